"""/debug/explain: for one pod, per node and per claim, why it fits or not.

A what-if view: nothing is remembered for bind and nothing is committed. Each claim is also
tried on its own, so that with several claims the one that does not fit is named. Where the
pod does not fit, ``preemption`` names the pods that would have to go for it to fit (the
victims ``/preempt`` would add to a candidate kube-scheduler proposed without any).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from extender.allocator import AllocationResult, Failure
from extender.model import Holdings, Node, ResourceClaim
from extender.model.pods import PodInfo
from extender.scheduling.claims import PodWaits
from extender.scheduling.context import SchedulingContext
from extender.scheduling.plan import PodPlan
from extender.scheduling.preemption.book import EvictionBook
from extender.scheduling.preemption.victims import NodePods, select_victims
from extender.scheduling.verdicts import Variant


def explain(ctx: SchedulingContext, pod: PodInfo) -> dict[str, Any]:
    ctx.memory.expire()
    out: dict[str, Any] = {"pod": pod.ref, "uid": pod.uid, "nodeName": pod.node_name or None}
    if ctx.evictions is not None:
        out["evictionPreemption"] = _eviction(ctx.evictions, pod)
    if not ctx.config.handles(pod):
        out["verdict"] = (
            f"schedulerName {pod.scheduler_name!r} is not handled by this extender: passes untouched"
        )
        return out
    untouched = "no resource claims or DRA-backed extended resources: passes every node untouched"
    if not pod.wants_devices:
        out["verdict"] = untouched
        return out
    try:
        plan = PodPlan.build(ctx, pod)
    except PodWaits as exc:
        out["verdict"] = f"waits: {exc}"
        return out
    if not plan.concerns_dra:
        out["verdict"] = untouched
        return out
    out["claims"] = [
        {
            "claim": f"{c.namespace}/{c.name}",
            "allocated": c.allocation is not None,
            "requests": [r.name for r in c.requests],
            "devices": [
                # Allocated claims keep their devices even if a driver stopped publishing them.
                {**d.to_api(), "published": ctx.state.slices.device(d.id) is not None}
                for d in (c.allocation.devices if c.allocation else ())
            ],
        }
        for c in plan.claims.claims
    ]
    nodes: dict[str, Any] = {}
    preemption = _Preemption(ctx, plan)
    for name in sorted(ctx.state.nodes):
        node = ctx.state.nodes[name]
        what_if = plan.what_if()
        variant = what_if.variant(node)
        to_allocate = variant.claims if isinstance(variant, Variant) else ()
        verdict = what_if.verdicts.verdict(node, phase="explain")
        what_if.flush_metrics()
        failure = verdict.failure
        if failure is not None and failure.kind == "fatal":
            out["verdict"] = f"fails on every node: {failure.reason}"
            return out
        entry: dict[str, Any] = {"fits": verdict.fits, "reason": None if failure is None else failure.reason}
        if verdict.fits:
            entry["allocation"] = {
                f"{c.namespace}/{c.name}": _devices_by_request(r)
                for c, r in zip(to_allocate, verdict.results, strict=True)
            }
        else:
            if len(to_allocate) > 1:
                entry["perClaim"] = _per_claim(ctx, to_allocate, node, plan.deadline)
            if failure is not None and failure.resolvable:
                entry["preemption"] = preemption.on(node)
        nodes[name] = entry
    out["nodes"] = nodes
    out["verdict"] = f"fits on {sum(1 for n in nodes.values() if n['fits'])} of {len(nodes)} nodes"
    return out


def _devices_by_request(result: AllocationResult) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for d in result.devices:
        out.setdefault(d.request, []).append(f"{d.driver}/{d.pool}/{d.device}")
    return out


def _per_claim(
    ctx: SchedulingContext, to_allocate: tuple[ResourceClaim, ...], node: Node, deadline: float
) -> dict[str, Any]:
    claims: dict[str, Any] = {}
    allocator = ctx.allocator(deadline=deadline)
    for claim in to_allocate:
        results = allocator.allocate(node, [claim])
        failure = results.naming([claim.key]) if isinstance(results, Failure) else None
        claims[f"{claim.namespace}/{claim.name}"] = {
            "fits": failure is None,
            "reason": None if failure is None else failure.reason,
        }
    return claims


def _eviction(book: EvictionBook, pod: PodInfo) -> dict[str, Any]:
    """What --preemption=evict did or may do for the pod."""
    held = book.hold_of(pod.uid)
    if held is not None:
        return {
            "state": "holding", "node": held.node,
            "evicted": [f"{v.namespace}/{v.name}" for v in held.victims],
            "heldForSeconds": round(book.age(held), 3), "holdTimeoutSeconds": book.hold_s,
        }
    if book.steps_aside(pod.uid):
        return {"state": "left to kube-scheduler's preempt calls"}
    return {"state": "waiting" if book.waiting(pod.uid) else "none"}


class _Preemption:
    """Who would have to go on a node for the pod to fit there; the cluster is read once."""

    def __init__(self, ctx: SchedulingContext, plan: PodPlan) -> None:
        self.ctx, self.plan = ctx, plan
        self._cluster: NodePods | None = None
        self._held: dict[str, list[Holdings]] = {}

    def on(self, node: Node) -> dict[str, Any] | str:
        state = self.ctx.state
        if self._cluster is None:
            budgets = list(state.disruption_budgets.values())
            self._cluster = NodePods.gather(state.pods.values(), state.claims.values(), budgets)
            self._held = self.plan.nominated_holds()
        over = partial(self.plan.failure_over, node=node)
        held = self._held.get(node.name, ())
        victims = select_victims(self.ctx.state, self.plan.pod, node, (), 0, self._cluster, held, over)
        if isinstance(victims, Failure):
            return victims.reason
        by_uid = {p.uid: p.ref for p in self._cluster.by_node.get(node.name, ())}
        return {"evict": [by_uid[uid] for uid in victims.uids], "pdbViolations": victims.pdb_violations}
