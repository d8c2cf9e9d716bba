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

from collections.abc import Mapping
from dataclasses import dataclass, field

from extender.allocator import AllocationError, AllocationTimeout, Allocator, NodeAllocationFailure
from extender.model import AllocationResult, Node
from extender.scheduling.claims import PodClaims, PodWaits, check_before_allocation, resolve, unavailable_on
from extender.scheduling.context import Remembered, SchedulingContext
from extender.state.pods import PodInfo


class FatalAllocation(Exception):
    """The allocator rejected the pod's claims as such; no node can change that."""


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    fits: bool
    reason: str = ""
    resolvable: bool = False  # preemption might help
    results: tuple[AllocationResult, ...] = ()


@dataclass
class FilterOutcome:
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    error: str = ""


class PodPlan:
    """The node-independent part of one pod's decision: claims, checks, one allocator."""

    def __init__(
        self, ctx: SchedulingContext, pod: PodInfo, claims: PodClaims, remember: bool = True
    ) -> None:
        self.ctx = ctx
        self.pod = pod
        self.claims = claims
        self.epoch = ctx.state.epoch
        # A what-if plan (preemption, explain) must not leave results bind could reuse.
        self.remember = remember
        self._allocator: Allocator | None = None

    def use_allocator(self, allocator: Allocator) -> None:
        self._allocator = allocator

    @classmethod
    def build(cls, ctx: SchedulingContext, pod: PodInfo) -> PodPlan:
        """Raises PodWaits when the pod cannot be scheduled on any node yet."""
        ctx.state.expire_inflight()
        claims = resolve(ctx.state, pod)
        check_before_allocation(ctx.state, ctx.features, pod, claims)
        return cls(ctx, pod, claims)

    @property
    def allocator(self) -> Allocator:
        """One allocator for all nodes of this request (compiled selectors, counter caches)."""
        if self._allocator is None:
            self._allocator = self.ctx.allocator()
        return self._allocator

    def evaluate(self, node: Node, phase: str = "filter") -> NodeVerdict:
        """Decide one node; raises FatalAllocation for errors that hold on every node."""
        outcome = self.ctx.metrics.allocation_attempts
        reason = unavailable_on(self.claims, node)
        if reason is not None:
            outcome.labels(phase, "unavailable").inc()
            return NodeVerdict(False, reason)
        if not self.claims.to_allocate:
            return NodeVerdict(True)
        try:
            results = self.allocator.allocate(node, self.claims.to_allocate)
        except AllocationTimeout:
            outcome.labels(phase, "timeout").inc()
            return NodeVerdict(False, "timed out trying to allocate devices")
        except NodeAllocationFailure as exc:
            outcome.labels(phase, "unavailable").inc()
            return NodeVerdict(False, exc.message)
        except AllocationError as exc:
            outcome.labels(phase, "error").inc()
            raise FatalAllocation(exc.message) from None
        if results is None:
            outcome.labels(phase, "nofit").inc()
            reason = getattr(self.allocator, "last_failure", "") or "cannot allocate all claims"
            return NodeVerdict(False, reason, resolvable=self._devices_in_use_near(node))
        outcome.labels(phase, "fit").inc()
        verdict = NodeVerdict(True, results=tuple(results))
        if self.remember:
            self.ctx.remembered[(self.pod.uid, node.name)] = Remembered(
                self.epoch, tuple(c.uid for c in self.claims.to_allocate), verdict.results
            )
        return verdict

    def _devices_in_use_near(self, node: Node) -> bool:
        per_pool = self.ctx.state.inuse.per_pool
        return bool(per_pool) and any(
            pool in per_pool for pool in self.ctx.state.slices.pools_for_node(node.name)
        )


def filter_nodes(
    ctx: SchedulingContext, pod: PodInfo, names: list[str], given: Mapping[str, Node] | None = None
) -> FilterOutcome:
    """Filter ``names``; ``given`` holds the request's Node objects in nodeCacheCapable=false mode."""
    out = FilterOutcome()
    if not ctx.handles(pod) or not pod.claims:
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
    for name in names:
        node = given.get(name) if given is not None else ctx.state.nodes.get(name)
        if node is None:
            out.unresolvable[name] = f"node {name} is not known to the extender"
            continue
        try:
            verdict = plan.evaluate(node)
        except FatalAllocation as exc:
            # Upstream aborts the whole attempt: nodes decided before this one fail too.
            return FilterOutcome(unresolvable=dict.fromkeys(names, str(exc)))
        if verdict.fits:
            out.passed.append(name)
        elif verdict.resolvable:
            out.failed[name] = verdict.reason
        else:
            out.unresolvable[name] = verdict.reason
    return out
