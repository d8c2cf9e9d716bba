"""The tests' kustomize (tests/manifests/kustomize.py) builds what kubectl builds."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.manifests.kustomize import KustomizeError, build
from tests.manifests.loader import EXTRAS, LAYOUTS, MANIFESTS

KUBECTL = shutil.which("kubectl")
EVERY = LAYOUTS | EXTRAS


def keyed(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str | None, str], dict[str, Any]]:
    out = {}
    for obj in objects:
        meta = obj["metadata"]
        out[(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])] = obj
    assert len(out) == len(objects)
    return out


@pytest.mark.skipif(KUBECTL is None, reason="needs kubectl (its kustomize is the reference)")
@pytest.mark.parametrize("directory", EVERY.values(), ids=EVERY.keys())
def test_same_objects_as_kubectl_kustomize(directory: Path) -> None:
    assert KUBECTL is not None
    output = subprocess.run([KUBECTL, "kustomize", str(directory)], check=True, capture_output=True,
                            text=True, timeout=60).stdout
    assert keyed(build(directory)) == keyed([doc for doc in yaml.safe_load_all(output) if doc])


def test_unsupported_features_are_refused(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: [a.yaml]\nnamePrefix: x-\n")
    with pytest.raises(KustomizeError, match="namePrefix"):
        build(tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "resources: [../a.yaml]\npatches:\n- target: {kind: ConfigMap, name: a}\n  patch: 'data: {b: c}'\n")
    (tmp_path.parent / "a.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")
    with pytest.raises(KustomizeError, match="JSON 6902"):
        build(tmp_path)


def test_every_overlay_builds_on_the_base_and_uses_all_its_files() -> None:
    for name, directory in LAYOUTS.items():
        spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
        base = (MANIFESTS / "base").resolve()
        assert [(directory / r).resolve() for r in spec["resources"]] == [base], name
        used = {patch["path"] for patch in spec.get("patches", [])}
        assert used == {p.name for p in directory.glob("*.yaml")} - {"kustomization.yaml"}, name
