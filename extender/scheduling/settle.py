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
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Mapping
from typing import Any

from extender.model import ResourceClaim
from extender.model.refs import PodRef, resource_version
from extender.scheduling.binder import Binder, WriteUncertain
from extender.state import ClusterState

log = logging.getLogger(__name__)


class Fate(enum.Enum):
    LANDED = "landed"
    IMPOSSIBLE = "impossible"
    UNKNOWN = "unknown"


def judge(obj: Mapping[str, Any] | None, claim_uid: str, pod_uid: str, version: int) -> Fate:
    """What the claim as seen in ``obj`` says about a write for ``pod_uid`` based on ``version``."""
    if obj is None or (obj.get("metadata") or {}).get("uid") != claim_uid:
        return Fate.IMPOSSIBLE  # the PUT names the old UID: the API server refuses it
    status = obj.get("status") or {}
    if status.get("allocation") is not None and any(
        (entry or {}).get("uid") == pod_uid for entry in status.get("reservedFor") or ()
    ):
        return Fate.LANDED
    return Fate.IMPOSSIBLE if resource_version(obj) > version else Fate.UNKNOWN


class Settler:
    """Follows each unsettled claim write to its end; one task per write."""

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
        task = asyncio.ensure_future(self._settle(claim, pod, write, version, key))
        self._tasks[key] = task
        task.add_done_callback(lambda _: self._tasks.pop(key, None))

    async def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        for task in list(self._tasks.values()):
            with contextlib.suppress(BaseException):
                await task

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
                    log.info("claim %s: the write of pod %s/%s was refused: %s", claim.key, pod.namespace,
                             pod.name, exc)
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
            held = self._state.claim(claim.namespace, claim.name)
            fate = judge(held.raw if held is not None else None, claim.uid, pod.uid, version)
            if fate is Fate.UNKNOWN and loop.time() >= next_read:
                next_read = loop.time() + self._readback_s
                fate = await self._read_back(claim, pod, version, fence=loop.time() >= fence_at)
            if fate is Fate.LANDED:
                await self._landed(claim, pod, key)
                return
            if fate is Fate.IMPOSSIBLE:
                log.info("claim %s: the write of pod %s/%s can no longer land; its devices are free",
                         claim.key, pod.namespace, pod.name)
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
            fate = judge(obj, claim.uid, pod.uid, version)
            if fence and obj is not None and fate is Fate.UNKNOWN:
                obj = await asyncio.wait_for(self._binder.fence_claim(obj), self._write_timeout_s)
                fate = judge(obj, claim.uid, pod.uid, version)
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
        node = _allocated_node(current.raw if current is not None else None)
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
                log.warning("claim %s: releasing the late write of pod %s/%s failed: %s", claim.key,
                            pod.namespace, pod.name, exc)
            else:
                if released is not None:
                    self._state.assume_claim_unless_older(released)
        log.info("claim %s: a late write for pod %s/%s landed; %s", claim.key, pod.namespace, pod.name,
                 "kept for the pod" if keep else "released")
        self._state.remove_inflight(key)


def _allocated_node(obj: Mapping[str, Any] | None) -> str | None:
    """The single node an allocation is bound to, when its node selector names one."""
    allocation = ((obj or {}).get("status") or {}).get("allocation") or {}
    terms = ((allocation.get("nodeSelector") or {}).get("nodeSelectorTerms")) or ()
    for term in terms:
        for field in term.get("matchFields") or ():
            if field.get("key") == "metadata.name" and len(field.get("values") or ()) == 1:
                return str(field["values"][0])
    return None
