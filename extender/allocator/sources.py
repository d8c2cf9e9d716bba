"""Where the allocator reads slices from: a protocol, and a plain-list implementation."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from extender.model import ResourceSlice


class SliceSource(Protocol):
    def for_node(self, node_name: str | None) -> Sequence[ResourceSlice]:
        """Slices with spec.nodeName == node (input order), then those without nodeName."""
        ...

    def pool_slices(self, driver: str, pool: str) -> Sequence[ResourceSlice]:
        """Every slice of that pool in the cluster, in input order."""
        ...


class SliceList:
    """A SliceSource over a fixed list, indexed once at construction."""

    def __init__(self, slices: Iterable[ResourceSlice]) -> None:
        self._slices = list(slices)
        self._by_node: dict[str, list[ResourceSlice]] = {}
        self._unbound: list[ResourceSlice] = []
        self._by_pool: dict[tuple[str, str], list[ResourceSlice]] = {}
        for s in self._slices:
            if s.node_name:
                self._by_node.setdefault(s.node_name, []).append(s)
            else:
                self._unbound.append(s)
            self._by_pool.setdefault((s.driver, s.pool.name), []).append(s)

    def for_node(self, node_name: str | None) -> Sequence[ResourceSlice]:
        if not node_name:
            return self._unbound
        return self._by_node.get(node_name, []) + self._unbound

    def pool_slices(self, driver: str, pool: str) -> Sequence[ResourceSlice]:
        return self._by_pool.get((driver, pool), [])
