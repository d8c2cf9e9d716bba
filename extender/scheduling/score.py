"""The prioritize policy (see docs/scheduling-policy.md).

Nodes are ordered by three keys, the first one deciding:

1. prioritized lists (upstream's DynamicResources ``Score``): the sum over the pod's
   ``firstAvailable`` requests of ``8 - index of the chosen subrequest`` — earlier
   subrequests win;
2. contention: a node loses if this pod would take a device that a pod scored just before
   (whose bind has not arrived yet) is expected to take there;
3. packing: the devices of the drivers this allocation uses that stay free on the node
   afterwards — fewest first with ``binpack`` (keeps whole nodes free for big pods),
   most first with ``spread``; with ``compact``, what the allocation breaks of whole nodes,
   topology domains and devices, fewest first (``placement.compact``).

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
from extender.scheduling.placement.compact import CompactRanker
from extender.scheduling.plan import PodPlan
from extender.scheduling.verdicts import NodeVerdict

MAX_SCORE = 10
FIRST_AVAILABLE_MAX = 8  # FirstAvailableDeviceRequestMaxSize

# A node's three keys as one integer, ordered as the keys in turn would be: the packing key
# (below 2**120 either way: ``CompactRanker.rank``, or a count of devices) in the low bits,
# then the contention bit, then the prioritized-list score. Ranking hashes and compares each
# node's key a few times, and a tuple's hash is computed anew each time: ranking 1,800 keys
# took 0.41 ms as tuples, 0.29 ms as integers (docs/performance.md, issue 27).
_PACKING_BITS = 128
_UNCONTENDED = 1 << _PACKING_BITS


def node_key(prioritized: int, packed: int) -> int:
    """The key of a node no other pod contends on (``- _UNCONTENDED``: one that is)."""
    return (((prioritized << 1) + 1) << _PACKING_BITS) + packed


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
        or not ctx.config.handles(pod)
        or not pod.wants_devices
        or not ctx.state.synced
    ):
        return scores
    try:
        plan = PodPlan.build(ctx, pod)
    except PodWaits:
        return scores
    if not plan.concerns_dra:
        return scores
    order = subrequest_order(plan.claims.to_allocate)
    prioritized = any(order)
    packing = _Packing(ctx)
    sign = -1 if ctx.config.score_policy == "binpack" else 1
    compact = CompactRanker(ctx.state, ctx.placement) if ctx.config.score_policy == "compact" else None

    def key_of(name: str, verdict: NodeVerdict) -> int:
        """The node's key as if no other pod contended for its devices."""
        # An extended-resource claim comes last and has no prioritized lists.
        prio = prioritized_score(order, verdict.results[: len(order)]) if prioritized else 0
        packed = compact.rank(name, verdict) if compact else sign * packing.free_after(name, verdict)
        return node_key(prio, packed)

    # A node's verdict is this pod's filter result while the node is unchanged, else decided
    # afresh: binds of earlier pods land between this pod's filter and prioritize, and scoring
    # a node on a stale result would send the pod to devices that are gone.
    from_table, own, table = plan.verdicts.fitting(names, phase="prioritize")
    plan.flush_metrics()
    keys: dict[str, int] = {}
    if table is not None and from_table:
        # A shared verdict's key depends on nothing but the verdict and the node's devices in
        # use, so it is kept with the verdict (and the score policy is fixed for the
        # extender's life): an unchanged node costs a lookup.
        derived, entries = table.derived, table.entries

        def derive(name: str) -> int:
            key = derived[name] = key_of(name, entries[name].verdict)
            return key

        known = derived.get
        keys = {name: known(name) or derive(name) for name in from_table}
    for name, verdict in own.items():
        keys[name] = key_of(name, verdict)
    if not keys:
        return scores

    def verdict_of(name: str) -> NodeVerdict:
        return own[name] if name in own else table.entries[name].verdict  # type: ignore[union-attr]

    # Devices other scored-but-unbound pods are expected to take, per node. (A pod sharing an
    # unallocated claim with one of them never gets here: it waits, see ``PodPlan.build``.)
    for name, contended in ctx.memory.devices_expected_elsewhere(pod.uid).items():
        key = keys.get(name)
        if key is not None and not verdict_of(name).devices.isdisjoint(contended):
            keys[name] = key - _UNCONTENDED
    ranked = sorted(set(keys.values()), reverse=True)
    score_of = {key: round((MAX_SCORE - 1) * (len(ranked) - i) / len(ranked)) for i, key in enumerate(ranked)}
    scores.update(zip(keys, map(score_of.__getitem__, keys.values()), strict=True))
    # One node, the first of the best, gets the top score: the scheduler then (normally)
    # picks exactly the node recorded as this pod's expected placement.
    best = next(name for name in names if keys.get(name) == ranked[0])
    scores[best] = MAX_SCORE
    claim_uids = frozenset(c.uid for c in plan.claims.to_allocate)
    ctx.memory.expect(pod.uid, best, verdict_of(best).devices, claim_uids)
    return scores
