"""Reading the local cluster's manifests: the YAML and JSON files of a ``--state`` directory, or the demo.

Its one job is turning files into (origin, object) pairs, each origin naming the file and the
document so that an error points at the place to fix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
import yaml

from extender.local.store import ManifestError, clone
from extender.model._shared import shared_json

# libyaml's safe loader is ~10x faster than the pure-Python one on big state directories.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_manifests(paths: Iterable[Path]) -> list[tuple[str, Any]]:
    """Every document of the given YAML or JSON files as (origin, object); errors name the file."""
    docs: list[tuple[str, Any]] = []
    for path in paths:
        if path.suffix == ".json":
            docs.extend(_json_documents(path))
            continue
        try:
            with path.open(encoding="utf-8") as fh:
                for i, doc in enumerate(yaml.load_all(fh, Loader=_SAFE_LOADER)):
                    if doc is None:
                        continue
                    if isinstance(doc, Mapping) and doc.get("kind") == "List":
                        items = enumerate(doc.get("items") or ())
                        docs.extend(
                            (f"{path} (document {i + 1}, item {j + 1})", _compact(item)) for j, item in items
                        )
                    else:
                        docs.append((f"{path} (document {i + 1})", _compact(doc)))
        except (OSError, yaml.YAMLError) as exc:
            # PyYAML spreads its message (with the line and column) over several lines.
            raise ManifestError(f"{path}: {' '.join(str(exc).split())}") from None
    return docs


def _json_documents(path: Path) -> list[tuple[str, Any]]:
    """A JSON file's objects: one object, or a ``List`` of them as ``kubectl get -o json`` writes.

    JSON is the fast state format: orjson reads a big cluster over ten times faster than libyaml,
    and its output is plain JSON already, so documents skip the clone and sharing YAML's need
    (the keys orjson makes are shared by its own cache; slices are shared when parsed).
    """
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ManifestError(f"{path}: {exc}") from None
    if not isinstance(doc, dict):
        raise ManifestError(f"{path}: expected a Kubernetes object or a List, got {_json_type(doc)}")
    if doc.get("kind") != "List":
        return [(str(path), doc)]
    items = doc.get("items")
    if items is None:
        return []
    if not isinstance(items, list):
        raise ManifestError(f"{path}: items: expected an array of objects, got {_json_type(items)}")
    return [(f"{path} (item {j + 1})", item) for j, item in enumerate(items)]


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    return names.get(type(value), "null" if value is None else "a number")


def _compact(doc: Any) -> Any:
    """``doc`` as it waits for its turn to load: plain JSON types with repeated subtrees shared.

    PyYAML's objects hold every key as its own string, so a big state directory took several
    times the memory of the cache it fills; documents are now shrunk one by one as they are read.
    """
    try:
        return shared_json(clone(doc))
    except ManifestError:
        return doc  # not JSON: load reports it in its place, with its origin


def state_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise ManifestError(f"{directory}: not a directory")
    return sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".json") and p.is_file())


def demo_files() -> list[Path]:
    root = resources.files("extender") / "demo"
    return sorted(Path(str(p)) for p in root.iterdir() if p.name.endswith(".yaml"))
