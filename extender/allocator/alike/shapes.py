"""Nodes alike to the allocator: one search's answer, reused for every node of the same shape.

Within one Allocator (one request, inputs fixed) a cluster built from a template makes the
same search over and over, once per node, and paid ~50 µs a node on a cold lap (issue 15,
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

Building the results reads one more thing of each pick: how its slice (or, with per-device
node selection, the device) selects nodes, which decides the result's node selector and whether
it can be recorded at all (a selector of several terms cannot: result.py). N's results are
built only when read (results.py), so N must not fail where P succeeded: the kind of node
selection is part of each candidate's shape.

A node's shape depends on its gathered pools alone, so it is kept with them (gathered.py) and
outlives the request; equal prefixes of shapes are numbered alike (``ShapeTable``), so that a
lookup hashes a number rather than a tuple of every candidate's facts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from extender.allocator.outcome import AllocationError
from extender.allocator.pools import Candidate, Pool, device_matches_node
from extender.allocator.requests import RequestData
from extender.allocator.result import Pick, Takes
from extender.allocator.state import AllocatedState
from extender.model import AllocationResult, ConfigEntry, CounterSet, DeviceID, Node, ResourceClaim
from extender.model.nodes import OPTIONAL_NODE_OPERATIONS

Key = tuple[Any, ...]


@dataclass(slots=True, eq=False)
class Answer:
    """What a successful search chose, by candidate index."""

    picks: list[list[tuple[int, RequestData]]]  # per claim: (candidate index, (sub)request)
    indices: tuple[int, ...]  # every claim's picked candidates, in order
    configs: list[tuple[ConfigEntry, ...]]  # per claim: the result's config, the same on every node
    takes: Takes  # what the searched node's results take: but for the devices, the same alike
    # The searched node's pools and the claims: they keep the objects whose identities the key
    # holds (CEL memos of its devices, claims) alive, so that no other object takes those ids.
    pools: Sequence[Pool]
    claims: Sequence[ResourceClaim]


@dataclass(frozen=True, slots=True)
class Searched:
    """What ``ShapeMemo.record`` needs of a successful search (``search.Search``)."""

    picks: Sequence[Sequence[Pick]]  # per claim, in the order picked
    claims: Sequence[ResourceClaim]
    read_bound: Callable[[], int]  # ``Search.read_bound``: asked only when no claim has constraints


class ShapeTable:
    """Prefixes of node shapes, each distinct one numbered once.

    A prefix of ``k + 1`` candidates is numbered by the pair (number of its first ``k``,
    shape of the next), so equal prefixes get equal numbers and each costs one small tuple.
    A number stands for its prefix as long as the table lives: the table keeps the shape each
    pair came from, whose candidates keep alive the objects the pair names by identity.
    """

    EMPTY = 0

    def __init__(self) -> None:
        self._numbers: dict[tuple[int, Key], tuple[int, NodeShape]] = {}

    def extend(self, prefix: int, shape: Key, owner: NodeShape) -> int:
        """The number of prefix ``prefix`` followed by one candidate of ``shape``."""
        known = self._numbers.get((prefix, shape))
        if known is None:
            known = self._numbers[(prefix, shape)] = (len(self._numbers) + 1, owner)
        return known[0]


@dataclass(slots=True, eq=False)
class NodeShape:
    """One node's shape, candidate by candidate, computed only as far as lookups needed."""

    node: Node
    key: Key  # node and pool facts
    candidates: list[Candidate]
    positions: list[int]  # each candidate's pool position
    table: ShapeTable
    prefixes: list[int] = field(default_factory=lambda: [ShapeTable.EMPTY])  # by length

    @classmethod
    def of(cls, node: Node, pools: Sequence[Pool], table: ShapeTable) -> NodeShape:
        candidates: list[Candidate] = []
        positions: list[int] = []
        pool_facts = []
        for position, pool in enumerate(pools):
            candidates.extend(pool.candidates)
            positions.extend([position] * len(pool.candidates))
            counters = _counters(pool.counter_sets.values())
            pool_facts.append((pool.driver, pool.incomplete, pool.invalid is not None, counters))
        key = (OPTIONAL_NODE_OPERATIONS in node.declared_features, tuple(pool_facts))
        return cls(node, key, candidates, positions, table)

    def prefix(self, k: int) -> int:
        """The number of the first ``k`` candidates' shapes; raises AllocationError as node
        selection does."""
        prefixes = self.prefixes
        for i in range(len(prefixes) - 1, k):
            shape = _candidate_shape(self.node, self.candidates[i], self.positions[i])
            prefixes.append(self.table.extend(prefixes[i], shape, self))
        return prefixes[k]


class ShapeMemo:
    """Answers of successful searches by node shape, for one Allocator's lifetime."""

    def __init__(self, state: AllocatedState) -> None:
        self._state = state
        self._shared: set[DeviceID] | None = None
        # (claims, node key) -> read bound -> (prefix number, bound is the whole list) -> answer
        self._answers: dict[Key, dict[int, dict[tuple[int, bool], Answer]]] = {}
        self.hits = 0
        self._claims: Sequence[ResourceClaim] = ()  # the claims last looked up, and their key
        self._claims_key: Key = ()

    def untouched(self, device_ids: Iterable[DeviceID]) -> bool:
        """Whether committed allocations hold none of these devices (a node's, with the devices
        of its pools' slices it does not see)."""
        state = self._state
        allocated, capacity = state.allocated_devices, state.aggregated_capacity
        if not allocated and not capacity and not state.allocated_shared:
            return True
        if self._shared is None:
            self._shared = state.shared_device_ids()
        return (
            allocated.isdisjoint(device_ids)
            and capacity.keys().isdisjoint(device_ids)
            and self._shared.isdisjoint(device_ids)
        )

    def lookup(self, claims: Sequence[ResourceClaim], shape: NodeShape) -> Answer | None:
        if claims is not self._claims:  # one filter asks for the same claims on every node
            self._claims, self._claims_key = claims, tuple(map(id, claims))
        by_bound = self._answers.get((self._claims_key, shape.key))
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

    def record(
        self,
        shape: NodeShape,
        searched: Searched,
        pools: Sequence[Pool],
        results: Sequence[AllocationResult],
    ) -> None:
        """Keep a successful search's answer for the nodes alike."""
        picks: list[list[tuple[int, RequestData]]] = []
        for claim_results in searched.picks:
            claim_picks = []
            for pick in claim_results:
                if pick.share_id is not None or pick.consumed:
                    return
                claim_picks.append((pick.candidate.index, pick.data))
            picks.append(claim_picks)
        count = len(shape.candidates)
        claims = searched.claims
        bound = count if any(claim.constraints for claim in claims) else searched.read_bound()
        try:
            prefix = shape.prefix(bound)
        except AllocationError:
            return
        answer = Answer(
            picks,
            tuple(index for claim_picks in picks for index, _ in claim_picks),
            [result.config for result in results],
            Takes.of(results),
            pools,
            claims,
        )
        by_bound = self._answers.setdefault((tuple(map(id, claims)), shape.key), {})
        by_bound.setdefault(bound, {})[(prefix, bound == count)] = answer


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
        tuple([(t.key, t.value, t.effect) for t in device.taints]) if device.taints else (),
        bool(device.binding_conditions),
        per_device,
        per_device and device_matches_node(node, device),
        bool(slice_.skip_node_operations),
        _selection(candidate, per_device),
    )


def _selection(candidate: Candidate, per_device: bool) -> int:
    """How the candidate selects nodes, as a result's node selector reads it (result.py):
    bound to one node, every node, or a selector of one term or of several (unrecordable)."""
    device, slice_ = candidate.device, candidate.slice
    name, selector = (
        (device.node_name, device.node_selector) if per_device else (slice_.node_name, slice_.node_selector)
    )
    if name or device.binds_to_node:
        return 0
    if selector is None:
        return 1
    return 2 if len(selector.terms) <= 1 else 3
