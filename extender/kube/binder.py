"""The Binder that writes to a real API server, mirroring the in-tree DynamicResources PreBind.

Per claim, as the plugin's PreBind does: add the delete-protection finalizer with a normal update, then
one status update setting ``allocation`` and appending the pod to ``reservedFor``, guarded by the
resourceVersion; on a conflict re-read, re-validate and retry (5 attempts, like client-go's
DefaultRetry). Then the pod's Binding. Every step is idempotent so that a retry after a lost
reply converges instead of failing or duplicating; every retry follows one :class:`RetryPolicy`.
Blocking client calls run in a private thread pool so that slow writes never starve the event
loop's default executor.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import random
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import kubernetes

from extender.kube.client import MERGE_PATCH, STRATEGIC_MERGE_PATCH, KubeApiError, RawClient
from extender.metrics import Metrics
from extender.model import ResourceClaim
from extender.model.extended import is_extended_claim_of
from extender.model.refs import DELETE_PROTECTION_FINALIZER, RESERVED_FOR_MAX, PodRef, resource_version
from extender.scheduling.binder import NOT_THE_LEADER, BindError, BindingUncertain, WriteUncertain

log = logging.getLogger(__name__)
# Set and removed again by a fence (see _fence_claim): its value is the version fenced off.
FENCE_ANNOTATION = "dra-extender.k8s.io/fenced-resource-version"

T = TypeVar("T")


def _retryable(exc: KubeApiError) -> bool:
    """Conflicts, throttling, server and transport errors may pass on a fresh attempt."""
    return exc.status in (0, 409, 429) or exc.status >= 500


@dataclass(frozen=True, slots=True)
class Attempt:
    number: int  # 0 for the first
    remaining: float | None  # seconds left before the deadline (None: no deadline)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The binder's one way to try again.

    Up to ``attempts`` attempts, the pause before each growing with its number (``delay`` times
    number, plus up to 10 % jitter); none starts after the deadline, none while this replica
    does not lead. An attempt ends the run with its result, with a :class:`BindError` (a
    definite answer), or with a :class:`KubeApiError`: conflicts, throttling, server and
    transport errors are worth another attempt, any other answer ends the run at once.
    """

    attempts: int = 5
    delay: float = 0.01
    is_leader: Callable[[], bool] | None = None

    def run(
        self,
        what: str,
        attempt: Callable[[Attempt], T],
        deadline: float | None = None,
        failure: Callable[[str], BindError] = BindError,
    ) -> T:
        """``attempt`` until it returns; the error that ends a run unsuccessfully is ``failure``
        of a message starting with ``what``."""
        last: KubeApiError | None = None
        tries = 0
        for number in range(self.attempts):
            if number:
                time.sleep(self.delay * (1 + 0.1 * random.random()) * number)
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            if self.is_leader is not None and not self.is_leader():
                raise failure(NOT_THE_LEADER)
            tries += 1
            try:
                return attempt(Attempt(number, remaining))
            except KubeApiError as exc:
                if not _retryable(exc):
                    raise failure(f"{what} failed: {exc}") from exc
                log.info("%s: %s (attempt %d)", what, exc, number + 1)
                last = exc
        if last is None:
            raise failure(f"{what} failed: no time left before the bind deadline")
        raise failure(f"{what} failed after {tries} attempts: {last}")


def _same_allocation(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    # The timestamp is set at write time, so a retried write of the same decision differs only there.
    def strip(x: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in x.items() if k != "allocationTimestamp"}

    return strip(a) == strip(b)


def _plain(value: Any) -> Any:
    """A mutable deep copy of API JSON (the model keeps read-only mappings)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return copy.copy(value)


class KubeBinder:
    def __init__(
        self,
        api_client: kubernetes.client.ApiClient | RawClient,
        *,
        is_leader: Callable[[], bool] | None = None,
        attempts: int = 5,
        retry_delay: float = 0.01,
        request_timeout: float = 10.0,
        workers: int = 16,
        metrics: Metrics | None = None,
    ) -> None:
        if not isinstance(api_client, RawClient):
            api_client = RawClient(api_client, request_timeout, metrics=metrics)
        self._client = api_client
        self._retry = RetryPolicy(attempts, retry_delay, is_leader)
        self._attempts = attempts
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kube-binder")

    async def write_claim(
        self,
        claim: ResourceClaim,
        allocation: dict[str, Any] | None,
        pod: PodRef,
        deadline: float | None = None,
    ) -> dict[str, Any]:
        if deadline is None:
            # The client's own timeout: a RawClient passed in has its own, not request_timeout's.
            deadline = time.monotonic() + self._client.request_timeout * self._attempts
        return await self._run(self._write_claim, claim, allocation, pod, deadline)

    async def read_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._run(self._read_claim, namespace, name)

    async def fence_claim(self, claim: dict[str, Any]) -> dict[str, Any] | None:
        return await self._run(self._fence_claim, claim)

    async def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._run(self._read_pod, namespace, name)

    async def bind_pod(self, pod: PodRef, node: str, deadline: float | None = None) -> None:
        await self._run(self._bind_pod, pod, node, deadline)

    async def release_claim(
        self, claim: ResourceClaim, pod: PodRef, deallocate: bool
    ) -> dict[str, Any] | None:
        return await self._run(self._release_claim, claim, pod, deallocate)

    async def create_extended_claim(self, body: dict[str, Any], pod: PodRef) -> dict[str, Any]:
        return await self._run(self._create_extended_claim, body, pod)

    async def delete_extended_claims(self, pod: PodRef) -> list[dict[str, Any]]:
        return await self._run(self._delete_extended_claims, pod)

    async def patch_pod_status(self, pod: PodRef, status: dict[str, Any]) -> None:
        await self._run(self._patch_pod_status, pod, status)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    # ----- blocking implementations ------------------------------------------------------

    def _write_claim(
        self, claim: ResourceClaim, allocation: dict[str, Any] | None, pod: PodRef, deadline: float
    ) -> dict[str, Any]:
        """Attempts until the deadline; each PUT is one request (no transport-level re-sends).

        Every PUT carries the resourceVersion it was based on. When an attempt ends without a
        definite answer (no reply, or the API server's own timeout), that write may still be
        applied later: from then on every failure is a :class:`WriteUncertain` carrying the
        highest such version, so the caller can tell when the write has become impossible.
        Only a vanished claim ends that doubt here (the PUT names the claim's UID).
        """
        path = _claim_path(claim.namespace, claim.name)
        current = _plain(claim.raw)
        uncertain = 0

        def attempt(at: Attempt) -> dict[str, Any]:
            nonlocal current, uncertain
            assert at.remaining is not None  # the run has a deadline
            timeout = min(self._client.request_timeout, at.remaining)
            try:
                if at.number:
                    current = self._client.request("GET", path, timeout=timeout)
                return self._try_write_claim(path, claim, current, allocation, pod, deadline)
            except _Sent as sent:
                if _maybe_applied(sent.error):
                    uncertain = max(uncertain, sent.resource_version)
                exc = sent.error
            except KubeApiError as err:
                exc = err
            if exc.not_found:
                raise BindError(f"claim {claim.key} got deleted in the meantime") from exc
            raise exc

        return self._retry.run(
            f"writing claim {claim.key}", attempt, deadline, lambda message: _failure(message, uncertain)
        )

    def _read_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._client.request("GET", _claim_path(namespace, name))
        except KubeApiError as exc:
            if exc.not_found:
                return None
            raise BindError(f"reading claim {namespace}/{name} failed: {exc}") from exc

    def _read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._client.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        except KubeApiError as exc:
            if exc.not_found:
                return None
            raise BindError(f"reading pod {namespace}/{name} failed: {exc}") from exc

    def _fence_claim(self, claim: dict[str, Any]) -> dict[str, Any] | None:
        """Two metadata updates: a marker annotation in, then out again.

        An update that changes nothing would not get a new resourceVersion, so the first one
        carries a change; the second takes it back. Either makes stale every request based on
        the version read. A marker left behind by a failed second write is harmless.
        """
        meta = claim.get("metadata") or {}
        path = _claim_path(str(meta.get("namespace")), str(meta.get("name")))
        marked = _plain(claim)
        annotations = marked["metadata"].setdefault("annotations", {})
        annotations[FENCE_ANNOTATION] = str(meta.get("resourceVersion"))
        try:
            fenced = self._client.request("PUT", path, body=marked)
        except KubeApiError as exc:
            if exc.not_found:
                return None
            what = f"fencing claim {meta.get('namespace')}/{meta.get('name')}"
            raise BindError(f"{what} failed: {exc}") from exc
        cleared = _plain(fenced)
        cleared_annotations = cleared["metadata"].get("annotations") or {}
        cleared_annotations.pop(FENCE_ANNOTATION, None)
        if not cleared_annotations:
            cleared["metadata"].pop("annotations", None)
        try:
            return self._client.request("PUT", path, body=cleared)
        except KubeApiError as exc:
            log.info("claim %s/%s: removing the fence marker failed (harmless): %s",
                     meta.get("namespace"), meta.get("name"), exc)
            return fenced

    def _put(self, path: str, body: dict[str, Any], deadline: float) -> dict[str, Any]:
        """One conditional PUT that ends by ``deadline``; a failure says which version it was based on."""
        version = resource_version(body)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise KubeApiError(0, f"PUT {path}: no time left before the bind deadline")
        try:
            return self._client.request(
                "PUT", path, body=body, timeout=min(self._client.request_timeout, remaining)
            )
        except KubeApiError as exc:
            raise _Sent(exc, version) from exc

    def _try_write_claim(
        self,
        path: str,
        claim: ResourceClaim,
        current: dict[str, Any],
        allocation: dict[str, Any] | None,
        pod: PodRef,
        deadline: float,
    ) -> dict[str, Any]:
        meta = current.get("metadata") or {}
        if meta.get("uid") != claim.uid or meta.get("deletionTimestamp"):
            raise BindError(f"claim {claim.key} got deleted in the meantime")
        status = current.setdefault("status", {})
        existing = status.get("allocation")
        reserved = status.get("reservedFor") or []
        if allocation is not None and existing is not None and not _same_allocation(existing, allocation):
            raise BindError(f"claim {claim.key} got allocated elsewhere in the meantime")
        consumer = pod.reservation
        if any(entry.get("uid") == consumer.uid for entry in reserved):
            return current  # an earlier attempt (or another pod of the group) already went through
        if existing is None:
            if allocation is None:
                raise BindError(f"claim {claim.key} is not allocated any more")
            finalizers = meta.get("finalizers") or []
            if DELETE_PROTECTION_FINALIZER not in finalizers:
                # The finalizer must be there before the allocation, or the claim controller may race
                # us to deallocation (kubernetes#124931).
                meta["finalizers"] = [*finalizers, DELETE_PROTECTION_FINALIZER]
                current = self._put(path, current, deadline)
                status = current.setdefault("status", {})
            status["allocation"] = allocation
        if len(reserved) >= RESERVED_FOR_MAX:
            raise BindError(f"claim {claim.key} already has the maximum of {RESERVED_FOR_MAX} consumers")
        status["reservedFor"] = [*reserved, consumer.entry()]
        return self._put(path + "/status", current, deadline)

    def _bind_pod(self, pod: PodRef, node: str, deadline: float | None) -> None:
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding"
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }

        # Set once an attempt got no definite answer: that Binding may be in, or land later,
        # whatever a retry hears.
        unanswered = False

        def attempt(at: Attempt) -> None:
            nonlocal unanswered
            timeout = None if at.remaining is None else min(self._client.request_timeout, at.remaining)
            try:
                self._client.request("POST", path, body=body, timeout=timeout)
            except KubeApiError as exc:
                unanswered = unanswered or _maybe_applied(exc)
                if exc.not_found:
                    raise BindError(f"pod {pod} no longer exists") from exc
                if not exc.conflict:
                    raise
                self._check_already_bound(pod, node, exc)

        what = f"binding pod {pod}"
        try:
            self._retry.run(what, attempt, deadline)
        except BindError as failed:
            if not unanswered:
                raise
            self._settle_unanswered(pod, node, failed)

    def _settle_unanswered(self, pod: PodRef, node: str, failed: BindError) -> None:
        """The last attempts failed, but an earlier one went unanswered: only the pod can tell.

        Bound there: success. Gone, replaced, being deleted or bound elsewhere: the Binding can
        never land, ``failed`` stands. Otherwise the unanswered request may still be applied (the
        API server can hold it up to its request timeout): :class:`BindingUncertain`.
        """
        try:
            current = self._client.request("GET", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}")
        except KubeApiError as exc:
            if exc.not_found:
                raise failed from None
            raise BindingUncertain(
                f"{failed}; an earlier attempt went unanswered and re-reading the pod failed: {exc}"
            ) from exc
        meta, spec = current.get("metadata") or {}, current.get("spec") or {}
        if meta.get("uid") == pod.uid and spec.get("nodeName") == node:
            log.info("binding pod %s: an earlier attempt whose reply was lost went through (%s)", pod, failed)
            return
        if meta.get("uid") != pod.uid or spec.get("nodeName") or meta.get("deletionTimestamp"):
            raise failed
        raise BindingUncertain(f"{failed}; an earlier attempt went unanswered and may still land")

    def _check_already_bound(self, pod: PodRef, node: str, conflict: KubeApiError) -> None:
        """A conflict is success when an earlier attempt (whose reply we lost) bound the pod there."""
        try:
            bound = self._bound_to(pod, node)
        except KubeApiError as exc:
            raise BindError(f"binding pod {pod} failed: {conflict}; re-reading it: {exc}") from exc
        if not bound:
            raise BindError(f"binding pod {pod} to {node} failed: {conflict.message}")

    def _bound_to(self, pod: PodRef, node: str) -> bool:
        """Whether this very pod (same UID) is bound to ``node`` now; raises KubeApiError if unreadable."""
        current = self._client.request("GET", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}")
        uid = (current.get("metadata") or {}).get("uid")
        return uid == pod.uid and (current.get("spec") or {}).get("nodeName") == node

    def _release_claim(self, claim: ResourceClaim, pod: PodRef, deallocate: bool) -> dict[str, Any] | None:
        path = _claim_path(claim.namespace, claim.name) + "/status"
        patch = {
            "metadata": {"uid": claim.uid},
            "status": {"reservedFor": [{"$patch": "delete", "uid": pod.uid}]},
        }
        try:
            current = self._client.request("PATCH", path, body=patch, content_type=STRATEGIC_MERGE_PATCH)
        except KubeApiError as exc:
            if exc.not_found or exc.conflict:
                return None  # the claim is gone or was replaced: nothing of ours is left on it
            raise BindError(f"removing pod {pod.name} from claim {claim.key} failed: {exc}") from exc
        if deallocate:
            return self._deallocate(claim, path, current)
        return current

    def _deallocate(self, claim: ResourceClaim, path: str, current: dict[str, Any]) -> dict[str, Any] | None:
        """Clear an allocation nobody uses any more; stop as soon as someone else holds the claim.

        Returns the claim as last seen, or None when it is gone.
        """
        seen: dict[str, Any] | None = current

        def attempt(at: Attempt) -> dict[str, Any] | None:
            nonlocal seen
            try:
                if at.number:
                    seen = self._client.request("GET", _claim_path(claim.namespace, claim.name))
                assert seen is not None
                status = seen.get("status") or {}
                if (
                    (seen.get("metadata") or {}).get("uid") != claim.uid
                    or status.get("reservedFor")
                    or status.get("allocation") is None
                ):
                    return seen
                cleared = copy.deepcopy(seen)
                for field in ("allocation", "reservedFor", "devices"):
                    (cleared.get("status") or {}).pop(field, None)
                return self._client.request("PUT", path, body=cleared)
            except KubeApiError as exc:
                if exc.not_found:
                    return None
                raise

        return self._retry.run(f"deallocating claim {claim.key}", attempt)

    # ----- the pod's extended-resource claim (DRAExtendedResource), created at bind ----------

    def _extended_claims(self, pod: PodRef) -> list[dict[str, Any]]:
        listed = self._client.request("GET", _claims_path(pod.namespace))
        return [c for c in listed.get("items") or () if is_extended_claim_of(c, pod.name, pod.uid)]

    def _create_extended_claim(self, body: dict[str, Any], pod: PodRef) -> dict[str, Any]:
        def attempt() -> dict[str, Any]:
            # Looked up first on every attempt: a create whose reply was lost must not be repeated.
            existing = self._extended_claims(pod)
            if existing:
                return existing[0]
            return self._client.request("POST", _claims_path(pod.namespace), body=body)

        return self._retry.run(f"creating the extended-resource claim of pod {pod}", lambda _: attempt())

    def _delete_extended_claims(self, pod: PodRef) -> list[dict[str, Any]]:
        what = f"deleting the extended-resource claim of pod {pod}"
        claims = self._retry.run(what, lambda _: self._extended_claims(pod))
        return [obj for obj in (self._delete_claim(c, what) for c in claims) if obj is not None]

    def _delete_claim(self, claim: dict[str, Any], what: str) -> dict[str, Any] | None:
        """Remove our finalizer (a regular update, as upstream), then delete; None if already gone."""
        meta = claim["metadata"]
        path = _claim_path(meta["namespace"], meta["name"])
        current = claim

        def attempt(_: Attempt) -> dict[str, Any] | None:
            nonlocal current
            try:
                finalizers = current["metadata"].get("finalizers") or []
                if DELETE_PROTECTION_FINALIZER in finalizers:
                    unprotected = copy.deepcopy(current)
                    unprotected["metadata"]["finalizers"] = [
                        f for f in finalizers if f != DELETE_PROTECTION_FINALIZER
                    ]
                    current = self._client.request("PUT", path, body=unprotected)
                options = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": meta["uid"]}}
                self._client.request("DELETE", path, body=options)
                return current
            except KubeApiError as exc:
                if exc.not_found:
                    return None
                if exc.conflict:
                    current = self._client.request("GET", path)  # re-read, then try again
                raise

        return self._retry.run(what, attempt)

    def _patch_pod_status(self, pod: PodRef, status: dict[str, Any]) -> None:
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
        # The UID guards against a pod re-created under the same name meanwhile. A JSON merge
        # patch replaces lists whole: an empty nodeAllocatableResourceClaimStatuses clears it.
        patch = {"metadata": {"uid": pod.uid}, "status": status}

        def attempt(_: Attempt) -> None:
            try:
                self._client.request("PATCH", path, body=patch, content_type=MERGE_PATCH)
            except KubeApiError as exc:
                if exc.not_found:
                    raise BindError(f"pod {pod.namespace}/{pod.name} no longer exists") from exc
                raise

        self._retry.run(f"patching the status of pod {pod}", attempt)


class _Sent(Exception):
    """A PUT that was sent and failed, with the resourceVersion it was conditioned on."""

    def __init__(self, error: KubeApiError, resource_version: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.resource_version = resource_version


def _failure(message: str, uncertain: int) -> BindError:
    """Why a claim write stopped; uncertain when some attempt conditioned on version
    ``uncertain`` (0: none) may still be applied."""
    if uncertain:
        return WriteUncertain(message + " (a write may still land; its devices stay held)", uncertain)
    return BindError(message)


def _maybe_applied(exc: KubeApiError) -> bool:
    """No reply, or the API server's own timeout (504): the request may have been, or may yet be,
    applied. Any other answer, errors included, is the server's final word on that request."""
    return exc.status in (0, 504)


def _claims_path(namespace: str) -> str:
    return f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"


def _claim_path(namespace: str, name: str) -> str:
    return f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
