"""Pods asking for DRA-backed extended resources, through the HTTP app on a local cluster."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from extender.model.extended import EXTENDED_RESOURCE_CLAIM_ANNOTATION
from extender.model.refs import PodRef
from extender.scheduling.binder import BindError
from tests.scheduling.cluster import (
    DRIVER,
    Service,
    allocated_devices,
    bind_call,
    claim,
    device_class,
    filter_call,
    gpus,
    node,
    node_slice,
    pod,
    schedule,
)

RESOURCE = "example.com/gpu"


def mapped_class(name: str = DRIVER, resource: str = RESOURCE) -> dict[str, Any]:
    obj = device_class(name)
    obj["spec"]["extendedResourceName"] = resource
    return obj


def extended_pod(name: str, requests: dict[str, str], init: dict[str, str] | None = None) -> dict[str, Any]:
    obj = pod(name)
    obj["spec"]["containers"][0]["resources"] = {"requests": dict(requests)}
    if init:
        obj["spec"]["initContainers"] = [{"name": "setup", "image": "img", "resources": {"requests": init}}]
    return obj


def test_node_listing_the_resource_is_left_to_the_device_plugin():
    plugin_node = node("plugin")
    plugin_node["status"] = {"allocatable": {RESOURCE: "2"}}
    svc = Service([mapped_class(), plugin_node, extended_pod("p", {RESOURCE: "1"})])
    p = svc.pod("p")

    async def flow(client):
        result = await filter_call(client, p, ["plugin"])
        return result, await bind_call(client, p, "plugin")

    result, error = svc.run(flow)
    assert result["NodeNames"] == ["plugin"]
    assert error == ""
    assert svc.claims() == {}  # nothing for DRA to do there


def test_resource_no_class_maps_and_no_node_lists_is_left_to_kube_scheduler():
    svc = Service([mapped_class(), node("bare"), extended_pod("p", {"vendor.io/fpga": "1"})])
    result = svc.run(lambda c: filter_call(c, svc.pod("p"), ["bare"]))
    assert result["NodeNames"] == ["bare"]  # NodeResourcesFit rejects it there, not us


def test_unmapped_resource_next_to_a_mapped_one_cannot_fit_where_not_listed():
    svc = Service([mapped_class(), node("bare"), extended_pod("p", {RESOURCE: "1", "vendor.io/fpga": "1"})])
    result = svc.run(lambda c: filter_call(c, svc.pod("p"), ["bare"]))
    assert result["NodeNames"] == []
    assert result["FailedAndUnresolvableNodes"]["bare"].startswith("cannot fit resource vendor.io/fpga")


def dra_node(name: str, devices: int) -> list[dict[str, Any]]:
    return [node(name), node_slice(name, gpus(devices))]


def test_pod_gets_a_created_claim_with_allocation_reservation_and_status_mapping():
    objs = [mapped_class(), *dra_node("n", 4)]
    objs.append(extended_pod("p", {"cpu": "1", RESOURCE: "2"}, init={RESOURCE: "3"}))
    svc = Service(objs)
    p = svc.pod("p")
    node_name, error = svc.run(lambda c: schedule(c, p, ["n"]))
    assert (node_name, error) == ("n", "")

    [(name, written)] = svc.claims().items()
    assert name.startswith("p-extended-resources-") and len(name) == len("p-extended-resources-") + 5
    meta = written["metadata"]
    assert meta["generateName"] == "p-extended-resources-"
    assert meta["annotations"] == {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}
    assert meta["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": p["metadata"]["uid"], "controller": True}
    ]
    assert "resource.kubernetes.io/delete-protection" in meta["finalizers"]
    # i: init containers first; j: index among the container's sorted request names (cpu first).
    # The init container needs 3: main's 2 (main has not started yet) and 1 of its own.
    assert written["spec"]["devices"]["requests"] == [
        {"name": "container-0-request-0",
         "exactly": {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1}},
        {"name": "container-1-request-1",
         "exactly": {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 2}},
    ]
    results = written["status"]["allocation"]["devices"]["results"]
    assert sorted(r["request"] for r in results) == [
        "container-0-request-0", "container-1-request-1", "container-1-request-1"
    ]
    assert len({r["device"] for r in results}) == 3
    uid = p["metadata"]["uid"]
    assert written["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": uid}]

    bound = svc.pod("p")
    assert bound["spec"]["nodeName"] == "n"
    assert bound["status"]["extendedResourceClaimStatus"] == {
        "resourceClaimName": name,
        "requestMappings": [
            {"containerName": "main", "resourceName": RESOURCE, "requestName": "container-1-request-1"},
            {"containerName": "setup", "resourceName": RESOURCE, "requestName": "container-1-request-1"},
            {"containerName": "setup", "resourceName": RESOURCE, "requestName": "container-0-request-0"},
        ],
    }


def test_implicit_class_name_is_served_too():
    resource = f"deviceclass.resource.kubernetes.io/{DRIVER}"
    svc = Service([device_class(), *dra_node("n", 1), extended_pod("p", {resource: "1"})])
    node_name, error = svc.run(lambda c: schedule(c, svc.pod("p"), ["n"]))
    assert (node_name, error) == ("n", "")
    [written] = svc.claims().values()
    assert written["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == DRIVER


def test_node_without_enough_devices_fails_with_the_allocator_reason():
    svc = Service([mapped_class(), *dra_node("small", 1), extended_pod("p", {RESOURCE: "2"})])
    result = svc.run(lambda c: filter_call(c, svc.pod("p"), ["small"]))
    assert result["NodeNames"] == []
    reason = {**result["FailedNodes"], **result["FailedAndUnresolvableNodes"]}["small"]
    assert reason.startswith("claim default/<extended-resources>, request container-0-request-0: 1 of 2")
    assert svc.claims() == {}


@pytest.mark.parametrize(("policy", "best"), [("binpack", "plugin"), ("spread", "dra")])
def test_plugin_node_and_dra_node_both_pass_and_are_ranked_by_the_devices_left(policy, best):
    plugin_node = node("plugin")
    plugin_node["status"] = {"allocatable": {RESOURCE: "2"}}
    objs = [mapped_class(), plugin_node, *dra_node("dra", 2), extended_pod("p", {RESOURCE: "1"})]
    svc = Service(objs, score_policy=policy)
    p = svc.pod("p")

    async def flow(client):
        passed = (await filter_call(client, p, ["plugin", "dra"]))["NodeNames"]
        scores = (await client.post("/prioritize", json={"Pod": p, "NodeNames": passed})).json()
        return passed, {s["Host"]: s["Score"] for s in scores}

    passed, scores = svc.run(flow)
    assert sorted(passed) == ["dra", "plugin"]
    # The DRA node keeps one free device after the allocation, the plugin node none of DRA's.
    assert max(scores, key=scores.__getitem__) == best


def test_extended_and_user_claims_never_share_a_device():
    objs = [mapped_class(), *dra_node("n", 3), claim("c")]
    user = extended_pod("p", {RESOURCE: "2"})
    user["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "c"}]
    objs += [user, extended_pod("q", {RESOURCE: "1"})]
    svc = Service(objs)

    async def flow(client):
        first = await schedule(client, svc.pod("p"), ["n"])
        second = await filter_call(client, svc.pod("q"), ["n"])
        return first, second

    first, second = svc.run(flow)
    assert first == ("n", "")
    devices = allocated_devices(svc.claims().values())
    assert len(devices) == 3 and len(set(devices)) == 3  # 1 for the user claim, 2 for the extended one
    assert second["NodeNames"] == []  # nothing left for q


def test_failed_binding_deletes_the_created_claim_and_frees_its_devices():
    svc = Service([mapped_class(), *dra_node("n", 1), extended_pod("p", {RESOURCE: "1"})])
    p = svc.pod("p")
    original = svc.ctx.binder.bind_pod

    async def refuse(ref: PodRef, node_name: str, deadline: float | None = None) -> None:
        raise BindError("binding refused")

    svc.ctx.binder.bind_pod = refuse  # type: ignore[method-assign]
    error = svc.run(lambda c: schedule(c, p, ["n"]))[1]
    assert "binding refused" in error
    assert svc.claims() == {}

    # The only device is free again: the retry gets it.
    svc.ctx.binder.bind_pod = original  # type: ignore[method-assign]
    assert svc.run(lambda c: schedule(c, p, ["n"])) == ("n", "")
    assert len(svc.claims()) == 1


def test_leftover_unallocated_claim_makes_the_pod_unschedulable_with_its_name():
    svc = Service([mapped_class(), *dra_node("n", 1), extended_pod("p", {RESOURCE: "1"})])
    p = svc.pod("p")
    leftover = claim("p-extended-resources-abcde")
    leftover["metadata"]["annotations"] = {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}
    leftover["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": p["metadata"]["uid"], "controller": True}
    ]
    svc.cluster.apply(leftover)
    result = svc.run(lambda c: filter_call(c, p, ["n"]))
    reason = result["FailedAndUnresolvableNodes"]["n"]
    assert reason.startswith("cannot schedule extended resource claim default/p-extended-resources-abcde")


def test_claim_left_allocated_by_an_earlier_attempt_is_adopted_not_duplicated():
    # The Binding never answers: bind gives up and leaves the claims reserved for the retry.
    svc = Service([mapped_class(), *dra_node("n", 2), extended_pod("p", {RESOURCE: "1"})], bind_timeout_s=1.0)
    p = svc.pod("p")
    original = svc.ctx.binder.bind_pod

    async def no_answer(ref: PodRef, node_name: str, deadline: float | None = None) -> None:
        await asyncio.Event().wait()

    svc.ctx.binder.bind_pod = no_answer  # type: ignore[method-assign]
    error = svc.run(lambda c: bind_call(c, p, "n"))
    assert "stay reserved for the retry" in error
    [first] = svc.claims()

    svc.ctx.binder.bind_pod = original  # type: ignore[method-assign]
    assert svc.run(lambda c: schedule(c, svc.pod("p"), ["n"])) == ("n", "")
    assert list(svc.claims()) == [first]
    assert svc.pod("p")["status"]["extendedResourceClaimStatus"]["resourceClaimName"] == first


def test_a_binding_failure_during_a_retry_deletes_the_adopted_claim():
    """The claim created by the first attempt (which waits for the device's binding conditions)
    is the retry's by adoption: when the binding fails while the retry runs (here: as it records
    the claim in the pod's status, which the first attempt's record had lost), the retry deletes
    it all the same, for a fresh attempt to create anew."""
    device = {**gpus(1)[0], "bindingConditions": ["attached"], "bindingFailureConditions": ["broken"]}
    svc = Service([mapped_class(), node("n"), node_slice("n", [device]), extended_pod("p", {RESOURCE: "1"})])
    assert "waiting for binding conditions" in svc.run(lambda c: bind_call(c, svc.pod("p"), "n"))
    [(name, created)] = svc.claims().items()
    lost = svc.pod("p")
    del lost["status"]["extendedResourceClaimStatus"]
    svc.cluster.write("Pod", lost)
    record = svc.ctx.binder.patch_pod_status

    async def record_as_the_binding_fails(ref: PodRef, status: dict[str, Any]) -> None:
        created["status"]["devices"] = [{"driver": DRIVER, "pool": "n", "device": device["name"],
                                         "conditions": [{"type": "broken", "status": "True"}]}]
        svc.cluster.write("ResourceClaim", created)
        await record(ref, status)

    svc.ctx.binder.patch_pod_status = record_as_the_binding_fails  # type: ignore[method-assign]
    error = svc.run(lambda c: bind_call(c, svc.pod("p"), "n"))
    assert "binding failed" in error and "broken" in error
    assert name not in svc.claims()
    assert not svc.state.inuse.devices


def test_preempting_a_victim_frees_the_devices_of_its_extended_resource_claim():
    objs = [mapped_class(), *dra_node("n", 1)]
    objs += [extended_pod("victim", {RESOURCE: "1"}), extended_pod("newcomer", {RESOURCE: "1"})]
    svc = Service(objs)

    async def flow(client):
        assert await schedule(client, svc.pod("victim"), ["n"]) == ("n", "")
        victims = {"Pods": [{"UID": svc.pod("victim")["metadata"]["uid"]}], "NumPDBViolations": 0}
        useless = {"Pods": [{"UID": "someone-else"}], "NumPDBViolations": 0}
        kept = []
        for candidate in (victims, useless):
            body = {"Pod": svc.pod("newcomer"), "NodeNameToMetaVictims": {"n": candidate}}
            kept.append(list((await client.post("/preempt", json=body)).json()["NodeNameToMetaVictims"]))
        return kept

    assert svc.run(flow) == [["n"], []]


def test_adopted_claim_is_recorded_in_the_pod_status_when_the_earlier_bind_did_not():
    svc = Service([mapped_class(), *dra_node("n", 2), extended_pod("p", {"cpu": "1", RESOURCE: "1"})])
    p = svc.pod("p")
    uid = p["metadata"]["uid"]
    earlier = claim("p-extended-resources-xyz12", {"devices": {"requests": [
        {"name": "container-0-request-1", "exactly": {"deviceClassName": DRIVER, "count": 1}}]}})
    earlier["metadata"]["annotations"] = {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}
    earlier["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": uid, "controller": True}
    ]
    earlier["status"] = {
        "allocation": {"devices": {"results": [
            {"request": "container-0-request-1", "driver": DRIVER, "pool": "n", "device": "gpu-1"}]}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": uid}],
    }
    svc.cluster.apply(earlier)

    assert svc.run(lambda c: schedule(c, p, ["n"])) == ("n", "")
    assert list(svc.claims()) == ["p-extended-resources-xyz12"]  # nothing new created or allocated
    assert svc.pod("p")["status"]["extendedResourceClaimStatus"] == {
        "resourceClaimName": "p-extended-resources-xyz12",
        "requestMappings": [
            {"containerName": "main", "resourceName": RESOURCE, "requestName": "container-0-request-1"}
        ],
    }


def test_deleting_the_pod_deletes_its_extended_resource_claim_and_frees_the_devices():
    svc = Service([mapped_class(), *dra_node("n", 1), extended_pod("p", {RESOURCE: "1"}),
                   extended_pod("q", {RESOURCE: "1"})])
    assert svc.run(lambda c: schedule(c, svc.pod("p"), ["n"])) == ("n", "")
    assert len(svc.claims()) == 1
    assert svc.cluster.delete("Pod", "default", "p")
    assert svc.claims() == {}  # the local claim controller: owned by the pod, gone with it
    assert svc.run(lambda c: schedule(c, svc.pod("q"), ["n"])) == ("n", "")
