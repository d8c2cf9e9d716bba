"""The Dockerfile parses, copies paths that exist, and runs the console script as a non-root user.

There is no Docker engine here, so the file is read instruction by instruction instead of built.
"""

from __future__ import annotations

import fnmatch
import json
import shlex
import tomllib
from pathlib import Path

from extender.cli import _parser
from tests.manifests.loader import ROOT, one

INSTRUCTIONS = {"FROM", "ENV", "WORKDIR", "COPY", "RUN", "USER", "EXPOSE", "ENTRYPOINT", "CMD", "ARG",
                "LABEL"}


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip("\\").strip() + " "
        if line.rstrip().endswith("\\"):
            continue
        keyword, _, args = pending.strip().partition(" ")
        out.append((keyword.upper(), args.strip()))
        pending = ""
    assert not pending, "dangling line continuation"
    return out


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for keyword, args in instructions():
        if keyword == "FROM":
            result.append([])
        assert result, "the Dockerfile must start with FROM"
        result[-1].append((keyword, args))
    return result


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), f"not exec form: {args}"
    return value


def test_only_known_instructions_and_no_healthcheck() -> None:
    keywords = {keyword for keyword, _ in instructions()}
    assert keywords <= INSTRUCTIONS, keywords - INSTRUCTIONS
    assert "HEALTHCHECK" not in keywords  # kubelet probes /healthz and /readyz instead


def test_multi_stage_on_slim_python_311() -> None:
    all_stages = stages()
    assert len(all_stages) >= 2
    for stage in all_stages:
        image = stage[0][1].split()[0]
        assert image.startswith("python:3.11-slim"), image


def test_build_stage_installs_the_project_without_test_extras() -> None:
    runs = " ".join(args for keyword, args in stages()[0] if keyword == "RUN")
    assert "pip install ." in runs and "[test]" not in runs


def test_copied_paths_exist_and_are_not_docker_ignored() -> None:
    ignored = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    for keyword, args in instructions():
        if keyword != "COPY" or args.startswith("--from="):
            continue
        *sources, _ = shlex.split(args)
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such path"
            assert not any(fnmatch.fnmatch(source, pattern) for pattern in ignored), f"{source} is ignored"


def test_runtime_stage_runs_the_console_script_as_the_deployments_user() -> None:
    final = dict(stages()[-1])
    user = final["USER"].split(":")[0]
    assert user.isdigit() and int(user) != 0
    pod = one("Deployment", "dra-extender")["spec"]["template"]["spec"]
    assert int(user) == pod["securityContext"]["runAsUser"]
    entrypoint, command = exec_form(final["ENTRYPOINT"]), exec_form(final["CMD"])
    scripts = tomllib.loads(Path(ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert entrypoint == ["dra-extender"] and "dra-extender" in scripts
    assert command[:2] == ["serve", "--kube"]
    assert _parser().parse_args(command).kube
