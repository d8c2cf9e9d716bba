"""Reading the shipped manifests: every kustomization under manifests/, built as kubectl would."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from tests.manifests.kustomize import build

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
# What `kubectl apply -k manifests/` installs, and each variant of it.
LAYOUTS = {"manifests": MANIFESTS} | {
    path.name: path for path in sorted((MANIFESTS / "overlays").iterdir()) if path.is_dir()
}
# Applied on their own, after a layout.
EXTRAS = {"example": MANIFESTS / "example", "monitoring": MANIFESTS / "monitoring"}


@cache
def built(directory: Path) -> tuple[dict[str, Any], ...]:
    return tuple(build(directory))


def documents() -> list[dict[str, Any]]:
    """The objects of the default layout and of the extras."""
    return [doc for directory in (MANIFESTS, *EXTRAS.values()) for doc in built(directory)]


def find(objects: tuple[dict[str, Any], ...] | list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [doc for doc in objects if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def one(kind: str, name: str) -> dict[str, Any]:
    return find(documents(), kind, name)


def container(objects: tuple[dict[str, Any], ...], name: str) -> dict[str, Any]:
    """A container of the dra-extender pod by name."""
    pod = find(objects, "Deployment", "dra-extender")["spec"]["template"]["spec"]
    (found,) = [c for c in pod["containers"] if c["name"] == name]
    return found
