"""End to end: DRANodeAllocatableResources with the Kubernetes source and binder.

The test API server validates the pod's status against the 1.37 schema, where
``nodeAllocatableResourceClaimStatuses`` is a list merged by claim name under a strategic merge
patch: clearing it needs a JSON merge patch with an empty list (upstream's Unreserve).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
import pytest

from extender.api import create_app
from extender.cel.environment import Environment
from extender.config import Config
from extender.kube.binder import KubeBinder
from extender.kube.client import RawClient
from extender.kube.source import KubeSource
from extender.metrics import Metrics
from extender.model import Features
from extender.scheduling.context import SchedulingContext
from extender.state import ClusterState
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer
from tests.kube import objects
from tests.kube.conftest import eventually

pytestmark = pytest.mark.anyio

ON = Features.parse("DRANodeAllocatableResources=true", "1.37")
STATUS = [
    {
        "resourceClaimName": "c",
        "containers": ["main"],
        "mapping": [{"name": "cpu", "quantity": "2"}],
        "overhead": [{"name": "memory", "perPod": "512Mi"}],
    }
]


def seed(server: ApiServer) -> dict[str, Any]:
    store = server.store
    store.seed(BY_KIND["DeviceClass"], objects.device_class())
    node = objects.node("node-a")
    node["status"] = {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
    store.seed(BY_KIND["Node"], node)
    slice_ = objects.resource_slice("node-a", devices=2)
    for device in slice_["spec"]["devices"]:
        device["nodeAllocatableResources"] = {
            "cpu": {"mapping": {"deviceMultiplier": "2"}},
            "memory": {"overhead": {"perPod": "512Mi"}},
        }
    store.seed(BY_KIND["ResourceSlice"], slice_)
    store.seed(BY_KIND["ResourceClaim"], objects.claim("c"))
    pod = objects.pod("p", claim_name="c")
    pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1"}
    return store.seed(BY_KIND["Pod"], pod)


@contextlib.asynccontextmanager
async def extender(server: ApiServer) -> AsyncIterator[httpx.AsyncClient]:
    client = RawClient(server.api_client())
    state = ClusterState(ON)
    cfg = replace(Config(kube=True), feature_gates=ON)
    ctx = SchedulingContext(
        cfg, state, KubeBinder(client, retry_delay=0.001), Metrics(), Environment.create()
    )
    app = create_app(ctx, background=[KubeSource(client, state).run])
    async with app.router.lifespan_context(app), httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://extender"
    ) as http:
        await eventually(lambda: state.synced, what="extender ready")
        yield http


async def filter_and_bind(http: httpx.AsyncClient, pod: dict[str, Any]) -> tuple[list[str], str]:
    result = (await http.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": ["node-a"]})).json()
    body = {"PodName": "p", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"], "Node": "node-a"}
    return result["NodeNames"], (await http.post("/bind", json=body)).json()["Error"]


def pod_status(server: ApiServer) -> dict[str, Any]:
    return server.store.get(BY_KIND["Pod"], "default", "p").get("status") or {}


async def test_bind_records_the_claims_node_resources_in_the_pod_status(apiserver: ApiServer) -> None:
    pod = seed(apiserver)
    async with extender(apiserver) as http:
        assert await filter_and_bind(http, pod) == (["node-a"], "")
    assert pod_status(apiserver)["nodeAllocatableResourceClaimStatuses"] == STATUS
    assert apiserver.store.get(BY_KIND["Pod"], "default", "p")["spec"]["nodeName"] == "node-a"


async def test_a_failed_binding_clears_the_recorded_node_resources(apiserver: ApiServer) -> None:
    pod = seed(apiserver)
    async with extender(apiserver) as http:
        apiserver.faults.fail("create", "pods", 403, subresource="binding")
        passed, error = await filter_and_bind(http, pod)
    assert passed == ["node-a"]
    assert "binding pod default/p to node node-a" in error
    assert pod_status(apiserver).get("nodeAllocatableResourceClaimStatuses") in (None, [])
    claim = apiserver.store.get(BY_KIND["ResourceClaim"], "default", "c")
    assert "allocation" not in (claim.get("status") or {})
