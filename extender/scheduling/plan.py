"""The decision every verb shares: one pod's plan, and what it decides about one node.

``PodPlan.build`` resolves the pod's claims and runs the checks that hold on every node
(upstream's PreFilter); the plan then answers, for one node, what must be allocated there, the
allocator's verdict and what bind commits. Verbs reach node verdicts through the plan's
``verdicts`` (``verdicts.PodVerdicts``), which keeps them and shares them between pods asking
alike, and asks the plan only for nodes it has no current verdict of. What a plan keeps for
later verbs goes into ``memory``.

Per-node outcomes (upstream: ``Filter`` in kubernetes/kubernetes
pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go), each a ``Failure``:

* fits → passes; the allocation is remembered per (pod uid, node) for bind;
* no solution while the node has devices held by other claims → "nofit", resolvable
  (``FailedNodes``): evicting pods may free devices (``preempt`` then checks whether the
  victims actually help);
* no solution otherwise, a node-local failure (invalid pools), an allocated claim pinned to
  other nodes, a timeout → unresolvable (``FailedAndUnresolvableNodes``);
* fatal allocator errors (bad CEL, unknown class, limits, ``All`` on an incomplete pool):
  "fatal", which holds on every node (see ``filter`` for how it is reported).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import partial
from weakref import proxy

from extender.allocator import AllocatedState, Allocator, Failure
from extender.model import AllocationResult, Holdings, Node
from extender.model.pods import PodInfo
from extender.scheduling.claims import (
    PodClaims,
    PodWaits,
    check_before_allocation,
    lacks_node_operations,
    reserved_for_pod,
    resolve,
    unusable_reason,
)
from extender.scheduling.context import SchedulingContext
from extender.scheduling.extended_resources.claim import (
    ExtendedClaim,
    find_extended_claim,
    in_memory_claim,
    leftover_reason,
    mappings_of,
)
from extender.scheduling.extended_resources.needs import ExtendedNeeds
from extender.scheduling.node_resources import NodeResourcesOutcome, check, sharing_problem
from extender.scheduling.preemption.nominated import held_views, holds
from extender.scheduling.turns import pause
from extender.scheduling.verdicts import (
    TIMEOUT,
    ExtendedStatus,
    NodeVerdict,
    Placement,
    PodResults,
    PodVerdicts,
    Variant,
)
from extender.state.pod_requests import ClaimFootprint

# The metrics' name of each kind of failure (``dra_extender_allocation_attempts_total``).
_OUTCOME = {"nofit": "nofit", "unavailable": "unavailable", "timeout": "timeout", "fatal": "error"}


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
    """The node-independent part of one pod's decision: claims, checks, one allocator; and,
    asked by its ``verdicts`` for one node, that node's answer (the ``verdicts.Judge``)."""

    def __init__(
        self,
        ctx: SchedulingContext,
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
        self._allocator: Allocator | None = None
        self._held_allocators: dict[str, Allocator] = {}
        self._plain = Variant.of(claims.to_allocate)
        self._variants: dict[tuple[str, ...], Variant] = {}
        self.outcomes: Counter[tuple[str, str]] = Counter()
        # DRANodeAllocatableResources: each node's answer also depends on this pod's requests
        # and the node's other pods, so it is checked per pod, after the shared device verdict;
        # as upstream's Filter, only where the node allocates something for the pod (the
        # footprint then covers the pod's allocated claims too).
        self._node_check = ctx.features.node_allocatable_resources
        self.node_sharing = _shared_mapped_claim(ctx, pod, claims) if self._node_check else ""
        # Where this pod's filter results go for bind: memory's (handed out by ``build``), or
        # a throw-away one.
        kept = results if results is not None and remember else PodResults()
        # The verdicts ask this plan back through a weak proxy: a strong reference would make
        # a cycle, and every verb's plan (its allocator, variants, failures) would wait for the
        # cyclic collector instead of going when the verb returns. That garbage, three plans per
        # pod, made the collector run three times as often and cost 5-15 % of the hot path's
        # CPU (docs/performance.md, issue 27). The verdicts never outlive their plan.
        self.verdicts = PodVerdicts(proxy(self), ctx.state, ctx.memory.shared_verdicts, kept, remember, pause)

    @classmethod
    def build(cls, ctx: SchedulingContext, pod: PodInfo, holds: bool = True) -> PodPlan:
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
            plan.verdicts.held = held_views(ctx, pod, partial(expected_results, ctx))
        return plan

    def nominated_holds(self) -> dict[str, list[Holdings]]:
        """What nominated pods this pod must respect hold, by node name (``preemption.nominated``)."""
        return holds(self.ctx, self.pod, partial(expected_results, self.ctx))

    def failure_over(self, view: AllocatedState, node: Node, phase: str = "preempt") -> Failure | None:
        """Why the pod would not fit on ``node`` if the devices in use were ``view`` (None: it
        fits); nothing of it is remembered or shared (preemption's question)."""
        what_if = self.what_if(self.ctx.allocator(view, self.deadline))
        try:
            return what_if.verdicts.verdict(node, phase).failure
        finally:
            what_if.flush_metrics()

    def what_if(self, allocator: Allocator | None = None) -> PodPlan:
        """The same decision against another state; nothing of it is remembered or shared.

        With ``allocator``, every node is decided over its state, which already counts any
        holds; otherwise over the holds of this plan."""
        plan = PodPlan(self.ctx, self.pod, self.claims, self.extended, remember=False, deadline=self.deadline)
        if allocator is None:
            plan.verdicts.held = self.verdicts.held
        else:
            plan._allocator = allocator
        return plan

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

    # --- one node, as ``verdicts`` asks (``verdicts.Judge``) -------------------------------------

    @property
    def uniform(self) -> Variant | None:
        if self.extended is not None or self.claims.allocated or self._node_check:
            return None
        return self._plain

    def variant(self, node: Node) -> Variant | Failure:
        """What must be allocated on ``node``, or why the node cannot serve the pod's resources."""
        if self.extended is None:
            return self._plain
        via_dra, reason = self.extended.on_node(node)
        if reason:
            return Failure("unavailable", reason)
        if not via_dra or self.claims.extended is not None:
            return self._plain  # device plugins serve it all, or an earlier bind allocated it
        variant = self._variants.get(via_dra)
        if variant is None:
            extended = in_memory_claim(self.pod, via_dra, self.extended.classes)
            variant = self._variants[via_dra] = Variant.of(self.claims.to_allocate, extended)
        return variant

    def refusal(self, node: Node) -> Failure | None:
        claims = self.claims
        if not claims.allocated:
            return None
        # A shared mapped claim is reported before any other claim's unavailability, as
        # upstream's Filter returns it at once.
        reason = self.node_sharing or claims.unusable or unavailable_on(claims, node)
        return None if reason is None else Failure("unavailable", reason)

    def allocate(self, node: Node, variant: Variant, view: AllocatedState | None, phase: str) -> NodeVerdict:
        allocator = self.allocator if view is None else self._held_allocators.get(node.name)
        if allocator is None:
            allocator = self._held_allocators[node.name] = self.ctx.allocator(view, self.deadline)
        results = allocator.allocate(node, variant.claims)
        if not isinstance(results, Failure):
            self.outcomes[(phase, "fit")] += 1
            return NodeVerdict.fitting(results)
        self.outcomes[(phase, _OUTCOME[results.kind])] += 1
        if results.kind == "timeout":
            return NodeVerdict.failing(Failure("timeout", TIMEOUT))
        if results.kind == "nofit":
            return NodeVerdict.failing(Failure("nofit", results.reason, self._devices_in_use_near(node)))
        return NodeVerdict.failing(results)

    def with_node_resources(
        self, node: Node, variant: Variant, verdict: NodeVerdict, phase: str
    ) -> NodeVerdict:
        if not self._node_check:
            return verdict
        outcome = self.node_resources(node, variant, verdict.results)
        if not outcome.reason:
            return verdict
        if outcome.error:
            self.outcomes[(phase, _OUTCOME["fatal"])] += 1
            return NodeVerdict.failing(Failure("fatal", outcome.reason))
        self.outcomes[(phase, "nofit")] += 1
        return NodeVerdict.failing(Failure("nofit", outcome.reason, outcome.resolvable))

    def counted(self, phase: str, outcome: str, n: int = 1) -> None:
        self.outcomes[(phase, outcome)] += n

    def node_resources(
        self, node: Node, variant: Variant, results: Sequence[AllocationResult]
    ) -> NodeResourcesOutcome:
        """What the pod's claims, allocated as given on ``node``, cost the node, and whether the
        pod still fits there (DRANodeAllocatableResources)."""
        allocations = [(c, c.allocation) for c in self.claims.allocated if c.allocation is not None]
        allocations += zip(variant.claims, results, strict=True)
        return check(self.ctx.state, self.pod, node, allocations)

    # --- bind --------------------------------------------------------------------------------

    def bind_variant(self, node: Node) -> Variant | Failure:
        unavailable = unavailable_on(self.claims, node)
        variant = self.variant(node) if unavailable is None else Failure("refused", unavailable)
        if isinstance(variant, Failure):
            return self._refused(node, variant.reason)
        return variant

    def _refused(self, node: Node, reason: str, where: str = "cannot run") -> Failure:
        return Failure("refused", f"pod {self.pod.ref} {where} on node {node.name}: {reason}")

    def place(self, node: Node, variant: Variant, verdict: NodeVerdict) -> Placement | Failure:
        """What bind commits on ``node``, or why the pod cannot go there (the reply's text).

        The node resources are checked again even for a remembered result: other pods may
        have come to the node since filter."""
        self.flush_metrics()
        failure = verdict.failure
        if failure is not None:
            if failure.kind == "fatal":
                return failure
            return self._refused(node, failure.reason, "no longer fits")
        footprints: tuple[ClaimFootprint, ...] = ()
        if self._node_check and variant.claims:
            outcome = self.node_resources(node, variant, verdict.results)
            if outcome.reason:
                return self._refused(node, outcome.reason)
            footprints = outcome.footprints
        try:
            status = self._extended_status(variant.extended)
        except ValueError as exc:
            return Failure("refused", str(exc))
        features = self.ctx.features
        reserve = tuple(c for c in self.claims.allocated if not reserved_for_pod(features, c, self.pod))
        create = variant.extended.create_body() if variant.extended is not None else None
        return Placement(variant, verdict.results, reserve, status, create, footprints)

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

    def flush_metrics(self) -> None:
        """Per-node outcomes are counted locally and published once per request."""
        metrics = self.ctx.metrics
        for (phase, outcome), n in self.outcomes.items():
            metrics.attempt(phase, outcome, n)
        hits = self.verdicts.cache_hits
        for phase, n in hits.items():
            metrics.attempt(phase, "cached", n)
        self.outcomes.clear()
        hits.clear()

    def _devices_in_use_near(self, node: Node) -> bool:
        per_pool = self.ctx.state.inuse.per_pool
        return bool(per_pool) and any(
            pool in per_pool for pool in self.ctx.state.slices.pools_for_node(node.name)
        )


def _with_existing_extended_claim(ctx: SchedulingContext, pod: PodInfo, claims: PodClaims) -> PodClaims:
    """Adopt the claim an earlier bind created for the pod's extended resources.

    Allocated and reserved for the pod, it is used like any allocated claim (a bind waiting for
    binding conditions, or one whose Binding timed out, left it so for the retry). Any other is
    a leftover (``leftover_reason``) that makes the pod wait until it is deleted.
    """
    existing = find_extended_claim(ctx.state.claims.values(), pod)
    if existing is None or ctx.memory.was_deleted(existing.uid):
        return claims
    if existing.deleting:
        raise PodWaits(f'resourceclaim "{existing.name}" is being deleted')
    leftover = leftover_reason(existing, pod.uid, unusable_reason(ctx.state, ctx.features, existing))
    if leftover is not None:
        raise PodWaits(leftover)  # filter has it deleted (``stale``)
    return claims.with_extended(existing)


def _shared_mapped_claim(ctx: SchedulingContext, pod: PodInfo, claims: PodClaims) -> str:
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


def expected_results(
    ctx: SchedulingContext, pod: PodInfo, node: Node, view: AllocatedState
) -> Sequence[AllocationResult]:
    """What ``pod`` would be given on ``node`` if the devices in use were ``view`` (nothing if
    it does not fit there): what a nominated pod holds (``preemption.nominated``)."""
    try:
        plan = PodPlan.build(ctx, pod, holds=False)
    except PodWaits:
        return ()
    if not plan.may_allocate:
        return ()
    what_if = plan.what_if(ctx.allocator(view, plan.deadline))
    verdict = what_if.verdicts.verdict(node, phase="hold")
    what_if.flush_metrics()
    return verdict.results  # none where it does not fit
