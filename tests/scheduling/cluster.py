"""Small builders for cluster objects and an in-process service, shared by the service tests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from typing import Any

import httpx

from extender.api import create_app
from extender.cel.environment import Environment
from extender.config import Config
from extender.local.binder import LocalBinder
from extender.local.cluster import LocalCluster
from extender.metrics import Metrics
from extender.model.kinds import KIND_NAMES
from extender.scheduling.context import SchedulingContext
from extender.state import ClusterState

DRIVER = "gpu.example.com"
SCHEDULER = "dra-extender-scheduler"


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def device_class(name: str = DRIVER, expression: str = f'device.driver == "{DRIVER}"') -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def gpu(name: str, root: str = "pci-0", memory: str = "40Gi") -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"resource.kubernetes.io/pcieRoot": {"string": root}},
        "capacity": {"memory": {"value": memory}},
    }


def node_slice(node_name: str, devices: Iterable[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": list(devices),
        },
    }


def gpus(n: int, roots: int = 1) -> list[dict[str, Any]]:
    return [gpu(f"gpu-{i}", root=f"pci-{i % roots}") for i in range(n)]


def request(
    name: str = "gpu", count: int = 1, device_class_name: str = DRIVER, **extra: Any
) -> dict[str, Any]:
    exactly = {"deviceClassName": device_class_name, "count": count, **extra}
    return {"name": name, "exactly": exactly}


def claim_spec(*requests: dict[str, Any], constraints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests) or [request()]}
    if constraints:
        devices["constraints"] = constraints
    return {"devices": devices}


def claim(name: str, spec: dict[str, Any] | None = None, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec or claim_spec(),
    }


def template(name: str, spec: dict[str, Any] | None = None, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": spec or claim_spec()},
    }


def pod(
    name: str,
    *,
    claims: dict[str, str] | None = None,
    templates: dict[str, str] | None = None,
    scheduler: str | None = SCHEDULER,
    namespace: str = "default",
) -> dict[str, Any]:
    """``claims``/``templates`` map pod claim names to claim/template names."""
    refs = [{"name": k, "resourceClaimName": v} for k, v in (claims or {}).items()]
    refs += [{"name": k, "resourceClaimTemplateName": v} for k, v in (templates or {}).items()]
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "img"}]}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    if refs:
        spec["resourceClaims"] = refs
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def gpu_cluster(nodes: int = 2, per_node: int = 2, roots: int = 1) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [device_class()]
    for i in range(nodes):
        objs.append(node(f"node-{i}"))
        objs.append(node_slice(f"node-{i}", gpus(per_node, roots)))
    return objs


def local_context(objects: Iterable[dict[str, Any]], **config: Any) -> tuple[SchedulingContext, LocalCluster]:
    """A synced local cluster holding ``objects`` and the scheduling context over it (no HTTP)."""
    cfg = replace(Config(), **config)
    state = ClusterState(cfg.feature_gates)
    cluster = LocalCluster(state)
    cluster.load((f"object {i}", obj) for i, obj in enumerate(objects))
    for kind in KIND_NAMES:
        state.mark_synced(kind)
    return SchedulingContext(cfg, state, LocalBinder(cluster), Metrics(), Environment.create()), cluster


class Service:
    """The app over a local cluster, plus handles on its insides for assertions."""

    def __init__(self, objects: Iterable[dict[str, Any]], **config: Any) -> None:
        self.ctx, self.cluster = local_context(objects, **config)
        self.config, self.state = self.ctx.config, self.ctx.state
        self.app = create_app(self.ctx, cluster=self.cluster)

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://extender")

    def run(self, fn: Callable[[httpx.AsyncClient], Awaitable[Any]]) -> Any:
        async def main() -> Any:
            async with self.client() as client:
                return await fn(client)

        return asyncio.run(main())

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any]:
        info = self.state.pod(namespace, name)
        assert info is not None, f"pod {namespace}/{name} not in state"
        return dict(info.raw)

    def node_names(self) -> list[str]:
        return sorted(self.state.nodes)

    def claims(self) -> dict[str, dict[str, Any]]:
        return {c.name: dict(c.raw) for c in self.state.claims.values()}


async def filter_call(client: httpx.AsyncClient, pod_obj: dict[str, Any], names: list[str]) -> dict[str, Any]:
    response = await client.post("/filter", json={"Pod": pod_obj, "Nodes": None, "NodeNames": names})
    assert response.status_code == 200, response.text
    return response.json()


async def bind_call(client: httpx.AsyncClient, pod_obj: dict[str, Any], node_name: str) -> str:
    meta = pod_obj["metadata"]
    body = {
        "PodName": meta["name"],
        "PodNamespace": meta["namespace"],
        "PodUID": meta["uid"],
        "Node": node_name,
    }
    response = await client.post("/bind", json=body)
    assert response.status_code == 200, response.text
    return response.json()["Error"]


async def schedule(
    client: httpx.AsyncClient, pod_obj: dict[str, Any], names: list[str]
) -> tuple[str | None, str]:
    """filter → prioritize → bind like kube-scheduler; returns (node, error or reasons)."""
    result = await filter_call(client, pod_obj, names)
    passed = result["NodeNames"]
    if not passed:
        return None, str({**result["FailedNodes"], **result["FailedAndUnresolvableNodes"]})
    chosen = passed[0]
    if len(passed) > 1:
        response = await client.post("/prioritize", json={"Pod": pod_obj, "NodeNames": passed})
        scores = response.json()
        chosen = max(scores, key=lambda h: h["Score"])["Host"]
    error = await bind_call(client, pod_obj, chosen)
    return (None if error else chosen), error


def allocated_devices(claims: Iterable[dict[str, Any]]) -> list[tuple[str, str, str]]:
    out = []
    for obj in claims:
        allocation = (obj.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or ():
            if not result.get("adminAccess") and not result.get("shareID"):
                out.append((result["driver"], result["pool"], result["device"]))
    return out


class FailingBinding:
    """A binder (``inner``) whose every Binding fails with ``error``: bind rolls back what it
    wrote, or, for a Binding of unknown fate (``BindingUncertain``), leaves it to the settler."""

    def __init__(self, inner: Any, error: Exception) -> None:
        self.inner, self.error = inner, error

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def bind_pod(self, pod_ref: Any, node_name: str, deadline: Any = None) -> None:
        raise self.error

