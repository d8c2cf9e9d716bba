"""filter: per-node feasibility for one pod, with the reasons users read in ``kubectl describe pod``.

How a node's verdict is reached is ``plan``'s business; here it is sorted into the reply:

* fits → ``NodeNames``;
* resolvable (devices held by other claims) → ``FailedNodes``: preemption may help;
* otherwise → ``FailedAndUnresolvableNodes``;
* a pod that must wait (``PodWaits``) → every node unresolvable with the reason;
* no node fits → claims of the pod that no node can use are released in the background
  (``stale``), so that the next attempt starts afresh;
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

from extender.model import Node
from extender.model.pods import PodInfo
from extender.model.refs import PodRef
from extender.scheduling.claims import PodWaits
from extender.scheduling.context import SchedulingContext
from extender.scheduling.plan import PodPlan
from extender.scheduling.stale import release_stale


@dataclass
class FilterOutcome:
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    error: str = ""


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
    out = _filter(ctx, pod, names, given)
    if not names or out.error:
        return out
    # What kube-scheduler cannot see for itself: when to try a turned-away pod again
    # (scheduling/retry.py) and, with --preemption=evict, who may preempt (preemption/book.py).
    if out.passed:
        if ctx.retry is not None:
            ctx.retry.fits(pod.uid)
        if ctx.evictions is not None:
            ctx.evictions.fits(pod.uid)
        return out
    if ctx.retry is not None:
        ctx.retry.turned_away(pod)
    if ctx.evictions is not None and out.failed and pod.may_preempt:
        # Only a pod that devices alone keep out of some nodes.
        ctx.evictions.wants(pod, sorted(out.failed))
    return out


def _filter(
    ctx: SchedulingContext, pod: PodInfo, names: list[str], given: Mapping[str, Node] | None
) -> FilterOutcome:
    ctx.memory.expire()
    out = FilterOutcome()
    if not ctx.config.handles(pod) or not pod.wants_devices:
        out.passed = list(names)
        return out
    if not ctx.state.synced:
        out.error = "dra-extender: cluster state not synced yet"
        return out
    try:
        plan = PodPlan.build(ctx, pod)
    except PodWaits as exc:
        out.unresolvable = dict.fromkeys(names, str(exc))
        release_stale(ctx, pod)  # a leftover extended-resource claim, say
        return out
    if not plan.concerns_dra:
        out.passed = list(names)
        return out
    decided = plan.verdicts.decide(names, given)
    plan.flush_metrics()
    if decided.fatal is not None:
        # Upstream aborts the whole attempt: nodes decided before this one fail too.
        return FilterOutcome(unresolvable=dict.fromkeys(names, decided.fatal.reason))
    out.passed = decided.passed
    failed, unresolvable = out.failed, out.unresolvable
    for name, failure in decided.rejected.items():
        (failed if failure.resolvable else unresolvable)[name] = failure.reason
    if len(out.passed) == 1:
        _expect_sole_node(ctx, plan, out.passed[0])
    elif not out.passed:
        release_stale(ctx, pod)  # upstream's PostFilter
    return out


def _expect_sole_node(ctx: SchedulingContext, plan: PodPlan, node_name: str) -> None:
    """With one feasible node kube-scheduler skips prioritize and takes it.

    (kube-scheduler's ``schedulePod``: a single feasible node is returned without scoring, so
    no prioritize call tells the extender where the pod goes.)
    """
    remembered = plan.verdicts.remembered(node_name)
    if remembered is None:
        return
    claims = frozenset(c.uid for c in plan.claims.to_allocate)
    ctx.memory.expect(plan.pod.uid, node_name, remembered[2].devices, claims)
