"""End to end: DRA-backed extended resources with the Kubernetes source and binder on the test API server.

The server validates every object against the official schema (which knows
``extendedResourceClaimStatus``) and records every call, so the tests check what a real cluster
would hold afterwards and which writes it took to get there.
"""

from __future__ import annotations

import asyncio
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
from extender.model.refs import PodRef
from extender.scheduling.binder import BindError
from extender.scheduling.context import SchedulingContext
from extender.state import ClusterState
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer, Call
from tests.kube import objects
from tests.kube.conftest import eventually

pytestmark = pytest.mark.anyio

RESOURCE = "example.com/gpu"
ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


def seed(server: ApiServer, allocatable: dict[str, str] | None = None) -> dict[str, Any]:
    """One node with two devices and a class mapping RESOURCE; returns the pod asking for one."""
    store = server.store
    device_class = objects.device_class()
    device_class["spec"]["extendedResourceName"] = RESOURCE
    store.seed(BY_KIND["DeviceClass"], device_class)
    node = objects.node("node-a")
    if allocatable:
        node["status"] = {"allocatable": allocatable}
    store.seed(BY_KIND["Node"], node)
    store.seed(BY_KIND["ResourceSlice"], objects.resource_slice("node-a", devices=2))
    pod = objects.pod("p")
    pod["spec"]["containers"][0]["resources"] = {"requests": {RESOURCE: "1"}, "limits": {RESOURCE: "1"}}
    return store.seed(BY_KIND["Pod"], pod)


@contextlib.asynccontextmanager
async def extender(server: ApiServer, **config: Any) -> AsyncIterator[tuple[httpx.AsyncClient, ClusterState]]:
    client = RawClient(server.api_client())
    state = ClusterState()
    binder = KubeBinder(client, retry_delay=0.001)
    cfg = replace(Config(kube=True), **config)
    ctx = SchedulingContext(cfg, state, binder, Metrics(), Environment.create())
    app = create_app(ctx, background=[KubeSource(client, state).run])
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://extender") as http:
            await eventually(lambda: state.synced, what="extender ready")
            yield http, state


async def filter_and_bind(http: httpx.AsyncClient, pod: dict[str, Any]) -> tuple[list[str], str]:
    result = (await http.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": ["node-a"]})).json()
    if not result["NodeNames"]:
        return [], str(result["FailedAndUnresolvableNodes"])
    body = {"PodName": "p", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"], "Node": "node-a"}
    return result["NodeNames"], (await http.post("/bind", json=body)).json()["Error"]


def claims(server: ApiServer) -> list[dict[str, Any]]:
    return server.store.list(BY_KIND["ResourceClaim"], "default")[0]


def write_calls(server: ApiServer) -> list[tuple[str, str, str | None]]:
    def short(c: Call) -> tuple[str, str, str | None]:
        return (c.verb, c.resource, c.subresource)

    return [short(c) for c in server.writes() if c.resource != "events"]


async def test_pod_gets_a_claim_allocation_status_mapping_and_binding(apiserver: ApiServer) -> None:
    pod = seed(apiserver)
    uid = pod["metadata"]["uid"]
    async with extender(apiserver) as (http, _):
        before = len(apiserver.writes())
        assert await filter_and_bind(http, pod) == (["node-a"], "")
        calls = apiserver.writes()[before:]

    [claim] = claims(apiserver)
    name = claim["metadata"]["name"]
    assert name.startswith("p-extended-resources-")
    assert claim["metadata"]["generateName"] == "p-extended-resources-"
    assert claim["metadata"]["annotations"] == {ANNOTATION: "true"}
    assert claim["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": uid, "controller": True}
    ]
    assert claim["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    assert claim["spec"] == {"devices": {"requests": [{"name": "container-0-request-0", "exactly": {
        "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}}]}}
    allocation = claim["status"]["allocation"]
    assert allocation["devices"]["results"] == [
        {"request": "container-0-request-0", "driver": objects.DRIVER, "pool": "node-a", "device": "gpu-0"}
    ]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": uid}]

    held = apiserver.store.get(BY_KIND["Pod"], "default", "p")
    assert held["spec"]["nodeName"] == "node-a"
    assert held["status"]["extendedResourceClaimStatus"] == {
        "resourceClaimName": name,
        "requestMappings": [{"containerName": "main", "resourceName": RESOURCE,
                             "requestName": "container-0-request-0"}],
    }
    # create, finalizer (update), allocation + reservedFor (status), pod status, Binding.
    assert [(c.verb, c.resource, c.subresource) for c in calls if c.resource != "events"] == [
        ("create", "resourceclaims", None),
        ("update", "resourceclaims", None),
        ("update", "resourceclaims", "status"),
        ("patch", "pods", "status"),
        ("create", "pods", "binding"),
    ]


async def test_node_listing_the_resource_is_left_to_the_device_plugin(apiserver: ApiServer) -> None:
    pod = seed(apiserver, allocatable={"cpu": "4", RESOURCE: "2"})
    async with extender(apiserver) as (http, _):
        before = len(write_calls(apiserver))
        assert await filter_and_bind(http, pod) == (["node-a"], "")
        assert write_calls(apiserver)[before:] == [("create", "pods", "binding")]
    assert claims(apiserver) == []


async def test_failure_after_the_claim_was_created_deletes_it(apiserver: ApiServer) -> None:
    pod = seed(apiserver)
    async with extender(apiserver) as (http, state):
        apiserver.faults.fail("create", "pods", 403, subresource="binding")
        passed, error = await filter_and_bind(http, pod)
        assert passed == ["node-a"]
        assert "binding pod default/p to node node-a" in error
        assert claims(apiserver) == []
        assert apiserver.store.get(BY_KIND["Pod"], "default", "p")["spec"].get("nodeName") is None
        await eventually(lambda: not state.claims, what="the deleted claim to leave the cache")
        # The devices are free again: the next attempt allocates and binds.
        assert await filter_and_bind(http, pod) == (["node-a"], "")
    assert len(claims(apiserver)) == 1


async def test_failed_status_patch_rolls_back_the_created_claim(apiserver: ApiServer) -> None:
    pod = seed(apiserver)
    async with extender(apiserver) as (http, _):
        apiserver.faults.fail("patch", "pods", 422, subresource="status")
        _, error = await filter_and_bind(http, pod)
        assert "in the status of pod p" in error
    assert claims(apiserver) == []


async def test_retried_bind_reuses_the_claim_instead_of_creating_a_second(apiserver: ApiServer) -> None:
    pod = seed(apiserver)
    # Generous: the claim create, finalizer, status and pod-status writes before the held Binding
    # must beat the deadline even on a loaded CI machine.
    async with extender(apiserver, bind_timeout_s=3.0) as (http, state):
        release = apiserver.faults.hold("create", "pods", subresource="binding")
        try:
            _, error = await filter_and_bind(http, pod)
        finally:
            release.set()
        assert "stay reserved for the retry" in error
        [first] = claims(apiserver)
        await eventually(lambda: apiserver.store.get(BY_KIND["Pod"], "default", "p")["spec"].get("nodeName"),
                         what="the held Binding to land")
        # kube-scheduler retries the bind (it never saw the first one succeed).
        body = {"PodName": "p", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"], "Node": "node-a"}
        await eventually(lambda: state.pod("default", "p").node_name, what="the cache to see the binding")
        assert (await http.post("/bind", json=body)).json()["Error"] == ""
    assert [c["metadata"]["name"] for c in claims(apiserver)] == [first["metadata"]["name"]]


async def test_binder_create_is_idempotent_per_pod(apiserver: ApiServer, client: RawClient) -> None:
    pod = seed(apiserver)
    ref = PodRef("default", "p", pod["metadata"]["uid"])
    binder = KubeBinder(client, retry_delay=0.001)
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"generateName": "p-extended-resources-", "namespace": "default",
                         "annotations": {ANNOTATION: "true"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                                              "uid": ref.uid, "controller": True}]},
            "spec": {"devices": {"requests": []}}}
    first = await binder.create_extended_claim(body, ref)
    # A lost reply: the retry finds the claim instead of creating another.
    assert (await binder.create_extended_claim(body, ref))["metadata"]["uid"] == first["metadata"]["uid"]
    deleted = await binder.delete_extended_claims(ref)
    assert [d["metadata"]["uid"] for d in deleted] == [first["metadata"]["uid"]]
    assert claims(apiserver) == []
    assert await binder.delete_extended_claims(ref) == []
    binder.close()


def extended_claim_body(ref: PodRef) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"generateName": "p-extended-resources-", "namespace": "default",
                         "annotations": {ANNOTATION: "true"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                                              "uid": ref.uid, "controller": True}]},
            "spec": {"devices": {"requests": []}}}


async def protected_extended_claim(server: ApiServer, binder: KubeBinder, ref: PodRef) -> dict[str, Any]:
    """The pod's extended-resource claim as a bind leaves it: with the delete-protection finalizer."""
    created = await binder.create_extended_claim(extended_claim_body(ref), ref)
    created["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    return server.store.update(BY_KIND["ResourceClaim"], "default", created["metadata"]["name"], created)


@pytest.mark.parametrize("refusal", [500, 409])
async def test_binder_delete_removes_the_finalizer_then_the_claim_even_after_a_refused_update(
    apiserver: ApiServer, client: RawClient, refusal: int
) -> None:
    """A finalizer left on it would leave the claim terminating for ever, its devices counted.
    A 500 is tried again with the claim as listed, a 409 after reading it again."""
    pod = seed(apiserver)
    ref = PodRef("default", "p", pod["metadata"]["uid"])
    binder = KubeBinder(client, retry_delay=0.001)
    protected = await protected_extended_claim(apiserver, binder, ref)
    apiserver.faults.fail("update", "resourceclaims", refusal, times=1)
    deleted = await binder.delete_extended_claims(ref)
    assert [d["metadata"]["uid"] for d in deleted] == [protected["metadata"]["uid"]]
    assert not deleted[0]["metadata"].get("finalizers")
    assert claims(apiserver) == []  # gone, not merely terminating
    assert write_calls(apiserver)[-3:] == [("update", "resourceclaims", None)] * 2 + [
        ("delete", "resourceclaims", None)]
    binder.close()


async def test_binder_delete_removes_only_its_own_finalizer(apiserver: ApiServer, client: RawClient) -> None:
    pod = seed(apiserver)
    ref = PodRef("default", "p", pod["metadata"]["uid"])
    binder = KubeBinder(client, retry_delay=0.001)
    protected = await protected_extended_claim(apiserver, binder, ref)
    protected["metadata"]["finalizers"].insert(0, "example.com/keep")
    apiserver.store.update(BY_KIND["ResourceClaim"], "default", protected["metadata"]["name"], protected)
    await binder.delete_extended_claims(ref)
    [left] = claims(apiserver)  # terminating, until the other controller lets it go
    assert left["metadata"]["finalizers"] == ["example.com/keep"] and left["metadata"]["deletionTimestamp"]
    binder.close()


async def test_binder_delete_never_deletes_a_claim_made_since_under_the_same_name(
    apiserver: ApiServer, client: RawClient
) -> None:
    pod = seed(apiserver)
    ref = PodRef("default", "p", pod["metadata"]["uid"])
    binder = KubeBinder(client, retry_delay=0.001)
    listed = await binder.create_extended_claim(extended_claim_body(ref), ref)
    name = listed["metadata"]["name"]
    apiserver.store.delete(BY_KIND["ResourceClaim"], "default", name)
    since = apiserver.store.create(BY_KIND["ResourceClaim"], "default", {**objects.claim(name)})
    what = "deleting the extended-resource claim of pod default/p"
    with pytest.raises(BindError, match=f"^{what} failed.*UID"):
        # The claim as the binder listed it, whose name another claim has taken since.
        await asyncio.to_thread(binder._delete_claim, listed, what)
    assert [c["metadata"]["uid"] for c in claims(apiserver)] == [since["metadata"]["uid"]]
    binder.close()


async def test_binder_delete_that_fails_names_what_failed(apiserver: ApiServer, client: RawClient) -> None:
    pod = seed(apiserver)
    ref = PodRef("default", "p", pod["metadata"]["uid"])
    binder = KubeBinder(client, retry_delay=0.001)
    await protected_extended_claim(apiserver, binder, ref)
    failed = r"^deleting the extended-resource claim of pod default/p failed: .*403"
    apiserver.faults.fail("list", "resourceclaims", 403, times=1)
    with pytest.raises(BindError, match=failed):
        await binder.delete_extended_claims(ref)
    apiserver.faults.fail("delete", "resourceclaims", 403, times=1)
    with pytest.raises(BindError, match=failed):
        await binder.delete_extended_claims(ref)
    binder.close()
