"""Per-node feasibility for one pod, with the reasons users read in ``kubectl describe pod``.

Outcome classification (dra-scheduling.md §5.1, extender-protocol.md §6):

* fits → passes; the allocation is remembered per (pod uid, node) for bind;
* no solution while the node has devices held by other claims → ``FailedNodes``: evicting
  pods may free devices (``preempt`` then checks whether the victims actually help);
* no solution otherwise, a node-local failure (invalid pools), an allocated claim pinned to
  other nodes, a timeout → ``FailedAndUnresolvableNodes``;
* fatal allocator errors (bad CEL, unknown class, limits, ``All`` on an incomplete pool):
  every node goes to ``FailedAndUnresolvableNodes`` with the error text, and ``Error`` stays
  empty. Upstream returns an ``Error`` status here, which for an extender means a scheduler
  *error*: the attempt is aborted, the pod backs off and is retried every few seconds,
  and the message lands in the logs as an internal failure. The cause, though, is in the
  pod's claim or its class and no retry can fix it; reporting it per node makes the pod
  plainly Unschedulable with the text (class/request and expression) in its events and
  condition, and the pod is retried on the next cluster event, e.g. the class being fixed.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

from extender.allocator import AllocationError, AllocationTimeout, Allocator, NodeAllocationFailure
from extender.model import AllocationResult, Node, ResourceClaim
from extender.model.pods import PodInfo
from extender.model.refs import PodRef
from extender.scheduling.claims import PodClaims, PodWaits, check_before_allocation, resolve, unavailable_on
from extender.scheduling.context import (
    EXPECTED_TTL_S,
    CachedVerdict,
    Expected,
    NodeVerdict,
    Remembered,
    SchedulingContext,
)
from extender.scheduling.extended import ExtendedNeeds
from extender.scheduling.extended_claim import ExtendedClaim, find_extended_claim, in_memory_claim

TIMEOUT = "timed out trying to allocate devices"
FITS = NodeVerdict(True)


class FatalAllocation(Exception):
    """The allocator rejected the pod's claims as such; no node can change that."""


@dataclass
class FilterOutcome:
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    error: str = ""


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


class PodPlan:
    """The node-independent part of one pod's decision: claims, checks, one allocator.

    Verdicts are shared between pods through ``ctx.verdicts``, keyed by the claims' spec
    signature: the allocator is deterministic, so claims with equal specs get the same
    answer on a node whose signature (inventory epoch + versions of the in-use sets of its
    pools) has not changed. Results with share IDs (fresh UUIDs per allocation) and
    timeouts are never shared.
    """

    def __init__(
        self,
        ctx: SchedulingContext,
        pod: PodInfo,
        claims: PodClaims,
        remember: bool = True,
        extended: ExtendedNeeds | None = None,
    ) -> None:
        self.ctx = ctx
        self.pod = pod
        self.claims = claims
        # Extended resources still to be provided: none once an earlier bind allocated them.
        self.extended = extended
        # A what-if plan (preemption, explain) must neither leave results bind could reuse
        # nor share verdicts computed against a hypothetical state.
        self.remember = remember
        self._allocator: Allocator | None = None
        self._remembered = ctx.remembered_for(pod.uid) if remember and self.may_allocate else {}
        self._plain = Variant.of(claims.to_allocate)
        self._variants: dict[tuple[str, ...], Variant] = {}
        self.outcomes: Counter[tuple[str, str]] = Counter()
        self.cache_hits: Counter[str] = Counter()  # by phase; apart from outcomes: no tuple per node
        # Rekeyed rejections by (reason template, resolvable): in a filling cluster most
        # candidates fail alike, and each would otherwise be rewritten anew.
        self._rekeyed: dict[tuple[str, bool], NodeVerdict] = {}

    def remembered(self, node_name: str) -> Remembered | None:
        """This pod's filter result on the node, while the node is unchanged."""
        entry = self._remembered.get(node_name)
        if entry is None or entry.node_signature != self.ctx.state.node_signature(node_name):
            return None
        return entry

    def use_allocator(self, allocator: Allocator) -> None:
        self._allocator = allocator

    def what_if(self) -> PodPlan:
        """The same decision against another state; nothing of it is remembered or shared."""
        return PodPlan(self.ctx, self.pod, self.claims, remember=False, extended=self.extended)

    @classmethod
    def build(cls, ctx: SchedulingContext, pod: PodInfo) -> PodPlan:
        """Raises PodWaits when the pod cannot be scheduled on any node yet."""
        ctx.state.expire_inflight()
        claims = resolve(ctx.state, pod)
        extended = ExtendedNeeds.of(pod, ctx.state.classes)
        if extended is not None:
            claims = _with_existing_extended_claim(ctx, pod, claims)
        check_before_allocation(ctx.state, ctx.features, pod, claims)
        _check_expected(ctx, pod, claims)
        return cls(ctx, pod, claims, extended=extended)

    @property
    def may_allocate(self) -> bool:
        """Whether some node may need an allocation (unallocated claims, or extended resources)."""
        return bool(self.claims.to_allocate) or (self.extended is not None and self.claims.extended is None)

    @property
    def concerns_dra(self) -> bool:
        """Whether DRA has anything to decide for this pod (claims or DRA-backed resources)."""
        return bool(self.claims.claims) or self.extended is not None

    @property
    def allocator(self) -> Allocator:
        """One allocator for all nodes of this request (compiled selectors, counter caches)."""
        if self._allocator is None:
            self._allocator = self.ctx.allocator()
        return self._allocator

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
        variant = self.variant(node)
        if isinstance(variant, str):
            self.outcomes[(phase, "unavailable")] += 1
            return NodeVerdict(False, variant)
        claims = self.claims
        if claims.allocated:
            reason = unavailable_on(claims, node)
            if reason is not None:
                self.outcomes[(phase, "unavailable")] += 1
                return NodeVerdict(False, reason)
        if not variant.claims:
            return FITS
        name = node.name
        state = self.ctx.state
        signature = state.node_signature(name)
        held = state.nodes.get(name)
        shareable = self.remember and (held is node or held == node)
        verdict = None
        if shareable:
            hit = self.ctx.verdicts.get((variant.spec, name))
            if hit is not None and hit.node_signature == signature:
                verdict = hit.verdict
                # A fit names no claim; only rejections speak of the other pod's claims.
                if not verdict.fits and hit.claim_keys != variant.keys:
                    verdict = self._rekey(hit, variant.keys)
                self.cache_hits[phase] += 1
        if verdict is None:
            verdict = self._allocate(node, phase, variant.claims)
            if shareable and verdict.reason != TIMEOUT and not _has_shares(verdict.results):
                template = "" if verdict.fits else _reason_template(verdict.reason, variant.keys)
                self.ctx.share_verdict(
                    (variant.spec, name), CachedVerdict(signature, variant.keys, verdict, template)
                )
        if verdict.fits and self.remember:
            self._remembered[name] = Remembered(signature, variant.uids, verdict)
        return verdict

    def _rekey(self, hit: CachedVerdict, claim_keys: tuple[str, ...]) -> NodeVerdict:
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

    def _allocate(self, node: Node, phase: str, claims: tuple[ResourceClaim, ...]) -> NodeVerdict:
        outcomes = self.outcomes
        try:
            results = self.allocator.allocate(node, claims)
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
            reason = self.allocator.last_failure or "cannot allocate all claims"
            return NodeVerdict(False, reason, resolvable=self._devices_in_use_near(node))
        outcomes[(phase, "fit")] += 1
        return NodeVerdict.fitting(tuple(results))

    def _devices_in_use_near(self, node: Node) -> bool:
        per_pool = self.ctx.state.inuse.per_pool
        return bool(per_pool) and any(
            pool in per_pool for pool in self.ctx.state.slices.pools_for_node(node.name)
        )


def _with_existing_extended_claim(ctx: SchedulingContext, pod: PodInfo, claims: PodClaims) -> PodClaims:
    """Adopt the claim an earlier bind created for the pod's extended resources.

    Allocated, it is used like any allocated claim (a bind waiting for binding conditions, or
    one whose Binding timed out, left it reserved for the retry). Unallocated with requests, it
    is a leftover of a failed bind that could not be cleaned up: upstream's PostFilter deletes
    it and the pod retries, the extender (without PostFilter) reports it.
    """
    existing = find_extended_claim(ctx.state.claims.values(), pod)
    if existing is None or existing.uid in ctx.deleted_claims:
        return claims
    key = f"{existing.namespace}/{existing.name}"
    if (existing.raw.get("metadata") or {}).get("deletionTimestamp"):
        raise PodWaits(f'resourceclaim "{existing.name}" is being deleted')
    if existing.allocation is None:
        raise PodWaits(
            f"cannot schedule extended resource claim {key}: it was created by an earlier attempt "
            "and is not allocated; it must be deleted for the pod to be scheduled anew"
        )
    return claims.with_extended(existing)


def _check_expected(ctx: SchedulingContext, pod: PodInfo, claims: PodClaims) -> None:
    """A claim another pod was just placed with is as good as in flight (upstream's Reserve).

    kube-scheduler would have put it in its in-flight map at once; the extender only knows the
    placement it recommended in prioritize, until that pod's bind arrives or the guess expires.
    """
    if not claims.to_allocate or not ctx.expected:
        return
    for uid, expected in ctx.live_expected():
        if uid == pod.uid:
            continue
        for claim in claims.to_allocate:
            if claim.uid in expected.claims:
                raise PodWaits(
                    f"resource claim {claim.namespace}/{claim.name} is in the process of being allocated "
                    f"(for another pod, on node {expected.node})"
                )


def _slot(index: int) -> str:
    return f"\x00{index}\x00"  # NUL never occurs in names or reasons


def _reason_template(reason: str, claim_keys: tuple[str, ...]) -> str:
    """``reason`` with each "claim <ns/name>" of ``claim_keys`` turned into a numbered slot."""
    for i, claim_key in enumerate(claim_keys):
        reason = reason.replace(f"claim {claim_key}", f"claim {_slot(i)}")
    return reason


def _has_shares(results: tuple[AllocationResult, ...]) -> bool:
    return any(d.share_id for r in results for d in r.devices)


def report_no_fit(ctx: SchedulingContext, pod: PodInfo, out: FilterOutcome) -> None:
    """Tell the user why no candidate node fits (an Event on the pod with --kube).

    kube-scheduler's own FailedScheduling event only says that the extender rejected the nodes;
    this one carries the DRA reasons. The message names no node and lists distinct reasons in
    sorted order, so the recorder's per-message dedup holds while the scheduler rotates samples.
    """
    if ctx.events is None or out.passed or out.error or not (out.failed or out.unresolvable):
        return
    reasons = sorted({*out.failed.values(), *out.unresolvable.values()})
    more = f" (+{len(reasons) - 3} more)" if len(reasons) > 3 else ""
    ctx.events.no_node_fits(
        PodRef(pod.namespace, pod.name, pod.uid),
        f"no candidate node can allocate the pod's claims: {'; '.join(reasons[:3])}{more}",
    )


def filter_nodes(
    ctx: SchedulingContext, pod: PodInfo, names: list[str], given: Mapping[str, Node] | None = None
) -> FilterOutcome:
    """Filter ``names``; ``given`` holds the request's Node objects in nodeCacheCapable=false mode."""
    out = FilterOutcome()
    if not ctx.handles(pod) or not (pod.claims or pod.extended_requests):
        out.passed = list(names)
        return out
    if not ctx.state.synced:
        out.error = "dra-extender: cluster state not synced yet"
        return out
    try:
        plan = PodPlan.build(ctx, pod)
    except PodWaits as exc:
        out.unresolvable = dict.fromkeys(names, str(exc))
        return out
    if not plan.concerns_dra:
        out.passed = list(names)
        return out
    for name in names:
        node = given.get(name) if given is not None else ctx.state.nodes.get(name)
        if node is None:
            out.unresolvable[name] = f"node {name} is not known to the extender"
            continue
        try:
            verdict = plan.evaluate(node)
        except FatalAllocation as exc:
            plan.flush_metrics()
            # Upstream aborts the whole attempt: nodes decided before this one fail too.
            return FilterOutcome(unresolvable=dict.fromkeys(names, str(exc)))
        if verdict.fits:
            out.passed.append(name)
        elif verdict.resolvable:
            out.failed[name] = verdict.reason
        else:
            out.unresolvable[name] = verdict.reason
    plan.flush_metrics()
    if len(out.passed) == 1:
        _expect_sole_node(ctx, plan, out.passed[0])
    return out


def _expect_sole_node(ctx: SchedulingContext, plan: PodPlan, node_name: str) -> None:
    """With one feasible node kube-scheduler skips prioritize and takes it (protocol §4.1.5)."""
    remembered = plan.remembered(node_name)
    if remembered is None:
        return
    claims = frozenset(c.uid for c in plan.claims.to_allocate)
    expires = time.monotonic() + EXPECTED_TTL_S
    ctx.expected[plan.pod.uid] = Expected(node_name, remembered.verdict.devices, claims, expires)
