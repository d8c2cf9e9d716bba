"""Claim writes that outlive their bind: their devices stay held until the write's fate is known.

A bind gives up at its deadline, but a claim write it sent may still be applied afterwards: the
request can sit in the API server, or its reply can be lost. Releasing the in-flight devices at
that point (or after any fixed TTL) lets the next pod take them while the old write may still
land — the double allocation this module exists to prevent. So a write of unknown fate is
handed to :class:`Settler`, which keeps the claim's in-flight entry until either

- the write is seen to have landed (the claim is allocated and reserved for the pod): the pod
  keeps it when it still wants it (its retried bind then has nothing left to write), otherwise
  it is released; or
- the write is proven impossible: the claim is gone or was replaced (another UID), or it is
  seen at a newer resourceVersion than every attempt was conditioned on without the write in
  it (the API server refuses a PUT whose resourceVersion is stale).

Nothing here ever expires by time alone. The watch and, while the fate is open, a periodic
read-back are what the settler learns from; and when a read-back ``fence_after_s`` or more
after the write was given up still finds the claim at the version the write was conditioned
on (the request may be sitting in the API server, or may have been refused while nobody
listened), it *fences* the claim: moves it to a newer version
without changing what it says, after which the old request can never be applied. It never
writes an allocation itself: that would skip the checks a bind makes (a device withdrawn
meanwhile, counters that shrank); the pod's next bind decides afresh.

A Binding of unknown fate is settled the same way (``Settler.follow_binding``): the pod's
claims stay reserved (and the pod's bind slot taken) until the pod is seen bound on the node
(kept) or the Binding is proven unable to land: the pod is bound elsewhere, deleted or replaced,
or still unbound when read back ``fence_after_s`` after the bind gave up (the API server's
request timeout: a request it still held has been answered by then). Then the bind is undone.

Also here: :class:`Releases`, the stale-claim releases filter starts (``stale.py``), one task
per pod, owned like the settler's tasks by the context and cancelled when the app closes; and
:class:`Handover`, which keeps a replica that takes over scheduling from writing allocations
that a write of the replica before it, still on its way, could contradict (docs/reliability.md,
"Handover").
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from extender.model import ResourceClaim, parse_resource_claim
from extender.model.pods import PodInfo, parse_pod
from extender.model.refs import PodRef
from extender.scheduling.binder import Binder, WriteUncertain
from extender.state import ClusterState

log = logging.getLogger(__name__)


class Fate(enum.Enum):
    LANDED = "landed"
    IMPOSSIBLE = "impossible"
    UNKNOWN = "unknown"


def judge(claim: ResourceClaim | None, claim_uid: str, pod_uid: str, version: int) -> Fate:
    """What ``claim`` as seen says about a write for ``pod_uid`` based on ``version``."""
    if claim is None or claim.uid != claim_uid:
        return Fate.IMPOSSIBLE  # the PUT names the old UID: the API server refuses it
    if claim.allocation is not None and claim.reserved_for_uid(pod_uid):
        return Fate.LANDED
    return Fate.IMPOSSIBLE if claim.resource_version > version else Fate.UNKNOWN


def binding_fate(pod: PodInfo | None, ref: PodRef, node: str) -> Fate:
    """What the pod as seen says about a Binding of ``ref`` to ``node``."""
    if pod is None or pod.uid != ref.uid:
        return Fate.IMPOSSIBLE  # the Binding names the old UID
    if pod.node_name == node:
        return Fate.LANDED
    if pod.node_name or pod.deleting:
        return Fate.IMPOSSIBLE  # a pod is bound once; one being deleted is not bound at all
    return Fate.UNKNOWN


def _binding_key(pod_uid: str) -> str:
    return f"binding/{pod_uid}"


def _claim_or_none(obj: dict[str, Any] | None) -> ResourceClaim | None:
    """A read-back claim, parsed; a malformed one (never written by an API server) is no proof."""
    return None if obj is None else parse_resource_claim(obj)


class Settler:
    """Follows each unsettled claim write and Binding to its end; one task each."""

    def __init__(
        self,
        state: ClusterState,
        binder: Binder,
        *,
        write_timeout_s: float,
        fence_after_s: float,
        poll_s: float = 0.2,
        readback_s: float = 2.0,
    ) -> None:
        self._state = state
        self._binder = binder
        self._write_timeout_s = write_timeout_s
        self._fence_after_s = fence_after_s
        self._poll_s = poll_s
        self._readback_s = readback_s
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @property
    def unsettled(self) -> int:
        return len(self._tasks)

    def follow(
        self,
        claim: ResourceClaim,
        pod: PodRef,
        write: asyncio.Future[Any] | None,
        version: int = 0,
        inflight_uid: str | None = None,
    ) -> None:
        """Hold the in-flight devices (entry ``inflight_uid``, by default the claim's UID) until
        the write (still running, or ended uncertain at ``version``) is known to have landed or
        to be impossible."""
        key = inflight_uid or claim.uid
        self._state.pin_inflight(key)
        self._start(key, self._settle(claim, pod, write, version, key))

    def follow_binding(self, pod: PodRef, node: str, undo: Callable[[], Awaitable[None]]) -> None:
        """Follow a Binding of unknown fate: ``undo`` the bind once it is proven unable to land."""
        self.stop_following_binding(pod.uid)
        self._start(_binding_key(pod.uid), self._settle_binding(pod, node, undo))

    def stop_following_binding(self, pod_uid: str) -> None:
        """A new bind of the pod takes over what an unsettled Binding of it holds."""
        task = self._tasks.pop(_binding_key(pod_uid), None)
        if task is not None:
            task.cancel()

    def _start(self, key: str, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks[key] = task

        def forget(done: asyncio.Task[None]) -> None:
            if self._tasks.get(key) is done:
                del self._tasks[key]

        task.add_done_callback(forget)

    async def close(self) -> None:
        await _cancel(self._tasks.values())

    async def _settle(
        self, claim: ResourceClaim, pod: PodRef, write: asyncio.Future[Any] | None, version: int, key: str
    ) -> None:
        try:
            if write is not None:
                try:
                    obj = await write  # the binder ends its attempts by the bind deadline
                except WriteUncertain as exc:
                    version = exc.resource_version
                except Exception as exc:  # a definite refusal: nothing of it can land
                    log.info("claim %s: the write of pod %s was refused: %s", claim.key, pod, exc)
                    self._state.remove_inflight(key)
                    return
                else:
                    self._state.assume_claim_unless_older(obj)
                    await self._landed(claim, pod, key)
                    return
            await self._prove(claim, pod, version, key)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug: keep the devices held (safe) and say so
            log.exception("settling the write of claim %s failed; its devices stay held", claim.key)

    async def _prove(self, claim: ResourceClaim, pod: PodRef, version: int, key: str) -> None:
        loop = asyncio.get_running_loop()
        next_read = loop.time()
        fence_at = next_read + self._fence_after_s
        while True:
            fate = judge(self._state.claim(claim.namespace, claim.name), claim.uid, pod.uid, version)
            if fate is Fate.UNKNOWN and loop.time() >= next_read:
                next_read = loop.time() + self._readback_s
                fate = await self._read_back(claim, pod, version, fence=loop.time() >= fence_at)
            if fate is Fate.LANDED:
                await self._landed(claim, pod, key)
                return
            if fate is Fate.IMPOSSIBLE:
                log.info("claim %s: the write of pod %s can no longer land; its devices are free",
                         claim.key, pod)
                self._state.remove_inflight(key)
                return
            await asyncio.sleep(self._poll_s)

    async def _read_back(self, claim: ResourceClaim, pod: PodRef, version: int, fence: bool) -> Fate:
        """Ask the API server, in case the watch is slow or away; with ``fence``, fence off a
        claim found unchanged."""
        try:
            obj = await asyncio.wait_for(
                self._binder.read_claim(claim.namespace, claim.name), self._readback_s
            )
            fate = judge(_claim_or_none(obj), claim.uid, pod.uid, version)
            if fence and obj is not None and fate is Fate.UNKNOWN:
                obj = await asyncio.wait_for(self._binder.fence_claim(obj), self._write_timeout_s)
                fate = judge(_claim_or_none(obj), claim.uid, pod.uid, version)
        except Exception as exc:
            log.debug("claim %s: reading back or fencing failed, trying again later: %s", claim.key, exc)
            return Fate.UNKNOWN
        if obj is not None:
            self._state.assume_claim_unless_older(obj)
        return fate

    async def _landed(self, claim: ResourceClaim, pod: PodRef, key: str) -> None:
        """The write is in (and cached): keep it for the pod that still wants it, release it
        otherwise."""
        current = self._state.claim(claim.namespace, claim.name)
        node = current.allocation.node_name if current is not None and current.allocation else None
        held = self._state.pod(pod.namespace, pod.name)
        keep = (
            held is not None and held.uid == pod.uid and not held.deleting
            and (not held.node_name or node is None or held.node_name == node)
        )
        if not keep:
            try:
                released = await asyncio.wait_for(
                    self._binder.release_claim(claim, pod, deallocate=True), self._write_timeout_s
                )
            except Exception as exc:
                # Still allocated in the API server and so in the cache: nothing is handed out twice.
                log.warning("claim %s: releasing the late write of pod %s failed: %s", claim.key, pod, exc)
            else:
                if released is not None:
                    self._state.assume_claim_unless_older(released)
        log.info("claim %s: a late write for pod %s landed; %s", claim.key, pod,
                 "kept for the pod" if keep else "released")
        self._state.remove_inflight(key)

    async def _settle_binding(self, pod: PodRef, node: str, undo: Callable[[], Awaitable[None]]) -> None:
        try:
            fate = await self._prove_binding(pod, node)
            if fate is Fate.IMPOSSIBLE:
                log.info("the Binding of pod %s to node %s can no longer land; its bind is undone", pod, node)
                await undo()
            else:
                log.info("the Binding of pod %s to node %s landed; its claims stay", pod, node)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug: the claims stay reserved (safe) and the pod's retry adopts them
            log.exception("settling the Binding of pod %s failed; its claims stay reserved", pod)

    async def _prove_binding(self, pod: PodRef, node: str) -> Fate:
        """Watch the pod, reading it back now and then; past ``fence_after_s`` only a successful
        read-back that still finds it unbound proves that the Binding cannot land any more."""
        loop = asyncio.get_running_loop()
        next_read = loop.time()
        give_up_at = next_read + self._fence_after_s
        while True:
            fate = binding_fate(self._state.pod(pod.namespace, pod.name), pod, node)
            if fate is Fate.UNKNOWN and loop.time() >= next_read:
                asked_at = loop.time()
                next_read = asked_at + self._readback_s
                read = await self._read_back_pod(pod, node)
                if read is Fate.UNKNOWN and asked_at >= give_up_at:
                    return Fate.IMPOSSIBLE
                fate = read or Fate.UNKNOWN
            if fate is not Fate.UNKNOWN:
                return fate
            await asyncio.sleep(self._poll_s)

    async def _read_back_pod(self, pod: PodRef, node: str) -> Fate | None:
        """The pod's fate as the API server tells it now; None when it could not be asked."""
        try:
            obj = await asyncio.wait_for(self._binder.read_pod(pod.namespace, pod.name), self._readback_s)
            return binding_fate(None if obj is None else parse_pod(obj), pod, node)
        except Exception as exc:
            log.debug("pod %s: reading it back failed, trying again later: %s", pod, exc)
            return None


class Releases:
    """The stale-claim releases under way (``stale.py``), at most one per pod.

    A release runs while no bind of its pod does (``SchedulerMemory.binding``), and a bind
    refuses a pod whose release runs (``running``): both checks and the start happen without an
    ``await`` in between. The context creates it, the app's shutdown closes it (``close``
    cancels what still runs), so no task outlives the app.
    """

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def running(self, pod_uid: str) -> bool:
        return pod_uid in self._tasks

    def start(self, pod_uid: str, work: Coroutine[Any, Any, None]) -> bool:
        """Run ``work`` for the pod unless a release of it runs already (then ``work`` is closed)."""
        if pod_uid in self._tasks:
            work.close()
            return False
        task = asyncio.get_running_loop().create_task(work)
        self._tasks[pod_uid] = task
        task.add_done_callback(lambda _: self._tasks.pop(pod_uid, None))
        return True

    async def close(self) -> None:
        await _cancel(self._tasks.values())


async def _cancel(tasks: Any) -> None:
    running = list(tasks)
    for task in running:
        task.cancel()
    for task in running:
        with contextlib.suppress(BaseException):
            await task


class Handover:
    """New allocations wait, after this replica's kube-scheduler takes over, until no claim
    write of the replica active before can land any more.

    kube-scheduler's Lease decides which replica schedules; each extender knows only its own
    writes. A claim write the previous replica sent can land up to the API server's request
    timeout after the Lease moved, and give a device to one claim while this replica gives the
    same device to another: two claims are two objects, no resourceVersion conflict stops it.
    So the first bind that would allocate in a new term of the Lease (``term``: the current
    holding, whoever holds it; a bind is only sent by the scheduler that holds it) starts a
    takeover, and until it is done such binds are refused (kube-scheduler retries them). When
    ``leading`` says this replica's scheduler holds the Lease, the takeover starts before the
    first bind (``watch``). The takeover

    1. waits ``quiet_s`` (the bind timeout): every bind of the previous replica was called
       before the Lease moved, and none starts a claim write later than its own start plus
       the bind timeout;
    2. fences every claim the cache holds unallocated (moves it to a newer resourceVersion
       without changing it: ``Binder.fence_claim``), so that every request of the previous
       replica, all conditioned on an older version, is refused whenever it arrives. Allocated
       claims need nothing: their allocation is real and counted as in use.

    A claim that cannot be fenced (the API server refuses or does not answer) is tried again
    until ``give_up_s`` (the API server's request timeout) after the wait: by then every request
    sent before it has been answered or dropped. Reservations and Bindings are never held back:
    they hand out no device.
    """

    def __init__(
        self,
        state: ClusterState,
        binder: Binder,
        *,
        term: Callable[[], str | None] | None,
        leading: Callable[[], bool] | None = None,
        quiet_s: float,
        give_up_s: float,
        poll_s: float = 0.5,
        concurrency: int = 8,
    ) -> None:
        self._state = state
        self._binder = binder
        self._term = term
        self._leading = leading
        self._quiet_s = quiet_s
        self._give_up_s = give_up_s
        self._poll_s = poll_s
        self._concurrency = concurrency
        self._done_term: str | None = None  # the term whose takeover is over
        self._task: asyncio.Task[None] | None = None
        self._task_term: str | None = None
        self.fenced = 0  # claims fenced by takeovers (the cost, with the wait)
        self.last_takeover_s: float | None = None  # how long the last takeover held allocations

    def blocks_allocation(self) -> str | None:
        """Why a new allocation must wait now (None: it may be written); starts the takeover of
        a new term."""
        if self._term is None:
            return None  # no Lease to follow: local mode, tests, or leader election of our own
        term = self._term()
        if term is None:
            return ("kube-scheduler's Lease could not be read lately; new allocations wait until it "
                    "is (the scheduler retries)")
        if term == self._done_term:
            return None
        self._start(term)
        return ("this replica took over scheduling (a new holding of the Lease): new allocations wait "
                "until the previous leader's claim writes can no longer land (the scheduler retries)")

    async def watch(self) -> None:
        """Start the takeover as soon as this replica's scheduler is seen holding the Lease, not
        only at the first bind."""
        while True:
            if self._leading is not None and self._leading():
                self.blocks_allocation()
            await asyncio.sleep(self._poll_s)

    async def close(self) -> None:
        if self._task is not None:
            await _cancel([self._task])

    def _start(self, term: str) -> None:
        if self._task is not None and not self._task.done():
            if self._task_term == term:
                return
            self._task.cancel()
        self._task_term = term
        self._task = asyncio.get_running_loop().create_task(self._take_over(term))

    async def _take_over(self, term: str) -> None:
        started = time.monotonic()
        log.info("took over scheduling (Lease holding %s): new allocations wait %gs, then every "
                 "unallocated claim is fenced", term, self._quiet_s)
        await asyncio.sleep(self._quiet_s)
        while not self._state.synced:
            await asyncio.sleep(self._poll_s)
        give_up_at = time.monotonic() + self._give_up_s
        pending = [c for c in self._state.claims.values() if c.allocation is None]
        limit = asyncio.Semaphore(self._concurrency)
        while pending and time.monotonic() < give_up_at:
            fenced = await asyncio.gather(*(self._fence(c, limit) for c in pending))
            pending = [c for c, ok in zip(pending, fenced, strict=True) if not ok]
            if pending:
                await asyncio.sleep(self._poll_s)
        self._done_term = term
        self.last_takeover_s = time.monotonic() - started
        log.info("takeover %s done after %.1fs (%d claims could not be fenced and were waited out)",
                 term, self.last_takeover_s, len(pending))

    async def _fence(self, claim: ResourceClaim, limit: asyncio.Semaphore) -> bool:
        """Whether no request conditioned on the claim's present version can land any more."""
        async with limit:
            try:
                obj = await self._binder.read_claim(claim.namespace, claim.name)
                current = _claim_or_none(obj)
                if obj is None or current is None or current.uid != claim.uid:
                    return True  # gone or replaced: a request names the UID it was read with
                if current.allocation is None:
                    obj = await self._binder.fence_claim(obj)
                    if obj is None:
                        return True
                    self.fenced += 1
                self._state.assume_claim_unless_older(obj)
                return True
            except Exception as exc:
                log.info("fencing claim %s at takeover failed, trying again: %s", claim.key, exc)
                return False
