"""The Allocator: upstream's structured allocator for one pod's claims, node by node."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from extender.allocator.counters import CounterValues, PoolKey
from extender.allocator.diagnose import explain_failure
from extender.allocator.errors import NodeAllocationFailure
from extender.allocator.pools import Pool, gather_pools
from extender.allocator.requests import validate_claims
from extender.allocator.result import build_result
from extender.allocator.search import Search
from extender.allocator.selection import SelectorCache
from extender.allocator.sources import SliceSource
from extender.allocator.state import AllocatedState
from extender.cel.environment import Environment
from extender.model import AllocationResult, DeviceClass, Node, ResourceClaim
from extender.model.features import Features


class Allocator:
    """Reusable across the nodes of one scheduling cycle; each ``allocate`` is independent.

    Caches live as long as the object and assume its inputs (features, allocated state,
    classes, slices) do not change: the node's gathered pools, compiled selectors, and the
    per-pool available counters (upstream keeps that one for the allocator's lifetime too).
    Selectors are compiled by ``cel``, the CEL environment (engine, cache, counters) it is given.
    """

    def __init__(
        self,
        features: Features,
        allocated: AllocatedState,
        classes: Mapping[str, DeviceClass],
        slices: SliceSource,
        cel: Environment,
        deadline: float | None = None,
        pause: Callable[[], None] | None = None,
        node_timeout: float | None = None,
    ) -> None:
        self.features = features
        self.allocated = allocated
        self.classes = classes
        self.slices = slices
        self.deadline = deadline
        # Seconds one ``allocate`` may take before ``deadline`` (DRASchedulerFilterTimeout).
        self.node_timeout = node_timeout
        # Called every few milliseconds of a search: the service lets other requests run there.
        self.pause = pause
        self.last_failure = ""
        self._pools: dict[str | None, list[Pool]] = {}
        self._selectors = SelectorCache(cel)
        self._counters: dict[PoolKey, CounterValues] = {}

    def pools_for(self, node: Node | None) -> list[Pool]:
        key = node.name if node is not None else None
        pools = self._pools.get(key)
        if pools is None:
            pools = gather_pools(self.slices, node, self.features)
            self._pools[key] = pools
        return pools

    def allocate(self, node: Node | None, claims: Sequence[ResourceClaim]) -> list[AllocationResult] | None:
        """One result per claim, or None when the claims cannot be satisfied on this node.

        Raises AllocationError (fatal for the pod), NodeAllocationFailure (this node has
        invalid pools and nothing fitted) or AllocationTimeout.
        """
        self.last_failure = ""
        deadline = self.deadline
        if self.node_timeout is not None:
            # Upstream's limit covers the whole Allocate call, gathering the pools included.
            node_deadline = time.monotonic() + self.node_timeout
            deadline = node_deadline if deadline is None else min(deadline, node_deadline)
        pools = self.pools_for(node)
        search = Search(
            self.features, self.allocated, node, pools, claims, self._selectors, self._counters,
            deadline, self.pause,
        )
        search.prepare(validate_claims(claims, self.features, self.classes, search.fill_all))
        if not search.run():
            invalid = [p for p in pools if p.invalid is not None]
            if invalid:
                details = "; ".join(f"{p.driver}/{p.name}: {p.invalid}" for p in invalid)
                raise NodeAllocationFailure(f"invalid resource pools were encountered: {details}")
            self.last_failure = explain_failure(search)
            return None
        binding = self.features.binding
        return [
            build_result(claim, search.results[c], search.chosen(c), node, binding)
            for c, claim in enumerate(claims)
        ]
