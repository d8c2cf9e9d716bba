"""The prioritize policy (see docs/scheduling-policy.md).

Nodes are ordered by three keys, the first one deciding:

1. prioritized lists (upstream's DynamicResources ``Score``): the sum over the pod's
   ``firstAvailable`` requests of ``8 - index of the chosen subrequest`` — earlier
   subrequests win;
2. contention: a node loses if this pod would take a device that a pod scored just before
   (whose bind has not arrived yet) is expected to take there;
3. packing: the devices of the drivers this allocation uses that stay free on the node
   afterwards — fewest first with ``binpack`` (keeps whole nodes free for big pods),
   most first with ``spread``.

One node, the first of those with the best key, scores 10; the distinct keys are spread
evenly from 9 (nodes tied with the best) down towards 0. A node that does not fit scores 0,
and so does every node with ``none``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from extender.model import AllocationResult, ResourceClaim
from extender.model.pods import PodInfo
from extender.scheduling.claims import PodWaits
from extender.scheduling.context import SchedulingContext
from extender.scheduling.plan import FatalAllocation, NodeVerdict, PodPlan, handles, wants_devices

MAX_SCORE = 10
FIRST_AVAILABLE_MAX = 8  # FirstAvailableDeviceRequestMaxSize


def subrequest_order(claims: Sequence[ResourceClaim]) -> list[dict[str, list[str]]]:
    """Per claim: request name -> its subrequest names in preference order (prioritized lists only)."""
    return [
        {r.name: [s.name for s in r.first_available] for r in c.requests if r.first_available} for c in claims
    ]


def prioritized_score(order: Sequence[Mapping[str, list[str]]], results: Sequence[AllocationResult]) -> int:
    total = 0
    for subrequests, result in zip(order, results, strict=True):
        if not subrequests:
            continue
        seen: set[str] = set()
        for device in result.devices:
            request, _, sub = device.request.partition("/")
            if request in subrequests and request not in seen and sub in subrequests[request]:
                seen.add(request)
                total += FIRST_AVAILABLE_MAX - subrequests[request].index(sub)
    return total


class _Packing:
    """Free devices per node after an allocation; the per-call lookups hoisted out of the loop."""

    def __init__(self, ctx: SchedulingContext) -> None:
        self.totals = ctx.state.slices.devices_per_pool()
        self.in_use = ctx.state.inuse.per_pool
        self.pools_by_node = ctx.state.slices.pools_by_node
        self.pools_for_node = ctx.state.slices.pools_for_node

    def free_after(self, node: str, verdict: NodeVerdict) -> int:
        drivers = verdict.drivers
        if not drivers:
            return 0
        totals, in_use = self.totals, self.in_use
        free = -verdict.taken
        pools = self.pools_by_node.get(node)
        if pools is None:
            pools = self.pools_for_node(node)
        # A plain loop: this runs for every candidate node of every prioritize call.
        for pool in pools:
            if pool[0] in drivers:
                free += totals[pool] - in_use.get(pool, 0)
        return max(free, 0)


def score_nodes(ctx: SchedulingContext, pod: PodInfo, names: list[str]) -> dict[str, int]:
    ctx.memory.expire()
    scores = dict.fromkeys(names, 0)
    if (
        ctx.config.score_policy == "none"
        or not handles(ctx.config, pod)
        or not wants_devices(pod)
        or not ctx.state.synced
    ):
        return scores
    try:
        plan = PodPlan.build(ctx, pod)
    except PodWaits:
        return scores
    if not plan.concerns_dra:
        return scores
    keys: dict[str, tuple[int, int, int]] = {}
    verdicts: dict[str, NodeVerdict] = {}
    order = subrequest_order(plan.claims.to_allocate)
    prioritized = any(order)
    packing = _Packing(ctx)
    claim_uids = frozenset(c.uid for c in plan.claims.to_allocate)
    # Devices other scored-but-unbound pods are expected to take, per node. (A pod sharing an
    # unallocated claim with one of them never gets here: it waits, see ``PodPlan.build``.)
    others = ctx.memory.devices_expected_elsewhere(pod.uid)
    sign = -1 if ctx.config.score_policy == "binpack" else 1
    remembered = plan.remembered
    for name in names:
        entry = remembered(name)
        verdict = entry.verdict if entry is not None else _fresh_verdict(ctx, plan, name)
        if verdict is None:
            continue
        # An extended-resource claim comes last and has no prioritized lists.
        prio = prioritized_score(order, verdict.results[: len(order)]) if prioritized else 0
        contended = others.get(name)
        free_of_contention = 1 if contended is None else int(verdict.devices.isdisjoint(contended))
        keys[name] = (prio, free_of_contention, sign * packing.free_after(name, verdict))
        verdicts[name] = verdict
    plan.flush_metrics()
    if not keys:
        return scores
    ranked = sorted(set(keys.values()), reverse=True)
    score_of = {key: round((MAX_SCORE - 1) * (len(ranked) - i) / len(ranked)) for i, key in enumerate(ranked)}
    for name, key in keys.items():
        scores[name] = score_of[key]
    # One node, the first of the best, gets the top score: the scheduler then (normally)
    # picks exactly the node recorded as this pod's expected placement.
    best = max(keys, key=keys.__getitem__)
    scores[best] = MAX_SCORE
    ctx.memory.expect(pod.uid, best, verdicts[best].devices, claim_uids)
    return scores


def _fresh_verdict(ctx: SchedulingContext, plan: PodPlan, name: str) -> NodeVerdict | None:
    """The node's fitting verdict computed now: it changed since filter, or filter never saw it.

    Binds of earlier pods land between this pod's filter and prioritize; scoring a node on a
    stale result would send the pod to devices that are gone.
    """
    node = ctx.state.nodes.get(name)
    if node is None:
        return None
    try:
        verdict = plan.evaluate(node, phase="prioritize")
    except FatalAllocation:
        return None
    return verdict if verdict.fits else None
