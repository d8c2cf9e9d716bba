"""bind: commit in memory, write the claims, bind the pod; undo everything on failure.

A bind is one :class:`BindTransaction`: ``begin`` decides the allocation and commits it in
memory, ``run`` writes the claims, the pod's status and the Binding, and ends in ``commit``
(the pod is bound) or ``rollback`` (every write undone). Writes whose fate is unknown are not
undone but handed to the settler (``settle.py``), which holds what they may still take.

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
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from extender.allocator import Failure
from extender.logs import decision_fields, note
from extender.model import AllocationResult, Node, ResourceClaim, parse_resource_claim
from extender.model.pods import PodInfo
from extender.model.refs import Consumer, PodRef
from extender.scheduling.binder import NOT_THE_LEADER, BindError, BindingUncertain, WriteUncertain
from extender.scheduling.claims import PodWaits, first_problem, reserved_for
from extender.scheduling.context import SchedulingContext
from extender.scheduling.extended_resources.claim import IN_MEMORY_NAME
from extender.scheduling.plan import PodPlan
from extender.scheduling.turns import in_turns
from extender.scheduling.verdicts import ExtendedStatus
from extender.state import InFlight
from extender.state.pod_requests import ClaimFootprint, in_units, pod_requests

log = logging.getLogger(__name__)

T = TypeVar("T")


class BindFailed(Exception):
    """The bind cannot proceed; the message goes back in the reply's ``Error``."""


class UnknownPod(LookupError):
    """A filter/prioritize/preempt request names only a pod the extender does not hold: a bad request.

    A bind never raises it: kube-scheduler drops the body of any non-200 extender answer, so a
    refused bind is a 200 whose Error says why.
    """


Outcome = Literal["bound", "refused", "rejected", "failed", "waiting"]


@dataclass(frozen=True, slots=True)
class BindResult:
    """How a bind ended: ``outcome`` is the ``dra_extender_bind_outcomes_total`` label; ``error``
    the reply's Error ("" when bound)."""

    outcome: Outcome
    error: str = ""


@dataclass(frozen=True, slots=True)
class _Write:
    claim: ResourceClaim
    result: AllocationResult | None  # None: already allocated, only reserve
    newly_allocated: bool
    # The extended-resource claim exists only in memory: it is created from this body first.
    create: dict[str, Any] | None = None
    consumer: Consumer | None = None  # reserved for the pod's PodGroup rather than the pod


async def bind_pod(ctx: SchedulingContext, namespace: str, name: str, uid: str, node: str) -> str:
    """Bind one pod; returns "" on success, else the error text for the reply.

    Every refusal is such a text, an unknown pod included: kube-scheduler re-queues the pod
    either way, and only a 200 reply gets its reason into the scheduler's log and events.
    """
    if not ctx.leading:
        return _refused(ctx, NOT_THE_LEADER)
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
    if ctx.releases.running(pod.uid):
        return _refused(ctx, f"claims of pod {pod.ref} that no node could use are being released")
    if not memory.begin_bind(pod.uid):
        return _refused(ctx, f"a bind of pod {pod.ref} is already in progress")
    try:
        if pod.node_name and pod.node_name != node:
            return _refused(ctx, f"pod {pod.ref} is already bound to node {pod.node_name}")
        # An earlier Binding of unknown fate is this bind's now: it adopts the claims that one
        # holds, and follows its own Binding.
        ctx.settler.stop_following_binding(pod.uid)
        result = await _bind(ctx, pod, node)
    except Exception:
        _outcome(ctx, "error")  # a bug: the request answers 500
        raise
    finally:
        memory.end_bind(pod.uid)
    _outcome(ctx, result.outcome)
    if result.error and ctx.events is not None:
        ctx.events.bind_failed(pod.pod_ref, result.error)
    return result.error


def _outcome(ctx: SchedulingContext, outcome: str) -> None:
    ctx.metrics.bind_outcomes.labels(outcome).inc()
    note(outcome=outcome)


def _refused(ctx: SchedulingContext, reason: str) -> str:
    """A bind turned down before it starts: nothing was committed or written."""
    _outcome(ctx, "refused")
    return reason


async def _bind(ctx: SchedulingContext, pod: PodInfo, node: str) -> BindResult:
    try:
        transaction = await BindTransaction.begin(ctx, pod, node)
    except (PodWaits, BindFailed) as exc:
        return BindResult("rejected", str(exc))
    try:
        return await transaction.run()
    finally:
        transaction.close()


class BindTransaction:
    """One bind's side effects, from the in-memory commit to the Binding.

    What it tracks is what ``rollback`` must undo: the claims written (``written``), the
    extended-resource claim created (``created``, by the in-memory claim's UID), whether the
    pod's status got footprints; and what it must leave alone: claim writes of unknown fate
    (``unknown``), whose devices the settler holds until their fate is known.
    """

    def __init__(
        self,
        ctx: SchedulingContext,
        pod: PodInfo,
        node: str,
        writes: list[_Write],
        deadline: float,
        plan: PodPlan | None = None,
        status: ExtendedStatus | None = None,
        footprints: tuple[ClaimFootprint, ...] = (),
    ) -> None:
        self._ctx = ctx
        self._pod = pod
        self._ref = pod.pod_ref
        self._node = node
        self._writes = writes
        # No claim write starts after this: the bind's start plus bind_timeout_s, which is what
        # a replica taking over waits for (``settle.Handover``).
        self._deadline = deadline
        self._plan = plan
        self._status = status
        self._footprints = footprints  # pod.status.nodeAllocatableResourceClaimStatuses
        self._written: list[_Write] = []
        self._created: dict[str, ResourceClaim] = {}
        self._unknown: set[str] = set()
        self._footprints_written = False
        self._delete_extended = any(w.create is not None for w in writes)

    # --- begin: the in-memory commit ------------------------------------------------------

    @classmethod
    async def begin(cls, ctx: SchedulingContext, pod: PodInfo, node_name: str) -> BindTransaction:
        """Decide the allocation on ``node_name`` and register it in flight.

        A placement that must be recomputed may take turns with other requests; it is committed
        only if nothing it was computed from changed meanwhile (otherwise the scheduler retries),
        and the commit itself never awaits. Raises PodWaits or BindFailed.
        """
        deadline = time.monotonic() + ctx.config.bind_timeout_s
        if not pod.wants_devices:
            return cls(ctx, pod, node_name, [], deadline)
        plan = PodPlan.build(ctx, pod)
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
                f"pod {pod.ref}: the claims or the devices of node {node_name} changed while its "
                "allocation was computed; the scheduler retries"
            )
        if placement.results and (waiting := ctx.handover.blocks_allocation()) is not None:
            raise BindFailed(f"pod {pod.ref}: {waiting}")
        # From here to the return: no await, so no other request sees half of it.
        writes = []
        expires = time.monotonic() + ctx.config.inflight_ttl_s
        extended = placement.variant.extended
        consumers = plan.claims.consumers
        for claim, result in zip(placement.variant.claims, placement.results, strict=True):
            state.add_inflight(InFlight(claim.uid, pod.uid, result, expires))
            create = placement.create if extended is not None and claim is extended.claim else None
            writes.append(_Write(claim, _stamped(ctx, result), True, create, consumers.get(claim.uid)))
        writes.extend(_Write(c, None, False, consumer=consumers.get(c.uid)) for c in placement.reserve)
        return cls(ctx, pod, node_name, writes, deadline, plan, placement.status, placement.footprints)

    # --- run: the writes, in order ----------------------------------------------------------

    async def run(self) -> BindResult:
        """Write everything; ``commit`` on success, ``rollback`` on a definite failure."""
        if (fields := decision_fields()) is not None:
            fields["allocation"] = self.chosen()
        try:
            await self._write_claims()
            if self._status is not None or self._footprints:
                await self._record_pod_status()
            waiting = await self._check_readiness()
            if waiting is not None:
                return BindResult("waiting", waiting)  # claims stay allocated and reserved for the retry
            await self._bind_pod()
        except BindFailed as exc:
            await self.rollback()
            return BindResult("failed", str(exc))
        except _BindingUnsettled as exc:
            return self._follow_binding(exc.reason)
        self.commit()
        return BindResult("bound")

    async def _write_claims(self) -> None:
        """Every claim write at once; raises BindFailed naming each that failed."""
        metrics = self._ctx.metrics
        timeout = max(0.0, self._deadline - time.monotonic())
        outcomes = await _run_all(
            [self._write(w, self._deadline) for w in self._writes], timeout, self._ctx.config.bind_timeout_s
        )
        errors = []
        for write, outcome in zip(self._writes, outcomes, strict=True):
            if not isinstance(outcome, BaseException):
                metrics.claim_writes.labels("ok").inc()
                self._written.append(write)
                continue
            errors.append(f"claim {write.claim.key}: {outcome}")
            if not isinstance(outcome, Unfinished | WriteUncertain):
                metrics.claim_writes.labels("error").inc()
                continue
            metrics.claim_writes.labels("unknown").inc()
            if write.newly_allocated:
                self._follow_write(write, outcome)
            else:
                self._written.append(write)  # only a reservation: released best effort, holds no devices
        if errors:
            raise BindFailed("; ".join(errors))

    async def _write(self, write: _Write, deadline: float) -> object:
        """Write one claim; the result counts as committed at once, before any watch echo."""
        ctx, claim, ref = self._ctx, write.claim, self._ref
        if write.create is not None:
            obj = await ctx.binder.create_extended_claim(write.create, ref)
            try:
                claim = parse_resource_claim(dict(obj))
            except ValueError as exc:
                raise BindError(f"the created extended-resource claim is malformed: {exc}") from None
            self._created[write.claim.uid] = claim
            ctx.state.assume_claim_unless_older(obj)
        if write.consumer is not None:
            ref = replace(ref, consumer=write.consumer)
        allocation = None if write.result is None else write.result.to_api()
        written = await ctx.binder.write_claim(claim, allocation, ref, deadline)
        ctx.state.assume_claim_unless_older(written)
        return written

    def _follow_write(self, write: _Write, outcome: Unfinished | WriteUncertain) -> None:
        """Hand a new allocation's write of unknown fate to the settler, which holds its devices."""
        claim = self._created.get(write.claim.uid, write.claim)
        task = outcome.task if isinstance(outcome, Unfinished) else None
        version = outcome.resource_version if isinstance(outcome, WriteUncertain) else 0
        self._ctx.settler.follow(claim, self._ref, task, version, inflight_uid=write.claim.uid)
        self._unknown.add(write.claim.uid)

    async def _record_pod_status(self) -> None:
        """PreBind's write of the pod's status, in one patch: its extended-resource claim and what
        the claims cost the node. That claim goes by the name it got when bind created it."""
        created_name = next(iter(self._created.values())).name if self._created else ""
        fields: dict[str, Any] = {}
        recorded = []
        if self._status is not None:
            name = self._status.claim_name or created_name
            fields.update(self._status.fields(name))
            recorded.append(f"claim {self._ref.namespace}/{name}")
        if self._footprints:
            self._footprints_written = True  # even a failed patch may have landed
            real_name = created_name or IN_MEMORY_NAME
            fields["nodeAllocatableResourceClaimStatuses"] = [
                (replace(f, claim_name=real_name) if f.claim_name == IN_MEMORY_NAME else f).to_api()
                for f in self._footprints
            ]
            recorded.append("what the claims use of node resources")
        try:
            await self._in_time(self._ctx.binder.patch_pod_status(self._ref, fields))
        except Exception as exc:
            what = " and ".join(recorded)
            raise BindFailed(f"recording {what} in the status of pod {self._ref.name}: {exc}") from None

    async def _check_readiness(self) -> str | None:
        """With the binding gates: why the pod must wait for its devices (None: ready). Claims
        whose binding failed are released, the extended-resource claim deleted (BindFailed)."""
        plan = self._plan
        if plan is None or not self._ctx.features.binding:
            return None
        state = self._ctx.state
        # A list, not a generator: claims reads it without calling back into this module.
        held = [state.claim(c.namespace, c.name) for c in (*plan.claims.claims, *self._created.values())]
        readiness = first_problem([c for c in held if c is not None])
        if readiness.failed:
            # Everything reserved for the pod goes, also what earlier binds left to it.
            self._written = self._ours_to_release(plan)
            self._delete_extended = self._delete_extended or plan.extended is not None
            raise BindFailed(readiness.message)
        return None if readiness.ready else readiness.message

    def _ours_to_release(self, plan: PodPlan) -> list[_Write]:
        """Every user claim reserved for the pod, each to be deallocated too: the binder clears an
        allocation only when no other pod holds the claim, as the API server has it then.

        The extended-resource claim is not among them: it is deleted instead.
        """
        out = []
        for claim in plan.claims.claims:
            if claim is plan.claims.extended:
                continue
            held = self._ctx.state.claim(claim.namespace, claim.name)
            if held is not None and reserved_for(held, self._ref.uid):
                out.append(_Write(held, None, newly_allocated=True))
        return out

    async def _bind_pod(self) -> None:
        """The Binding; raises BindFailed when it was refused, _BindingUnsettled when it may land."""
        ctx, ref, node = self._ctx, self._ref, self._node
        deadline = time.monotonic() + ctx.config.bind_timeout_s
        try:
            await self._in_time(ctx.binder.bind_pod(ref, node, deadline))
        except (TimeoutError, BindingUncertain) as exc:
            what_happened = str(exc) or f"no answer within {ctx.config.bind_timeout_s:g}s"
            raise _BindingUnsettled(f"binding pod {ref} to node {node}: {what_happened}") from None
        except Exception as exc:
            raise BindFailed(f"binding pod {ref} to node {node}: {exc}") from None

    def _follow_binding(self, reason: str) -> BindResult:
        """The Binding may still land: releasing the claims now could leave the pod bound without
        them (kubelet would never start it). They stay reserved until the settler knows: the pod
        bound there (kept), or the Binding unable to land (``rollback``, unless a retry of the
        pod has taken over meanwhile). A retry adopts them, with nothing left to write."""
        memory, uid = self._ctx.memory, self._ref.uid
        memory.binding_unknown(uid)

        async def undo() -> None:
            if not memory.begin_bind(uid):
                return  # a bind of the pod runs: it has taken the claims over
            try:
                await self.rollback()
                memory.not_bound(uid)
            finally:
                memory.end_bind(uid)

        self._ctx.settler.follow_binding(self._ref, self._node, undo)
        return BindResult("failed", f"{reason}; its claims stay reserved for the retry until it is settled")

    # --- the two ends -------------------------------------------------------------------------

    def commit(self) -> None:
        """The pod is bound: memory forgets its filter results, its node counts its resources."""
        ctx, pod = self._ctx, self._pod
        ctx.memory.bound(pod.uid)
        for write in self._writes:
            ctx.memory.allocation_settled(write.claim.uid)  # in use by a bound pod now
        if ctx.state.node_requests is not None:
            # Counted on the node at once, as kube-scheduler assumes every pod it binds (devices
            # or not): until the watch shows it bound, the next pod must not get its CPU or memory.
            units = in_units(pod_requests(pod.raw, self._footprints, use_status=True))
            ctx.state.node_requests.assume(pod.key, self._node, units)

    async def rollback(self) -> None:
        """Undo what was written (upstream's Unreserve): reservations removed, new allocations
        cleared, the extended-resource claim deleted, the pod's footprints cleared."""
        ctx = self._ctx
        if self._delete_extended:
            try:
                await self._in_time(delete_extended_claims(ctx, self._ref))
            except Exception as exc:
                log.error("rollback: deleting the extended-resource claim of pod %s failed: %s",
                          self._ref, exc)
        undo = [w for w in self._written if w.create is None]
        memory = ctx.memory
        for write in undo:
            if write.newly_allocated and not self._used_by_a_bound_pod(write.claim):
                memory.allocation_abandoned(write.claim.uid)
        await self._release([(w, w.newly_allocated) for w in undo])
        # A shared claim this bind only reserved, whose allocation another pod's rollback had to
        # leave while this pod held it: asked to clear, it is cleared if this one was the last out
        # (the binder checks that against the API server).
        last_out = [(w, True) for w in undo if not w.newly_allocated and memory.abandoned(w.claim.uid)]
        if last_out:
            await self._release(last_out)
        if self._footprints_written:
            await self._clear_footprints()

    def _used_by_a_bound_pod(self, claim: ResourceClaim) -> bool:
        """Whether another pod holding the claim was bound by us (its ``commit`` ran first)."""
        held = self._ctx.state.claim(claim.namespace, claim.name)
        memory = self._ctx.memory
        return held is not None and any(
            r.uid != self._ref.uid and memory.may_be_bound(r.uid) for r in held.reserved_for
        )

    async def _release(self, releases: list[tuple[_Write, bool]]) -> None:
        """Remove the pod from each claim's reservations, also clearing the allocation when
        flagged; all at once, within the bind timeout."""
        await _run_all([self._release_one(w, deallocate) for w, deallocate in releases],
                       self._ctx.config.bind_timeout_s)

    async def _release_one(self, write: _Write, deallocate: bool) -> None:
        """One claim's release. Its reply is cached at once, like a write: until the watch echoes
        the rollback, a retry of the pod would otherwise find its old reservation and bind without
        writing the claim. A claim found deallocated or gone is no longer an abandoned allocation.
        A reply that comes after the bind timeout is handled all the same."""
        ctx = self._ctx
        try:
            claim = await ctx.binder.release_claim(write.claim, self._ref, deallocate=deallocate)
        except Exception as exc:
            log.error("rollback of claim %s failed: %s", write.claim.key, exc)
            return
        if claim is not None:
            ctx.state.assume_claim_unless_older(claim)
        held = None if claim is None else ctx.state.claim(write.claim.namespace, write.claim.name)
        if held is None or held.uid != write.claim.uid or held.allocation is None:
            ctx.memory.allocation_settled(write.claim.uid)

    async def _clear_footprints(self) -> None:
        """An empty list, not an absent field, so that the API server does not keep the old value
        for a client that does not know the field."""
        try:
            await self._in_time(
                self._ctx.binder.patch_pod_status(self._ref, {"nodeAllocatableResourceClaimStatuses": []})
            )
        except Exception as exc:
            log.error("rollback: clearing nodeAllocatableResourceClaimStatuses of pod %s failed: %s",
                      self._ref, exc)

    def close(self) -> None:
        """The in-flight entries end: a written claim is in the cache, a refused one holds
        nothing; only writes of unknown fate keep theirs, with the settler."""
        for write in self._writes:
            if write.newly_allocated and write.claim.uid not in self._unknown:
                self._ctx.state.remove_inflight(write.claim.uid)

    def chosen(self) -> dict[str, dict[str, list[str]]]:
        """The devices the bind allocates, per claim and request:
        {"ns/claim": {"gpu": ["driver/pool/dev"]}}."""
        out: dict[str, dict[str, list[str]]] = {}
        for write in self._writes:
            if write.result is None:
                continue
            per_request = out.setdefault(write.claim.key, {})
            for result in write.result.devices:
                per_request.setdefault(result.request, []).append("/".join(result.id))
        return out

    async def _in_time(self, work: Awaitable[T]) -> T:
        return await asyncio.wait_for(work, self._ctx.config.bind_timeout_s)


class _BindingUnsettled(Exception):
    """The Binding may have landed, or may still: its fate is for the settler to find out."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _stamped(ctx: SchedulingContext, result: AllocationResult) -> AllocationResult:
    if ctx.features.binding and not result.allocated_at:
        # PreBind stamps the allocation when both binding gates are on (upstream's
        # DynamicResources PreBind, bindClaim).
        return replace(result, allocated_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return result


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


async def _run_all(
    coros: list[Coroutine[Any, Any, Any]], timeout: float, budget: float | None = None
) -> list[Any]:
    """Run concurrently; each entry is the result, the exception, or :class:`Unfinished`
    (whose message names ``budget``, the whole time allowed, by default ``timeout``).

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
            out.append(Unfinished(task, timeout if budget is None else budget))
        elif task.exception() is not None:
            out.append(task.exception())
        else:
            out.append(task.result())
    return out


async def delete_extended_claims(ctx: SchedulingContext, ref: PodRef) -> None:
    """Delete the pod's extended-resource claims and forget them: the one cleanup of a bind's
    rollback and of a stale release.

    The claims are looked up by owner and annotation rather than by name, so a create whose
    reply was lost still gets cleaned up. Each is gone from the cache at once (a retry must
    neither adopt it nor count its devices) and remembered as deleted (a watch event still in
    transit must not bring it back for adoption). Raises what the binder raises.
    """
    for obj in await ctx.binder.delete_extended_claims(ref):
        try:
            claim = parse_resource_claim(obj)
        except ValueError as exc:
            log.error("pod %s: a deleted extended-resource claim is malformed: %s", ref, exc)
            continue
        ctx.memory.claim_deleted(claim.uid)
        ctx.state.delete("ResourceClaim", obj)
