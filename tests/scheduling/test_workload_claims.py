"""DRAWorkloadResourceClaims: claims a PodGroup's pods share.

The cases follow upstream's k8s.io/dynamic-resource-allocation/resourceclaim tests
(TestResourceClaimIsFor, TestIsReservedForPod, TestBindTo) and the DynamicResources plugin
(kubernetes/kubernetes pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go at
04f5fdea8047): the owner check, the reservedFor entry and the wait for a missing PodGroup.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.model import Features
from extender.model.pods import parse_pod_group
from tests.scheduling.cluster import (
    FailingBinding,
    Service,
    claim,
    filter_call,
    gpu_cluster,
    gpus,
    node_slice,
    pod,
    schedule,
    template,
)
from tests.scheduling.test_plan import allocated
from tests.scheduling.test_stale import a_while, until

WORKLOAD = Features.parse("DRAWorkloadResourceClaims=true", "1.37")
GROUP_UID = "group-uid"


def pod_group(
    name: str = "g", claims: list[dict[str, str]] | None = None, uid: str = GROUP_UID
) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"schedulingPolicy": {"basic": {}}, "resourceClaims": claims or []},
    }


def member(name: str, group: str = "g", **claims: Any) -> dict[str, Any]:
    obj = pod(name, **claims)
    obj["metadata"]["uid"] = f"{name}-uid"
    obj["spec"]["schedulingGroup"] = {"podGroupName": group}
    return obj


def group_owned_claim(
    name: str, owner: str = "g", api_version: str = "scheduling.k8s.io/v1beta1"
) -> dict[str, Any]:
    obj = claim(name)
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": "PodGroup", "name": owner, "uid": GROUP_UID, "controller": True}
    ]
    return obj


def with_generated(obj: dict[str, Any], pod_claim: str, claim_name: str) -> dict[str, Any]:
    # What the resourceclaim controller records for a template entry the group shares.
    obj["status"] = {"resourceClaimStatuses": [{"name": pod_claim, "resourceClaimName": claim_name}]}
    return obj


GROUP_RESERVATION = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "g", "uid": GROUP_UID}


def test_a_claim_the_group_shares_is_reserved_once_for_the_group():
    shared = [{"name": "gpu", "resourceClaimName": "shared"}]
    objs = [*gpu_cluster(nodes=1, per_node=1), claim("shared"), pod_group(claims=shared)]
    objs += [member("a", claims={"gpu": "shared"}), member("b", claims={"gpu": "shared"})]
    svc = Service(objs, feature_gates=WORKLOAD)

    async def flow(client):
        return [await schedule(client, svc.pod(name), ["node-0"]) for name in ("a", "b")]

    assert svc.run(flow) == [("node-0", ""), ("node-0", "")]
    assert svc.claims()["shared"]["status"]["reservedFor"] == [GROUP_RESERVATION]


def test_without_the_gate_the_shared_claim_is_reserved_for_each_pod():
    shared = [{"name": "gpu", "resourceClaimName": "shared"}]
    objs = [*gpu_cluster(nodes=1, per_node=1), claim("shared"), pod_group(claims=shared)]
    objs += [member("a", claims={"gpu": "shared"}), member("b", claims={"gpu": "shared"})]
    svc = Service(objs, feature_gates=Features.defaults("1.37"))  # beta, off

    async def flow(client):
        return [await schedule(client, svc.pod(name), ["node-0"]) for name in ("a", "b")]

    assert svc.run(flow) == [("node-0", ""), ("node-0", "")]
    assert [r["uid"] for r in svc.claims()["shared"]["status"]["reservedFor"]] == ["a-uid", "b-uid"]


@pytest.mark.parametrize(
    "group_claim",
    [
        {"name": "other", "resourceClaimName": "shared"},  # upstream: "Claim name mismatch"
        {"name": "gpu", "resourceClaimName": "not-shared"},  # "Claim resourceClaimName mismatch"
        {"name": "gpu", "resourceClaimTemplateName": "shared"},  # a different kind of source
    ],
)
def test_a_claim_that_matches_no_group_claim_is_reserved_for_the_pod(group_claim):
    objs = [*gpu_cluster(nodes=1, per_node=1), claim("shared"), pod_group(claims=[group_claim])]
    objs += [member("a", claims={"gpu": "shared"})]
    svc = Service(objs, feature_gates=WORKLOAD)
    assert svc.run(lambda c: schedule(c, svc.pod("a"), ["node-0"])) == ("node-0", "")
    assert svc.claims()["shared"]["status"]["reservedFor"] == [
        {"resource": "pods", "name": "a", "uid": "a-uid"}
    ]


@pytest.mark.parametrize("api_version", ["scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v25"])
def test_a_template_claim_owned_by_the_pods_group_passes_the_owner_check(api_version):
    # Upstream: "owned-by-podgroup" and "owned-by-podgroup-other-api-version".
    shared = [{"name": "gpu", "resourceClaimTemplateName": "one"}]
    objs = [*gpu_cluster(nodes=1, per_node=1), template("one"), pod_group(claims=shared)]
    objs += [group_owned_claim("g-gpu", api_version=api_version)]
    objs += [with_generated(member("a", templates={"gpu": "one"}), "gpu", "g-gpu")]
    svc = Service(objs, feature_gates=WORKLOAD)
    assert svc.run(lambda c: schedule(c, svc.pod("a"), ["node-0"])) == ("node-0", "")
    assert svc.claims()["g-gpu"]["status"]["reservedFor"] == [GROUP_RESERVATION]


@pytest.mark.parametrize(
    ("gates", "owner", "group", "reason"),
    [
        # Upstream "owned-by-podgroup" with acceptPodGroup false: the gate is off.
        (Features.defaults("1.37"), "g", "g",
         "ResourceClaim default/g-gpu was not created for Pod default/a (Pod is not owner)"),
        # "other-podgroup": the claim belongs to another group.
        (WORKLOAD, "g", "h",
         "ResourceClaim default/g-gpu was not created for Pod default/a "
         "(neither Pod nor PodGroup h is the owner)"),
    ],
)
def test_a_template_claim_of_another_owner_fails_the_owner_check(gates, owner, group, reason):
    objs = [*gpu_cluster(nodes=1, per_node=1), template("one"), pod_group(group)]
    objs += [group_owned_claim("g-gpu", owner)]
    objs += [with_generated(member("a", group, templates={"gpu": "one"}), "gpu", "g-gpu")]
    svc = Service(objs, feature_gates=gates)
    result = svc.run(lambda c: filter_call(c, svc.pod("a"), ["node-0"]))
    assert result["FailedAndUnresolvableNodes"]["node-0"] == reason


def test_a_pod_of_a_podgroup_that_does_not_exist_waits_for_it():
    objs = [*gpu_cluster(nodes=1, per_node=1), claim("shared")]
    objs += [member("a", "missing", claims={"gpu": "shared"})]
    svc = Service(objs, feature_gates=WORKLOAD)
    result = svc.run(lambda c: filter_call(c, svc.pod("a"), ["node-0"]))
    assert result["FailedAndUnresolvableNodes"]["node-0"] == 'podgroup.scheduling.k8s.io "missing" not found'
    # Without the gate the group is not looked at.
    svc = Service(objs, feature_gates=Features.defaults("1.37"))
    assert svc.run(lambda c: filter_call(c, svc.pod("a"), ["node-0"]))["NodeNames"] == ["node-0"]


def test_a_claim_reserved_for_the_group_is_used_without_a_new_reservation():
    # Upstream TestIsReservedForPod "reserved-for-podgroup": the group's entry covers its pods;
    # a pod of another group ("reserved-for-other-podgroup") needs an entry of its own.
    shared = [{"name": "gpu", "resourceClaimName": "shared"}]
    objs = [*gpu_cluster(nodes=1, per_node=1), claim("shared"), pod_group(claims=shared)]
    objs += [pod_group("h", uid="h-uid"), member("a", claims={"gpu": "shared"})]
    objs += [member("b", claims={"gpu": "shared"}), member("c", "h", claims={"gpu": "shared"})]
    svc = Service(objs, feature_gates=WORKLOAD)

    async def flow(client):
        out = [await schedule(client, svc.pod("a"), ["node-0"])]
        version = svc.claims()["shared"]["metadata"]["resourceVersion"]
        out.append(await schedule(client, svc.pod("b"), ["node-0"]))
        assert svc.claims()["shared"]["metadata"]["resourceVersion"] == version  # nothing written
        out.append(await schedule(client, svc.pod("c"), ["node-0"]))
        return out

    assert svc.run(flow) == [("node-0", ""), ("node-0", ""), ("node-0", "")]
    assert svc.claims()["shared"]["status"]["reservedFor"] == [
        GROUP_RESERVATION, {"resource": "pods", "name": "c", "uid": "c-uid"}
    ]


def test_malformed_pod_group_is_refused_with_the_field():
    bad = pod_group(claims=[{"name": "gpu", "resourceClaimName": "x", "resourceClaimTemplateName": "y"}])
    # Both sources set: upstream validation refuses it.
    both = r"^PodGroup default/g: spec.resourceClaims\[0\].resourceClaimName or .*: exactly one must be set"
    with pytest.raises(ValueError, match=both):
        parse_pod_group(bad)
    with pytest.raises(ValueError, match=r"spec.resourceClaims\[0\].name: required"):
        parse_pod_group(pod_group(claims=[{"resourceClaimName": "x"}]))


def test_malformed_scheduling_group_makes_the_pod_wait_with_the_field():
    objs = [*gpu_cluster(nodes=1, per_node=1), claim("shared"), member("a", claims={"gpu": "shared"})]
    objs[-1]["spec"]["schedulingGroup"] = {"podGroupName": 7}
    svc = Service(objs, feature_gates=WORKLOAD)
    result = svc.run(lambda c: filter_call(c, objs[-1], ["node-0"]))
    reason = result["FailedAndUnresolvableNodes"]["node-0"]
    assert "spec.schedulingGroup.podGroupName: must be a string" in reason


# --- upstream's PostFilter: a group's reservation no pod of the group uses is dropped ---------


def _group_cluster(bound_member: bool) -> list[dict[str, Any]]:
    """A claim the group shares, allocated on a node that is gone and reserved for the group."""
    shared = [{"name": "gpu", "resourceClaimName": "shared"}]
    objs = [*gpu_cluster(nodes=1, per_node=1), node_slice("gone", gpus(1)), pod_group(claims=shared)]
    reserved = allocated(claim("shared"), "gone", ["gpu-0"])
    reserved["status"]["reservedFor"] = [GROUP_RESERVATION]
    objs += [reserved, member("a", claims={"gpu": "shared"})]
    b = member("b", claims={"gpu": "shared"})
    if bound_member:
        b["spec"]["nodeName"] = "gone"
        b["status"] = {"phase": "Running"}
    return [*objs, b]


def test_a_failed_filter_drops_the_groups_reservation_when_no_member_is_scheduled():
    svc = Service(_group_cluster(bound_member=False), feature_gates=WORKLOAD)

    async def flow(client):
        first = await filter_call(client, svc.pod("a"), ["node-0"])
        await until("the group unreserved", lambda: not svc.claims()["shared"]["status"].get("reservedFor"))
        # Reserved for nobody now, on a node that is gone: the next failed filter deallocates it.
        second = await filter_call(client, svc.pod("a"), ["node-0"])
        await until("the claim deallocated", lambda: "allocation" not in svc.claims()["shared"]["status"])
        return first, second, await filter_call(client, svc.pod("a"), ["node-0"])

    first, second, third = svc.run(flow)
    assert first["NodeNames"] == second["NodeNames"] == []
    assert third["NodeNames"] == ["node-0"]


@pytest.mark.parametrize(
    ("bound_member", "features"),
    [(True, WORKLOAD), (False, Features.defaults("1.37"))],
    ids=["a-member-is-scheduled", "gate-off"],
)
def test_a_groups_reservation_stays(bound_member: bool, features: Features) -> None:
    svc = Service(_group_cluster(bound_member), feature_gates=features)

    async def flow(client):
        result = await filter_call(client, svc.pod("a"), ["node-0"])
        await a_while()
        return result

    assert svc.run(flow)["NodeNames"] == []
    assert svc.claims()["shared"]["status"]["reservedFor"] == [GROUP_RESERVATION]


# --- bind: a claim allocated before is only reserved, for the group ---------------------------


def _allocated_unreserved_group_claim() -> list[dict[str, Any]]:
    shared = [{"name": "gpu", "resourceClaimName": "shared"}]
    objs = [*gpu_cluster(nodes=1, per_node=1), pod_group(claims=shared)]
    return [*objs, allocated(claim("shared"), "node-0", ["gpu-0"]), member("a", claims={"gpu": "shared"})]


def test_a_claim_the_group_shares_that_is_allocated_already_is_reserved_for_the_group():
    svc = Service(_allocated_unreserved_group_claim(), feature_gates=WORKLOAD)
    before = svc.claims()["shared"]["status"]["allocation"]
    assert svc.run(lambda c: schedule(c, svc.pod("a"), ["node-0"])) == ("node-0", "")
    status = svc.claims()["shared"]["status"]
    assert status["reservedFor"] == [GROUP_RESERVATION]
    assert status["allocation"] == before  # only reserved: the allocation is not rewritten


@pytest.mark.parametrize(
    ("features", "left_reserved"),
    [(WORKLOAD, [GROUP_RESERVATION]), (Features.defaults("1.37"), None)],
    ids=["for-the-group", "for-the-pod"],
)
def test_a_failed_bind_leaves_a_claim_allocated_before_allocated(features, left_reserved):
    # The allocation was not this bind's: undoing the bind must not deallocate it, even when
    # nothing stays reserved. The group's reservation is not the pod's to release (other members
    # may use it); a failed filter drops it when no member is scheduled
    # (test_a_failed_filter_drops_the_groups_reservation_when_no_member_is_scheduled).
    svc = Service(_allocated_unreserved_group_claim(), feature_gates=features)
    before = svc.claims()["shared"]["status"]["allocation"]
    svc.ctx.binder = FailingBinding(svc.ctx.binder, RuntimeError("the Binding was refused"))
    _, error = svc.run(lambda c: schedule(c, svc.pod("a"), ["node-0"]))
    assert error.endswith("the Binding was refused")
    status = svc.claims()["shared"]["status"]
    assert status["allocation"] == before and status.get("reservedFor") == left_reserved
