"""The Dockerfile parses, builds reproducibly from the lock file, and runs the console script as a
non-root user.

There is no Docker engine here, so the file is read instruction by instruction instead of built.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from pathlib import Path

import yaml

from extender.cli import _parser
from tests.manifests.loader import MANIFESTS, ROOT, built, container

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
        if not result:
            assert keyword == "ARG", "only ARGs may come before the first FROM"
            continue
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


def global_args() -> dict[str, str]:
    """The ARGs before the first FROM, with their defaults."""
    out = {}
    for keyword, args in instructions():
        if keyword == "FROM":
            break
        assert keyword == "ARG"
        name, _, default = args.partition("=")
        out[name] = default
    return out


def stage_args(stage: list[tuple[str, str]]) -> dict[str, str]:
    return dict(args.partition("=")[::2] for keyword, args in stage if keyword == "ARG")


def test_no_syntax_directive_so_nothing_is_fetched_to_parse_it() -> None:
    first = (ROOT / "Dockerfile").read_text().splitlines()[0]
    assert not re.match(r"#\s*syntax\s*=", first, re.IGNORECASE)


def test_multi_stage_on_a_pinned_slim_python_311() -> None:
    image = global_args()["PYTHON_IMAGE"]
    # a patch release (the tag moves only for rebuilds of it) or a digest
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", image), image
    all_stages = stages()
    assert len(all_stages) >= 2
    for stage in all_stages:
        assert stage[0][1].split()[0] == "${PYTHON_IMAGE}"


def test_build_stage_installs_the_lock_with_hashes_then_the_project_alone() -> None:
    runs = [args for keyword, args in stages()[0] if keyword == "RUN"]
    installs = [command for run in runs for command in run.split("&&") if " install " in command]
    assert len(installs) == 2
    locked, project = (shlex.split(command) for command in installs)
    assert {"--require-hashes", "--no-deps", "--only-binary=:all:"} <= set(locked)
    assert locked[locked.index("-r") + 1] == "requirements.lock"
    assert {"--no-deps", "--no-build-isolation"} <= set(project) and project[-1] == "."
    assert "[test]" not in " ".join(runs)


def locked(name: str = "requirements.lock") -> dict[str, tuple[str, list[str]]]:
    """package -> (version, hashes) of a lock file."""
    out: dict[str, tuple[str, list[str]]] = {}
    text = (ROOT / name).read_text().replace("\\\n", " ")
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        requirement, *hashes = line.split("--hash=")
        package, _, version = requirement.split(";")[0].strip().partition("==")
        assert version and re.fullmatch(r"[\w.]+", version), f"not pinned: {line}"
        assert hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h.strip()) for h in hashes), package
        out[package.lower().replace("_", "-")] = (version, [h.strip() for h in hashes])
    return out


def _names(requirements: list[str]) -> set[str]:
    return {re.match(r"[A-Za-z0-9_.-]+", r)[0].lower().replace("_", "-") for r in requirements}  # type: ignore[index]


def test_lock_pins_every_dependency_and_the_build_backend() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    serving, testing = locked(), locked("requirements-test.lock")
    needed = _names([*project["project"]["dependencies"], *project["build-system"]["requires"]])
    extras = _names([r for extra in project["project"]["optional-dependencies"].values() for r in extra])
    assert not needed - set(serving), f"not in requirements.lock: {sorted(needed - set(serving))}"
    missing = (needed | extras) - set(testing)
    assert not missing, f"not in requirements-test.lock: {sorted(missing)}"
    # Serving needs none of the extras: make run and the image stay small.
    assert not (extras - needed) & set(serving), sorted((extras - needed) & set(serving))


def test_the_serving_lock_has_the_versions_and_hashes_of_the_test_lock() -> None:
    testing = locked("requirements-test.lock")
    for name, pin in locked().items():
        assert testing.get(name) == pin, f"{name}: {pin[0]} here, {testing.get(name)} in the test lock"


def test_lock_versions_are_those_the_tests_run_with() -> None:
    from importlib.metadata import PackageNotFoundError, version

    for name, (pinned, _) in locked("requirements-test.lock").items():
        try:
            installed = version(name)
        except PackageNotFoundError:
            continue  # a dependency of a dependency that this environment does not need
        if name != "setuptools":
            assert installed == pinned, f"{name}: tests run {installed}, requirements-test.lock has {pinned}"


def test_setup_installs_the_locks_with_hashes_and_make_lock_refreshes_them() -> None:
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    installs = [shlex.split(line) for line in setup.splitlines() if " install " in line]
    assert len(installs) == 2
    locks, project = installs
    assert {"--require-hashes", "--no-deps", "-r"} <= set(locks) and locks[-1] == '$lock'
    assert "lock=requirements.lock" in setup and "lock=requirements-test.lock" in setup
    assert {"--no-deps", "--no-build-isolation", "-e"} <= set(project) and project[-1] == "."
    makefile = (ROOT / "Makefile").read_text()
    assert "bash scripts/setup.sh serve" in makefile and "bash scripts/setup.sh test" in makefile
    assert re.search(r"^lock:\n\tbash scripts/lock\.sh$", makefile, re.M)
    lock = (ROOT / "scripts" / "lock.sh").read_text()
    assert "--generate-hashes" in lock and "-o requirements.lock" in lock
    assert "-o requirements-test.lock" in lock


def test_oci_labels_and_the_version_agree_with_the_package_and_the_manifests() -> None:
    final = stages()[-1]
    text = " ".join(args for keyword, args in final if keyword == "LABEL")
    labels = {key.removeprefix("org.opencontainers.image."): value
              for key, value in re.findall(r'(org\.opencontainers\.image\.[a-z.]+)="([^"]*)"', text)}
    assert set(labels) == {"title", "description", "version", "revision", "licenses", "base.name"}
    assert labels["version"] == "${VERSION}" and labels["revision"] == "${REVISION}"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert stage_args(final)["VERSION"] == project["version"]
    assert labels["licenses"] == project["license"]
    images = yaml.safe_load((MANIFESTS / "base" / "kustomization.yaml").read_text())["images"]
    (ours,) = [image for image in images if image["name"] == "dra-extender"]
    assert ours["newTag"] == project["version"] and "/" in ours["newName"]  # a registry, not a bare name


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
    extender = container(built(MANIFESTS), "extender")
    assert int(user) == extender["securityContext"]["runAsUser"]
    entrypoint, command = exec_form(final["ENTRYPOINT"]), exec_form(final["CMD"])
    scripts = tomllib.loads(Path(ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert entrypoint == ["dra-extender"] and "dra-extender" in scripts
    assert command[:2] == ["serve", "--kube"]
    args = _parser().parse_args(command)
    # Run on its own, the image keeps the scheduling API on the loopback too.
    assert args.kube and args.host == "127.0.0.1" and final["EXPOSE"] == str(args.probe_port)
