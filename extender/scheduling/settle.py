"""Claim writes that outlive their bind: their devices stay held until the write's fate is known.

A bind gives up at its deadline, but a claim write it sent may still be applied afterwards: the
request can sit in the API server, or its reply can be lost. Releasing the in-flight devices at
that point (or after any fixed TTL) lets the next pod take them while the old write may still
land — the double allocation this module exists to prevent. So a write of unknown fate is
handed to :class:`Settler`, which keeps the claim's in-flight entry until one of:

- the write is seen to have landed (the claim is allocated and reserved for the pod): the pod
  keeps it when it still wants it (its retried bind then has nothing left to write), otherwise
  it is released;
- the write is proven impossible: the claim is gone or was replaced (another UID), or it is
  seen at a newer resourceVersion than every attempt was conditioned on without the write in
  it (the API server refuses a PUT whose resourceVersion is stale);
- the pod still wants the claim and the API server answers again with the claim unchanged:
  the settler writes the same allocation itself, conditioned on that version. Success lands
  the allocation; any older request still held in the server then carries a stale
  resourceVersion and can never be applied.

Nothing here ever expires by time alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from extender.model import ResourceClaim, parse_resource_claim
from extender.model.refs import PodRef
from extender.scheduling.binder import Binder, WriteUncertain
from extender.state import ClusterState

log = logging.getLogger(__name__)


class Fate(enum.Enum):
    LANDED = "landed"
    IMPOSSIBLE = "impossible"
    UNKNOWN = "unknown"


def resource_version(obj: Mapping[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


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
        poll_s: float = 0.2,
        readback_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._state = state
        self._binder = binder
        self._write_timeout_s = write_timeout_s
        self._poll_s = poll_s
        self._readback_s = readback_s
        self._clock = clock
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @property
    def unsettled(self) -> int:
        return len(self._tasks)

    def follow(
        self,
        claim: ResourceClaim,
        pod: PodRef,
        allocation: dict[str, Any],
        write: asyncio.Future[Any] | None,
        version: int = 0,
        inflight_uid: str | None = None,
    ) -> None:
        """Hold the in-flight devices (entry ``inflight_uid``, by default the claim's UID) until
        the write (still running, or ended uncertain at ``version``) is known to have landed or
        to be impossible."""
        key = inflight_uid or claim.uid
        self._state.pin_inflight(key)
        task = asyncio.ensure_future(self._settle(claim, pod, allocation, write, version, key))
        self._tasks[key] = task
        task.add_done_callback(lambda _: self._tasks.pop(key, None))

    async def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        for task in list(self._tasks.values()):
            with contextlib.suppress(BaseException):
                await task

    async def _settle(
        self,
        claim: ResourceClaim,
        pod: PodRef,
        allocation: dict[str, Any],
        write: asyncio.Future[Any] | None,
        version: int,
        key: str,
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
                    await self._landed(claim, pod, obj, key)
                    return
            await self._prove(claim, pod, allocation, version, key)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug: keep the devices held (safe) and say so
            log.exception("settling the write of claim %s failed; its devices stay held", claim.key)

    async def _prove(
        self, claim: ResourceClaim, pod: PodRef, allocation: dict[str, Any], version: int, key: str
    ) -> None:
        next_read = self._clock()
        while True:
            held = self._state.claim(claim.namespace, claim.name)
            fate = judge(held.raw if held is not None else None, claim.uid, pod.uid, version)
            if fate is Fate.UNKNOWN and self._clock() >= next_read:
                next_read = self._clock() + self._readback_s
                fate, version = await self._read_back(claim, pod, allocation, version)
            if fate is Fate.LANDED:
                current = self._state.claim(claim.namespace, claim.name)
                await self._landed(claim, pod, current.raw if current is not None else None, key)
                return
            if fate is Fate.IMPOSSIBLE:
                log.info("claim %s: the write of pod %s/%s can no longer land; its devices are free",
                         claim.key, pod.namespace, pod.name)
                self._state.remove_inflight(key)
                return
            await asyncio.sleep(self._poll_s)

    async def _read_back(
        self, claim: ResourceClaim, pod: PodRef, allocation: dict[str, Any], version: int
    ) -> tuple[Fate, int]:
        """Ask the API server; when it holds the claim unchanged and the pod still wants it,
        land the allocation ourselves at that version (which makes every older write stale)."""
        try:
            obj = await asyncio.wait_for(
                self._binder.read_claim(claim.namespace, claim.name), self._readback_s
            )
        except Exception:
            return Fate.UNKNOWN, version  # still away: ask again later
        self._assume(obj)
        fate = judge(obj, claim.uid, pod.uid, version)
        if fate is not Fate.UNKNOWN or obj is None or not self._wanted(claim, pod):
            return fate, version
        try:
            current = parse_resource_claim(dict(obj))
            deadline = self._clock() + self._write_timeout_s
            written = await asyncio.wait_for(
                self._binder.write_claim(current, allocation, pod, deadline), self._write_timeout_s + 1
            )
        except WriteUncertain as exc:
            return Fate.UNKNOWN, max(version, exc.resource_version)
        except Exception as exc:
            log.info("claim %s: re-writing the allocation of pod %s/%s: %s", claim.key, pod.namespace,
                     pod.name, exc)
            return Fate.UNKNOWN, version
        self._assume(written)
        return judge(written, claim.uid, pod.uid, version), version

    def _wanted(self, claim: ResourceClaim, pod: PodRef) -> bool:
        held = self._state.pod(pod.namespace, pod.name)
        return held is not None and held.uid == pod.uid and not held.deleting

    async def _landed(
        self, claim: ResourceClaim, pod: PodRef, obj: Mapping[str, Any] | None, key: str
    ) -> None:
        """The write is in: keep it for the pod that still wants it, release it otherwise."""
        self._assume(obj)
        node = _allocated_node(obj)
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
                self._assume(released)
        log.info("claim %s: a late write for pod %s/%s landed; %s", claim.key, pod.namespace, pod.name,
                 "kept for the pod" if keep else "released")
        self._state.remove_inflight(key)

    def _assume(self, obj: Mapping[str, Any] | None) -> None:
        """Cache what the API server just told us, unless the watch already brought newer."""
        if not obj:
            return
        meta = obj.get("metadata") or {}
        held = self._state.claim(meta.get("namespace") or "default", meta.get("name") or "")
        if held is not None and (held.raw is obj or resource_version(held.raw) >= resource_version(obj)):
            return
        self._state.assume_claim(dict(obj))


def _allocated_node(obj: Mapping[str, Any] | None) -> str | None:
    """The single node an allocation is bound to, when its node selector names one."""
    allocation = ((obj or {}).get("status") or {}).get("allocation") or {}
    terms = ((allocation.get("nodeSelector") or {}).get("nodeSelectorTerms")) or ()
    for term in terms:
        for field in term.get("matchFields") or ():
            if field.get("key") == "metadata.name" and len(field.get("values") or ()) == 1:
                return str(field["values"][0])
    return None
