"""The decision every verb shares: one pod's plan and its per-node verdicts.

``PodPlan.build`` resolves the pod's claims and runs the checks that hold on every node
(upstream's PreFilter); ``PodPlan.evaluate`` decides one node (upstream's Filter) and
``PodPlan.placement`` decides the node bind was given. filter, prioritize, bind, preempt and
explain all go through here; what a plan keeps for later verbs goes into ``memory``.

Per-node outcomes (upstream: ``Filter`` in kubernetes/kubernetes
pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go):

* fits → passes; the allocation is remembered per (pod uid, node) for bind;
* no solution while the node has devices held by other claims → resolvable (``FailedNodes``):
  evicting pods may free devices (``preempt`` then checks whether the victims actually help);
* no solution otherwise, a node-local failure (invalid pools), an allocated claim pinned to
  other nodes, a timeout → unresolvable (``FailedAndUnresolvableNodes``);
* fatal allocator errors (bad CEL, unknown class, limits, ``All`` on an incomplete pool):
  ``FatalAllocation``, which holds on every node (see ``filter`` for how it is reported).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from extender.allocator import (
    AllocatedState,
    AllocationError,
    AllocationTimeout,
    Allocator,
    Features,
    NodeAllocationFailure,
)
from extender.metrics import Metrics
from extender.model import AllocationResult, Node, ResourceClaim
from extender.model.pods import PodInfo
from extender.scheduling.claims import (
    PodClaims,
    PodWaits,
    check_before_allocation,
    lacks_node_operations,
    reserved_for_pod,
    resolve,
)
from extender.scheduling.extended_resources.claim import (
    ExtendedClaim,
    extended_status,
    find_extended_claim,
    in_memory_claim,
    leftover_reason,
    mappings_of,
)
from extender.scheduling.extended_resources.needs import ExtendedNeeds
from extender.scheduling.node_resources import NodeResourcesOutcome, check, sharing_problem
from extender.scheduling.turns import pause
from extender.scheduling.verdicts import (
    FITS,
    TIMEOUT,
    NodeVerdict,
    PodResults,
    Remembered,
    SharedVerdict,
    SpecVerdicts,
)
from extender.state import ClusterState
from extender.state.pod_requests import ClaimFootprint

if TYPE_CHECKING:
    from extender.config import Config

class FatalAllocation(Exception):
    """The allocator rejected the pod's claims as such; no node can change that."""


class PlanMemory(Protocol):
    """What a plan reads from, and leaves in, the scheduler's memory (``memory.SchedulerMemory``)."""

    def results_for(self, pod_uid: str) -> PodResults: ...

    def shared_verdicts(self, spec: bytes, /) -> SpecVerdicts:
        """The verdicts shared for a claim spec (created empty on first use)."""
        ...

    def placed_with(
        self, claims: Iterable[ResourceClaim], pod_uid: str
    ) -> tuple[ResourceClaim, str] | None: ...

    def was_deleted(self, claim_uid: str) -> bool: ...


class Wiring(Protocol):
    """What a plan uses of the ``context.SchedulingContext`` it is given.

    Declared here so that the decision depends on no wiring: memory keeps the plan's records
    and the context holds memory, so neither may be imported by the plan.
    """

    @property
    def state(self) -> ClusterState: ...

    @property
    def features(self) -> Features: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def memory(self) -> PlanMemory: ...

    def deadline(self) -> float: ...

    def allocator(
        self, allocated: AllocatedState | None = None, deadline: float | None = None
    ) -> Allocator: ...

    def held_for(self, pod: PodInfo) -> Mapping[str, AllocatedState]:
        """The in-use view ``pod`` gets where nominated pods hold devices, by node name."""
        ...


@dataclass(frozen=True, slots=True)
class Variant:
    """The claims to allocate on a node: the pod's unallocated claims plus, where the node
    leaves extended resources to DRA, that node's variant of the extended-resource claim."""

    claims: tuple[ResourceClaim, ...]
    extended: ExtendedClaim | None
    keys: tuple[str, ...]  # "ns/name", named in reasons
    uids: tuple[str, ...]
    spec: bytes  # what verdicts are shared by

    @classmethod
    def of(cls, claims: tuple[ResourceClaim, ...], extended: ExtendedClaim | None = None) -> Variant:
        if extended is not None:
            claims = (*claims, extended.claim)
        return cls(
            claims,
            extended,
            tuple(f"{c.namespace}/{c.name}" for c in claims),
            tuple(c.uid for c in claims),
            orjson.dumps([c.raw.get("spec") for c in claims], option=orjson.OPT_SORT_KEYS),
        )


@dataclass(frozen=True, slots=True)
class ExtendedStatus:
    """``pod.status.extendedResourceClaimStatus`` to record; claim "" = the one bind creates."""

    claim_name: str
    mappings: tuple[Mapping[str, str], ...]

    def fields(self, created_name: str) -> dict[str, Any]:
        """The pod status fields to set, ``created_name`` naming the claim bind created."""
        return extended_status(self.claim_name or created_name, self.mappings)


@dataclass(frozen=True, slots=True)
class Placement:
    """Everything bind commits on its node, decided before anything is held or written."""

    variant: Variant  # ``variant.claims`` get ``results``, in order
    results: Sequence[AllocationResult]
    reserve: tuple[ResourceClaim, ...]  # allocated claims that do not list the pod in reservedFor yet
    status: ExtendedStatus | None  # what the pod's status must say about its extended-resource claim
    # The extended-resource claim of ``variant`` exists only in memory: bind creates it from this.
    create: dict[str, Any] | None = None
    # What the claims cost the node (``pod.status.nodeAllocatableResourceClaimStatuses``).
    footprints: tuple[ClaimFootprint, ...] = ()


def handles(config: Config, pod: PodInfo) -> bool:
    """Pods of another scheduler pass untouched; a pod without schedulerName counts as ours."""
    names = config.handled_scheduler_names
    return names is None or pod.scheduler_name is None or pod.scheduler_name in names


def wants_devices(pod: PodInfo) -> bool:
    """Whether the pod asks for anything DRA might provide (claims, or extended resources)."""
    return bool(pod.claims or pod.extended_requests)


def unavailable_on(claims: PodClaims, node: Node) -> str | None:
    """Why an already allocated claim cannot be used on ``node``, or None."""
    for claim in claims.allocated:
        selector = claim.allocation.node_selector if claim.allocation else None
        if selector is not None:
            try:
                ok = selector.matches(node)
            except ValueError as exc:
                return f"resource claim {claim.namespace}/{claim.name}: invalid node selector: {exc}"
            if not ok:
                return f"resource claim {claim.namespace}/{claim.name} is allocated for other nodes"
        lacking = lacks_node_operations(claim, node)
        if lacking is not None:
            return lacking
    return None


class PodPlan:
    """The node-independent part of one pod's decision: claims, checks, one allocator.

    Verdicts are shared between pods through ``memory``, keyed by the claims' spec
    signature: the allocator is deterministic, so claims with equal specs get the same
    answer on a node whose version (``ClusterState.node_versions``) has not moved. Results
    with share IDs (fresh UUIDs per allocation) and timeouts are never shared.
    """

    def __init__(
        self,
        ctx: Wiring,
        pod: PodInfo,
        claims: PodClaims,
        extended: ExtendedNeeds | None = None,
        results: PodResults | None = None,
        remember: bool = True,
        deadline: float | None = None,
    ) -> None:
        self.ctx = ctx
        # One allocation budget for the whole request, whatever number of nodes it covers.
        self.deadline = ctx.deadline() if deadline is None else deadline
        self.pod = pod
        self.claims = claims
        # Extended resources still to be provided: none once an earlier bind allocated them.
        self.extended = extended
        # A what-if plan (preemption, explain) must neither leave results bind could reuse
        # nor share verdicts computed against a hypothetical state.
        self.remember = remember
        # Where this pod's filter results go for bind: memory's (handed out by ``build``), or
        # a throw-away one.
        self._results = results if results is not None and remember else PodResults()
        self._allocator: Allocator | None = None
        # Nodes where devices are held for pods a preemption nominated there (see
        # ``preemption.nominated``): decided over that view, and never shared.
        self.held: Mapping[str, AllocatedState] = {}
        self._held_allocators: dict[str, Allocator] = {}
        self._shared_verdicts = ctx.memory.shared_verdicts
        self._plain = Variant.of(claims.to_allocate)
        self._variants: dict[tuple[str, ...], Variant] = {}
        self.outcomes: Counter[tuple[str, str]] = Counter()
        self.cache_hits: Counter[str] = Counter()  # by phase; apart from outcomes: no tuple per node
        # Rekeyed rejections by (reason template, resolvable): in a filling cluster most
        # candidates fail alike, and each would otherwise be rewritten anew.
        self._rekeyed: dict[tuple[str, bool], NodeVerdict] = {}
        # DRANodeAllocatableResources: each node's answer also depends on this pod's requests
        # and the node's other pods, so it is checked per pod, after the shared device verdict;
        # as upstream's Filter, only where the node allocates something for the pod (the
        # footprint then covers the pod's allocated claims too).
        self._node_check = ctx.features.node_allocatable_resources
        self.node_sharing = _shared_mapped_claim(ctx, pod, claims) if self._node_check else ""

    @classmethod
    def build(cls, ctx: Wiring, pod: PodInfo, holds: bool = True) -> PodPlan:
        """Raises PodWaits when the pod cannot be scheduled on any node yet.

        ``holds=False`` ignores the devices held for nominated pods (how a hold is computed).

        Reads memory (deleted claims, expected placements, the pod's filter results) but
        expires nothing: each verb calls ``ctx.memory.expire()`` first.
        """
        extended = ExtendedNeeds.of(pod, ctx.state.classes)
        claims = resolve(ctx.state, pod)
        if extended is not None:
            claims = _with_existing_extended_claim(ctx, pod, claims)
        check_before_allocation(ctx.state, ctx.features, pod, claims)
        claims = claims.judged(ctx.state, ctx.features)
        # Only a pod that may allocate has results worth keeping for bind.
        keeps_results = _may_allocate(claims, extended)
        memory = ctx.memory
        # A claim another pod was just placed with is as good as in flight (upstream's Reserve):
        # kube-scheduler would have put it in its in-flight map at once; the extender only knows
        # the placement it recommended, until that pod's bind arrives or the guess expires.
        placed = memory.placed_with(claims.to_allocate, pod.uid) if claims.to_allocate else None
        if placed is not None:
            claim, node = placed
            raise PodWaits(
                f"resource claim {claim.namespace}/{claim.name} is in the process of being allocated "
                f"(for another pod, on node {node})"
            )
        plan = cls(ctx, pod, claims, extended, memory.results_for(pod.uid) if keeps_results else None)
        if holds and keeps_results:
            plan.held = ctx.held_for(pod)
        return plan

    def what_if(self) -> PodPlan:
        """The same decision against another state; nothing of it is remembered or shared."""
        plan = PodPlan(self.ctx, self.pod, self.claims, self.extended, remember=False, deadline=self.deadline)
        plan.held = self.held
        return plan

    def use_allocator(self, allocator: Allocator) -> None:
        """Decide every node over ``allocator``'s state, which already counts any holds."""
        self._allocator = allocator
        self.held = {}

    @property
    def may_allocate(self) -> bool:
        """Whether some node may need an allocation (unallocated claims, or extended resources)."""
        return _may_allocate(self.claims, self.extended)

    @property
    def concerns_dra(self) -> bool:
        """Whether DRA has anything to decide for this pod (claims or DRA-backed resources)."""
        return bool(self.claims.claims) or self.extended is not None

    @property
    def allocator(self) -> Allocator:
        """One allocator for all nodes of this request (compiled selectors, counter caches)."""
        if self._allocator is None:
            self._allocator = self.ctx.allocator(deadline=self.deadline)
        return self._allocator

    def remembered(self, node_name: str) -> Remembered | None:
        """This pod's filter result on the node, while the node is unchanged."""
        state = self.ctx.state
        entry = self._results.get(node_name)
        if entry is not None and entry[0] == state.node_signature(node_name):
            return entry
        shared = self._results.shared
        if shared is None or node_name in self.held:
            return None
        table, uids = shared
        table.sync(*state.node_versions())
        hit = table.entries.get(node_name)
        if hit is None or not hit.verdict.fits:
            return None
        return (hit.node_signature, uids, hit.verdict)

    def decide(
        self, names: list[str], given: Mapping[str, Node] | None = None, phase: str = "filter"
    ) -> tuple[list[str], dict[str, NodeVerdict | None]]:
        """``evaluate`` every named node (``given``: the request's Node objects, else the
        state's): the nodes that fit, in order, and the others' verdicts (None: a node that is
        not known). Raises FatalAllocation as ``evaluate``.

        Where the pod's claims are shared alike, nodes with a current shared verdict are
        read from the spec's table as sets: this runs for every filter call over every
        candidate node, and in a big cluster almost none has moved since the previous pod.
        """
        nodes: Mapping[str, Node] = self.ctx.state.nodes
        if given is not None and any(nodes.get(name) is not given.get(name) for name in names):
            nodes = given
        else:
            given = None  # the state's own nodes (api.wire hands them out when equal): as by name
        variant = self._plain
        if (
            given is not None
            or not self.remember
            or self.extended is not None
            or self.claims.allocated
            or self._node_check
        ):
            passed: list[str] = []
            rejected: dict[str, NodeVerdict | None] = {}
            for name in names:
                node = nodes.get(name)
                verdict = None if node is None else self.evaluate(node, phase)
                if verdict is not None and verdict.fits:
                    passed.append(name)
                else:
                    rejected[name] = verdict
            return passed, rejected
        if not variant.claims:
            return [n for n in names if n in nodes], {n: None for n in names if n not in nodes}
        state = self.ctx.state
        table = self._shared_verdicts(variant.spec)
        self._results.shared = (table, variant.uids)
        entries, held = table.entries, self.held
        # Decided here rather than read: nodes without a current verdict, and nodes with holds.
        own: dict[str, NodeVerdict | None] = {}
        while True:
            _, floor, clock = versions = state.node_versions()
            table.sync(*versions)
            if own or held:
                todo = [n for n in names if (n not in entries or n in held) and n not in own]
            else:  # the usual first round, in one test per node
                todo = [n for n in names if n not in entries]
            if not todo:
                break
            for name in todo:
                node = nodes.get(name)
                own[name] = None if node is None else self.evaluate(node, phase)
            # Evaluations may have paused, and other requests moved the state meanwhile; if
            # nothing moved, no verdict read from the table went stale and all is decided.
            _, floor_now, clock_now = state.node_versions()
            if (floor_now, clock_now) == (floor, clock):
                break
        self.cache_hits[phase] += len(names) - len(own)
        fit = table.fits
        if not own:
            passed = [n for n in names if n in fit]
            if len(passed) == len(names):
                return passed, {}
        # Of the named nodes only, in one pass: the table's set is the whole cluster's, and
        # copying it cost about a millisecond per filter at 15,000 nodes (docs/performance.md).
        keys = variant.keys
        passed = []
        rejected = {}
        for name in names:
            if name in own:
                verdict = own[name]
                if verdict is not None and verdict.fits:
                    passed.append(name)
                else:
                    rejected[name] = verdict
            elif name in fit:
                passed.append(name)
            else:
                hit = entries[name]
                rejected[name] = hit.verdict if hit.claim_keys == keys else self._rekey(hit, keys)
        return passed, rejected

    def fitting(
        self, names: list[str], phase: str
    ) -> tuple[list[str], dict[str, NodeVerdict], SpecVerdicts | None]:
        """The named nodes that fit: those whose fitting verdict the spec's shared table holds
        (the table, current until the caller next yields to other requests), and the pod's
        own fitting verdicts by node name.

        A verdict is this pod's filter result while the node is unchanged, else decided now:
        binds of other pods land between verbs.
        """
        state = self.ctx.state
        shared = self._results.shared
        table = shared[0] if shared is not None else None
        fits: set[str] = table.fits if table is not None else set()
        held = self.held
        nodes = state.nodes
        remembered_on = self._results.get
        own: dict[str, NodeVerdict] = {}
        looked: set[str] = set()
        while True:
            if table is not None:
                table.sync(*state.node_versions())
            if not looked and not held:
                from_table = [n for n in names if n in fits]
                if len(from_table) == len(names):
                    return from_table, own, table  # the usual case: every survivor of filter
            rest = [n for n in names if (n not in fits or n in held) and n not in looked]
            if not rest:
                break
            stamps, floor, _ = state.node_versions()
            for name in rest:
                looked.add(name)
                entry = remembered_on(name)
                if entry is not None and entry[0] == stamps.get(name, floor):
                    own[name] = entry[2]
                    continue
                node = nodes.get(name)
                if node is None:
                    continue
                try:
                    verdict = self.evaluate(node, phase)
                except FatalAllocation:
                    continue
                if verdict.fits:
                    own[name] = verdict
                # The evaluation may have paused, and other requests moved the state meanwhile.
                stamps, floor, _ = state.node_versions()
        if not fits:
            return [], own, table
        return [n for n in names if n in fits and n not in looked], own, table

    def variant(self, node: Node) -> Variant | str:
        """What must be allocated on ``node``, or why the node cannot serve the pod's resources."""
        if self.extended is None:
            return self._plain
        via_dra, reason = self.extended.on_node(node)
        if reason:
            return reason
        if not via_dra or self.claims.extended is not None:
            return self._plain  # device plugins serve it all, or an earlier bind allocated it
        variant = self._variants.get(via_dra)
        if variant is None:
            extended = in_memory_claim(self.pod, via_dra, self.extended.classes)
            variant = self._variants[via_dra] = Variant.of(self.claims.to_allocate, extended)
        return variant

    def evaluate(self, node: Node, phase: str = "filter") -> NodeVerdict:
        """Decide one node; raises FatalAllocation for errors that hold on every node.

        This runs for every candidate node of every filter call: keep it lean.
        """
        pause()  # a long candidate list lets other requests run between nodes
        variant = self.variant(node)
        if isinstance(variant, str):
            self.outcomes[(phase, "unavailable")] += 1
            return NodeVerdict(False, variant)
        claims = self.claims
        if claims.allocated:
            # A shared mapped claim is reported before any other claim's unavailability, as
            # upstream's Filter returns it at once.
            reason = self.node_sharing or claims.unusable or unavailable_on(claims, node)
            if reason is not None:
                self.outcomes[(phase, "unavailable")] += 1
                return NodeVerdict(False, reason)
        if not variant.claims:
            return FITS
        name = node.name
        state = self.ctx.state
        signature = state.node_signature(name)
        cached = state.nodes.get(name)
        view = self.held.get(name) if self.held else None
        shareable = self.remember and view is None and (cached is node or cached == node)
        verdict = None
        table = self._shared_verdicts(variant.spec) if shareable else None
        if table is not None:
            hit = table.entries.get(name)
            if hit is not None and hit.node_signature == signature:
                verdict = hit.verdict
                # A fit names no claim; only rejections speak of the other pod's claims.
                if not verdict.fits and hit.claim_keys != variant.keys:
                    verdict = self._rekey(hit, variant.keys)
                self.cache_hits[phase] += 1
        if verdict is None:
            verdict = self._allocate(node, phase, variant.claims, view)
            if table is not None and verdict.reason != TIMEOUT and not verdict.shares:
                template = "" if verdict.fits else _reason_template(verdict.reason, variant.keys)
                # Kept only if the node did not move while it was computed (``put``).
                shared = SharedVerdict(signature, variant.keys, verdict, template)
                table.put(name, shared, state.node_signature(name))
        if self._node_check and verdict.fits:
            verdict = self._with_node_resources(node, variant, verdict, phase)
        if verdict.fits and self.remember:
            self._results.keep(name, (signature, variant.uids, verdict))
        return verdict

    def node_resources(
        self, node: Node, variant: Variant, results: Sequence[AllocationResult]
    ) -> NodeResourcesOutcome:
        """What the pod's claims, allocated as given on ``node``, cost the node, and whether the
        pod still fits there (DRANodeAllocatableResources)."""
        allocations = [(c, c.allocation) for c in self.claims.allocated if c.allocation is not None]
        allocations += zip(variant.claims, results, strict=True)
        return check(self.ctx.state, self.pod, node, allocations)

    def _with_node_resources(
        self, node: Node, variant: Variant, verdict: NodeVerdict, phase: str
    ) -> NodeVerdict:
        outcome = self.node_resources(node, variant, verdict.results)
        if not outcome.reason:
            return verdict
        self.outcomes[(phase, "nofit")] += 1
        return NodeVerdict(False, outcome.reason, resolvable=outcome.resolvable)

    def placement(self, node: Node) -> Placement | str:
        """What bind commits on ``node``, or why the pod cannot go there (the reply's text).

        The filter result is reused while the node's signature has not moved since filter;
        otherwise the allocation is recomputed against the current state.
        """
        where = f"pod {self.pod.ref} cannot run on node {node.name}"
        unavailable = unavailable_on(self.claims, node)
        if unavailable is not None:
            return f"{where}: {unavailable}"
        variant = self.variant(node)
        if isinstance(variant, str):
            return f"{where}: {variant}"
        results: Sequence[AllocationResult] = ()
        # A hold may have appeared since filter without changing the node's signature.
        remembered = self.remembered(node.name) if variant.claims and node.name not in self.held else None
        if remembered is not None and remembered[1] == variant.uids:
            results = remembered[2].results
        elif variant.claims:
            try:
                verdict = self.evaluate(node, phase="bind")
            except FatalAllocation as exc:
                return str(exc)
            finally:
                self.flush_metrics()
            if not verdict.fits:
                return f"pod {self.pod.ref} no longer fits on node {node.name}: {verdict.reason}"
            results = verdict.results
        footprints: tuple[ClaimFootprint, ...] = ()
        if self._node_check and variant.claims:
            # Checked again even for a remembered result: other pods may have come to the node.
            outcome = self.node_resources(node, variant, results)
            if outcome.reason:
                return f"{where}: {outcome.reason}"
            footprints = outcome.footprints
        try:
            status = self._extended_status(variant.extended)
        except ValueError as exc:
            return str(exc)
        features = self.ctx.features
        reserve = tuple(c for c in self.claims.allocated if not reserved_for_pod(features, c, self.pod))
        create = variant.extended.create_body() if variant.extended is not None else None
        return Placement(variant, results, reserve, status, create, footprints)

    def _extended_status(self, extended: ExtendedClaim | None) -> ExtendedStatus | None:
        """What the pod's status must say about its extended-resource claim, if it does not yet.

        Raises ValueError when an adopted claim's requests name no request of the pod.
        """
        if extended is not None:
            return ExtendedStatus("", extended.mappings)
        adopted = self.claims.extended
        if adopted is None or self.pod.extended_claim_name == adopted.name:
            return None
        # Adopted from an earlier bind that did not get to record it: its requests name the containers.
        return ExtendedStatus(adopted.name, tuple(mappings_of(self.pod, adopted)))

    def _rekey(self, hit: SharedVerdict, claim_keys: tuple[str, ...]) -> NodeVerdict:
        """Another pod's rejection, with its claim names in the reason replaced by ours."""
        key = (hit.reason_template, hit.verdict.resolvable)
        rekeyed = self._rekeyed.get(key)
        if rekeyed is None:
            reason = hit.reason_template
            for i, claim_key in enumerate(claim_keys):
                reason = reason.replace(_slot(i), claim_key)
            rekeyed = self._rekeyed[key] = NodeVerdict(False, reason, hit.verdict.resolvable)
        return rekeyed

    def flush_metrics(self) -> None:
        """Per-node outcomes are counted locally and published once per request."""
        for (phase, outcome), n in self.outcomes.items():
            self.ctx.metrics.attempt(phase, outcome, n)
        for phase, n in self.cache_hits.items():
            self.ctx.metrics.attempt(phase, "cached", n)
        self.outcomes.clear()
        self.cache_hits.clear()

    def _allocate(
        self, node: Node, phase: str, claims: tuple[ResourceClaim, ...], view: AllocatedState | None
    ) -> NodeVerdict:
        outcomes = self.outcomes
        allocator = self.allocator if view is None else self._held_allocators.get(node.name)
        if allocator is None:
            allocator = self._held_allocators[node.name] = self.ctx.allocator(view, self.deadline)
        try:
            results = allocator.allocate(node, claims)
        except AllocationTimeout:
            outcomes[(phase, "timeout")] += 1
            return NodeVerdict(False, TIMEOUT)
        except NodeAllocationFailure as exc:
            outcomes[(phase, "unavailable")] += 1
            return NodeVerdict(False, exc.message)
        except AllocationError as exc:
            outcomes[(phase, "error")] += 1
            raise FatalAllocation(exc.message) from None
        if results is None:
            outcomes[(phase, "nofit")] += 1
            reason = allocator.last_failure or "cannot allocate all claims"
            return NodeVerdict(False, reason, resolvable=self._devices_in_use_near(node))
        outcomes[(phase, "fit")] += 1
        return NodeVerdict.fitting(results)

    def _devices_in_use_near(self, node: Node) -> bool:
        per_pool = self.ctx.state.inuse.per_pool
        return bool(per_pool) and any(
            pool in per_pool for pool in self.ctx.state.slices.pools_for_node(node.name)
        )


def _with_existing_extended_claim(ctx: Wiring, pod: PodInfo, claims: PodClaims) -> PodClaims:
    """Adopt the claim an earlier bind created for the pod's extended resources.

    Allocated and reserved for the pod, it is used like any allocated claim (a bind waiting for
    binding conditions, or one whose Binding timed out, left it so for the retry). Any other is
    a leftover (``leftover_reason``) that makes the pod wait until it is deleted.
    """
    existing = find_extended_claim(ctx.state.claims.values(), pod)
    if existing is None or ctx.memory.was_deleted(existing.uid):
        return claims
    if (existing.raw.get("metadata") or {}).get("deletionTimestamp"):
        raise PodWaits(f'resourceclaim "{existing.name}" is being deleted')
    leftover = leftover_reason(ctx.state, ctx.features, existing, pod.uid)
    if leftover is not None:
        raise PodWaits(leftover)  # filter has it deleted (``stale``)
    return claims.with_extended(existing)


def _shared_mapped_claim(ctx: Wiring, pod: PodInfo, claims: PodClaims) -> str:
    """Why no node can serve the pod: an allocated claim with devices mapped to node resources
    is already another pod's (upstream's validateNodeAllocatableDRAClaimSharing); "" if none."""
    features = ctx.features
    for claim in claims.allocated:
        problem = sharing_problem(ctx.state, claim, reserved_for_pod(features, claim, pod))
        if problem is not None:
            return problem
    return ""


def _may_allocate(claims: PodClaims, extended: ExtendedNeeds | None) -> bool:
    return bool(claims.to_allocate) or (extended is not None and claims.extended is None)


def _slot(index: int) -> str:
    return f"\x00{index}\x00"  # NUL never occurs in names or reasons


def _reason_template(reason: str, claim_keys: tuple[str, ...]) -> str:
    """``reason`` with each "claim <ns/name>" of ``claim_keys`` turned into a numbered slot."""
    for i, claim_key in enumerate(claim_keys):
        reason = reason.replace(f"claim {claim_key}", f"claim {_slot(i)}")
    return reason
