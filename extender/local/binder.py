"""The Binder for local mode: writes go into the in-memory store like API calls would.

It keeps the API server's rules that matter for correctness: a claim that was deleted or
re-created (different UID) is not written, an allocation is never replaced by a different
one ("allocated elsewhere"), reservedFor holds each pod once and at most 256 entries, and a
pod already bound elsewhere is not re-bound.
"""

from __future__ import annotations

from typing import Any

from extender.local.cluster import LocalCluster
from extender.local.store import ManifestError, clone, now_rfc3339
from extender.model import ResourceClaim
from extender.model.extended import is_extended_claim_of
from extender.model.refs import DELETE_PROTECTION_FINALIZER, RESERVED_FOR_MAX, PodRef
from extender.scheduling.binder import BindError


class LocalBinder:
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster

    def _current(self, claim: ResourceClaim) -> dict[str, Any]:
        held = self.cluster.state.claim(claim.namespace, claim.name)
        if held is None or held.uid != claim.uid:
            raise BindError(f"claim {claim.namespace}/{claim.name} got deleted in the meantime")
        copied: dict[str, Any] = clone(dict(held.raw))
        return copied

    async def write_claim(
        self,
        claim: ResourceClaim,
        allocation: dict[str, Any] | None,
        pod: PodRef,
        deadline: float | None = None,
    ) -> dict[str, Any]:
        # The embedded store answers at once and for certain: the deadline never matters here.
        obj = self._current(claim)
        meta, status = obj["metadata"], obj.setdefault("status", {})
        if meta.get("deletionTimestamp"):
            raise BindError(f"claim {claim.namespace}/{claim.name} got deleted in the meantime")
        if allocation is not None:
            held = status.get("allocation")
            if held is not None and held != allocation:
                raise BindError(
                    f"claim {claim.namespace}/{claim.name} got allocated elsewhere in the meantime"
                )
            finalizers = meta.setdefault("finalizers", [])
            if DELETE_PROTECTION_FINALIZER not in finalizers:
                finalizers.append(DELETE_PROTECTION_FINALIZER)
            status["allocation"] = clone(allocation)
        elif not status.get("allocation"):
            raise BindError(f"claim {claim.namespace}/{claim.name} is not allocated")
        reserved = status.setdefault("reservedFor", [])
        consumer = pod.reservation
        if not any(entry.get("uid") == consumer.uid for entry in reserved):
            if len(reserved) >= RESERVED_FOR_MAX:
                raise BindError(
                    f"claim {claim.namespace}/{claim.name}: reservedFor is full ({RESERVED_FOR_MAX} entries)"
                )
            reserved.append(consumer.entry())
        return self.cluster.write("ResourceClaim", obj)

    async def bind_pod(self, pod: PodRef, node: str, deadline: float | None = None) -> None:
        # Answered at once and for certain, like the claim writes: the deadline never matters.
        held = self.cluster.state.pod(pod.namespace, pod.name)
        if held is None or held.uid != pod.uid:
            raise BindError(f"pod {pod.namespace}/{pod.name} with UID {pod.uid} does not exist")
        if held.node_name:
            if held.node_name == node:
                return  # a retried bind: already done
            raise BindError(f"pod {pod.namespace}/{pod.name} is already bound to node {held.node_name}")
        obj = clone(dict(held.raw))
        obj.setdefault("spec", {})["nodeName"] = node
        conditions = obj.setdefault("status", {}).setdefault("conditions", [])
        conditions[:] = [c for c in conditions if c.get("type") != "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()})
        self.cluster.write("Pod", obj)

    async def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        held = self.cluster.state.pod(namespace, name)
        return None if held is None else clone(dict(held.raw))

    async def read_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        held = self.cluster.state.claim(namespace, name)
        return None if held is None else clone(dict(held.raw))

    async def fence_claim(self, claim: dict[str, Any]) -> dict[str, Any] | None:
        # Every write here gets a fresh resourceVersion, an unchanged one included.
        held = self.cluster.state.claim(
            claim["metadata"].get("namespace") or "default", claim["metadata"]["name"]
        )
        if held is None or held.uid != claim["metadata"].get("uid"):
            return None
        if held.raw["metadata"].get("resourceVersion") != claim["metadata"].get("resourceVersion"):
            raise BindError(f"claim {held.namespace}/{held.name} changed in the meantime")
        return self.cluster.write("ResourceClaim", clone(dict(held.raw)))

    async def release_claim(
        self, claim: ResourceClaim, pod: PodRef, deallocate: bool
    ) -> dict[str, Any] | None:
        try:
            obj = self._current(claim)
        except BindError:
            return None  # gone: nothing left to release
        meta, status = obj["metadata"], obj.setdefault("status", {})
        status["reservedFor"] = [e for e in status.get("reservedFor") or () if e.get("uid") != pod.uid]
        if not status["reservedFor"]:
            del status["reservedFor"]
            if deallocate:
                status.pop("allocation", None)
                finalizers = [f for f in meta.get("finalizers") or () if f != DELETE_PROTECTION_FINALIZER]
                if finalizers:
                    meta["finalizers"] = finalizers
                else:
                    meta.pop("finalizers", None)
        return self.cluster.write("ResourceClaim", obj)

    def _extended_claims(self, pod: PodRef) -> list[dict[str, Any]]:
        return [
            clone(dict(c.raw))
            for c in self.cluster.state.claims.values()
            if c.namespace == pod.namespace and is_extended_claim_of(c.raw, pod.name, pod.uid)
        ]

    async def create_extended_claim(self, body: dict[str, Any], pod: PodRef) -> dict[str, Any]:
        existing = self._extended_claims(pod)
        if existing:
            return existing[0]
        obj = clone(body)
        meta = obj.setdefault("metadata", {})
        prefix = str(meta.get("generateName") or "")
        meta["name"] = self.cluster.store.generate_name("ResourceClaim", pod.namespace, prefix, pod.uid)
        try:
            return self.cluster.apply(obj)
        except (ManifestError, ValueError) as exc:
            raise BindError(
                f"creating the extended-resource claim of pod {pod.namespace}/{pod.name}: {exc}"
            ) from None

    async def delete_extended_claims(self, pod: PodRef) -> list[dict[str, Any]]:
        deleted = []
        for obj in self._extended_claims(pod):
            # Without finalizers the API server removes the object at once.
            obj["metadata"].pop("finalizers", None)
            self.cluster.state.delete("ResourceClaim", obj)
            deleted.append(obj)
        return deleted

    async def patch_pod_status(self, pod: PodRef, status: dict[str, Any]) -> None:
        held = self.cluster.state.pod(pod.namespace, pod.name)
        if held is None or held.uid != pod.uid:
            raise BindError(f"pod {pod.namespace}/{pod.name} with UID {pod.uid} does not exist")
        obj = clone(dict(held.raw))
        obj.setdefault("status", {}).update(clone(status))
        self.cluster.write("Pod", obj)

