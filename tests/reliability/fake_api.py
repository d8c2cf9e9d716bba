"""An in-memory API server for property tests: the truth, a watch queue, and injectable faults.

Unlike the local binder, writes here do not reach the extender's cache directly. The binder's
reply (which bind assumes at once) and the watch event (queued, delivered when the test says
so) are separate, so the tests can interleave stale echoes, deletions and slow or lost replies
with scheduling the way a real cluster can.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from extender.model import ResourceClaim
from extender.model.refs import DELETE_PROTECTION_FINALIZER, PodRef
from extender.scheduling.binder import BindError
from extender.state import ClusterState


@dataclass
class Faults:
    """Probabilities (0..1) drawn per call from the test's own seeded random source."""

    rng: random.Random
    fail: float = 0.0  # the write is refused (like a 500 after every retry)
    lost_reply: float = 0.0  # the write lands, then the reply never comes (the caller times out)
    slow: float = 0.0  # the reply comes after the bind deadline
    slow_seconds: float = 0.0
    # the request sits in the server past the bind deadline and lands afterwards, if its
    # resourceVersion precondition still holds (after the caller gave up and rolled back)
    late: float = 0.0
    injected: int = 0

    def roll(self, p: float) -> bool:
        hit = p > 0 and self.rng.random() < p
        self.injected += hit
        return hit


@dataclass
class Write:
    step: int
    claim_uid: str
    devices: tuple[tuple[str, str, str], ...]


@dataclass
class FakeApi:
    state: ClusterState
    faults: Faults
    claims: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    events: deque[tuple[str, str, dict[str, Any]]] = field(default_factory=deque)
    allocations: list[Write] = field(default_factory=list)  # every allocation ever written
    step: int = 0
    _rv: int = 1000

    # ----- the API side ---------------------------------------------------------------------

    def seed(self) -> None:
        """Take the state's objects as the server's truth (before any scheduling)."""
        for claim in self.state.claims.values():
            self.claims[(claim.namespace, claim.name)] = copy.deepcopy(dict(claim.raw))
        for info in self.state.pods.values():
            self.pods[info.key] = copy.deepcopy(dict(info.raw))

    def _store(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        (self.claims if kind == "ResourceClaim" else self.pods)[key] = obj
        self.events.append(("MODIFIED", kind, copy.deepcopy(obj)))
        return copy.deepcopy(obj)

    def deliver(self, count: int | None = None) -> int:
        """Feed up to ``count`` queued watch events (all if None) to the extender, in order."""
        delivered = 0
        while self.events and (count is None or delivered < count):
            event, kind, obj = self.events.popleft()
            if event == "DELETED":
                self.state.delete(kind, obj)
            else:
                self.state.apply(kind, obj)
            delivered += 1
        return delivered

    def delete_claim(self, namespace: str, name: str) -> bool:
        obj = self.claims.pop((namespace, name), None)
        if obj is None:
            return False
        self.events.append(("DELETED", "ResourceClaim", obj))
        return True

    def delete_pod(self, namespace: str, name: str) -> bool:
        """The pod goes; the resourceclaim controller drops its reservations (and frees lone claims)."""
        obj = self.pods.pop((namespace, name), None)
        if obj is None:
            return False
        self.events.append(("DELETED", "Pod", obj))
        uid = obj["metadata"]["uid"]
        for claim in list(self.claims.values()):
            status = claim.get("status") or {}
            reserved = status.get("reservedFor") or []
            if any(r["uid"] == uid for r in reserved):
                released = copy.deepcopy(claim)
                self._drop_reservation(released, uid, deallocate=True)
                self._store("ResourceClaim", released)
        return True

    @staticmethod
    def _drop_reservation(obj: dict[str, Any], pod_uid: str, deallocate: bool) -> None:
        status = obj.get("status") or {}
        if not any(r["uid"] == pod_uid for r in status.get("reservedFor") or ()):
            return  # not ours: the strategic-merge delete matches nothing
        status["reservedFor"] = [r for r in status.get("reservedFor") or () if r["uid"] != pod_uid]
        if not status["reservedFor"]:
            del status["reservedFor"]
            if deallocate:
                status.pop("allocation", None)
                finalizers = obj["metadata"].get("finalizers") or []
                obj["metadata"]["finalizers"] = [f for f in finalizers if f != DELETE_PROTECTION_FINALIZER]

    # ----- the Binder the extender uses ----------------------------------------------------

    async def _reply(self) -> None:
        await asyncio.sleep(self.faults.rng.choice((0, 0, 0.001, 0.003)))
        if self.faults.roll(self.faults.fail):
            raise BindError("injected: the API server refused the write")

    async def _after_write(self) -> None:
        if self.faults.roll(self.faults.lost_reply):
            await asyncio.sleep(3600)  # the caller's deadline cancels this
        if self.faults.roll(self.faults.slow):
            await asyncio.sleep(self.faults.slow_seconds)

    async def write_claim(self, claim: ResourceClaim, allocation: dict | None, pod: PodRef) -> dict:
        await self._reply()
        if self.faults.roll(self.faults.late):
            precondition = claim.raw["metadata"].get("resourceVersion")
            loop = asyncio.get_running_loop()
            loop.call_later(self.faults.slow_seconds, self._land_late, claim, allocation, pod, precondition)
            await asyncio.sleep(3600)  # the caller's deadline cancels this
        return await self._write_claim(claim, allocation, pod)

    def _land_late(
        self, claim: ResourceClaim, allocation: dict | None, pod: PodRef, precondition: str
    ) -> None:
        current = self.claims.get((claim.namespace, claim.name))
        if current is None or current["metadata"].get("resourceVersion") != precondition:
            return  # 409 Conflict (or 404): the late request changes nothing
        with contextlib.suppress(BindError):
            self._apply_claim_write(claim, allocation, pod)
        self.deliver()  # a watch lagging less than the in-flight TTL

    async def _write_claim(self, claim: ResourceClaim, allocation: dict | None, pod: PodRef) -> dict:
        written = self._apply_claim_write(claim, allocation, pod)
        await self._after_write()
        return written

    def _apply_claim_write(self, claim: ResourceClaim, allocation: dict | None, pod: PodRef) -> dict:
        current = self.claims.get((claim.namespace, claim.name))
        if current is None or current["metadata"]["uid"] != claim.uid:
            raise BindError(f"claim {claim.key} got deleted in the meantime")
        obj = copy.deepcopy(current)
        status = obj.setdefault("status", {})
        if allocation is not None:
            held = status.get("allocation")
            if held is not None and held != allocation:
                raise BindError(f"claim {claim.key} got allocated elsewhere in the meantime")
            if held is None:
                obj["metadata"]["finalizers"] = [DELETE_PROTECTION_FINALIZER]
                status["allocation"] = copy.deepcopy(allocation)
                devices = tuple(
                    (r["driver"], r["pool"], r["device"]) for r in allocation["devices"]["results"]
                )
                self.allocations.append(Write(self.step, claim.uid, devices))
        elif not status.get("allocation"):
            raise BindError(f"claim {claim.key} is not allocated any more")
        reserved = status.setdefault("reservedFor", [])
        if not any(r["uid"] == pod.uid for r in reserved):
            reserved.append({"resource": "pods", "name": pod.name, "uid": pod.uid})
        return self._store("ResourceClaim", obj)

    async def bind_pod(self, pod: PodRef, node: str) -> None:
        await self._reply()
        current = self.pods.get((pod.namespace, pod.name))
        if current is None or current["metadata"]["uid"] != pod.uid:
            raise BindError(f"pod {pod.namespace}/{pod.name} no longer exists")
        bound = current["spec"].get("nodeName")
        if bound and bound != node:
            raise BindError(f"pod {pod.namespace}/{pod.name} is already bound to {bound}")
        if not bound:
            obj = copy.deepcopy(current)
            obj["spec"]["nodeName"] = node
            self._store("Pod", obj)
        await self._after_write()

    async def release_claim(self, claim: ResourceClaim, pod: PodRef, deallocate: bool) -> dict | None:
        # Rollback is retried by the real binder until it lands; no faults here.
        current = self.claims.get((claim.namespace, claim.name))
        if current is None or current["metadata"]["uid"] != claim.uid:
            return None
        obj = copy.deepcopy(current)
        self._drop_reservation(obj, pod.uid, deallocate)
        if obj == current:  # like the API server, a patch that changes nothing keeps the resourceVersion
            return copy.deepcopy(current)
        return self._store("ResourceClaim", obj)
