"""Values by the text they were made from, within a budget of that text's bytes."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")


class TextCache(Generic[V]):
    """An LRU whose size is the bytes of its keys; keys longer than ``largest`` are not kept.

    It serves a lookup per node of a full-Node filter (500 a call): cachetools' LRUCache does
    its bookkeeping in Python per lookup, OrderedDict in C (0.3 ms of such a filter).
    """

    def __init__(self, budget: int, largest: int) -> None:
        self._entries: OrderedDict[bytes, V] = OrderedDict()
        self._budget, self._largest, self._held = budget, largest, 0

    def get(self, text: bytes) -> V | None:
        value = self._entries.get(text)
        if value is not None:
            self._entries.move_to_end(text)
        return value

    def put(self, text: bytes, value: V) -> None:
        if len(text) > self._largest:
            return
        entries = self._entries
        if entries.pop(text, None) is None:
            self._held += len(text)
        entries[text] = value
        while self._held > self._budget:
            gone, _ = entries.popitem(last=False)
            self._held -= len(gone)

    def __contains__(self, text: bytes) -> bool:
        return text in self._entries

    def __len__(self) -> int:
        return len(self._entries)
