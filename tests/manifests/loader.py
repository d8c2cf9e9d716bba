"""Reading the shipped manifests (every YAML document under manifests/, by kind and name)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"


def documents(directory: Path = MANIFESTS) -> list[tuple[Path, dict[str, Any]]]:
    """Every Kubernetes object in the YAML files of ``directory`` and below (kustomizations excluded)."""
    found = []
    for path in sorted(directory.rglob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        with path.open() as f:
            found += [(path, doc) for doc in yaml.safe_load_all(f) if doc]
    return found


def one(kind: str, name: str) -> dict[str, Any]:
    matches = [doc for _, doc in documents() if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]
