"""The extender beside kube-controller-manager's resourceclaim controller (its stand-in,
tests/apiserver/controller.py, follows v1.37.2): pods that finish, pods replaced under their
name, claims made from templates and deleted again.

The controller runs where the tests call it, so each test also shows what the extender does in
between: a claim of a finished or replaced pod holds its devices until the controller has let
them go, and a pod whose claim is not made yet waits for it.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.state import ClusterState
from tests.apiserver.controller import sync_claims, sync_pods
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer
from tests.kube import objects
from tests.kube.conftest import eventually
from tests.kube.test_extended_resources import RESOURCE
from tests.kube.test_service import NODES, seed
from tests.reliability.harness import (
    CLAIM,
    POD,
    audit,
    cached_allocation,
    extender,
    filter_nodes,
    pod_obj,
    schedule,
)

pytestmark = pytest.mark.anyio

TEMPLATE = BY_KIND["ResourceClaimTemplate"]


def finish(server: ApiServer, name: str, phase: str = "Succeeded") -> None:
    pod = pod_obj(server, name)
    pod["status"] = {**(pod.get("status") or {}), "phase": phase}
    server.store.update(POD, "default", name, pod, "status")


def replace_pod(server: ApiServer, name: str) -> dict[str, Any]:
    """The pod deleted and made again under its name (a StatefulSet's way): a new UID, unbound."""
    old = pod_obj(server, name)
    server.store.delete(POD, "default", name)
    fresh = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
             "spec": {k: v for k, v in old["spec"].items() if k != "nodeName"}}
    return server.store.seed(POD, fresh)


def generated(server: ApiServer, pod: str) -> str:
    (status,) = pod_obj(server, pod)["status"]["resourceClaimStatuses"]
    return str(status["resourceClaimName"])


def seed_templated(server: ApiServer, pods: int) -> None:
    """One device per node (as ``seed``), and pods whose claim comes from a template."""
    seed(server, pods=0)
    server.store.seed(TEMPLATE, objects.claim_template("gpu"))
    for i in range(pods):
        server.store.seed(POD, objects.pod(f"job-{i}", template_name="gpu"))


async def claims_cached(state: ClusterState, *pods: str) -> None:
    """Until the extender has seen the pods' generated claims: before, its answer is the one for
    a claim not made yet, and kube-scheduler retries the pod after its backoff."""
    def seen() -> bool:
        for name in pods:
            held = state.pod("default", name)
            if held is None or "gpu" not in held.claim_statuses:
                return False
            if state.claim("default", held.claim_statuses["gpu"] or "") is None:
                return False
        return True

    await eventually(seen, what="the generated claims cached")


def claim_exists(server: ApiServer, name: str) -> bool:
    return any(c["metadata"]["name"] == name for c in server.store.list(CLAIM, "default")[0])


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
async def test_the_device_of_a_finished_pod_goes_to_the_next_pod_once_the_controller_lets_it_go(
    apiserver: ApiServer, phase: str
) -> None:
    seed(apiserver, pods=3)
    async with extender(apiserver) as (http, state, _ctx):
        first, _ = await schedule(http, apiserver, "pod-0")
        second, _ = await schedule(http, apiserver, "pod-1")
        assert {first, second} == set(NODES)
        assert (await schedule(http, apiserver, "pod-2"))[0] is None
        finish(apiserver, "pod-0", phase)
        await eventually(lambda: state.pod("default", "pod-0").finished, what="the finished pod cached")
        # Its claim still holds the device: only the controller takes it back.
        assert (await schedule(http, apiserver, "pod-2"))[0] is None
        assert sync_claims(apiserver.store) == 1
        await eventually(lambda: not cached_allocation(state, "claim-0"), what="the deallocation cached")
        node, error = await schedule(http, apiserver, "pod-2")
        assert node == first, error
        await audit(apiserver, state)


@pytest.mark.parametrize("controller_first", [True, False], ids=["controller-first", "scheduler-first"])
async def test_a_pod_replaced_under_its_name_gets_its_claim(
    apiserver: ApiServer, controller_first: bool
) -> None:
    seed(apiserver, pods=1)
    async with extender(apiserver) as (http, state, _ctx):
        node, _ = await schedule(http, apiserver, "pod-0")
        old_uid = pod_obj(apiserver, "pod-0")["metadata"]["uid"]
        new_uid = replace_pod(apiserver, "pod-0")["metadata"]["uid"]
        await eventually(lambda: getattr(state.pod("default", "pod-0"), "uid", None) == new_uid,
                         what="the new pod cached")
        if controller_first:
            assert sync_claims(apiserver.store) == 1  # the old pod's reservation goes, and the allocation
            await eventually(lambda: not cached_allocation(state, "claim-0"), what="the deallocation cached")
        again, error = await schedule(http, apiserver, "pod-0")
        assert again is not None, error
        if not controller_first:
            # Still allocated there and reserved for the old pod: the new one shares it, as
            # kube-scheduler would; then the controller drops the old reservation only.
            assert again == node
            reserved = apiserver.store.get(CLAIM, "default", "claim-0")["status"]["reservedFor"]
            assert [r["uid"] for r in reserved] == [old_uid, new_uid]
            assert sync_claims(apiserver.store) == 1
        status = apiserver.store.get(CLAIM, "default", "claim-0")["status"]
        assert [r["uid"] for r in status["reservedFor"]] == [new_uid]
        await audit(apiserver, state)


async def test_a_claim_from_a_template_is_waited_for_used_and_deleted_with_its_finished_pod(
    apiserver: ApiServer,
) -> None:
    seed_templated(apiserver, pods=3)
    async with extender(apiserver) as (http, state, _ctx):
        waiting = await filter_nodes(http, apiserver, "job-0")
        assert waiting["NodeNames"] == []
        assert "ResourceClaim not created yet" in waiting["FailedAndUnresolvableNodes"]["node-a"]
        assert sync_pods(apiserver.store) == 3
        await claims_cached(state, "job-0", "job-1", "job-2")
        first, error = await schedule(http, apiserver, "job-0")
        assert first is not None, error
        assert (await schedule(http, apiserver, "job-1"))[0] is not None
        assert (await schedule(http, apiserver, "job-2"))[0] is None
        claim = generated(apiserver, "job-0")
        finish(apiserver, "job-0", "Failed")
        assert sync_claims(apiserver.store) == 1
        assert not claim_exists(apiserver, claim)  # deallocated, and deleted: its pod is done
        await eventually(lambda: state.claim("default", claim) is None, what="the deletion cached")
        node, error = await schedule(http, apiserver, "job-2")
        assert node == first, error
        await audit(apiserver, state)


async def test_a_generated_claim_deleted_before_its_pod_is_scheduled_is_made_again(
    apiserver: ApiServer,
) -> None:
    seed_templated(apiserver, pods=1)
    sync_pods(apiserver.store)
    lost = generated(apiserver, "job-0")
    async with extender(apiserver) as (http, state, _ctx):
        apiserver.store.delete(CLAIM, "default", lost)
        await eventually(lambda: state.claim("default", lost) is None, what="the deletion cached")
        waiting = await filter_nodes(http, apiserver, "job-0")
        assert waiting["NodeNames"] == [] and "not found" in waiting["FailedAndUnresolvableNodes"]["node-a"]
        assert sync_pods(apiserver.store) == 1
        made = generated(apiserver, "job-0")
        assert made != lost
        await claims_cached(state, "job-0")
        node, error = await schedule(http, apiserver, "job-0")
        assert node is not None, error
        assert apiserver.store.get(CLAIM, "default", made)["status"]["reservedFor"][0]["name"] == "job-0"
        await audit(apiserver, state)


def seed_extended(server: ApiServer, *pods: str) -> None:
    """One device per node, mapped to the extended resource RESOURCE, and pods asking for one."""
    store = server.store
    device_class = objects.device_class()
    device_class["spec"]["extendedResourceName"] = RESOURCE
    store.seed(BY_KIND["DeviceClass"], device_class)
    for name in NODES:
        store.seed(BY_KIND["Node"], objects.node(name))
        store.seed(BY_KIND["ResourceSlice"], objects.resource_slice(name, devices=1))
    for name in pods:
        pod = objects.pod(name)
        pod["spec"]["containers"][0]["resources"] = {"requests": {RESOURCE: "1"}, "limits": {RESOURCE: "1"}}
        store.seed(POD, pod)


def extended_claim(server: ApiServer, pod: str) -> str:
    return str(pod_obj(server, pod)["status"]["extendedResourceClaimStatus"]["resourceClaimName"])


async def test_the_extended_resource_claim_of_a_finished_pod_is_deleted_and_its_device_reused(
    apiserver: ApiServer,
) -> None:
    """The claim the extender makes for a DRA-backed extended resource has the pod as its
    controller: the controller deletes it when the pod is done, as a generated one."""
    seed_extended(apiserver, "a", "b", "c")
    async with extender(apiserver) as (http, state, _ctx):
        first, error = await schedule(http, apiserver, "a")
        assert first is not None, error
        assert (await schedule(http, apiserver, "b"))[0] is not None
        assert (await schedule(http, apiserver, "c"))[0] is None
        made = extended_claim(apiserver, "a")
        finish(apiserver, "a")
        assert sync_claims(apiserver.store) == 1
        assert not claim_exists(apiserver, made)
        await eventually(lambda: state.claim("default", made) is None, what="the deletion cached")
        node, error = await schedule(http, apiserver, "c")
        assert node == first, error
        await audit(apiserver, state)


async def test_a_replaced_pod_gets_an_extended_resource_claim_of_its_own(apiserver: ApiServer) -> None:
    """The old pod's claim is not the new one's (another UID controls it): the new pod gets a
    claim of its own on the other node, and the controller deletes the old one."""
    seed_extended(apiserver, "a")
    async with extender(apiserver) as (http, state, _ctx):
        first, error = await schedule(http, apiserver, "a")
        assert first is not None, error
        old = extended_claim(apiserver, "a")
        new_uid = replace_pod(apiserver, "a")["metadata"]["uid"]
        await eventually(lambda: getattr(state.pod("default", "a"), "uid", None) == new_uid,
                         what="the new pod cached")
        second, error = await schedule(http, apiserver, "a")
        assert second is not None and second != first, error
        made = extended_claim(apiserver, "a")
        assert made != old
        assert sync_claims(apiserver.store) == 1
        assert not claim_exists(apiserver, old) and claim_exists(apiserver, made)
        await audit(apiserver, state)
