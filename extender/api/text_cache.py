"""Values by the text they were made from, within a budget of that text's bytes."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")


class TextCache(Generic[V]):
    """An LRU whose size is the bytes of its texts; texts longer than ``largest`` are not kept.

    It serves a lookup per node of a full-Node filter (500 a call). Entries are found by the
    first ``prefix`` bytes of their text and then compared whole: hashing whole node texts
    was two thirds of the lookup (0.9 -> 0.3 ms for 500 nodes of 6 KB). A Node's text begins
    with its name, uid and resourceVersion, so two texts with one prefix are rare; they take
    turns in one entry, each found while it is there. ``chain`` finds a run of texts in a
    larger body the same way, in place, without copying each out. OrderedDict, not cachetools,
    because its bookkeeping is in C.
    """

    def __init__(self, budget: int, largest: int, prefix: int = 256) -> None:
        self._entries: OrderedDict[bytes, tuple[bytes, V]] = OrderedDict()
        self._budget, self._largest, self._prefix, self._held = budget, largest, prefix, 0

    def get(self, text: bytes) -> V | None:
        key = text[: self._prefix]
        entry = self._entries.get(key)
        if entry is None or entry[0] != text:
            return None
        self._entries.move_to_end(key)
        return entry[1]

    def chain(self, body: bytes, start: int, end: int, sep: int) -> tuple[list[tuple[bytes, V]], int] | None:
        """The entries, each a text and its value, whose texts ``body`` holds one after the other
        from ``start``, each followed by the byte ``sep`` or by ``end``; and where they stop:
        ``end``, or where a text that is not here begins. None if a text found is followed by
        anything else. Each is found in place, by its prefix and one compare, without knowing
        where it ends (a text shorter than the prefix is not found this way)."""
        entries, prefix = self._entries, self._prefix
        found: list[tuple[bytes, V]] = []
        get, touch, holds = entries.get, entries.move_to_end, body.startswith
        p = start
        while True:
            key = body[p : p + prefix]
            entry = get(key)
            if entry is None or not holds(entry[0], p):
                return found, p
            touch(key)
            found.append(entry)
            p += len(entry[0])
            if p == end:
                return found, p
            if p > end or body[p] != sep:
                return None
            p += 1

    def put(self, text: bytes, value: V) -> None:
        if len(text) > self._largest:
            return
        entries, key = self._entries, text[: self._prefix]
        old = entries.pop(key, None)
        self._held += len(text) - (0 if old is None else len(old[0]))
        entries[key] = (text, value)
        while self._held > self._budget:
            _, (gone, _) = entries.popitem(last=False)
            self._held -= len(gone)

    def __contains__(self, text: bytes) -> bool:
        entry = self._entries.get(text[: self._prefix])
        return entry is not None and entry[0] == text

    def __len__(self) -> int:
        return len(self._entries)
