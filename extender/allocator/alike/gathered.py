"""Each node's gathered pools, and what follows from them alone, kept across requests.

A node's pools depend on the slices, the node object and the gates, not on the pod. Every
request's Allocator used to gather them afresh for each node it met: on a cluster's first lap
(every node met for the first time by one claim spec) that, with the node's shape, was about a
third of a filter's CPU (docs/performance.md, "15,000 nodes by simulation"). ``GatheredPools``
holds them for one set of slices: the cluster state hands out one per inventory epoch
(``ClusterState.gathered_pools``) and fills it once the cache has synced, so the first filters
after a start no longer gather at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from extender.allocator.alike.shapes import NodeShape, ShapeTable
from extender.allocator.outcome import AllocationError
from extender.allocator.pools import Pool, SliceSource, gather_pools
from extender.allocator.result import only_node
from extender.model import DeviceID, Node, NodeSelector
from extender.model.features import Features


@dataclass(slots=True, eq=False)
class NodePools:
    """One node's pools in search order, with the derived facts lookups read."""

    node: Node | None
    pools: list[Pool]
    # Every device of the pools, those of slices the node does not see included: what must be
    # free for the node's shape to stand for its search (shapes.py).
    device_ids: frozenset[DeviceID]  # a set: checked against the in-use sets by stored hashes
    table: ShapeTable
    _shape: NodeShape | None = field(default=None, repr=False)
    _only_here: NodeSelector | None = field(default=None, repr=False)

    def shape(self) -> NodeShape:
        """The node's shape (for a node object only)."""
        shape = self._shape
        if shape is None:
            assert self.node is not None
            shape = self._shape = NodeShape.of(self.node, self.pools, self.table)
        return shape

    def only_here(self) -> NodeSelector:
        """The selector of an allocation bound to this node (``result.only_node``), made once."""
        selector = self._only_here
        if selector is None:
            assert self.node is not None
            selector = self._only_here = only_node(self.node.name)
        return selector


class GatheredPools:
    """Nodes' gathered pools over fixed slices and gates.

    An entry stands for the node object it was gathered for: a request's copy of a node that
    differs from the cluster's (newer labels, say) is gathered for itself and takes the
    name's place. Gathering raises AllocationError as ``gather_pools`` does, and is then
    repeated on the next call, so the error is raised again where the search would meet it.
    """

    def __init__(self, slices: SliceSource, features: Features) -> None:
        self.slices = slices
        self.features = features
        self._by_node: dict[str | None, NodePools] = {}
        self._table = ShapeTable()

    def __len__(self) -> int:
        return len(self._by_node)

    def for_node(self, node: Node | None) -> NodePools:
        key = node.name if node is not None else None
        known = self._by_node.get(key)
        if known is not None and known.node is node:
            return known
        pools = gather_pools(self.slices, node, self.features)
        ids = frozenset([d.id for p in pools for s in (*p.slices, *p.other_slices) for d in s.devices])
        entry = self._by_node[key] = NodePools(node, pools, ids, self._table)
        return entry

    def fill(self, nodes: Iterable[Node]) -> None:
        """Gather ``nodes`` and their shapes ahead of the first filters, with the shape of the
        first candidate, which every lookup compares (the rest only as far as an answer read)."""
        for node in nodes:
            try:
                shape = self.for_node(node).shape()
                shape.prefix(min(1, len(shape.candidates)))
            except AllocationError:
                continue  # met again, and reported, by the search that needs the node
