"""Rendering charts/dra-extender with a real ``helm``, built once by scripts/helm/build.sh.

The binary comes from ``$DRA_HELM`` when set; otherwise, with ``go`` on PATH, from
scripts/helm/build.sh (cold: a few minutes of compiling, once per machine; warm: only the path
is printed). Without either the tests that need it are skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests.manifests.loader import ROOT

CHART = ROOT / "charts" / "dra-extender"
BUILD = ROOT / "scripts" / "helm" / "build.sh"
# What `kubectl apply -k manifests/` uses; the chart takes the release namespace.
NAMESPACE = "dra-system"


def find_helm() -> tuple[Path | None, str]:
    """The helm binary, or None and why not."""
    if os.environ.get("DRA_HELM"):
        return Path(os.environ["DRA_HELM"]), ""
    if shutil.which("go") is None:
        return None, "needs helm: no `go` on PATH to build it (scripts/helm/build.sh), and DRA_HELM is unset"
    done = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/helm/build.sh failed:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1]), ""


def run(helm: Path, *args: str, values: dict[str, Any] | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    """``helm ARGS [-f values.yaml]`` in a scratch HOME, so no user configuration is read."""
    with tempfile.TemporaryDirectory(prefix="dra-helm-") as scratch:
        command = [str(helm), *args]
        if values is not None:
            path = Path(scratch) / "values.yaml"
            path.write_text(yaml.safe_dump(values))
            command += ["--values", str(path)]
        env = {"PATH": os.environ.get("PATH", ""), "HOME": scratch, "HELM_CACHE_HOME": f"{scratch}/cache",
               "HELM_CONFIG_HOME": f"{scratch}/config", "HELM_DATA_HOME": f"{scratch}/data"}
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr}")
    return done


def render(helm: Path, values: dict[str, Any], namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """The objects ``helm template`` renders for these values, in the release namespace."""
    output = run(helm, "template", "dra-extender", str(CHART), "--namespace", namespace, values=values).stdout
    return [doc for doc in yaml.safe_load_all(output) if doc]
