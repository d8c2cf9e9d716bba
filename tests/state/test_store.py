"""The cluster-state cache: feeding contract, indexes, in-use devices, assume cache, in flight."""

from __future__ import annotations

import pytest

from extender.model import Features, parse_allocation
from extender.model.kinds import KIND_NAMES
from extender.model.pods import parse_pod
from extender.model.quantity import Quantity
from extender.state import ClusterState, InFlight
from tests.scheduling.cluster import DRIVER, claim, device_class, gpus, node, node_slice, pod

GATES = Features.parse("DRAConsumableCapacity=true")


def allocated_claim(name: str, uid: str, results: list[dict], rv: str = "5") -> dict:
    obj = claim(name)
    obj["metadata"].update(uid=uid, resourceVersion=rv)
    obj["status"] = {"allocation": {"devices": {"results": results}}}
    return obj


def result(device: str, pool: str = "node-0", **extra) -> dict:
    return {"request": "gpu", "driver": DRIVER, "pool": pool, "device": device, **extra}


def network_slice(name: str, devices: list[dict]) -> dict:
    obj = node_slice("x", devices)
    obj["metadata"]["name"] = name
    del obj["spec"]["nodeName"]
    obj["spec"]["allNodes"] = True
    obj["spec"]["pool"]["name"] = name
    return obj


def test_node_version_ignores_heartbeats_but_not_labels_or_other_pools():
    state = ClusterState()
    state.apply("Node", node("node-0", zone="a"))
    state.apply("ResourceSlice", node_slice("node-0", gpus(1)))
    state.apply("ResourceSlice", node_slice("node-1", gpus(1)))
    before = state.node_version("node-0")
    heartbeat = node("node-0", zone="a")
    heartbeat["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    state.apply("Node", heartbeat)
    state.apply("ResourceClaim", allocated_claim("c", "u", [result("gpu-0", pool="node-1")]))
    assert state.node_version("node-0") == before
    state.apply("Node", node("node-0", zone="b"))
    assert state.node_version("node-0") != before


def test_devices_in_use_change_the_versions_of_the_nodes_that_see_their_pool():
    state = ClusterState()
    state.apply("ResourceSlice", node_slice("node-0", gpus(2)))
    state.apply("ResourceSlice", node_slice("node-1", gpus(2)))
    state.apply("ResourceSlice", network_slice("net", gpus(2)))
    before = {n: state.node_version(n) for n in ("node-0", "node-1")}
    state.apply("ResourceClaim", allocated_claim("a", "ua", [result("gpu-0", pool="node-0")]))
    assert state.node_version("node-0") != before["node-0"]
    assert state.node_version("node-1") == before["node-1"]
    middle = {n: state.node_version(n) for n in ("node-0", "node-1")}
    # Every node sees a pool published without a node.
    state.apply("ResourceClaim", allocated_claim("b", "ub", [result("gpu-0", pool="net")]))
    after = {n: state.node_version(n) for n in ("node-0", "node-1")}
    assert all(after[n] != middle[n] and after[n] != before[n] for n in after)
    stamps, floor, _ = state.node_versions()
    assert {n: stamps.get(n, floor) for n in after} == after


def test_synced_only_when_every_kind_is():
    state = ClusterState()
    for kind in KIND_NAMES[:-1]:
        state.mark_synced(kind)
    assert not state.synced
    state.mark_synced(KIND_NAMES[-1])
    assert state.synced
    with pytest.raises(ValueError, match="unsupported kind"):
        state.mark_synced("Secret")


def test_the_gates_change_only_while_nothing_is_cached():
    """A release the API server names after start takes effect before the cache fills."""
    state = ClusterState()
    newest = Features.defaults()
    assert state.features == newest and state.node_requests is None
    gated = Features.parse("DRANodeAllocatableResources=true")
    state.use_features(gated)
    assert state.features == gated and state.inuse.features == gated and state.node_requests is not None
    state.apply("Node", node("node-0"))
    with pytest.raises(RuntimeError, match="cache that holds objects"):
        state.use_features(newest)
    empty_but_synced = ClusterState()
    empty_but_synced.mark_synced("Node")
    with pytest.raises(RuntimeError):
        empty_but_synced.use_features(gated)


def test_slices_for_node_keep_order_and_append_network_slices():
    state = ClusterState()
    state.apply("ResourceSlice", network_slice("net", gpus(1)))
    state.apply("ResourceSlice", node_slice("node-1", gpus(2)))
    state.apply("ResourceSlice", node_slice("node-0", gpus(2)))
    second = node_slice("node-0", gpus(1))
    second["metadata"]["name"] = "node-0-extra"
    state.apply("ResourceSlice", second)
    assert [s.name for s in state.slices.for_node("node-0")] == [f"node-0-{DRIVER}", "node-0-extra", "net"]
    assert [s.name for s in state.slices.pool_slices(DRIVER, "node-0")] == [
        f"node-0-{DRIVER}",
        "node-0-extra",
    ]
    state.delete("ResourceSlice", second)
    assert [s.name for s in state.slices.for_node("node-0")] == [f"node-0-{DRIVER}", "net"]
    assert state.slices.devices_per_pool()[(DRIVER, "node-0")] == 2


def test_allocated_claims_mark_devices_in_use_and_deletion_frees_them():
    state = ClusterState(GATES)
    obj = allocated_claim("c", "u1", [result("gpu-0"), result("gpu-1", adminAccess=True)])
    state.apply("ResourceSlice", node_slice("node-0", gpus(2)))
    before = state.node_version("node-0")
    state.apply("ResourceClaim", obj)
    assert state.inuse.devices == {(DRIVER, "node-0", "gpu-0")}  # admin access consumes nothing
    assert state.node_version("node-0") != before
    state.delete("ResourceClaim", obj)
    assert not state.inuse.devices and not state.inuse.per_pool


def test_shares_and_consumed_capacity_add_up_per_device():
    state = ClusterState(GATES)
    share = {"shareID": "s1", "consumedCapacity": {"memory": "10Gi"}}
    state.apply("ResourceClaim", allocated_claim("a", "ua", [result("gpu-0", **share)]))
    other = {"shareID": "s2", "consumedCapacity": {"memory": "6Gi"}}
    state.apply("ResourceClaim", allocated_claim("b", "ub", [result("gpu-0", **other)]))
    device = (DRIVER, "node-0", "gpu-0")
    assert state.inuse.devices == set()
    assert state.inuse.shared == {(device, "s1"), (device, "s2")}
    assert state.inuse.capacity[device]["memory"] == Quantity.parse("16Gi")
    state.delete("ResourceClaim", claim("a"))
    assert state.inuse.capacity[device]["memory"] == Quantity.parse("6Gi")


def test_share_ids_are_exclusive_devices_without_consumable_capacity():
    state = ClusterState(Features.parse("DRAConsumableCapacity=false"))
    state.apply("ResourceClaim", allocated_claim("a", "ua", [result("gpu-0", shareID="s1")]))
    assert state.inuse.devices == {(DRIVER, "node-0", "gpu-0")}


def test_assumed_claim_is_not_overwritten_by_an_older_echo():
    state = ClusterState()
    fresh = claim("c")
    fresh["metadata"].update(uid="u", resourceVersion="7")
    state.apply("ResourceClaim", fresh)
    written = allocated_claim("c", "u", [result("gpu-0")], rv="9")
    state.assume_claim(written)
    state.apply("ResourceClaim", fresh)  # the watch catching up with the pre-write version
    assert state.claim("default", "c").allocation is not None
    newer = allocated_claim("c", "u", [result("gpu-1")], rv="10")
    state.apply("ResourceClaim", newer)
    assert state.inuse.devices == {(DRIVER, "node-0", "gpu-1")}
    state.apply("ResourceClaim", fresh)  # not assumed any more: the source is trusted again
    assert state.claim("default", "c").allocation is None


def test_device_held_by_two_owners_stays_in_use_until_both_release():
    state = ClusterState()
    allocation = parse_allocation({"devices": {"results": [result("gpu-0")]}})
    state.add_inflight(InFlight("u", "pod", allocation, expires_at=1e18))
    state.apply("ResourceClaim", allocated_claim("c", "u", [result("gpu-0")]))
    state.remove_inflight("u")
    assert state.inuse.devices == {(DRIVER, "node-0", "gpu-0")}
    state.delete("ResourceClaim", claim("c"))
    assert state.inuse.devices == set()


def test_inflight_expiry_and_what_if_release():
    state = ClusterState()
    allocation = parse_allocation({"devices": {"results": [result("gpu-0")]}})
    state.add_inflight(InFlight("gone", "pod", allocation, expires_at=0.0))
    state.apply("ResourceClaim", allocated_claim("c", "u", [result("gpu-1")]))
    devices, _, _ = state.inuse.without({("claim", "u")})
    assert devices == {(DRIVER, "node-0", "gpu-0")}
    assert state.expire_inflight() == ["gone"]
    assert state.inuse.devices == {(DRIVER, "node-0", "gpu-1")}


def test_replace_reconciles_deletions_and_items_return_raw_objects():
    state = ClusterState()
    state.apply("Node", node("a"))
    state.apply("Node", node("b"))
    state.replace("Node", [node("b"), node("c")])
    assert sorted(state.nodes) == ["b", "c"]
    assert sorted(n["metadata"]["name"] for n in state.items("Node")) == ["b", "c"]
    state.apply("DeviceClass", device_class())
    assert state.items("DeviceClass")[0]["metadata"]["name"] == DRIVER


def test_pods_are_parsed_once_with_claim_statuses():
    state = ClusterState()
    obj = pod("p", templates={"gpu": "t"})
    obj["metadata"]["uid"] = "pu"
    obj["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-abcde"}]}
    state.apply("Pod", obj)
    info = state.pod("default", "p")
    assert info.uid == "pu" and info.claim_statuses == {"gpu": "p-gpu-abcde"}
    assert info.claims[0].template_name == "t"


@pytest.mark.parametrize(
    ("kind", "obj", "message"),
    [
        ("Pod", {"metadata": {}}, "metadata.name: required"),
        ("Pod", {"metadata": {"name": "p"}, "spec": {"resourceClaims": [{"name": 3}]}}, "must be a string"),
        ("ResourceClaimTemplate", {"metadata": {"name": "t"}, "spec": {}}, "spec.spec: required"),
        ("ResourceSlice", {"metadata": {"name": "s"}, "spec": {"devices": 5}}, "ResourceSlice s"),
        ("Widget", {"metadata": {"name": "w"}}, "unsupported kind"),
    ],
)
def test_malformed_objects_are_rejected_with_a_message(kind, obj, message):
    with pytest.raises(ValueError, match=message):
        ClusterState().apply(kind, obj)


def test_a_relist_with_a_malformed_object_still_applies_the_rest_and_names_the_one_refused():
    state = ClusterState()
    for name in ("a", "b", "gone"):
        state.apply("Node", node(name))
    bad = node("b")
    bad["metadata"]["labels"] = {"zone": 1}
    with pytest.raises(ValueError, match=r"Node b: metadata\.labels\[zone\]: must be a string"):
        state.replace("Node", [node("a"), bad, {"metadata": {}}, node("c")])
    # The objects after the bad ones arrived and the one no longer listed went; the refused
    # object keeps the version the cache held, as a refused watch update does.
    assert sorted(state.nodes) == ["a", "b", "c"]
    assert state.nodes["b"].labels == {}


def test_device_index_follows_the_newest_pool_generation():
    state = ClusterState()
    old = node_slice("node-0", gpus(2))
    state.apply("ResourceSlice", old)
    assert state.slices.device((DRIVER, "node-0", "gpu-1")).name == "gpu-1"
    newer = node_slice("node-0", gpus(1))
    newer["metadata"]["name"] = "node-0-v2"
    newer["spec"]["pool"]["generation"] = 2
    state.apply("ResourceSlice", newer)
    assert state.slices.device((DRIVER, "node-0", "gpu-0")) is state.slices.by_name["node-0-v2"].devices[0]
    state.delete("ResourceSlice", old)
    assert state.slices.device((DRIVER, "node-0", "gpu-1")) is None


def test_nominated_pods_are_indexed_until_bound_or_deleted():
    state = ClusterState()
    waiting = pod("w")
    waiting["metadata"]["uid"] = "w-uid"
    state.apply("Pod", waiting)
    assert state.nominated == {}
    waiting["status"] = {"nominatedNodeName": "node-0"}
    state.apply("Pod", waiting)
    assert [p.name for p in state.nominated.values()] == ["w"]
    waiting["spec"]["nodeName"] = "node-0"
    state.apply("Pod", waiting)
    assert state.nominated == {}
    other = pod("o")
    other["metadata"]["uid"] = "o-uid"
    other["status"] = {"nominatedNodeName": "node-1"}
    state.apply("Pod", other)
    state.delete("Pod", other)
    assert state.nominated == {}


def test_a_pod_parsed_by_its_writer_is_kept_and_indexed_like_an_applied_one():
    state, applied = ClusterState(), ClusterState()
    waiting = pod("w", namespace="team")
    waiting["status"] = {"nominatedNodeName": "node-0"}
    state.put_pod(parse_pod(waiting))
    applied.apply("Pod", waiting)
    assert state.pods == applied.pods and state.nominated == applied.nominated
    assert list(state.nominated) == [("team", "w")]
    bound = {**waiting, "spec": {**waiting["spec"], "nodeName": "node-0"}}
    state.put_pod(parse_pod(bound))
    assert state.nominated == {} and state.pod("team", "w").node_name == "node-0"
    assert state.raw("Pod", ("team", "w")) is bound


def test_gathered_pools_are_filled_at_sync_and_kept_until_the_inventory_changes():
    state = ClusterState()
    state.apply("Node", node("node-0"))
    state.apply("ResourceSlice", node_slice("node-0", gpus(2)))
    for kind in KIND_NAMES:
        state.mark_synced(kind)
    gathered = state.gathered_pools()
    assert len(gathered) == 1  # filled once every kind had synced, before any request
    entry = gathered.for_node(state.nodes["node-0"])
    assert [c.device.name for p in entry.pools for c in p.candidates] == ["gpu-0", "gpu-1"]
    state.apply("Pod", pod("p"))
    state.apply("Node", node("node-0"))  # a heartbeat: nothing allocation reads
    assert state.gathered_pools() is gathered
    state.apply("ResourceSlice", node_slice("node-0", gpus(3)))
    regathered = state.gathered_pools()
    assert regathered is not gathered and len(regathered) == 0
    entry = regathered.for_node(state.nodes["node-0"])
    assert [c.device.name for p in entry.pools for c in p.candidates] == ["gpu-0", "gpu-1", "gpu-2"]
