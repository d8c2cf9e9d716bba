"""The Allocator: upstream's structured allocator for one pod's claims, node by node.

The search itself is search.py; around it, the Allocator keeps what one request may reuse
between nodes (compiled selectors, available counters, answers of nodes alike: alike/shapes.py),
and reads each node's gathered pools from a ``GatheredPools`` (alike/gathered.py) that may
outlive it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from extender.allocator.alike import AlikeResults, GatheredPools, Searched, ShapeMemo
from extender.allocator.diagnose import explain_failure
from extender.allocator.outcome import TIMED_OUT, AllocationError, Failure
from extender.allocator.pools import SliceSource
from extender.allocator.requests import validate_claims
from extender.allocator.result import build_config, build_result
from extender.allocator.search import Search, Setting
from extender.allocator.selection import SelectorCache
from extender.allocator.state import AllocatedState
from extender.cel.environment import Environment
from extender.model import AllocationResult, DeviceClass, Node, ResourceClaim
from extender.model.features import Features


class Allocator:
    """Reusable across the nodes of one scheduling cycle; each ``allocate`` is independent.

    Caches live as long as the object and assume its inputs (features, allocated state,
    classes, slices) do not change: compiled selectors, the per-pool available counters
    (upstream keeps that one for the allocator's lifetime too), and the answers of successful
    searches by node shape, reused for the nodes alike (:class:`ShapeMemo`;
    ``share_shapes=False`` turns that off). Nodes' gathered pools come from ``gathered``, which
    the caller may share between allocators over the same slices and gates (alike/gathered.py).
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
        share_shapes: bool = True,
        gathered: GatheredPools | None = None,
    ) -> None:
        self.features = features
        self.allocated = allocated
        self.classes = classes
        self.slices = slices
        self.deadline = deadline
        # Seconds one ``allocate`` may take before ``deadline`` (DRASchedulerFilterTimeout).
        self.node_timeout = node_timeout
        # What its searches share (compiled selectors, the pools' available counters) and
        # ``pause``, called every few milliseconds of a search (the service lets other requests
        # run there).
        self._setting = Setting(features, allocated, SelectorCache(cel), {}, pause)
        self.shapes = ShapeMemo(allocated) if share_shapes else None
        if gathered is None or gathered.slices is not slices or gathered.features != features:
            gathered = GatheredPools(slices, features)  # others' pools would not be this allocator's
        self._gathered = gathered

    def allocate(
        self, node: Node | None, claims: Sequence[ResourceClaim]
    ) -> Sequence[AllocationResult] | Failure:
        """One result per claim, or why the claims cannot be allocated on this node.

        A node alike to one searched before gets ``AlikeResults``, built when first read. The
        failure is "nofit" (its reason names the claims by position: ``Failure.naming``),
        "unavailable" (this node has invalid pools and nothing fitted), "timeout" or "fatal"
        (the claims as such: no node can help).
        """
        try:
            return self._allocate(node, claims)
        except AllocationError as exc:
            return Failure(exc.kind, exc.message)

    def _allocate(
        self, node: Node | None, claims: Sequence[ResourceClaim]
    ) -> Sequence[AllocationResult] | Failure:
        deadline = self.deadline
        if self.node_timeout is not None:
            # Upstream's limit covers the whole Allocate call, gathering the pools included.
            node_deadline = time.monotonic() + self.node_timeout
            deadline = node_deadline if deadline is None else min(deadline, node_deadline)
        gathered = self._gathered.for_node(node)
        pools = gathered.pools
        memo, shape = self.shapes, None
        if memo is not None and node is not None and memo.untouched(gathered.device_ids):
            shape = gathered.shape()
            answer = memo.lookup(claims, shape)
            if answer is not None:
                if deadline is not None and time.monotonic() > deadline:
                    # A spent budget stops a search at its first step: so it does here.
                    return Failure("timeout", TIMED_OUT)
                return AlikeResults(answer, node, claims, gathered, self.features)
        search = Search(self._setting, node, pools, claims, deadline)
        search.prepare(validate_claims(claims, self.features, self.classes, search.fill_all))
        if not search.run():
            invalid = [p for p in pools if p.invalid is not None]
            if invalid:
                details = "; ".join(f"{p.driver}/{p.name}: {p.invalid}" for p in invalid)
                return Failure("unavailable", f"invalid resource pools were encountered: {details}")
            return Failure("nofit", explain_failure(search))
        here = gathered.only_here() if node is not None else None
        results = tuple(
            build_result(
                claim, search.results[c], build_config(claim, search.chosen(c)), node, self.features, here
            )
            for c, claim in enumerate(claims)
        )
        if shape is not None and memo is not None:
            memo.record(shape, Searched(search.results, claims, search.read_bound), pools, results)
        return results
