"""Reading the local cluster's manifests: the YAML and JSON files of a ``--state`` directory, or the demo.

Its one job is turning files into (origin, object) pairs, each origin naming the file and the
document so that an error points at the place to fix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            # PyYAML spreads its message (with the line and column) over several lines.
            raise ManifestError(f"{path}: {' '.join(str(exc).split())}") from None
    return docs


@dataclass(frozen=True, slots=True)
class JsonText:
    """One object of a JSON Lines file still as its text, as it waits for its turn to load.

    Decoded objects take over ten times the memory of their text (a 5,000-node partitionable
    cluster: 80 MB of JSON, 1 GB of dicts); decoding again when the turn comes costs far less
    than sharing subtrees, the YAML path's way of keeping the waiting documents small.
    """

    kind: Any
    text: bytes

    def decode(self) -> Any:
        return orjson.loads(self.text)


def kind_of(doc: Any) -> Any:
    """The ``kind`` of a waiting document (None when it has none)."""
    if isinstance(doc, JsonText):
        return doc.kind
    return doc.get("kind") if isinstance(doc, Mapping) else None


def _json_documents(path: Path) -> list[tuple[str, Any]]:
    """A JSON file's objects, as kubectl reads them: one object, a ``List`` of them (what
    ``kubectl get -o json`` writes), or one object per line (JSON Lines).

    JSON is the fast state format: orjson reads a big cluster over ten times faster than libyaml,
    and its output is plain JSON already, so documents skip the clone and sharing YAML's need
    (the keys orjson makes are shared by its own cache; slices are shared when parsed).
    JSON Lines is the format for big clusters: no whole file is ever decoded at once.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ManifestError(f"{path}: {exc}") from None
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as whole:
        lines = _json_lines(path, data)
        if lines is None:
            raise ManifestError(f"{path}: {whole}") from None
        return lines
    return _json_items(str(path), doc)


def _json_lines(path: Path, data: bytes) -> list[tuple[str, Any]] | None:
    """The documents of a JSON Lines file; None when its first line is no JSON value alone (the
    file is one malformed document, and the whole file's error says where)."""
    docs: list[tuple[str, Any]] = []
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if not docs:
                return None
            raise ManifestError(f"{path}: line {n}: {exc.msg}, column {exc.colno}") from None
        if isinstance(doc, dict) and doc.get("kind") != "List":
            docs.append((f"{path} (line {n})", JsonText(doc.get("kind"), bytes(line))))
        else:
            docs.extend(_json_items(f"{path} (line {n})", doc))
    return docs


def _json_items(origin: str, doc: Any) -> list[tuple[str, Any]]:
    if not isinstance(doc, dict):
        raise ManifestError(f"{origin}: expected a Kubernetes object or a List, got {_json_type(doc)}")
    if doc.get("kind") != "List":
        return [(origin, doc)]
    items = doc.get("items")
    if items is None:
        return []
    if not isinstance(items, list):
        raise ManifestError(f"{origin}: items: expected an array of objects, got {_json_type(items)}")
    where = origin[:-1] + ", " if origin.endswith(")") else origin + " ("
    return [(f"{where}item {j + 1})", item) for j, item in enumerate(items)]


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


# What a state directory's files may be called (not its subdirectories: they are not read).
STATE_SUFFIXES = (".yaml", ".yml", ".json")


def state_files(directory: Path) -> list[Path]:
    """The manifest files of a ``--state`` directory; ManifestError naming it when it does not
    exist, cannot be listed or holds none. Served, such a directory would be an empty cluster in
    which no pod fits, a mistyped path looking like a scheduling problem."""
    where = f"--state {directory}"
    try:
        if not directory.exists():
            raise ManifestError(f"{where}: no such directory")
        if not directory.is_dir():
            raise ManifestError(f"{where}: not a directory")
        files = sorted(p for p in directory.iterdir() if p.suffix in STATE_SUFFIXES and p.is_file())
    except OSError as exc:
        raise ManifestError(f"{where}: cannot list it: {exc.strerror or exc}") from None
    if not files:
        raise ManifestError(f"{where}: no *.yaml, *.yml or *.json file in it")
    return files


def demo_files() -> list[Path]:
    root = resources.files("extender") / "demo"
    return sorted(Path(str(p)) for p in root.iterdir() if p.name.endswith(".yaml"))
