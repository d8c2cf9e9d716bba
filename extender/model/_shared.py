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
    # This runs over every device of every slice loaded, hence exact type checks (decoded JSON
    # holds plain dicts and lists; anything else is left as it is) and flat identity keys.
    if type(obj) is dict:
        shared = {}
        ids: list[Any] = [dict]
        for k, v in obj.items():
            t = type(v)
            v = _share(v, memo) if t is dict or t is list else _scalar(v, memo)
            k = memo.setdefault((str, k), k) if type(k) is str else k
            shared[k] = v
            ids += (id(k), id(v))
        key: tuple[Any, ...] = tuple(ids)
        found = memo.get(key)
        if found is None:
            found = memo[key] = shared
        return found
    if type(obj) is list:
        values = [_share(v, memo) if type(v) is dict or type(v) is list else _scalar(v, memo) for v in obj]
        key = (list, *map(id, values))
        found = memo.get(key)
        if found is None:
            found = memo[key] = values
        return found
    return _scalar(obj, memo)


def _scalar(obj: Any, memo: _Memo) -> Any:
    try:
        # 1, 1.0 and True are equal but not the same JSON value: the type is part of the key.
        return memo.setdefault((type(obj), obj), obj)
    except TypeError:
        return obj  # not plain JSON (a tuple of dicts, say): kept as it is, parsing judges it
