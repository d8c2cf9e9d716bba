"""Claims that earlier attempts left to a pod and that no node can use: released so that the
next attempt starts afresh (upstream's PostFilter, kubernetes/kubernetes
``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go``).

Upstream's PostFilter runs when Filter found no node: it deallocates an allocated claim that
is reserved for nobody or only the pod, and deletes an extended-resource claim an earlier
cycle created. kube-scheduler has no PostFilter for extenders, so filter calls
``release_stale`` when no candidate fits. Differences, and why:

* A claim is judged on the whole cache, not on the scheduler's sample of candidates: it is
  stale only when no node at all can use it. Its allocation's node selector matches no known
  node, a device of it is no longer published, or (binding gates on) its binding failed or
  timed out; the pod's extended-resource claim also when it cannot be taken over
  (``extended_resources.claim.leftover_reason``). Upstream releases a claim the sample could not use.
* Never a claim reserved for another pod, one whose binding conditions are still pending
  within the binding timeout, one in flight, or anything of a pod that is already bound, or
  that a bind of ours bound or may have bound while the cache does not show it yet.
* filter never waits for it: the release runs as a task of ``ctx.releases`` (``settle.Releases``,
  one per pod, cancelled when the app closes). It is not started while a bind of the pod runs,
  and a bind of the pod is refused while it runs.
* A claim is re-read before it is written and left alone unless it is still at the
  resourceVersion it was judged at; the binder conditions the deallocation itself on the
  version it reads back after removing the reservation (``Binder.release_claim``).

With DRAWorkloadResourceClaims, upstream's PostFilter also takes the pod's PodGroup out of the
``reservedFor`` of a claim reserved for the group, when no pod of the group is scheduled
(``unreservePodGroupClaims``): an allocation whose binding failed in an earlier cycle would
otherwise stay reserved for the group for ever. The extender does so when none of the group's
pods is bound, being bound by us, or placed by one of our filters, and, as upstream, one claim
per failed filter; the allocation stays, and the next filter judges the claim as above.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from extender.model import ResourceClaim, parse_resource_claim
from extender.model.pods import POD_GROUP_API_GROUP, POD_GROUP_RESOURCE, PodGroup, PodInfo
from extender.model.refs import PodRef
from extender.scheduling.bind import delete_extended_claims
from extender.scheduling.claims import PodWaits, claim_readiness, resolve, unusable_reason
from extender.scheduling.context import SchedulingContext
from extender.scheduling.extended_resources.claim import find_extended_claim, leftover_reason
from extender.scheduling.extended_resources.needs import ExtendedNeeds

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Stale:
    claim: ResourceClaim
    why: str
    extended: bool  # the pod's extended-resource claim: deleted rather than deallocated


def find_stale(ctx: SchedulingContext, pod: PodInfo) -> list[Stale]:
    """The pod's claims that no node can use and that may be released (see the module docstring)."""
    state = ctx.state
    held = state.pod(pod.namespace, pod.name)
    if held is None or held.uid != pod.uid or held.node_name or ctx.memory.may_be_bound(pod.uid):
        return []
    out = []
    try:
        allocated = resolve(state, held).allocated
    except PodWaits:
        allocated = ()
    for claim in allocated:
        why = _why_stale(ctx, claim, held.uid, extended=False)
        if why is not None:
            out.append(Stale(claim, why, extended=False))
    if ExtendedNeeds.of(held, state.classes) is not None:
        existing = find_extended_claim(state.claims.values(), held)
        if existing is not None and not ctx.memory.was_deleted(existing.uid) and not existing.deleting:
            why = _why_stale(ctx, existing, held.uid, extended=True)
            if why is not None:
                out.append(Stale(existing, why, extended=True))
    return out


def _why_stale(ctx: SchedulingContext, claim: ResourceClaim, pod_uid: str, extended: bool) -> str | None:
    state, features = ctx.state, ctx.features
    if any(ref.uid != pod_uid for ref in claim.reserved_for) or claim.uid in state.inuse.inflight:
        return None
    if claim.allocation is not None and features.binding:
        readiness = claim_readiness(claim)
        if not readiness.ready and not readiness.failed:
            return None  # the driver may still be preparing the devices
    if extended:
        why = leftover_reason(claim, pod_uid, unusable_reason(state, features, claim))
    else:
        why = unusable_reason(state, features, claim)
    return why if why is not None else _node_gone(ctx, claim)


def _node_gone(ctx: SchedulingContext, claim: ResourceClaim) -> str | None:
    selector = claim.allocation.node_selector if claim.allocation is not None else None
    if selector is None:
        return None
    try:
        if any(selector.matches(node) for node in ctx.state.nodes.values()):
            return None
    except ValueError:
        return None  # an invalid selector is reported per node; it is no proof of anything
    return f"claim {claim.key} is allocated for nodes that no longer exist"


@dataclass(frozen=True, slots=True)
class GroupReservations:
    """The claims reserved for the pod's PodGroup, which no pod of the group uses yet."""

    group: PodGroup
    claims: list[ResourceClaim]


def find_group_reservations(ctx: SchedulingContext, pod: PodInfo) -> GroupReservations | None:
    """The group's claims to unreserve (see the module docstring), or None."""
    if not ctx.features.workload_resource_claims:
        return None
    state, memory = ctx.state, ctx.memory
    name = pod.group_name
    group = state.pod_group(pod.namespace, name) if name else None
    if group is None:
        return None
    expected = memory.placements()
    for other in state.pods.values():
        if other.namespace != pod.namespace or other.group_name != name:
            continue
        if (
            (other.node_name and not other.finished)
            or memory.may_be_bound(other.uid)
            or memory.binding(other.uid)
            or (other.uid != pod.uid and other.uid in expected)
        ):
            return None
    claims = [
        claim
        for claim in state.claims.values()
        if claim.namespace == pod.namespace
        and claim.allocation is not None
        and claim.uid not in state.inuse.inflight
        and any(
            ref.api_group == POD_GROUP_API_GROUP
            and ref.resource == POD_GROUP_RESOURCE
            and ref.name == name
            and ref.uid == group.uid
            for ref in claim.reserved_for
        )
    ]
    return GroupReservations(group, claims) if claims else None


def release_stale(ctx: SchedulingContext, pod: PodInfo) -> None:
    """Start releasing the pod's stale claims (and its group's unused reservations), unless
    there are none, or a bind or a release of the pod is running.

    Called by filter when no candidate fits. Only the leader writes.
    """
    if not ctx.leading or ctx.memory.binding(pod.uid) or ctx.releases.running(pod.uid):
        return
    stale = find_stale(ctx, pod)
    held = ctx.state.pod(pod.namespace, pod.name)
    reservations = find_group_reservations(ctx, held) if held is not None and held.uid == pod.uid else None
    if stale or reservations is not None:
        ctx.releases.start(pod.uid, _release(ctx, pod.pod_ref, stale, reservations))


async def _release(
    ctx: SchedulingContext, ref: PodRef, stale: list[Stale], reservations: GroupReservations | None = None
) -> None:
    if reservations is not None:
        await _unreserve_group(ctx, reservations)
    for item in stale:
        try:
            await _release_one(ctx, ref, item)
        except Exception as exc:
            log.error("releasing stale claim %s of pod %s failed: %s", item.claim.key, ref, exc)


async def _as_judged(ctx: SchedulingContext, claim: ResourceClaim) -> bool:
    """Whether the API server still holds the claim as it was judged; otherwise the next filter
    judges it again on what it says now."""
    obj = await ctx.binder.read_claim(claim.namespace, claim.name)
    current = None if obj is None else parse_resource_claim(obj)
    if current is None or current.uid != claim.uid:
        return False
    if current.resource_version != claim.resource_version:
        log.info("claim %s changed since it was judged; left alone", claim.key)
        return False
    return True


async def _release_one(ctx: SchedulingContext, ref: PodRef, item: Stale) -> None:
    claim = item.claim
    if not await _as_judged(ctx, claim):
        return
    log.info("releasing claim %s of pod %s: %s", claim.key, ref, item.why)
    if item.extended:
        await delete_extended_claims(ctx, ref)
        return
    left = await ctx.binder.release_claim(claim, ref, deallocate=True)
    if left is not None:
        ctx.state.assume_claim_unless_older(left)


async def _unreserve_group(ctx: SchedulingContext, reservations: GroupReservations) -> None:
    """Take the group out of one of its claims' reservedFor, as upstream's PostFilter does."""
    group = reservations.group
    ref = PodRef(group.namespace, group.name, group.uid)
    for claim in reservations.claims:
        try:
            if not await _as_judged(ctx, claim):
                continue
            log.info(
                "unreserving claim %s for PodGroup %s: no pod of the group is scheduled", claim.key, group.ref
            )
            left = await ctx.binder.release_claim(claim, ref, deallocate=False)
        except Exception as exc:
            log.error("unreserving claim %s for PodGroup %s failed: %s", claim.key, group.ref, exc)
            continue
        if left is not None:
            ctx.state.assume_claim_unless_older(left)
        return
