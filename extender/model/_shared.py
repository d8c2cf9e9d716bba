"""One copy of each repeated JSON subtree of an object (hash-consing), one CEL memo
for the devices alike across slices (:func:`cel_memo_for`), and one parse of each repeated
JSON value (:class:`ContentMemo`).

A ResourceSlice repeats itself: every partition of a GPU carries the same attribute maps,
the same capacity and counter maps and the same strings. Decoded JSON holds each repetition
as its own dicts and strings, which made the raw slices most of the extender's heap on big
clusters. :func:`shared_json` rebuilds an object so that equal subtrees are one object.

The result must be treated as immutable (a change through one place would show in every
other): the cache already requires that of everything it holds, and writers clone first.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import orjson

T = TypeVar("T")

# Canonical objects keyed by (type, content). Containers are keyed by the identities of
# their already-canonical children, so no subtree is hashed more than once.
_Memo = dict[tuple[Any, ...], Any]


def shared_json(obj: Any) -> Any:
    """``obj`` (plain JSON types) with equal subtrees and equal strings made one object."""
    return _share(obj, {}, None)


class SharedJson:
    """:func:`shared_json` across documents: equal subtrees of any of them are one object.

    Documents of one kind repeat each other (every node's slice lists the same devices), so the
    table is kept from one document to the next, and each object in a list is also looked up by
    content, which skips walking the devices seen before (issue 15; docs/performance.md,
    "Start-up in local mode"). Both start afresh past ``size`` entries, so what goes away
    is not kept for long.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        # One attribute, so that a thread that starts afresh swaps both at once: an item found
        # by content must be made of the table's objects.
        self._tables: tuple[_Memo, ContentMemo[Any]] = ({}, ContentMemo(size))

    def __call__(self, obj: Any) -> Any:
        memo, alike = self._tables
        if len(memo) > self._size:
            memo, alike = self._tables = ({}, ContentMemo(self._size))
        return _share(obj, memo, alike)


def _share(obj: Any, memo: _Memo, alike: ContentMemo[Any] | None) -> Any:
    # This runs over every device of every slice loaded, hence exact type checks (decoded JSON
    # holds plain dicts and lists; anything else is left as it is) and flat identity keys.
    if type(obj) is dict:
        shared = {}
        ids: list[Any] = [dict]
        for k, v in obj.items():
            t = type(v)
            v = _share(v, memo, alike) if t is dict or t is list else _scalar(v, memo)
            k = memo.setdefault((str, k), k) if type(k) is str else k
            shared[k] = v
            ids += (id(k), id(v))
        key: tuple[Any, ...] = tuple(ids)
        found = memo.get(key)
        if found is None:
            found = memo[key] = shared
        return found
    if type(obj) is list:
        if alike is None:
            values = [
                _share(v, memo, None) if type(v) is dict or type(v) is list else _scalar(v, memo) for v in obj
            ]
        else:
            values = [
                _share_alike(v, memo, alike) if type(v) is dict
                else _share(v, memo, alike) if type(v) is list else _scalar(v, memo)
                for v in obj
            ]
        key = (list, *map(id, values))
        found = memo.get(key)
        if found is None:
            found = memo[key] = values
        return found
    return _scalar(obj, memo)


def _share_alike(obj: dict[str, Any], memo: _Memo, alike: ContentMemo[Any]) -> Any:
    return alike.parse(obj, lambda: _share(obj, memo, alike))


def _scalar(obj: Any, memo: _Memo) -> Any:
    try:
        # 1, 1.0 and True are equal but not the same JSON value: the type is part of the key.
        return memo.setdefault((type(obj), obj), obj)
    except TypeError:
        return obj  # not plain JSON (a tuple of dicts, say): kept as it is, parsing judges it


# One CEL memo for all devices that look alike to CEL, across slices.
#
# A selector's verdict depends only on the engine, the expression and what CEL sees of a
# device: its driver, attribute and capacity maps and ``allowMultipleAllocations``
# (extender/cel/device.py builds the view from exactly these). Clusters are made of nodes
# alike, so the same 64 devices come back in every node's slice: giving them one memo turns a
# cold filter's per-node evaluations into memo hits after the first node (issue 15, see
# docs/performance.md, "Cold cache").
#
# The content key is the maps' JSON text in their own order (CEL's view keeps that order, and
# which malformed attribute is reported first depends on it). Memos are held weakly: one lives
# as long as a device of any slice version refers to it.
#
# Why process-wide, not owned by an app: objects are parsed in model/, below anything an app
# owns, and a device's memo must be the same object for every slice holding that content. It
# is safe to share: what a memo holds is a function of its key alone (Selector keys each
# verdict by engine and expression; the device view is built from the content), so an app
# reading another's entry gets the verdict it would have computed (counted as a memo hit, not
# an evaluation). It is bounded by the devices alive: nothing outlives the last slice using it.


class CelMemo(dict[Any, Any]):
    """A device's CEL memo: a plain dict that the content table can hold weakly."""

    __slots__ = ("__weakref__",)


_by_content: weakref.WeakValueDictionary[bytes, CelMemo] = weakref.WeakValueDictionary()
_lock = threading.Lock()


def cel_memo_for(
    driver: str, attributes: Mapping[str, Any], capacity: Mapping[str, Any], allow_multiple: bool
) -> CelMemo:
    """The memo of every device with this CEL-visible content (a new one for the first)."""
    try:
        key = orjson.dumps((driver, attributes, capacity, allow_multiple))
    except TypeError:
        return CelMemo()  # not plain JSON (a huge int, a foreign mapping): the device keeps its own
    if b"null" in key:
        # orjson writes NaN and infinities as null, so null cannot tell contents apart.
        return CelMemo()
    with _lock:
        memo = _by_content.get(key)
        if memo is None:
            memo = _by_content[key] = CelMemo()
    return memo


class ContentMemo(Generic[T]):
    """What a parser makes of a JSON value, shared by every value with the same content.

    For parts that many objects repeat word for word (the spec of every claim a template makes):
    the parse runs once per content. Only successful parses are kept, so each malformed value is
    parsed, and reported, as its own. A hit needs the same JSON text *and* Python equality with
    that text decoded: the text alone cannot tell a string from a datetime orjson writes alike,
    nor null from NaN. Parses must not depend on the value's identity, and hits hand out the
    first value's parse, so what a parse returns must be treated as immutable (as the cache does).
    The oldest entries go past ``size``, so that a stream of distinct values keeps little.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: dict[bytes, tuple[Any, T]] = {}
        self._lock = threading.Lock()

    def parse(self, raw: Any, parse: Callable[[], T]) -> T:
        """``parse()``, the parse of ``raw``, or what it returned for a value alike."""
        try:
            key = orjson.dumps(raw)
        except TypeError:
            return parse()  # not JSON (a key that is not a string, an integer beyond 64 bits ...)
        found = self._entries.get(key)
        if found is not None and found[0] == raw:
            return found[1]
        parsed = parse()
        decoded = orjson.loads(key)
        if decoded == raw:
            with self._lock:
                if len(self._entries) >= self._size:
                    self._entries.pop(next(iter(self._entries)), None)
                self._entries[key] = (decoded, parsed)
        return parsed

    def __len__(self) -> int:
        return len(self._entries)
