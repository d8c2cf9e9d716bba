"""bind: commit in memory, write the claims, bind the pod; undo everything on failure.

Why no device is ever committed twice: the commit step (check that nothing the placement
was computed from has changed, then register the claims as in flight) runs without any
``await``, so on the single event loop no other filter or bind can interleave with it, and
every later allocation sees the in-flight devices. A remembered filter result is only reused
when the node's signature has not moved since filter, i.e. nothing that could change the
decision on that node happened in between; otherwise the allocation is recomputed for the
chosen node against the current state, taking turns with other requests if it is long.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from extender.allocator import Failure
from extender.logs import decision_fields, note
from extender.model import AllocationResult, Node, ResourceClaim, parse_resource_claim
from extender.model.refs import Consumer, PodRef
from extender.scheduling.binder import BindError, BindingUncertain, WriteUncertain
from extender.scheduling.claims import PodWaits, first_problem, reserved_for
from extender.scheduling.context import SchedulingContext
from extender.scheduling.extended_resources.claim import IN_MEMORY_NAME
from extender.scheduling.plan import PodPlan
from extender.scheduling.turns import in_turns
from extender.scheduling.verdicts import ExtendedStatus
from extender.state import InFlight
from extender.state.pod_requests import ClaimFootprint, in_units, pod_requests

log = logging.getLogger(__name__)


class BindFailed(Exception):
    """The bind cannot proceed; the message goes back in the reply's ``Error``."""


class UnknownPod(LookupError):
    """A filter/prioritize/preempt request names only a pod the extender does not hold: a bad request.

    A bind never raises it: kube-scheduler drops the body of any non-200 extender answer, so a
    refused bind is a 200 whose Error says why.
    """


@dataclass(frozen=True, slots=True)
class _Write:
    claim: ResourceClaim
    allocation: dict[str, Any] | None  # None: already allocated, only reserve
    newly_allocated: bool
    # The extended-resource claim exists only in memory: it is created from this body first.
    create: dict[str, Any] | None = None
    consumer: Consumer | None = None  # reserved for the pod's PodGroup rather than the pod


@dataclass(frozen=True, slots=True)
class _Commit:
    writes: list[_Write]
    status: ExtendedStatus | None = None
    footprints: tuple[ClaimFootprint, ...] = ()  # pod.status.nodeAllocatableResourceClaimStatuses

    @property
    def creates_claim(self) -> bool:
        return any(w.create is not None for w in self.writes)


def _allocation_api(ctx: SchedulingContext, result: AllocationResult) -> dict[str, Any]:
    api = result.to_api()
    if ctx.features.binding and not api.get("allocationTimestamp"):
        # PreBind stamps the allocation when both binding gates are on (upstream's
        # DynamicResources PreBind, bindClaim).
        api["allocationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return api


async def _commit(ctx: SchedulingContext, plan: PodPlan, node_name: str) -> _Commit:
    """Decide the allocation on ``node_name`` and register it in flight.

    A placement that must be recomputed may take turns with other requests; it is committed
    only if nothing it was computed from changed meanwhile (otherwise the scheduler retries),
    and the commit itself never awaits.
    """
    state = ctx.state
    node = state.nodes.get(node_name)
    if node is None:
        raise BindFailed(f"node {node_name} is not known to the extender")
    signature = state.node_version(node_name)
    placement = await in_turns(plan.verdicts.placement, node)
    if isinstance(placement, Failure):
        raise BindFailed(placement.reason)
    if _moved(ctx, plan, node, signature):
        raise BindFailed(
            f"pod {plan.pod.ref}: the claims or the devices of node {node_name} changed while its "
            "allocation was computed; the scheduler retries"
        )
    writes = []
    expires = time.monotonic() + ctx.config.inflight_ttl_s
    extended = placement.variant.extended
    for claim, result in zip(placement.variant.claims, placement.results, strict=True):
        ctx.state.add_inflight(InFlight(claim.uid, plan.pod.uid, result, expires))
        create = placement.create if extended is not None and claim is extended.claim else None
        consumer = plan.claims.consumers.get(claim.uid)
        writes.append(_Write(claim, _allocation_api(ctx, result), True, create, consumer))
    consumers = plan.claims.consumers
    writes.extend(_Write(c, None, False, consumer=consumers.get(c.uid)) for c in placement.reserve)
    return _Commit(writes, placement.status, placement.footprints)


def _moved(ctx: SchedulingContext, plan: PodPlan, node: Node, signature: int) -> bool:
    """Whether the pod, its claims or the node's devices changed since ``plan`` was made.

    The store replaces an object on every change, so identity is the test.
    """
    state = ctx.state
    pod = plan.pod
    return (
        state.node_version(node.name) != signature
        or state.nodes.get(node.name) is not node
        or state.pod(pod.namespace, pod.name) is not pod
        or any(state.claim(c.namespace, c.name) is not c for c in plan.claims.claims)
    )


class Unfinished(Exception):
    """A write still running when its bind's deadline passed; it goes on in ``task``."""

    def __init__(self, task: asyncio.Future[Any], timeout: float) -> None:
        super().__init__(f"no answer within {timeout:g}s (the write may still land)")
        self.task = task
        # Whoever follows the task reads its outcome; otherwise nobody would, and asyncio would
        # log "exception was never retrieved" for a failure that was already reported.
        task.add_done_callback(lambda done: done.cancelled() or done.exception())


async def _run_all(coros: list[Any], timeout: float) -> list[Any]:
    """Run concurrently; each entry is the result, the exception, or :class:`Unfinished`.

    Nothing is cancelled at the deadline: a cancelled coroutine would not stop a request already
    sent, only our knowledge of its fate. The caller decides what follows an unfinished one.
    """
    tasks = [asyncio.ensure_future(c) for c in coros]
    if not tasks:
        return []
    _, pending = await asyncio.wait(tasks, timeout=timeout)
    out: list[Any] = []
    for task in tasks:
        if task in pending:
            out.append(Unfinished(task, timeout))
        elif task.exception() is not None:
            out.append(task.exception())
        else:
            out.append(task.result())
    return out


async def bind_pod(ctx: SchedulingContext, namespace: str, name: str, uid: str, node: str) -> str:
    """Bind one pod; returns "" on success, else the error text for the reply.

    Every refusal is such a text, an unknown pod included: kube-scheduler re-queues the pod
    either way, and only a 200 reply gets its reason into the scheduler's log and events.
    """
    if not ctx.leading:
        return _refused(ctx, "this dra-extender replica is not the leader; binds go to the leader")
    memory = ctx.memory
    memory.expire()
    pod = ctx.state.pod(namespace, name)
    if pod is None:
        return _refused(ctx, f"pod {namespace}/{name} is not known to the extender")
    if uid and pod.uid != uid:
        return _refused(ctx, f"pod {namespace}/{name} has UID {pod.uid}, not {uid}")
    if not ctx.config.handles(pod):
        # Filter let it pass untouched, so nothing was decided for its claims: binding it would
        # leave them unallocated (or race the allocator of the scheduler it belongs to).
        names = ", ".join(ctx.config.handled_scheduler_names or ())
        return _refused(
            ctx,
            f"pod {pod.ref} has schedulerName {pod.scheduler_name}; this extender binds only pods of {names}",
        )
    if not memory.begin_bind(pod.uid):
        return _refused(ctx, f"a bind of pod {pod.ref} is already in progress")
    ref = PodRef(namespace, name, pod.uid)
    try:
        if pod.node_name and pod.node_name != node:
            return _refused(ctx, f"pod {pod.ref} is already bound to node {pod.node_name}")
        error = await _bind(ctx, pod.ref, ref, node)
    except Exception:
        _outcome(ctx, "error")  # a bug: the request answers 500
        raise
    finally:
        memory.end_bind(pod.uid)
    if error and ctx.events is not None:
        ctx.events.bind_failed(ref, error)
    return error


def _outcome(ctx: SchedulingContext, outcome: str) -> None:
    ctx.metrics.bind_outcomes.labels(outcome).inc()
    note(outcome=outcome)


def _refused(ctx: SchedulingContext, reason: str) -> str:
    """A bind turned down before it starts: nothing was committed or written."""
    _outcome(ctx, "refused")
    return reason


def _chosen(writes: list[_Write]) -> dict[str, dict[str, list[str]]]:
    """The devices a bind allocates, per claim and request: {"ns/claim": {"gpu": ["driver/pool/dev"]}}."""
    out: dict[str, dict[str, list[str]]] = {}
    for write in writes:
        if write.allocation is None:
            continue
        per_request = out.setdefault(f"{write.claim.namespace}/{write.claim.name}", {})
        for result in (write.allocation.get("devices") or {}).get("results") or ():
            device = f"{result['driver']}/{result['pool']}/{result['device']}"
            per_request.setdefault(result["request"], []).append(device)
    return out


async def _bind(ctx: SchedulingContext, pod_ref: str, ref: PodRef, node: str) -> str:
    pod = ctx.state.pod(ref.namespace, ref.name)
    assert pod is not None  # checked by the caller without an await in between
    metrics = ctx.metrics
    plan = None
    try:
        if pod.wants_devices:
            plan = PodPlan.build(ctx, pod)
            commit = await _commit(ctx, plan, node)
        else:
            commit = _Commit([])
    except (PodWaits, BindFailed) as exc:
        _outcome(ctx, "rejected")
        return str(exc)

    writes = commit.writes
    if (fields := decision_fields()) is not None:
        fields["allocation"] = _chosen(writes)
    written: list[_Write] = []
    # The extended-resource claim this bind created (by temporary UID): rollback deletes it.
    created: dict[str, ResourceClaim] = {}
    # Claims whose write may still land: a rollback now could run before it, so the settler
    # follows each to its end and their devices stay in flight until then.
    unknown: set[str] = set()
    footprints_written = False
    try:
        deadline = time.monotonic() + ctx.config.bind_timeout_s
        outcomes = await _run_all(
            [_write(ctx, w, ref, created, deadline) for w in writes], ctx.config.bind_timeout_s
        )
        errors = []
        for write, outcome in zip(writes, outcomes, strict=True):
            if not isinstance(outcome, BaseException):
                metrics.claim_writes.labels("ok").inc()
                written.append(write)
                continue
            errors.append(f"claim {write.claim.namespace}/{write.claim.name}: {outcome}")
            if not isinstance(outcome, Unfinished | WriteUncertain):
                metrics.claim_writes.labels("error").inc()
                continue
            metrics.claim_writes.labels("unknown").inc()
            if write.newly_allocated:
                _follow(ctx, write, ref, outcome, created)
                unknown.add(write.claim.uid)
            else:
                written.append(write)  # only a reservation: released best effort, holds no devices
        if errors:
            raise BindFailed("; ".join(errors))
        if commit.status is not None or commit.footprints:
            footprints_written = bool(commit.footprints)  # even a failed patch may have landed
            await _record_pod_status(ctx, ref, commit, created)
        if plan is not None and ctx.features.binding:
            readiness = first_problem(_current_claims(ctx, plan, created))
            if readiness.failed:
                await _release(ctx, ref, _ours_to_release(ctx, plan, ref), plan.extended is not None)
                written = []
                raise BindFailed(readiness.message)
            if not readiness.ready:
                _outcome(ctx, "waiting")
                return readiness.message  # claims stay allocated and reserved for the retry
        try:
            await asyncio.wait_for(ctx.binder.bind_pod(ref, node), ctx.config.bind_timeout_s)
        except (TimeoutError, BindingUncertain) as exc:
            # The Binding may still land, or may be in. Releasing the claims now could leave the pod
            # bound without them (kubelet would never start it), so they stay reserved: the
            # scheduler's retry adopts them (nothing left to write), and a deleted pod's
            # reservations are dropped by the resourceclaim controller.
            _outcome(ctx, "failed")
            ctx.memory.binding_unknown(ref.uid)
            what_happened = str(exc) or f"no answer within {ctx.config.bind_timeout_s:g}s"
            return (
                f"binding pod {pod_ref} to node {node}: {what_happened}; "
                "its claims stay reserved for the retry"
            )
        except Exception as exc:
            raise BindFailed(f"binding pod {pod_ref} to node {node}: {exc}") from None
    except BindFailed as exc:
        await _release(ctx, ref, [w for w in written if w.create is None], commit.creates_claim)
        if footprints_written:
            await _clear_footprints(ctx, ref)
        _outcome(ctx, "failed")
        return str(exc)
    finally:
        for write in writes:
            if write.newly_allocated and write.claim.uid not in unknown:
                ctx.state.remove_inflight(write.claim.uid)
    ctx.memory.bound(ref.uid)
    if commit.footprints and ctx.state.node_requests is not None:
        # Counted on the node at once, as kube-scheduler assumes a pod: until the watch shows
        # it bound, the next pod must not get the same CPU or memory.
        units = in_units(pod_requests(pod.raw, commit.footprints, use_status=True))
        ctx.state.node_requests.assume(pod.key, node, units)
    _outcome(ctx, "bound")
    return ""


async def _record_pod_status(
    ctx: SchedulingContext, ref: PodRef, commit: _Commit, created: Mapping[str, ResourceClaim]
) -> None:
    """PreBind's write of the pod's status, in one patch: its extended-resource claim and what
    the claims cost the node. That claim goes by the name it got when bind created it."""
    created_name = next(iter(created.values())).name if created else ""
    fields: dict[str, Any] = {}
    recorded = []
    if commit.status is not None:
        name = commit.status.claim_name or created_name
        fields.update(commit.status.fields(name))
        recorded.append(f"claim {ref.namespace}/{name}")
    if commit.footprints:
        real_name = created_name or IN_MEMORY_NAME
        fields["nodeAllocatableResourceClaimStatuses"] = [
            (replace(f, claim_name=real_name) if f.claim_name == IN_MEMORY_NAME else f).to_api()
            for f in commit.footprints
        ]
        recorded.append("what the claims use of node resources")
    try:
        await asyncio.wait_for(ctx.binder.patch_pod_status(ref, fields), ctx.config.bind_timeout_s)
    except Exception as exc:
        what = " and ".join(recorded)
        raise BindFailed(f"recording {what} in the status of pod {ref.name}: {exc}") from None


async def _clear_footprints(ctx: SchedulingContext, ref: PodRef) -> None:
    """Rollback (upstream's Unreserve): an empty list, not an absent field, so that the API
    server does not keep the old value for a client that does not know the field."""
    try:
        await asyncio.wait_for(
            ctx.binder.patch_pod_status(ref, {"nodeAllocatableResourceClaimStatuses": []}),
            ctx.config.bind_timeout_s,
        )
    except Exception as exc:
        log.error(
            "rollback: clearing nodeAllocatableResourceClaimStatuses of pod %s/%s failed: %s",
            ref.namespace,
            ref.name,
            exc,
        )


def _current_claims(
    ctx: SchedulingContext, plan: PodPlan, created: Mapping[str, ResourceClaim]
) -> list[Mapping[str, Any]]:
    held = (ctx.state.claim(c.namespace, c.name) for c in (*plan.claims.claims, *created.values()))
    return [c.raw for c in held if c is not None]


def _ours_to_release(ctx: SchedulingContext, plan: PodPlan, ref: PodRef) -> list[_Write]:
    """Every user claim reserved for the pod; those nobody else uses are deallocated too.

    The extended-resource claim is not among them: it is deleted instead.
    """
    out = []
    for claim in plan.claims.claims:
        if claim is plan.claims.extended:
            continue
        held = ctx.state.claim(claim.namespace, claim.name)
        if held is not None and reserved_for(held, ref.uid):
            alone = all(r.uid == ref.uid for r in held.reserved_for)
            out.append(_Write(held, None, alone))
    return out


def _follow(
    ctx: SchedulingContext,
    write: _Write,
    ref: PodRef,
    outcome: Unfinished | WriteUncertain,
    created: Mapping[str, ResourceClaim],
) -> None:
    """Hand a new allocation's write of unknown fate to the settler, which holds its devices."""
    claim = created.get(write.claim.uid, write.claim)
    task = outcome.task if isinstance(outcome, Unfinished) else None
    version = outcome.resource_version if isinstance(outcome, WriteUncertain) else 0
    ctx.settler.follow(claim, ref, task, version, inflight_uid=write.claim.uid)


async def _write(
    ctx: SchedulingContext, write: _Write, ref: PodRef, created: dict[str, ResourceClaim], deadline: float
) -> Mapping[str, Any]:
    """Write one claim; the result counts as committed at once, before any watch echo."""
    claim = write.claim
    if write.create is not None:
        obj = await ctx.binder.create_extended_claim(write.create, ref)
        try:
            claim = parse_resource_claim(dict(obj))
        except ValueError as exc:
            raise BindError(f"the created extended-resource claim is malformed: {exc}") from None
        created[write.claim.uid] = claim
        ctx.state.assume_claim_unless_older(obj)
    if write.consumer is not None:
        ref = replace(ref, consumer=write.consumer)
    obj = await ctx.binder.write_claim(claim, write.allocation, ref, deadline)
    ctx.state.assume_claim_unless_older(obj)
    return obj


async def _release(ctx: SchedulingContext, ref: PodRef, written: list[_Write], delete_extended: bool) -> None:
    """Undo the writes; with ``delete_extended`` also delete the pod's extended-resource claim.

    That claim is looked up by owner and annotation rather than by name: a create whose reply
    was lost still gets cleaned up.
    """
    if delete_extended:
        await _delete_extended_claims(ctx, ref)
    outcomes = await _run_all(
        [ctx.binder.release_claim(w.claim, ref, deallocate=w.newly_allocated) for w in written],
        ctx.config.bind_timeout_s,
    )
    for write, outcome in zip(written, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            log.error("rollback of claim %s/%s failed: %s", write.claim.namespace, write.claim.name, outcome)
        elif outcome is not None:
            # Cached at once, like a write: until the watch echoes the rollback, a retry of the pod
            # would otherwise find its old reservation and bind without writing the claim again.
            ctx.state.assume_claim_unless_older(outcome)


async def _delete_extended_claims(ctx: SchedulingContext, ref: PodRef) -> None:
    try:
        deleted = await asyncio.wait_for(ctx.binder.delete_extended_claims(ref), ctx.config.bind_timeout_s)
    except Exception as exc:
        log.error(
            "rollback: deleting the extended-resource claim of pod %s/%s failed: %s",
            ref.namespace,
            ref.name,
            exc,
        )
        return
    for obj in deleted:
        meta = obj.get("metadata") or {}
        ctx.memory.claim_deleted(str(meta.get("uid")))
        # Gone from the cache at once: a retry must neither adopt it nor count its devices.
        ctx.state.delete("ResourceClaim", dict(obj))
