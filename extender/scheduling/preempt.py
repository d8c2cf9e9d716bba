"""preempt: drop candidate nodes where evicting the victims cannot make the pod's claims fit.

Simple and conservative: on each candidate node the pod's unallocated claims are allocated
against the in-use devices minus every claim that only the victims hold (reservedFor names
victims only). If that fails, no eviction on this node helps DRA-wise and the node is
dropped; otherwise the scheduler's candidate is passed through unchanged. Pods we do not
handle, pods without claims and pods with nothing left to allocate pass through.
"""

from __future__ import annotations

from collections.abc import Mapping

from extender.allocator import AllocatedState
from extender.model.pods import PodInfo
from extender.scheduling.claims import PodWaits, resolve
from extender.scheduling.context import SchedulingContext
from extender.scheduling.plan import FatalAllocation, PodPlan, handles, wants_devices
from extender.state.inuse import Owner


def _released_by(ctx: SchedulingContext, victim_uids: set[str]) -> set[Owner]:
    """Claims held only by victims: their devices come free when the victims go."""
    owners: set[Owner] = set()
    victims = [p for p in ctx.state.pods.values() if p.uid in victim_uids]
    for victim in victims:
        try:
            claims = list(resolve(ctx.state, victim).allocated)
        except PodWaits:
            continue
        # The claim made for its extended resources is named in its status, not its spec.
        extended = ctx.state.claim(victim.namespace, victim.extended_claim_name)
        if extended is not None and extended.allocation is not None:
            claims.append(extended)
        for claim in claims:
            if claim.reserved_for and all(ref.uid in victim_uids for ref in claim.reserved_for):
                owners.add(("claim", claim.uid))
    return owners


def nodes_worth_preempting(
    ctx: SchedulingContext, pod: PodInfo, candidates: Mapping[str, list[str]]
) -> set[str]:
    """The candidate nodes (name -> victim pod UIDs) to keep."""
    ctx.memory.expire()
    if not handles(ctx.config, pod) or not wants_devices(pod) or not ctx.state.synced:
        return set(candidates)
    try:
        plan = PodPlan.build(ctx, pod)
    except PodWaits:
        return set()  # nothing a victim does creates a missing claim or class
    if not plan.may_allocate:
        return set(candidates)
    kept: set[str] = set()
    for name, victim_uids in candidates.items():
        node = ctx.state.nodes.get(name)
        if node is None:
            continue
        devices, shared, capacity = ctx.state.inuse.without(_released_by(ctx, set(victim_uids)))
        what_if = plan.what_if()
        what_if.use_allocator(ctx.allocator(AllocatedState(devices, shared, capacity), plan.deadline))
        try:
            if what_if.evaluate(node, phase="preempt").fits:
                kept.add(name)
        except FatalAllocation:
            return set()
        finally:
            what_if.flush_metrics()
    return kept
