"""End to end: the extender app with the Kubernetes source and binder schedules pods on the test server.

kube-scheduler's part is played by hand: filter with node names, bind to the first passing node,
with the pod JSON as the API server holds it (which is what the scheduler's informer would send).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from extender.api import create_app
from extender.cel.environment import Environment
from extender.cli import _parser, build_app, config_from_args
from extender.config import Config
from extender.kube.binder import KubeBinder
from extender.kube.client import RawClient
from extender.kube.source import KubeSource
from extender.metrics import Metrics
from extender.scheduling.context import SchedulingContext
from extender.state import ClusterState
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer
from tests.kube import objects
from tests.kube.conftest import eventually

pytestmark = pytest.mark.anyio

NODES = ["node-a", "node-b"]


def seed(server: ApiServer, pods: int) -> None:
    store = server.store
    store.seed(BY_KIND["DeviceClass"], objects.device_class())
    for name in NODES:
        store.seed(BY_KIND["Node"], objects.node(name))
        store.seed(BY_KIND["ResourceSlice"], objects.resource_slice(name, devices=1))
    for i in range(pods):
        store.seed(BY_KIND["ResourceClaim"], objects.claim(f"claim-{i}"))
        store.seed(BY_KIND["Pod"], objects.pod(f"pod-{i}", claim_name=f"claim-{i}"))


@contextlib.asynccontextmanager
async def extender(server: ApiServer) -> AsyncIterator[tuple[httpx.AsyncClient, ClusterState]]:
    client = RawClient(server.api_client())
    state = ClusterState()
    binder = KubeBinder(client, retry_delay=0.001)
    ctx = SchedulingContext(Config(kube=True), state, binder, Metrics(), Environment.create())
    app = create_app(ctx, background=[KubeSource(client, state).run])
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://extender") as http:
            async def ready() -> bool:
                return (await http.get("/readyz")).status_code == 200

            await eventually(lambda: state.synced, what="extender ready")
            assert await ready()
            yield http, state


async def schedule(http: httpx.AsyncClient, server: ApiServer,
                   pod_name: str) -> tuple[str | None, dict[str, Any]]:
    pod = server.store.get(BY_KIND["Pod"], "default", pod_name)
    result = (await http.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": NODES})).json()
    if not result["NodeNames"]:
        return None, result
    node = result["NodeNames"][0]
    bound = (await http.post("/bind", json={"PodName": pod_name, "PodNamespace": "default",
                                            "PodUID": pod["metadata"]["uid"], "Node": node})).json()
    assert bound == {"Error": ""}
    return node, result


def claim_status(server: ApiServer, name: str) -> dict[str, Any]:
    return server.store.get(BY_KIND["ResourceClaim"], "default", name).get("status", {})


async def test_pods_are_scheduled_through_the_http_verbs_and_written_to_the_api(apiserver: ApiServer) -> None:
    seed(apiserver, pods=3)
    async with extender(apiserver) as (http, _):
        first, _ = await schedule(http, apiserver, "pod-0")
        second, _ = await schedule(http, apiserver, "pod-1")
        third, rejected = await schedule(http, apiserver, "pod-2")
    assert {first, second} == set(NODES) and third is None
    assert set(rejected["FailedNodes"]) | set(rejected["FailedAndUnresolvableNodes"]) == set(NODES)
    for i, node in enumerate((first, second)):
        pod = apiserver.store.get(BY_KIND["Pod"], "default", f"pod-{i}")
        assert pod["spec"]["nodeName"] == node
        status = claim_status(apiserver, f"claim-{i}")
        consumer = {"resource": "pods", "name": f"pod-{i}", "uid": pod["metadata"]["uid"]}
        assert status["reservedFor"] == [consumer]
        (result,) = status["allocation"]["devices"]["results"]
        assert (result["request"], result["driver"], result["pool"], result["device"]) == \
            ("gpu", objects.DRIVER, node, "gpu-0")
    assert "allocation" not in claim_status(apiserver, "claim-2")


async def test_a_restarted_extender_sees_the_allocations_it_wrote(apiserver: ApiServer) -> None:
    seed(apiserver, pods=3)
    async with extender(apiserver) as (http, _):
        await schedule(http, apiserver, "pod-0")
        await schedule(http, apiserver, "pod-1")
    async with extender(apiserver) as (http, state):
        assert len(state.inuse.devices) == 2
        node, _ = await schedule(http, apiserver, "pod-2")
    assert node is None


async def test_a_failed_claim_write_fails_the_bind_and_leaves_the_pod_unbound(apiserver: ApiServer) -> None:
    seed(apiserver, pods=1)
    async with extender(apiserver) as (http, _):
        pod = apiserver.store.get(BY_KIND["Pod"], "default", "pod-0")
        result = (await http.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": NODES})).json()
        # every one of the binder's 5 attempts fails
        apiserver.faults.fail("update", "resourceclaims", 500, times=5, subresource="status")
        reply = (await http.post("/bind", json={"PodName": "pod-0", "PodNamespace": "default",
                                                "PodUID": pod["metadata"]["uid"],
                                                "Node": result["NodeNames"][0]})).json()
        assert "claim default/claim-0" in reply["Error"]
        assert "nodeName" not in apiserver.store.get(BY_KIND["Pod"], "default", "pod-0")["spec"]
        assert "allocation" not in claim_status(apiserver, "claim-0")
        # once the API recovers, the scheduler's retry succeeds with a fresh allocation
        node, _ = await schedule(http, apiserver, "pod-0")
    assert node in NODES


async def test_a_claim_the_pod_lists_twice_is_written_once(apiserver: ApiServer) -> None:
    store = apiserver.store
    store.seed(BY_KIND["DeviceClass"], objects.device_class())
    for name in NODES:
        store.seed(BY_KIND["Node"], objects.node(name))
        # Room for the claim twice: filter passes either way, the writes of bind tell.
        store.seed(BY_KIND["ResourceSlice"], objects.resource_slice(name, devices=2))
    store.seed(BY_KIND["ResourceClaim"], objects.claim("claim-0"))
    twice = objects.pod("twice")
    twice["spec"]["resourceClaims"] = [{"name": n, "resourceClaimName": "claim-0"} for n in ("a", "b")]
    created = store.create(BY_KIND["Pod"], "default", twice)
    async with extender(apiserver) as (http, _):
        writes_before = len(apiserver.writes())
        node, _ = await schedule(http, apiserver, "twice")
    assert node in NODES
    assert claim_status(apiserver, "claim-0")["reservedFor"] == [
        {"resource": "pods", "name": "twice", "uid": created["metadata"]["uid"]}
    ]
    assert [(c.verb, c.subresource) for c in apiserver.writes()[writes_before:]] == [
        ("update", None), ("update", "status"), ("create", "binding")
    ]


async def test_the_cli_kube_seam_serves_from_a_kubeconfig(apiserver: ApiServer, tmp_path) -> None:
    """``dra-extender serve --kube --kubeconfig …`` as built by the CLI, against the test server."""
    kubeconfig = tmp_path / "kubeconfig"
    apiserver.write_kubeconfig(str(kubeconfig))
    seed(apiserver, pods=1)
    args = _parser().parse_args(["serve", "--kube", "--kubeconfig", str(kubeconfig)])
    app = build_app(config_from_args(args))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://extender") as http:
            async def ready() -> bool:
                return (await http.get("/readyz")).status_code == 200

            deadline = asyncio.get_running_loop().time() + 5
            while not await ready():
                assert asyncio.get_running_loop().time() < deadline, "never became ready"
                await asyncio.sleep(0.05)
            # This replica has just become the leader: its first allocation waits for the takeover
            # (docs/reliability.md, "Handover"), and kube-scheduler retries, as here.
            pod_obj = apiserver.store.get(BY_KIND["Pod"], "default", "pod-0")
            fits = (await http.post("/filter", json={"Pod": pod_obj, "NodeNames": NODES})).json()
            node = fits["NodeNames"][0]
            bind = {"PodName": "pod-0", "PodNamespace": "default", "PodUID": pod_obj["metadata"]["uid"],
                    "Node": node}
            while error := (await http.post("/bind", json=bind)).json()["Error"]:
                assert "took over scheduling" in error, error
                assert asyncio.get_running_loop().time() < deadline + 20, "never bound"
                await asyncio.sleep(0.5)
            # Asked again on the other node only, the pod's allocated claim fits nowhere: the
            # reason reaches the pod as an Event (written in the background).
            pod_obj = apiserver.store.get(BY_KIND["Pod"], "default", "pod-0")
            others = [n for n in NODES if n != node]
            reply = (await http.post("/filter", json={"Pod": pod_obj, "NodeNames": others})).json()
            assert reply["NodeNames"] == []
            def allocation_events() -> list[dict[str, Any]]:
                events = apiserver.store.list(BY_KIND["Event"], "default")[0]
                return [e for e in events if e["reason"] == "FailedDeviceAllocation"]

            while not (events := allocation_events()):
                assert asyncio.get_running_loop().time() < deadline + 30, "no event written"
                await asyncio.sleep(0.05)
    assert apiserver.store.get(BY_KIND["Pod"], "default", "pod-0")["spec"]["nodeName"] == node
    (event,) = events
    assert event["involvedObject"]["name"] == "pod-0"
    assert "no candidate node can allocate" in event["message"]
