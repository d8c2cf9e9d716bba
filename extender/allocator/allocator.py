"""The Allocator: upstream's structured allocator for one pod's claims, node by node.

Nodes alike to the allocator (:class:`ShapeMemo`): one search's answer, reused for every node of
the same shape.

Within one Allocator (one request, inputs fixed) a cluster built from a template makes the
same search over and over, once per node, and pays ~50 µs a node on a cold lap (issue 15,
docs/performance.md "15,000 nodes by simulation"). The search is deterministic, so a node
that agrees with an earlier one on every fact the earlier search read gets the same picks,
up to renaming devices; the results are then built for the new node by the normal code.

Why the picks carry over (P the node searched, N the node looked up; candidates pair up by
index in gathered order, pools by position). The search reads:

- the claims, classes and features: the same objects (claims are part of the key);
- per candidate: its pool's position, what CEL sees (driver, attribute and capacity maps,
  allowMultipleAllocations; one ``cel_memo`` per such content, so its identity stands for it,
  and the typed attributes and capacities are parsed from those maps), consumed counters,
  taints, whether it has binding conditions, and for per-device node selection whether it
  matches the node, whether its slice skips node operations. Device names only form the
  device IDs, which are distinct among one node's candidates (duplicates make a pool invalid,
  and pools differ in driver or name), so the search's bookkeeping by ID pairs up too;
- per pool: driver, whether incomplete or invalid, its counter sets;
- the allocated state of the node's pools: required to be empty on both nodes (devices,
  shares, consumed capacity; counters and compatibility groups are derived from these);
- the node: whether it declares optional node operations (node selection above);
- how many candidates there are, only once a loop has run to the end.

A successful search looks at candidates only up to ``Search.read_bound`` (every look at one
comes after its verdict, or it was picked, which needs one), and a loop that reaches the end
looks at the last candidate. So P's answer holds for every N whose first ``read_bound``
candidates have P's shapes, and whose candidate count equals P's when the bound is P's count.
Requests with constraints take the whole list: the pruner of matchAttribute requests looks
ahead through state that verdicts do not record (selection.py). Failures are not shared
(their reasons name pools and devices), nor answers holding shares (fresh IDs per allocation)
or consumed capacity.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from extender.allocator.counters import CounterValues, PoolKey
from extender.allocator.diagnose import explain_failure
from extender.allocator.errors import AllocationError, AllocationTimeout, NodeAllocationFailure
from extender.allocator.pools import Candidate, Pool, device_matches_node, gather_pools
from extender.allocator.requests import RequestData, validate_claims
from extender.allocator.result import Pick, build_result
from extender.allocator.search import OPTIONAL_NODE_OPERATIONS, Search
from extender.allocator.selection import SelectorCache
from extender.allocator.sources import SliceSource
from extender.allocator.state import AllocatedState
from extender.cel.environment import Environment
from extender.model import AllocationResult, CounterSet, DeviceClass, DeviceID, Node, ResourceClaim
from extender.model.features import Features

Key = tuple[Any, ...]


@dataclass(slots=True, eq=False)
class Answer:
    """What a successful search chose, by candidate index."""

    picks: list[list[tuple[int, RequestData]]]  # per claim: (candidate index, (sub)request)
    chosen: list[list[RequestData]]  # per claim: per request, the request or its chosen subrequest
    # The searched node's pools and the claims: they keep the objects whose identities the key
    # holds (CEL memos of its devices, claims) alive, so that no other object takes those ids.
    pools: Sequence[Pool]
    claims: Sequence[ResourceClaim]


@dataclass(slots=True, eq=False)
class NodeShape:
    """One node's shape, candidate by candidate, computed only as far as a lookup needs."""

    node: Node
    key: Key  # claims, node and pool facts
    candidates: list[Candidate]
    positions: list[int]  # each candidate's pool position
    shapes: list[Key] = field(default_factory=list)

    def prefix(self, k: int) -> Key:
        """The shapes of the first ``k`` candidates; raises AllocationError as node selection does."""
        shapes = self.shapes
        for i in range(len(shapes), k):
            shapes.append(_candidate_shape(self.node, self.candidates[i], self.positions[i]))
        return tuple(shapes[:k])


class ShapeMemo:
    """Answers of successful searches by node shape, for one Allocator's lifetime."""

    def __init__(self, state: AllocatedState) -> None:
        self._state = state
        self._shared: set[DeviceID] | None = None
        # global key -> read bound -> (prefix shapes, bound is the whole list) -> answer
        self._answers: dict[Key, dict[int, dict[tuple[Key, bool], Answer]]] = {}
        self.hits = 0

    def shape(self, node: Node, pools: Sequence[Pool], claims: Sequence[ResourceClaim]) -> NodeShape | None:
        """The node's shape, or None when something is allocated in its pools."""
        if not self._untouched(pools):
            return None
        candidates: list[Candidate] = []
        positions: list[int] = []
        pool_facts = []
        for position, pool in enumerate(pools):
            candidates.extend(pool.candidates)
            positions.extend([position] * len(pool.candidates))
            counters = _counters(pool.counter_sets.values())
            pool_facts.append((pool.driver, pool.incomplete, pool.invalid is not None, counters))
        key = (
            tuple(map(id, claims)),
            OPTIONAL_NODE_OPERATIONS in node.declared_features,
            tuple(pool_facts),
        )
        return NodeShape(node, key, candidates, positions)

    def lookup(self, shape: NodeShape) -> Answer | None:
        by_bound = self._answers.get(shape.key)
        if by_bound is None:
            return None
        count = len(shape.candidates)
        try:
            for bound, answers in by_bound.items():
                if bound > count:
                    continue
                answer = answers.get((shape.prefix(bound), bound == count))
                if answer is not None:
                    self.hits += 1
                    return answer
        except AllocationError:
            return None  # the search meets the same error, or not: it decides
        return None

    def record(self, shape: NodeShape, search: Search, pools: Sequence[Pool]) -> None:
        """Keep a successful search's answer for the nodes alike."""
        picks: list[list[tuple[int, RequestData]]] = []
        for results in search.results:
            claim_picks = []
            for pick in results:
                if pick.share_id is not None or pick.consumed:
                    return
                claim_picks.append((pick.candidate.index, pick.data))
            picks.append(claim_picks)
        count = len(shape.candidates)
        bound = count if any(claim.constraints for claim in search.claims) else search.read_bound()
        try:
            prefix = shape.prefix(bound)
        except AllocationError:
            return
        chosen = [search.chosen(c) for c in range(len(search.claims))]
        by_bound = self._answers.setdefault(shape.key, {})
        by_bound.setdefault(bound, {})[(prefix, bound == count)] = Answer(picks, chosen, pools, search.claims)

    def _untouched(self, pools: Sequence[Pool]) -> bool:
        """Whether committed allocations hold nothing in these pools."""
        state = self._state
        allocated, capacity = state.allocated_devices, state.aggregated_capacity
        if not allocated and not capacity and not state.allocated_shared:
            return True
        if self._shared is None:
            self._shared = state.shared_device_ids()
        shared = self._shared
        for pool in pools:
            for s in (*pool.slices, *pool.other_slices):
                for device in s.devices:
                    dev_id = device.id
                    if dev_id in allocated or dev_id in capacity or dev_id in shared:
                        return False
        return True


def _counters(counter_sets: Iterable[CounterSet]) -> Key:
    return tuple((cs.name, tuple(cs.counters.items()), cs.compatibility_groups) for cs in counter_sets)


def _candidate_shape(node: Node, candidate: Candidate, position: int) -> Key:
    device = candidate.device
    slice_ = candidate.slice
    per_device = bool(slice_.per_device_node_selection)
    return (
        position,
        id(device.cel_memo),
        _counters(device.consumes_counters) if device.consumes_counters else (),
        tuple((t.key, t.value, t.effect) for t in device.taints),
        bool(device.binding_conditions),
        per_device,
        per_device and device_matches_node(node, device),
        bool(slice_.skip_node_operations),
    )


class Allocator:
    """Reusable across the nodes of one scheduling cycle; each ``allocate`` is independent.

    Caches live as long as the object and assume its inputs (features, allocated state,
    classes, slices) do not change: the node's gathered pools, compiled selectors, and the
    per-pool available counters (upstream keeps that one for the allocator's lifetime too),
    and the answers of successful searches by node shape, reused for the nodes alike
    (:class:`ShapeMemo`; ``share_shapes=False`` turns that off).
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
        self.shapes = ShapeMemo(allocated) if share_shapes else None

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
        shape = None
        if self.shapes is not None and node is not None:
            shape = self.shapes.shape(node, pools, claims)
            answer = None if shape is None else self.shapes.lookup(shape)
            if shape is not None and answer is not None:
                if deadline is not None and time.monotonic() > deadline:
                    # A spent budget stops a search at its first step: so it does here.
                    raise AllocationTimeout("filter operation aborted: context deadline exceeded")
                return self._results(answer, node, claims, shape.candidates)
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
        if shape is not None and self.shapes is not None:
            self.shapes.record(shape, search, pools)
        binding = self.features.binding
        return [
            build_result(claim, search.results[c], search.chosen(c), node, binding)
            for c, claim in enumerate(claims)
        ]

    def _results(
        self, answer: Answer, node: Node, claims: Sequence[ResourceClaim], candidates: list[Candidate]
    ) -> list[AllocationResult]:
        """An alike node's answer, built for this node's devices as the search would build it."""
        binding = self.features.binding
        return [
            build_result(
                claim,
                [Pick(data, candidates[index], None, None) for index, data in answer.picks[c]],
                answer.chosen[c],
                node,
                binding,
            )
            for c, claim in enumerate(claims)
        ]
