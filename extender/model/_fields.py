"""Typed field access for plain API dicts, so malformed objects fail with a precise message.

Every error reads ``"<kind> <name>: <field>: <problem>"``; callers bind kind and name once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from extender.model.quantity import Quantity


class Fields:
    """Reads one object's fields and reports problems against that object's identity."""

    __slots__ = ("kind", "name")

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name

    def error(self, field: str, problem: str) -> ValueError:
        return ValueError(f"{self.kind} {self.name}: {field}: {problem}")

    def mapping(self, obj: Any, field: str) -> Mapping[str, Any]:
        """A mapping; absent (None) counts as empty."""
        if obj is None:
            return {}
        if not isinstance(obj, Mapping):
            raise self.error(field, f"must be an object, got {type(obj).__name__}")
        return obj

    def sequence(self, obj: Any, field: str) -> list[Any]:
        if obj is None:
            return []
        if not isinstance(obj, list | tuple):
            raise self.error(field, f"must be a list, got {type(obj).__name__}")
        return list(obj)

    def mappings(self, obj: Any, field: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """Each element of a list of objects with its path (``field[i]``), for error messages."""
        for i, item in enumerate(self.sequence(obj, field)):
            where = f"{field}[{i}]"
            yield where, self.mapping(item, where)

    def string(self, obj: Any, field: str, *, required: bool = False) -> str:
        if obj is None or obj == "":
            if required:
                raise self.error(field, "required")
            return ""
        if not isinstance(obj, str):
            raise self.error(field, f"must be a string, got {type(obj).__name__}")
        return obj

    def strings(self, obj: Any, field: str) -> tuple[str, ...]:
        return tuple(
            self.string(v, f"{field}[{i}]", required=True) for i, v in enumerate(self.sequence(obj, field))
        )

    def string_map(self, obj: Any, field: str) -> Mapping[str, str]:
        """A map of strings (labels, annotations); absent counts as empty."""
        out = self.mapping(obj, field)
        for key, value in out.items():
            self.string(value, f"{field}[{key}]")
        return out

    def boolean(self, obj: Any, field: str) -> bool | None:
        if obj is None:
            return None
        if not isinstance(obj, bool):
            raise self.error(field, f"must be a boolean, got {type(obj).__name__}")
        return obj

    def integer(self, obj: Any, field: str) -> int | None:
        if obj is None:
            return None
        if isinstance(obj, bool) or not isinstance(obj, int):
            raise self.error(field, f"must be an integer, got {type(obj).__name__}")
        return obj

    def quantity(self, obj: Any, field: str) -> Quantity:
        # YAML turns `value: 5` into an int; the API server would have accepted it as "5".
        if isinstance(obj, bool) or not isinstance(obj, str | int | float):
            raise self.error(field, f"must be a quantity, got {type(obj).__name__}")
        try:
            return Quantity.parse(str(obj))
        except ValueError as exc:
            raise self.error(field, f"invalid quantity {obj!r}: {exc}") from None


def metadata_name(obj: Any, kind: str) -> tuple[Mapping[str, Any], str]:
    """The object's metadata and name; a nameless object cannot be referenced, so it is rejected."""
    if not isinstance(obj, Mapping):
        raise ValueError(f"{kind}: must be an object, got {type(obj).__name__}")
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise ValueError(f"{kind} <unnamed>: metadata: must be an object")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{kind} <unnamed>: metadata.name: required")
    return meta, name


# ObjectMeta's string fields; the rest the extender reads is checked field by field below.
_META_STRINGS = (
    "namespace", "generateName", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
)


def check_metadata(f: Fields, meta: Mapping[str, Any], field: str = "metadata") -> None:
    """Refuse ObjectMeta fields of the wrong type, as the API server's decoding would.

    Every layer reads annotations, owners and finalizers from the raw object; a parsed object
    guarantees them their API types, whether it came from a watch, a file or a request.
    """
    # Every object entering the cache passes here: a field's path is spelled out only for a
    # value that may be wrong (building them all cost ~0.05 s of a 50,000-object start-up).
    for key in _META_STRINGS:
        value = meta.get(key)
        if value is not None and not isinstance(value, str):
            f.string(value, f"{field}.{key}")
    for key in ("labels", "annotations"):
        if meta.get(key) is not None:
            f.string_map(meta[key], f"{field}.{key}")
    if meta.get("finalizers") is not None:
        f.strings(meta["finalizers"], f"{field}.finalizers")
    if meta.get("ownerReferences") is None:
        return
    for where, ref in f.mappings(meta["ownerReferences"], f"{field}.ownerReferences"):
        for key in ("apiVersion", "kind", "name", "uid"):
            f.string(ref.get(key), f"{where}.{key}", required=True)
        f.boolean(ref.get("controller"), f"{where}.controller")
        f.boolean(ref.get("blockOwnerDeletion"), f"{where}.blockOwnerDeletion")


def controlled_by(obj: Mapping[str, Any], uid: str, name: str | None = None) -> bool:
    """Whether ``obj``'s controller owner reference names ``uid`` (and ``name``, if given).

    Like metav1.IsControlledBy: only the reference marked ``controller: true`` counts.
    """
    refs = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return any(
        isinstance(ref, Mapping)
        and ref.get("controller") is True
        and ref.get("uid") == uid
        and (name is None or ref.get("name") == name)
        for ref in refs
    )
