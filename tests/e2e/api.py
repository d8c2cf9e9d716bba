"""A small, synchronous client of a real API server for the end-to-end scenarios.

The scenarios read and write plain JSON objects (what the API server stores is the evidence),
so this is a thin layer over httpx: a path for each kind, the verbs the scenarios use, and a
wait loop. It is not the extender's client on purpose: the extender under test must not also
be the judge of what is in the API server.
"""

from __future__ import annotations

import builtins
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

T = TypeVar("T")
Obj = dict[str, Any]


@dataclass(frozen=True)
class Kind:
    """Where objects of one kind live: ``/api/v1`` or ``/apis/<group>/<version>``."""

    prefix: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        path = self.prefix
        if self.namespaced and namespace is not None:
            path += f"/namespaces/{namespace}"
        path += f"/{self.plural}"
        return path + (f"/{name}" if name else "")


_CORE, _RESOURCE = "/api/v1", "/apis/resource.k8s.io/v1"
KINDS: dict[str, Kind] = {
    "Namespace": Kind(_CORE, "namespaces", False),
    "Node": Kind(_CORE, "nodes", False),
    "Pod": Kind(_CORE, "pods", True),
    "Event": Kind(_CORE, "events", True),
    "ServiceAccount": Kind(_CORE, "serviceaccounts", True),
    "ConfigMap": Kind(_CORE, "configmaps", True),
    "DeviceClass": Kind(_RESOURCE, "deviceclasses", False),
    "ResourceSlice": Kind(_RESOURCE, "resourceslices", False),
    "ResourceClaim": Kind(_RESOURCE, "resourceclaims", True),
    "ResourceClaimTemplate": Kind(_RESOURCE, "resourceclaimtemplates", True),
    "ClusterRole": Kind("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": Kind("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": Kind("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": Kind("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "PriorityClass": Kind("/apis/scheduling.k8s.io/v1", "priorityclasses", False),
    "PodDisruptionBudget": Kind("/apis/policy/v1", "poddisruptionbudgets", True),
    "Lease": Kind("/apis/coordination.k8s.io/v1", "leases", True),
}


class ApiError(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"{status}: {text[:500]}")
        self.status = status


class Api:
    """The scenario driver's view of the API server, as the cluster admin."""

    def __init__(self, server: str, ca: Path, cert: Path, key: Path) -> None:
        # An SSLContext, not httpx's `cert=`: httpx 0.28 takes client certificates only this way.
        tls = ssl.create_default_context(cafile=str(ca))
        tls.load_cert_chain(str(cert), str(key))
        self._http = httpx.Client(base_url=server, verify=tls, timeout=30.0)

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, body: Any = None, *, patch: str = "") -> Any:
        headers = {"Content-Type": patch} if patch else None
        try:
            response = self._http.request(method, path, json=body, headers=headers)
        except httpx.TransportError as exc:
            raise ApiError(0, f"{method} {path}: {exc!r}") from None
        if response.status_code >= 300:
            raise ApiError(response.status_code, f"{method} {path}: {response.text}")
        return response.json() if response.content else None

    def ready(self) -> bool:
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    # --- verbs -------------------------------------------------------------------------------

    def create(self, obj: Obj) -> Obj:
        kind = KINDS[obj["kind"]]
        result: Obj = self.request("POST", kind.path(obj["metadata"].get("namespace")), obj)
        return result

    def apply(self, obj: Obj) -> Obj:
        """Create, or replace what is there (the scenarios own every object they name)."""
        try:
            return self.create(obj)
        except ApiError as exc:
            if exc.status != 409:
                raise
        meta = obj["metadata"]
        current = self.get(obj["kind"], meta["name"], meta.get("namespace"))
        meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        result: Obj = self.request("PUT", KINDS[obj["kind"]].path(meta.get("namespace"), meta["name"]), obj)
        return result

    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj:
        result: Obj = self.request("GET", KINDS[kind].path(namespace, name))
        return result

    def find(self, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        try:
            return self.get(kind, name, namespace)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, kind: str, namespace: str | None = None, **params: str) -> list[Obj]:
        query = "&".join(f"{k.replace('_', '')}={v}" for k, v in params.items())
        path = KINDS[kind].path(namespace) + (f"?{query}" if query else "")
        items: list[Obj] = self.request("GET", path)["items"]
        return items

    def patch(
        self,
        kind: str,
        name: str,
        body: Obj,
        namespace: str | None = None,
        subresource: str = "",
        kind_of_patch: str = "merge",
    ) -> Obj:
        path = KINDS[kind].path(namespace, name) + (f"/{subresource}" if subresource else "")
        content_type = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
        }[kind_of_patch]
        result: Obj = self.request("PATCH", path, body, patch=content_type)
        return result

    def delete(self, kind: str, name: str, namespace: str | None = None, grace: int | None = None) -> None:
        body = {"gracePeriodSeconds": grace} if grace is not None else None
        try:
            self.request("DELETE", KINDS[kind].path(namespace, name), body)
        except ApiError as exc:
            if exc.status != 404:
                raise

    def events(self, namespace: str, involved: str) -> builtins.list[Obj]:
        return self.list("Event", namespace, fieldSelector=f"involvedObject.name={involved}")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 0.25) -> T:
    """Poll ``probe`` until it returns something truthy; :class:`TimeoutError` names ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = probe()
        except ApiError as exc:
            if exc.status not in (0, 429, 500, 503, 504):
                raise
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(interval)

