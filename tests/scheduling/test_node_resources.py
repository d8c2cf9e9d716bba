"""DRANodeAllocatableResources through filter, prioritize and bind.

Devices that use node resources (a CPU device's cores, a GPU's per-pod memory overhead) count
against the node's allocatable together with the pod's own requests and the requests of the
pods already on the node; bind records the claims' cost in
``pod.status.nodeAllocatableResourceClaimStatuses``. Upstream: kubernetes/kubernetes
pkg/scheduler/framework/plugins/dynamicresources/nodeallocatabledynamicresources.go and its
test at 0411cc704533 / 0c29b313f7b4 (TestValidateNodeAllocatableDRAClaimSharing,
TestBuildNodeAllocatableDRAInfo).
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

from extender.model import Features
from tests.scheduling.cluster import (
    DRIVER,
    Service,
    bind_call,
    claim,
    claim_spec,
    device_class,
    filter_call,
    node,
    node_slice,
    pod,
    request,
    schedule,
    template,
)

ON = Features.parse("DRANodeAllocatableResources=true", "1.37")
OFF = Features.defaults("1.37")

# Each device adds two CPUs to the pod, plus memory overheads.
USES_NODE = {
    "cpu": {"mapping": {"deviceMultiplier": "2"}},
    "memory": {"overhead": {"perPod": "1Gi", "perContainer": "256Mi"}},
}


def gpu(name: str, uses: dict[str, Any] | None = USES_NODE) -> dict[str, Any]:
    device: dict[str, Any] = {"name": name}
    if uses is not None:
        device["nodeAllocatableResources"] = uses
    return device


def sized_node(name: str, cpu: str = "8", memory: str = "16Gi") -> dict[str, Any]:
    obj = node(name)
    obj["status"] = {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}
    return obj


def cluster(
    cpus: dict[str, str], devices: int = 4, uses: dict[str, Any] | None = USES_NODE
) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [device_class(), template("one-gpu", claim_spec(request(count=1)))]
    for name, cpu in cpus.items():
        objs += [sized_node(name, cpu), node_slice(name, [gpu(f"gpu-{i}", uses) for i in range(devices)])]
    return objs


def worker(name: str, cpu: str = "1", memory: str = "1Gi", **claims: Any) -> dict[str, Any]:
    obj = pod(name, **(claims or {"templates": {"gpu": "one-gpu"}}))
    obj["metadata"]["uid"] = f"{name}-uid"
    container = obj["spec"]["containers"][0]
    container["resources"] = {"requests": {"cpu": cpu, "memory": memory}, "claims": [{"name": "gpu"}]}
    return obj


def generated(obj: dict[str, Any]) -> dict[str, Any]:
    # What the resourceclaim controller does for the template entry.
    name = obj["metadata"]["name"]
    obj["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]}
    return obj


def with_claims(objs: list[dict[str, Any]], *pods: dict[str, Any]) -> list[dict[str, Any]]:
    out = list(objs)
    for p in pods:
        generated(p)
        out.append(p)
        c = claim(f"{p['metadata']['name']}-gpu", claim_spec(request(count=1)))
        c["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": p["metadata"]["name"],
                "uid": p["metadata"]["uid"],
                "controller": True,
            }
        ]
        out.append(c)
    return out


def running(name: str, node_name: str, cpu: str, phase: str = "Running") -> dict[str, Any]:
    obj = pod(name, scheduler=None)
    obj["metadata"]["uid"] = f"{name}-uid"
    obj["spec"]["nodeName"] = node_name
    obj["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
    obj["status"] = {"phase": phase}
    return obj


def test_devices_count_against_the_nodes_cpu_with_the_pods_own_requests():
    # Each pod needs 1 CPU itself and 2 through its device: three fit on 8 CPUs only twice.
    pods = [worker(n) for n in ("a", "b", "c")]
    svc = Service(with_claims(cluster({"node-0": "8"}), *pods), feature_gates=ON)

    async def flow(client):
        return [await schedule(client, svc.pod(n), ["node-0"]) for n in ("a", "b", "c")]

    (a, b, c) = svc.run(flow)
    assert a == ("node-0", "") and b == ("node-0", "")
    assert c[0] is None and "Insufficient cpu" in c[1]


def test_without_the_gate_the_devices_node_resources_are_not_counted():
    pods = [worker(n) for n in ("a", "b", "c")]
    svc = Service(with_claims(cluster({"node-0": "8"}), *pods), feature_gates=OFF)

    async def flow(client):
        return [await schedule(client, svc.pod(n), ["node-0"]) for n in ("a", "b", "c")]

    assert svc.run(flow) == [("node-0", "")] * 3
    assert "nodeAllocatableResourceClaimStatuses" not in svc.pod("a").get("status", {})


def test_bind_records_what_the_claim_costs_the_node():
    svc = Service(with_claims(cluster({"node-0": "8"}), worker("a")), feature_gates=ON)
    assert svc.run(lambda c: schedule(c, svc.pod("a"), ["node-0"])) == ("node-0", "")
    assert svc.pod("a")["status"]["nodeAllocatableResourceClaimStatuses"] == [
        {
            "resourceClaimName": "a-gpu",
            "containers": ["main"],
            "mapping": [{"name": "cpu", "quantity": "2"}],
            "overhead": [{"name": "memory", "perPod": "1Gi", "perContainer": "256Mi"}],
        }
    ]


def test_a_node_too_small_even_when_empty_is_unresolvable_and_a_full_one_is_not():
    objs = with_claims(cluster({"small": "2", "busy": "8"}), worker("a"))
    objs.append(running("hog", "busy", "6"))
    svc = Service(objs, feature_gates=ON)
    result = svc.run(lambda c: filter_call(c, svc.pod("a"), ["small", "busy"]))
    assert result["NodeNames"] == []
    assert result["FailedAndUnresolvableNodes"] == {"small": "Insufficient cpu"}
    assert result["FailedNodes"] == {"busy": "Insufficient cpu"}


def test_finished_pods_free_their_requests():
    objs = with_claims(cluster({"node-0": "8"}), worker("a"))
    objs.append(running("done", "node-0", "6", phase="Succeeded"))
    svc = Service(objs, feature_gates=ON)
    assert svc.run(lambda c: filter_call(c, svc.pod("a"), ["node-0"]))["NodeNames"] == ["node-0"]


def test_a_pod_the_watch_shows_bound_later_counts_from_its_bind_on():
    # Both pass filter; once a is bound, b no longer fits, though the cache has not seen a bound.
    svc = Service(with_claims(cluster({"node-0": "5"}), worker("a"), worker("b")), feature_gates=ON)

    async def flow(client):
        passed = [(await filter_call(client, svc.pod(n), ["node-0"]))["NodeNames"] for n in ("a", "b")]
        return (
            passed,
            await bind_call(client, svc.pod("a"), "node-0"),
            await bind_call(client, svc.pod("b"), "node-0"),
        )

    passed, bound_a, bound_b = svc.run(flow)
    assert passed == [["node-0"], ["node-0"]]
    assert bound_a == ""
    assert "Insufficient cpu" in bound_b
    assert "nodeAllocatableResourceClaimStatuses" not in svc.pod("b").get("status", {})


def test_devices_without_node_resources_leave_the_nodes_cpu_to_kube_scheduler():
    # Upstream checks nothing unless an allocated device uses node resources: a node that lists
    # no CPU at all still passes.
    objs = with_claims(cluster({"node-0": "0"}, uses=None), worker("a", cpu="4"))
    svc = Service(objs, feature_gates=ON)
    assert svc.run(lambda c: schedule(c, svc.pod("a"), ["node-0"])) == ("node-0", "")
    assert "nodeAllocatableResourceClaimStatuses" not in svc.pod("a").get("status", {})


def test_a_pod_level_request_must_cover_what_the_devices_add():
    a = worker("a")
    a["spec"]["resources"] = {"requests": {"cpu": "2"}}  # the container's 1 plus the device's 2 is 3
    svc = Service(with_claims(cluster({"node-0": "8"}), a), feature_gates=ON)
    result = svc.run(lambda c: filter_call(c, svc.pod("a"), ["node-0"]))
    assert result["FailedAndUnresolvableNodes"] == {
        "node-0": "pod level request for cpu is insufficient to cover the aggregated container and "
        "node-allocatable DRA requests"
    }


def _shared_claim(uses: dict[str, Any]) -> list[dict[str, Any]]:
    objs = cluster({"node-0": "8"}, uses=uses)
    shared = claim("shared")
    shared["metadata"]["uid"] = "shared-uid"
    shared["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": DRIVER, "pool": "node-0", "device": "gpu-0"}]
            }
        },
        "reservedFor": [{"resource": "pods", "name": "x", "uid": "x-uid"}],
    }
    x = worker("x", claims={"gpu": "shared"})
    x["spec"]["nodeName"] = "node-0"
    return [*objs, shared, x, worker("y", claims={"gpu": "shared"})]


def test_a_claim_with_mapped_devices_is_one_pods_alone():
    svc = Service(_shared_claim(USES_NODE), feature_gates=ON)
    result = svc.run(lambda c: filter_call(c, svc.pod("y"), ["node-0"]))
    assert result["FailedAndUnresolvableNodes"] == {
        "node-0": "node allocatable resource claim shared has a mapped device and cannot be shared "
        "across pods"
    }


def test_a_claim_with_only_overheads_may_be_shared():
    overhead_only = {"memory": {"overhead": {"perPod": "1Gi"}}}
    svc = Service(_shared_claim(overhead_only), feature_gates=ON)
    assert svc.run(lambda c: filter_call(c, svc.pod("y"), ["node-0"]))["NodeNames"] == ["node-0"]


def _filter_after_a_bind_the_watch_has_not_shown(svc: Service) -> dict[str, str]:
    """Binds pod a on node-0 with a Binding accepted that the watch does not show yet, then
    filters pod b on node-0: its failed nodes."""

    async def lagging_watch(ref, node_name, deadline=None):
        return None

    svc.ctx.binder.bind_pod = lagging_watch  # type: ignore[method-assign]

    async def flow(client):
        bound = await bind_call(client, svc.pod("a"), "node-0")
        return bound, await filter_call(client, svc.pod("b"), ["node-0"])

    bound, result = svc.run(flow)
    assert bound == ""
    assert svc.state.pod("default", "a").node_name == ""  # the cache has not seen it bound
    failed: dict[str, str] = result["FailedNodes"]
    return failed


def test_a_pod_bound_while_the_watch_lags_counts_at_once():
    # The Binding is accepted but the cache does not see the pod bound yet: kube-scheduler would
    # have assumed it on the node, and so does the extender.
    svc = Service(with_claims(cluster({"node-0": "5"}), worker("a"), worker("b")), feature_gates=ON)
    assert _filter_after_a_bind_the_watch_has_not_shown(svc) == {"node-0": "Insufficient cpu"}


def test_a_pod_without_devices_bound_while_the_watch_lags_counts_at_once_too():
    # kube-scheduler assumes every pod it binds, devices or not; a pod without footprints bound
    # through the extender must take its CPU from the next pod's check just the same.
    plain = pod("a")
    plain["metadata"]["uid"] = "a-uid"
    plain["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "4", "memory": "1Gi"}}
    svc = Service([*with_claims(cluster({"node-0": "5"}), worker("b")), plain], feature_gates=ON)
    assert _filter_after_a_bind_the_watch_has_not_shown(svc) == {"node-0": "Insufficient cpu"}


def test_a_pod_whose_claims_were_all_allocated_before_is_not_checked():
    # Upstream's Filter computes the footprint only after allocating something on the node.
    objs = cluster({"node-0": "1"})
    done = claim("done")
    done["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": DRIVER, "pool": "node-0", "device": "gpu-0"}]
            }
        }
    }
    svc = Service([*objs, done, worker("a", claims={"gpu": "done"})], feature_gates=ON)
    assert svc.run(lambda c: schedule(c, svc.pod("a"), ["node-0"])) == ("node-0", "")
    assert "nodeAllocatableResourceClaimStatuses" not in svc.pod("a").get("status", {})


def test_a_footprint_that_cannot_be_worked_out_fails_the_pod_not_the_node():
    """A capacityKey mapping on a device whose allocation consumed no capacity is an error of
    upstream's plugin (statusError): the scheduling attempt fails, on node-1 too, whose devices
    are fine (tests/conformance/upstream/node-allocatable-consumed-capacity-missing-is-an-error)."""
    broken = {"cpu": {"mapping": {"capacityKey": "cores", "capacityMultiplier": "1"}}}
    objs = cluster({"node-0": "8"}, uses=broken)
    objs += [sized_node("node-1"), node_slice("node-1", [gpu("gpu-0")])]
    svc = Service(with_claims(objs, worker("a")), feature_gates=ON)
    result = svc.run(lambda c: filter_call(c, svc.pod("a"), ["node-0", "node-1"]))
    assert result["NodeNames"] == []
    reasons = result["FailedAndUnresolvableNodes"]
    assert set(reasons) == {"node-0", "node-1"}
    assert all("ConsumedCapacity is nil" in reason for reason in reasons.values()), reasons


# --- bind's status write and its undo ---------------------------------------------------------


class RefusingBinder:
    """The local binder, with the Binding refused and, when asked, the pod's status patches too."""

    def __init__(self, inner: Any, refuse_status: bool = False, refuse_clear: bool = False) -> None:
        self.inner, self.refuse_status, self.refuse_clear = inner, refuse_status, refuse_clear

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def bind_pod(self, pod_ref: Any, node_name: str, deadline: Any = None) -> None:
        raise RuntimeError("the Binding was refused")

    async def patch_pod_status(self, pod_ref: Any, status: dict[str, Any]) -> None:
        clearing = status == {"nodeAllocatableResourceClaimStatuses": []}
        if self.refuse_clear if clearing else self.refuse_status:
            raise RuntimeError("the status patch was refused")
        await self.inner.patch_pod_status(pod_ref, status)


def test_a_failed_bind_clears_the_footprints_it_recorded():
    # An empty list, not an absent field: the pod is not counted on the node it never reached.
    svc = Service(with_claims(cluster({"node-0": "8"}), worker("a")), feature_gates=ON)
    svc.ctx.binder = RefusingBinder(svc.ctx.binder)
    assert svc.run(lambda c: schedule(c, svc.pod("a"), ["node-0"]))[1].endswith("the Binding was refused")
    assert svc.pod("a")["status"]["nodeAllocatableResourceClaimStatuses"] == []


def test_a_rollback_that_cannot_clear_the_footprints_says_so(caplog):
    svc = Service(with_claims(cluster({"node-0": "8"}), worker("a")), feature_gates=ON)
    svc.ctx.binder = RefusingBinder(svc.ctx.binder, refuse_clear=True)
    with caplog.at_level(logging.ERROR, logger="extender.scheduling.bind"):
        svc.run(lambda c: schedule(c, svc.pod("a"), ["node-0"]))
    assert [r.getMessage() for r in caplog.records] == [
        "rollback: clearing nodeAllocatableResourceClaimStatuses of pod default/a failed: "
        "the status patch was refused"
    ]


def test_a_refused_status_patch_fails_the_bind_naming_what_it_records_and_still_clears():
    # A refused patch may have landed all the same: the rollback clears the footprints anyway.
    svc = Service(with_claims(cluster({"node-0": "8"}), worker("a")), feature_gates=ON)
    svc.ctx.binder = RefusingBinder(svc.ctx.binder, refuse_status=True)
    error = svc.run(lambda c: bind_call(c, svc.pod("a"), "node-0"))
    assert error == (
        "recording what the claims use of node resources in the status of pod a: the status patch was refused"
    )
    assert svc.pod("a")["status"]["nodeAllocatableResourceClaimStatuses"] == []
    assert not svc.claims()["a-gpu"]["status"].get("allocation")


def extended_cluster() -> list[dict[str, Any]]:
    gpu_class = device_class()
    gpu_class["spec"]["extendedResourceName"] = "example.com/gpu"
    return [gpu_class, sized_node("node-0"), node_slice("node-0", [gpu("gpu-0")])]


def extended_worker(name: str) -> dict[str, Any]:
    obj = pod(name)
    obj["metadata"]["uid"] = f"{name}-uid"
    obj["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1", "example.com/gpu": "1"}}
    return obj


def test_the_footprint_of_an_extended_resource_claim_names_the_claim_bind_created():
    svc = Service([*extended_cluster(), extended_worker("a")], feature_gates=ON)
    assert svc.run(lambda c: schedule(c, svc.pod("a"), ["node-0"])) == ("node-0", "")
    [created] = svc.claims()
    status = svc.pod("a")["status"]
    assert status["extendedResourceClaimStatus"]["resourceClaimName"] == created
    assert [f["resourceClaimName"] for f in status["nodeAllocatableResourceClaimStatuses"]] == [created]


def test_a_refused_status_patch_names_both_things_it_records():
    svc = Service([*extended_cluster(), extended_worker("a")], feature_gates=ON)
    svc.ctx.binder = RefusingBinder(svc.ctx.binder, refuse_status=True)
    error = svc.run(lambda c: bind_call(c, svc.pod("a"), "node-0"))
    assert re.fullmatch(
        r"recording claim default/a-extended-resources-\w+ and what the claims use of node resources "
        "in the status of pod a: the status patch was refused",
        error,
    ), error
    assert svc.claims() == {}  # the created claim is deleted again


class HangingStatus(RefusingBinder):
    """The Binding refused; the status patch that records the footprints never answers."""

    async def patch_pod_status(self, pod_ref: Any, status: dict[str, Any]) -> None:
        if status != {"nodeAllocatableResourceClaimStatuses": []}:
            await asyncio.sleep(3600)
        await self.inner.patch_pod_status(pod_ref, status)


def test_a_status_patch_without_an_answer_fails_the_bind_at_its_timeout():
    svc = Service(with_claims(cluster({"node-0": "8"}), worker("a")), feature_gates=ON, bind_timeout_s=0.2)
    svc.ctx.binder = HangingStatus(svc.ctx.binder)
    error = svc.run(lambda c: asyncio.wait_for(bind_call(c, svc.pod("a"), "node-0"), 5.0))
    assert error.startswith("recording what the claims use of node resources in the status of pod a: ")
    assert svc.pod("a")["status"]["nodeAllocatableResourceClaimStatuses"] == []
