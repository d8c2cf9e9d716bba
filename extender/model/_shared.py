"""One copy of each repeated JSON subtree of an object (hash-consing).

A ResourceSlice repeats itself: every partition of a GPU carries the same attribute maps,
the same capacity and counter maps and the same strings. Decoded JSON holds each repetition
as its own dicts and strings, which made the raw slices most of the extender's heap on big
clusters. :func:`shared_json` rebuilds an object so that equal subtrees are one object.

The result must be treated as immutable (a change through one place would show in every
other): the cache already requires that of everything it holds, and writers clone first.
"""

from __future__ import annotations

from typing import Any

# Canonical objects keyed by (type, content). Containers are keyed by the identities of
# their already-canonical children, so no subtree is hashed more than once.
_Memo = dict[tuple[Any, ...], Any]


def shared_json(obj: Any) -> Any:
    """``obj`` (plain JSON types) with equal subtrees and equal strings made one object."""
    return _share(obj, {})


def _share(obj: Any, memo: _Memo) -> Any:
    if isinstance(obj, dict):
        items = [(_share(k, memo), _share(v, memo)) for k, v in obj.items()]
        key: tuple[Any, ...] = (dict, *[(id(k), id(v)) for k, v in items])
        found = memo.get(key)
        if found is None:
            found = memo[key] = dict(items)
        return found
    if isinstance(obj, list):
        values = [_share(v, memo) for v in obj]
        key = (list, *map(id, values))
        found = memo.get(key)
        if found is None:
            found = memo[key] = values
        return found
    try:
        # 1, 1.0 and True are equal but not the same JSON value: the type is part of the key.
        return memo.setdefault((type(obj), obj), obj)
    except TypeError:
        return obj  # not plain JSON (a tuple of dicts, say): kept as it is, parsing judges it
