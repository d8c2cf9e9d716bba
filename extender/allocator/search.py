"""The depth-first search of one Allocate call, in upstream's exact order.

Upstream: allocator.allocateOne and allocateDevice (structured/internal/*/allocator_*.go in
k8s.io/dynamic-resource-allocation).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass

from extender.allocator.budget import Budget
from extender.allocator.capacity import capacity_fits, consumed_capacity
from extender.allocator.compatibility import GroupLedger
from extender.allocator.constraints import ConstraintState, new_state
from extender.allocator.counters import CounterLedger, CounterValues, PoolKey
from extender.allocator.outcome import AllocationError
from extender.allocator.pools import Candidate, Pool
from extender.allocator.requests import MAX_DEVICES_PER_CLAIM, ClaimRequests, RequestData, all_mode_devices
from extender.allocator.result import Pick
from extender.allocator.selection import (
    MatchPruner,
    SelectorCache,
    derived_attribute,
    node_allows,
    pruner_for,
    selectors_match,
)
from extender.allocator.state import AllocatedState
from extender.allocator.taints import all_taints_tolerated
from extender.model import AttributeValue, Device, DeviceID, Node, ResourceClaim
from extender.model.features import Features
from extender.model.nodes import OPTIONAL_NODE_OPERATIONS
from extender.model.quantity import Quantity

# visit() outcomes. MAX_SIZE is upstream's "would exceed 32 results" signal: it makes a
# firstAvailable parent try its next subrequest and is turned into FAIL at claim boundaries.
FAIL, DONE, MAX_SIZE = 0, 1, 2


Undo = Callable[[], None]
# A search step: yields the (c, r, s, d, in_sub, start) of the step it needs next, is sent
# that step's outcome, and returns its own outcome.
Call = tuple[int, int, int, int, bool, int]
Frame = Generator[Call, int, int]


@dataclass(frozen=True, slots=True)
class Setting:
    """What every search of one Allocator shares: the gates, the devices already taken, the
    compiled selectors, the pools' available counters and the hook that lets others run."""

    features: Features
    state: AllocatedState
    selectors: SelectorCache
    counter_cache: dict[PoolKey, CounterValues]
    pause: Callable[[], None] | None = None


class Search:
    """All temporary state of one Allocate call: ``claims`` on ``node``'s ``pools``, in
    ``setting``, until ``deadline``."""

    def __init__(
        self,
        setting: Setting,
        node: Node | None,
        pools: Sequence[Pool],
        claims: Sequence[ResourceClaim],
        deadline: float | None,
    ) -> None:
        self.features = setting.features
        self.state = state = setting.state
        self.node = node
        self.pools = pools
        self.claims = claims
        self.selectors = setting.selectors
        self.hide_multiple = self.features.variant == "stable"  # selection.cel_input
        self.exact_rollback = self.features.exact_rollback  # read by every pick
        self.budget = Budget(deadline, setting.pause)
        counter_cache = setting.counter_cache
        self.candidates: list[Candidate] = [c for p in pools for c in p.candidates]
        self.allocating: dict[DeviceID, set[int]] = {}
        self.allocating_capacity: dict[DeviceID, dict[str, Quantity]] = {}
        self.counters = CounterLedger(counter_cache, state)
        self.groups = GroupLedger(state)
        self._shared_ids: set[DeviceID] | None = None  # committed shares (_capacity_in_use)
        self.results: list[list[Pick]] = [[] for _ in claims]
        self.selected_sub: list[dict[int, int]] = [{} for _ in claims]
        self.requests: list[ClaimRequests] = []
        self.constraints: list[list[ConstraintState]] = []
        self._selectable: dict[int, list[bool | None]] = {}
        self._pruners: dict[int, MatchPruner | None] = {}

    # -- candidate filtering (upstream isSelectable) -----------------------------------------

    def selectable(self, candidate: Candidate, data: RequestData) -> bool:
        verdicts = self.verdicts_for(data)
        verdict = verdicts[candidate.index]
        if verdict is None:
            verdict = verdicts[candidate.index] = self.evaluate(candidate, data)
        return verdict

    def verdicts_for(self, data: RequestData) -> list[bool | None]:
        """Selectability per candidate index for one (sub)request, filled in lazily."""
        verdicts = self._selectable.get(id(data))
        if verdicts is None:
            verdicts = self._selectable[id(data)] = [None] * len(self.candidates)
        return verdicts

    def evaluate(self, candidate: Candidate, data: RequestData) -> bool:
        device = candidate.device
        cache, hide, check = self.selectors, self.hide_multiple, self.budget.in_evaluation
        by_class, by_claim = f"class {data.device_class.name}", f"claim {data.claim_key}"
        return (
            (self.features.binding or not device.binding_conditions)
            and selectors_match(cache, by_class, data.class_selectors, device, hide, check)
            and selectors_match(cache, by_claim, data.selectors, device, hide, check)
            and node_allows(self.node, candidate)
        )

    def fits(self, data: RequestData, candidate: Candidate) -> bool:
        dev_id = candidate.device.id
        return capacity_fits(
            data.exact.capacity_requests,
            candidate.device,
            self.state.aggregated_capacity.get(dev_id),
            self.allocating_capacity.get(dev_id),
            fractional=self.features.fractional_capacity_range,
        )

    def fill_all(self, data: RequestData) -> None:
        # Static capacity only: a matching device whose capacity is used up by other claims
        # stays in "all" and the request fails (upstream v0.37.2 requestData, allocation
        # mode All); one too small for the request is left out.
        cc, fractional = self.features.consumable_capacity, self.features.fractional_capacity_range
        requests = data.exact.capacity_requests
        all_mode_devices(
            data,
            self.pools,
            lambda c: self.selectable(c, data)
            and (not cc or capacity_fits(requests, c.device, None, None, fractional=fractional)),
        )

    # -- the search (upstream allocateOne) --------------------------------------------------

    def prepare(self, requests: list[ClaimRequests]) -> None:
        self.requests = requests
        lists, keep_all = self.features.list_type_attributes, self.features.exact_rollback
        self.constraints = [
            [new_state(con, lists, keep_all) for con in claim.constraints] for claim in self.claims
        ]

    def run(self) -> bool:
        """Drive the search from the first slot; True when every claim got its devices.

        Each ``_visit`` step is a generator that yields the arguments of the step it needs
        next and receives that step's outcome, so the search depth lives on an explicit
        stack instead of Python's call stack (pods may need hundreds of picks).
        """
        frames: list[Frame] = [self._visit(0, 0, 0, 0, False, 0)]
        outcome = FAIL
        sent: int | None = None  # None: the top frame is new and must be started with next()
        while frames:
            try:
                call = next(frames[-1]) if sent is None else frames[-1].send(sent)
            except StopIteration as finished:
                frames.pop()
                outcome = sent = finished.value
                continue
            frames.append(self._visit(*call))
            sent = None
        return outcome == DONE

    def _visit(self, c: int, r: int, s: int, d: int, in_sub: bool, start: int) -> Frame:
        crossed = False  # a claim boundary was passed in this frame: MAX_SIZE becomes FAIL
        while True:
            if time.monotonic() > self.budget.due:
                self.budget.check()
            if c == len(self.requests):
                return DONE
            claim_requests = self.requests[c]
            if r == len(claim_requests):
                c, r, s, d, in_sub, start = c + 1, 0, 0, 0, False, 0
                crossed = True
                continue
            variants = claim_requests[r]
            data = variants[s]
            if not in_sub and data.has_parent:
                outcome = yield from self._try_subrequests(c, r, variants)
            elif data.all_mode and not data.all_devices:
                outcome = FAIL
            elif d >= data.num_devices:
                c, r, s, d, in_sub, start = c, r + 1, 0, 0, False, 0
                continue
            elif len(self.results[c]) + data.num_devices - d > MAX_DEVICES_PER_CLAIM:
                outcome = MAX_SIZE
            elif data.all_mode:
                outcome = yield from self._visit_all(c, r, s, d, in_sub, data)
            else:
                outcome = yield from self._visit_exact(c, r, s, d, in_sub, start, data)
            return FAIL if crossed and outcome == MAX_SIZE else outcome

    def _try_subrequests(self, c: int, r: int, variants: list[RequestData]) -> Frame:
        all_exceeded = True
        for s2 in range(len(variants)):
            outcome = yield (c, r, s2, 0, True, 0)
            if outcome == MAX_SIZE:
                continue
            all_exceeded = False
            if outcome == DONE:
                self.selected_sub[c][r] = s2
                return DONE
        return MAX_SIZE if all_exceeded else FAIL

    def _visit_all(self, c: int, r: int, s: int, d: int, in_sub: bool, data: RequestData) -> Frame:
        undo = self.try_pick(c, data, data.all_devices[d], must=True)
        if undo is None:
            return FAIL
        outcome = yield (c, r, s, d + 1, in_sub, 0)
        if outcome != DONE:
            undo()
        return outcome

    def _visit_exact(
        self, c: int, r: int, s: int, d: int, in_sub: bool, start: int, data: RequestData
    ) -> Frame:
        committed = self.state.allocated_devices
        allocating = self.allocating
        admin = data.admin
        cc = self.features.consumable_capacity
        candidates = self.candidates
        verdicts = self.verdicts_for(data)
        pruner = self._pruner(c, data)
        need = data.num_devices - d - 1  # devices still needed after this pick
        for index in range(start, len(candidates)):
            candidate = candidates[index]
            dev_id = candidate.device.id
            if admin:
                if c in allocating.get(dev_id, ()):
                    continue
            elif dev_id in committed or allocating.get(dev_id):
                continue
            verdict = verdicts[index]
            if verdict is None:
                verdict = verdicts[index] = self.evaluate(candidate, data)
            if not verdict:
                continue
            if need and pruner is not None and pruner.futile(index, need):
                continue
            if cc and not self.fits(data, candidate):
                continue
            undo = self.try_pick(c, data, candidate, must=False)
            if undo is None:
                continue
            outcome = yield (c, r, s, d + 1, in_sub, index + 1)
            if outcome == DONE:
                return DONE
            undo()
            if outcome == MAX_SIZE:
                return MAX_SIZE
        return FAIL

    def _pruner(self, c: int, data: RequestData) -> MatchPruner | None:
        key = id(data)
        if key not in self._pruners:
            self._pruners[key] = pruner_for(self, c, data)
        return self._pruners[key]

    def try_pick(self, c: int, data: RequestData, candidate: Candidate, must: bool) -> Undo | None:
        """Check and record one pick (upstream allocateDevice); the order of checks and what a
        rejection gives back reproduce upstream exactly, per release (Features.exact_rollback:
        1.37 gives back everything, earlier releases kept the counters and, after the capacity
        check, the mark and constraint entries). Returns the undo action or None when rejected.

        Every release rolls back the compatibility groups the pick folded in, on every rejection
        after they were taken: ``_consume`` takes them (and the counters), and this is the one
        place that gives them back (``_give_back``).
        """
        device = candidate.device
        multi = self.features.consumable_capacity and device.allow_multiple_allocations
        if not self._may_pick(c, data, candidate, multi):
            return None
        consumed = self._consume(candidate, multi)
        if consumed is None:
            return None
        counted, ungroup = consumed
        exact = self.exact_rollback
        had_entry = multi and device.id in self.allocating_capacity
        picked = None
        try:
            picked = self._accept(c, data, candidate, multi, must)
        finally:
            if picked is None:
                self._give_back(candidate.pool, device, ungroup, counted and exact)
        if picked is None:
            return None
        accepted, pick = picked
        results = self.results[c]
        results.append(pick)

        def undo() -> None:
            for constraint in reversed(accepted):
                constraint.remove(data.parent)
            if ungroup is not None:
                ungroup()
            if multi:
                if pick.consumed:
                    _add_capacity(self.allocating_capacity[device.id], pick.consumed, -1)
                if exact:
                    # As upstream's ConsumedCapacityCollection.Remove: an entry left at zero goes,
                    # unless an earlier share made it (it marks the device as shared).
                    entry = self.allocating_capacity.get(device.id)
                    if entry is not None and not had_entry and all(q.sign() == 0 for q in entry.values()):
                        del self.allocating_capacity[device.id]
                    if counted:
                        self.counters.release(candidate.pool, device)
            else:
                self.allocating[device.id].discard(c)
                if counted:
                    self.counters.release(candidate.pool, device)
            results.pop()

        return undo

    def _give_back(self, pool: Pool, device: Device, ungroup: Undo | None, counters: bool) -> None:
        """What a pick rejected after its counter check gives back: its compatibility groups,
        and its counters when ``counters`` (from 1.37)."""
        if ungroup is not None:
            ungroup()
        if counters:
            self.counters.release(pool, device)

    def _capacity_in_use(self, dev_id: DeviceID, exact: bool) -> bool:
        """Whether shares of the allow-multiple device already hold its counters (upstream
        deviceCapacityInUse): committed capacity, a share picked in this call, and from 1.37 a
        committed share that consumes no capacity."""
        if dev_id in self.state.aggregated_capacity or dev_id in self.allocating_capacity:
            return True
        if not exact:
            return False
        if self._shared_ids is None:
            self._shared_ids = self.state.shared_device_ids()
        return dev_id in self._shared_ids

    def _may_pick(self, c: int, data: RequestData, candidate: Candidate, multi: bool) -> bool:
        """The checks of a pick that change nothing: the device is free for this request, and
        its slice and counters are allowed by the gates."""
        features = self.features
        device = candidate.device
        dev_id = device.id
        holders = self.allocating.get(dev_id)
        if not multi and data.admin and holders and c in holders:
            return False
        if not data.admin and (dev_id in self.state.allocated_devices or holders):
            return False
        if (
            candidate.slice.skip_node_operations
            and features.variant == "experimental"
            and not _node_operations_optional(features, self.node)
        ):
            return False
        return features.partitionable_devices or not device.consumes_counters

    def _consume(self, candidate: Candidate, multi: bool) -> tuple[bool, Undo | None] | None:
        """Fold the device into the compatibility groups and take its counters (not again for
        a device shared by several allocations that is already counted). None when rejected,
        with the groups rolled back; else whether counters were taken, and the groups' undo."""
        device = candidate.device
        dev_id = device.id
        if not device.consumes_counters or (multi and self._capacity_in_use(dev_id, self.exact_rollback)):
            return False, None
        ungroup: Undo | None = None
        # With the gate off, no slice declaring groups is in any pool (gather_pools).
        if self.features.device_compatibility_groups:
            ungroup = self.groups.try_consume(candidate.pool, device)
            if ungroup is None:
                return None
        if not self.counters.try_consume(candidate.pool, device):
            if ungroup is not None:
                ungroup()
            return None
        return True, ungroup

    def _accept(
        self, c: int, data: RequestData, candidate: Candidate, multi: bool, must: bool
    ) -> tuple[list[ConstraintState], Pick] | None:
        """The checks after the counters (taints, the claim's constraints, capacity), and the
        device marked as being allocated: the constraints the pick was added to and the pick,
        or None when rejected. Raises AllocationError where ``must`` (All mode) meets a
        constraint that refuses the device."""
        features = self.features
        device = candidate.device
        dev_id = device.id
        if features.device_taints and not all_taints_tolerated(device, data.exact.tolerations):
            return None
        states = self.constraints[c]
        accepted: list[ConstraintState] = []
        for i in data.constraints:
            constraint = states[i]
            if not constraint.add(data.parent, self.attribute_of(data, device, constraint.attribute)):
                for done in reversed(accepted):
                    done.remove(data.parent)
                if must:
                    raise AllocationError(
                        f"claim {data.claim_key}, request {data.exact.name}: cannot add device "
                        f"{'/'.join(dev_id)} because a claim constraint would not be satisfied"
                    )
                return None
            accepted.append(constraint)
        if not multi:
            self.allocating.setdefault(dev_id, set()).add(c)
        share_id = None
        consumed: dict[str, Quantity] | None = None
        if features.consumable_capacity:
            if not self.fits(data, candidate):
                if self.exact_rollback:
                    if not multi:
                        self.allocating[dev_id].discard(c)
                    for done in reversed(accepted):
                        done.remove(data.parent)
                return None
            if multi:
                consumed = consumed_capacity(
                    data.exact.capacity_requests, device, fractional=features.fractional_capacity_range
                )
                share_id = str(uuid.uuid4())
                _add_capacity(self.allocating_capacity.setdefault(dev_id, {}), consumed, +1)
        return accepted, Pick(data, candidate, share_id, consumed)

    def attribute_of(self, data: RequestData, device: Device, name: str) -> AttributeValue | None:
        """What a constraint compares of ``device`` picked for ``data``: the request's derived
        attribute ``name`` if it has one (it shadows the device's own), else the device's."""
        if name in data.derived:
            return derived_attribute(self.selectors, data, name, device, self.budget.in_evaluation)
        return device.attribute(name)

    def read_bound(self) -> int:
        """One past the highest candidate index this search has looked at (0: none).

        Every look at a candidate's device (selectors, node, capacity, a pick) comes after
        its verdict for some (sub)request, except the skip of a device already picked in this
        search, which had one to be picked; the pruner's look-ahead is not counted.
        """
        bound = 0
        for verdicts in self._selectable.values():
            for i in range(len(verdicts) - 1, bound - 1, -1):
                if verdicts[i] is not None:
                    bound = i + 1
                    break
        return bound

    def chosen(self, c: int) -> list[RequestData]:
        """Per request of claim c: the request, or the subrequest the search settled on."""
        return [
            variants[self.selected_sub[c].get(r, 0)] if variants[0].has_parent else variants[0]
            for r, variants in enumerate(self.requests[c])
        ]


def _node_operations_optional(features: Features, node: Node | None) -> bool:
    """Whether a device whose slice skips node operations may go to ``node``: the gate is on
    and the node's kubelet declares that it can skip them (upstream allocateDevice). Only the
    experimental allocator asks; the others allocate such devices like any other."""
    return features.optional_node_operations and node is not None and (
        OPTIONAL_NODE_OPERATIONS in node.declared_features
    )


def _add_capacity(target: dict[str, Quantity], amounts: Mapping[str, Quantity], sign: int) -> None:
    for name, amount in amounts.items():
        have = target.get(name)
        if have is None:
            target[name] = amount if sign > 0 else Quantity.from_int(0).sub(amount)
        else:
            target[name] = have.add(amount) if sign > 0 else have.sub(amount)
