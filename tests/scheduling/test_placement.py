"""The compact score policy: what it keeps whole, and that it only chooses between nodes."""

from __future__ import annotations

import asyncio
from typing import Any

from extender.scheduling.bind import bind_pod
from extender.scheduling.claims import pod_for_request
from extender.scheduling.filter import filter_nodes
from extender.scheduling.placement.compact import CompactRanker
from extender.scheduling.placement.profiles import build_profile
from extender.scheduling.score import score_nodes
from extender.scheduling.verdicts import NodeVerdict
from tests.scheduling.cluster import (
    DRIVER,
    claim,
    claim_spec,
    device_class,
    local_context,
    node,
    node_slice,
    pod,
    request,
)

NUMA = f"{DRIVER}/numaNode"


def whole_gpus(count: int, per_numa: int = 4) -> list[dict[str, Any]]:
    return [
        {"name": f"gpu-{i}", "attributes": {NUMA: {"int": i // per_numa}},
         "capacity": {"memory": {"value": "80Gi"}}}
        for i in range(count)
    ]


def partitioned_gpus(count: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``count`` GPUs of 80Gi, each offered whole and as two halves on one counter set."""
    devices, counter_sets = [], []
    for g in range(count):
        counters = f"gpu-{g}-counters"
        counter_sets.append({"name": counters, "counters": {"memory": {"value": "80Gi"}}})
        for name, memory in ((f"gpu-{g}", "80Gi"), (f"gpu-{g}-half-0", "40Gi"), (f"gpu-{g}-half-1", "40Gi")):
            devices.append({
                "name": name,
                "attributes": {NUMA: {"int": 0}},
                "capacity": {"memory": {"value": memory}},
                "consumesCounters": [{"counterSet": counters, "counters": {"memory": {"value": memory}}}],
            })
    return devices, counter_sets


def partition_slices(node_name: str, gpu_count: int) -> list[dict[str, Any]]:
    """The devices and their counter sets, in two slices of one pool (as the API wants them)."""
    devices, counter_sets = partitioned_gpus(gpu_count)
    with_devices, with_counters = node_slice(node_name, devices), node_slice(node_name, [])
    del with_counters["spec"]["devices"]
    with_counters["spec"]["sharedCounters"] = counter_sets
    with_counters["metadata"]["name"] += "-counters"
    for rs in (with_devices, with_counters):
        rs["spec"]["pool"]["resourceSliceCount"] = 2
    return [with_devices, with_counters]


def taken(name: str, node_name: str, *devices: str) -> dict[str, Any]:
    """A claim already allocated on ``node_name`` with ``devices`` (as a bind would have left it)."""
    obj = claim(name, claim_spec(request(count=len(devices))))
    results = [{"request": "gpu", "driver": DRIVER, "pool": node_name, "device": d} for d in devices]
    obj["status"] = {"allocation": {"devices": {"results": results}}}
    return obj


def best_node(objects: list[dict[str, Any]], policy: str, spec: dict[str, Any]) -> tuple[str, dict[str, int]]:
    """Filter every node for a pod of one claim of ``spec``, then prioritize: the 10-point node."""
    ctx, cluster = local_context([*objects, claim("wanted", spec), pod("p", claims={"gpu": "wanted"})],
                                 score_policy=policy)
    pod_info = pod_for_request(ctx.state, dict(cluster.store.get("Pod", "default", "p") or {}))
    passed = filter_nodes(ctx, pod_info, sorted(ctx.state.nodes)).passed
    scores = score_nodes(ctx, pod_info, passed)
    return max(sorted(scores), key=scores.__getitem__), scores


HALF_GPU = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) == 0'
HALF = claim_spec(request(selectors=[{"cel": {"expression": HALF_GPU}}]))


def test_a_partition_goes_to_the_gpu_already_partitioned():
    # "fresh" has one untouched GPU; "split" two GPUs, one with a half in use. Counting devices,
    # binpack sees more left free on "split" and breaks the fresh node's whole GPU; compact
    # takes the other half of the split GPU and keeps both whole GPUs.
    objects = [
        device_class(), node("fresh"), node("split"),
        *partition_slices("fresh", 1), *partition_slices("split", 2),
        taken("other", "split", "gpu-0-half-0"),
    ]
    assert best_node(objects, "compact", HALF)[0] == "split"
    assert best_node(objects, "binpack", HALF)[0] == "fresh"


def test_a_whole_free_node_is_kept_for_the_big_job():
    # "empty" (8 GPUs, none used) would be fuller afterwards than "busy" (16 GPUs, 4 used):
    # binpack breaks the empty node, compact keeps it whole for an 8-GPU job.
    objects = [
        device_class(), node("busy"), node("empty"),
        node_slice("busy", whole_gpus(16)), node_slice("empty", whole_gpus(8)),
        taken("other", "busy", "gpu-0", "gpu-1", "gpu-2", "gpu-3"),
    ]
    assert best_node(objects, "compact", claim_spec(request()))[0] == "busy"
    assert best_node(objects, "binpack", claim_spec(request()))[0] == "empty"


def test_two_gpus_land_on_one_numa_node_without_being_asked_to():
    # Upstream's first fit takes gpu-0 and gpu-2 on node-a (two NUMA nodes), gpu-0 and gpu-1 on
    # node-b (one). Binpack ties them (first by name wins); compact prefers node-b.
    objects = [
        device_class(), node("node-a"), node("node-b"),
        node_slice("node-a", whole_gpus(4, per_numa=2)), node_slice("node-b", whole_gpus(4, per_numa=2)),
        taken("on-a", "node-a", "gpu-1"), taken("on-b", "node-b", "gpu-3"),
    ]
    two = claim_spec(request(count=2))
    assert best_node(objects, "compact", two)[0] == "node-b"
    assert best_node(objects, "binpack", two)[0] == "node-a"


def test_a_free_numa_node_is_kept_before_packing():
    # One GPU. node-b is fuller, but its only free GPUs make up NUMA node 1, which a 2-GPU
    # job on one NUMA node needs whole; on node-a first fit takes gpu-1 beside the busy gpu-0.
    objects = [
        device_class(), node("node-a"), node("node-b"),
        node_slice("node-a", whole_gpus(4, per_numa=2)), node_slice("node-b", whole_gpus(4, per_numa=2)),
        taken("on-a", "node-a", "gpu-0"), taken("on-b", "node-b", "gpu-0", "gpu-1"),
    ]
    assert best_node(objects, "compact", claim_spec(request()))[0] == "node-a"
    assert best_node(objects, "binpack", claim_spec(request()))[0] == "node-b"


def verdict(*devices: str) -> NodeVerdict:
    """A fitting verdict on node "n" taking ``devices``."""
    ids = frozenset((DRIVER, "n", d) for d in devices)
    return NodeVerdict(True, devices=ids, drivers=frozenset({DRIVER}), taken=len(ids))


def test_the_figures_name_what_is_broken():
    objects = [device_class(), node("n"), node_slice("n", whole_gpus(8)), taken("t", "n", "gpu-0")]
    ctx, _ = local_context(objects, score_policy="compact")
    ranker = CompactRanker(ctx.state, ctx.placement)

    # gpu-1: NUMA 0 is already in use; a plain GPU is taken whole: nothing broken.
    assert ranker.figures("n", verdict("gpu-1")) == (0, 0, 0, 0, 6)
    # gpu-3 + gpu-4: breaks the free NUMA 1 and spans two NUMA nodes.
    assert ranker.figures("n", verdict("gpu-3", "gpu-4")) == (0, 1, 0, 1, 5)
    # gpu-4..7 fill NUMA 1: taken whole, not broken.
    assert ranker.figures("n", verdict("gpu-4", "gpu-5", "gpu-6", "gpu-7")) == (0, 0, 0, 0, 3)
    assert ranker.rank("n", verdict("gpu-1")) > ranker.rank("n", verdict("gpu-3", "gpu-4"))


def test_a_free_node_is_broken_unless_filled():
    objects = [device_class(), node("n"), node_slice("n", whole_gpus(8))]
    ctx, _ = local_context(objects, score_policy="compact")
    ranker = CompactRanker(ctx.state, ctx.placement)

    assert ranker.figures("n", verdict("gpu-0"))[:2] == (1, 1)
    # All eight: nothing left to break (they span both NUMA nodes, as they must).
    assert ranker.figures("n", verdict(*(f"gpu-{i}" for i in range(8)))) == (0, 0, 0, 1, 0)


def test_partitions_break_a_whole_gpu_and_the_whole_device_does_not():
    objects = [device_class(), node("n"), *partition_slices("n", 2)]
    ctx, _ = local_context(objects, score_policy="compact")
    ranker = CompactRanker(ctx.state, ctx.placement)

    assert ranker.figures("n", verdict("gpu-1-half-0"))[2] == 1
    assert ranker.figures("n", verdict("gpu-1"))[2] == 0
    assert ctx.placement.of("n").whole == {(DRIVER, "n", "gpu-0"), (DRIVER, "n", "gpu-1")}


def test_profiles_group_partitions_by_counter_set_and_follow_slice_changes():
    objects = [device_class(), node("n"), *partition_slices("n", 2)]
    ctx, cluster = local_context(objects, score_policy="compact")
    profile = ctx.placement.of("n")
    assert len(profile.unit_devices) == 2 and all(len(u) == 3 for u in profile.unit_devices)
    assert ctx.placement.of("n") is profile
    cluster.apply(node_slice("n", whole_gpus(1)))  # a slice of the same name, now one plain GPU
    assert len(ctx.placement.of("n").unit_devices) == 1
    assert build_profile(ctx.state.slices.for_node("n")).unit_of == ctx.placement.of("n").unit_of


def _bind(objects: list[dict[str, Any]], policy: str, node_name: str | None) -> tuple[str, list[str]]:
    """Place pod p (one claim of two GPUs) with ``policy`` (on ``node_name`` if given): node, devices."""
    ctx, cluster = local_context([*objects, claim("wanted", claim_spec(request(count=2))),
                                  pod("p", claims={"gpu": "wanted"})], score_policy=policy)
    pod_info = pod_for_request(ctx.state, dict(cluster.store.get("Pod", "default", "p") or {}))
    passed = filter_nodes(ctx, pod_info, sorted(ctx.state.nodes)).passed
    if node_name is None:
        scores = score_nodes(ctx, pod_info, passed)
        node_name = max(sorted(scores), key=scores.__getitem__)
    assert not asyncio.run(bind_pod(ctx, "default", "p", pod_info.uid, node_name))
    allocated = ctx.state.claim("default", "wanted")
    assert allocated is not None and allocated.allocation is not None
    return node_name, sorted(d.device for d in allocated.allocation.devices)


def test_the_devices_on_the_chosen_node_are_the_allocators_own():
    # compact only chooses the node: on it, the pod gets what it gets there without a score.
    objects = [
        device_class(), node("node-a"), node("node-b"),
        node_slice("node-a", whole_gpus(4, per_numa=2)), node_slice("node-b", whole_gpus(4, per_numa=2)),
        taken("on-a", "node-a", "gpu-1"), taken("on-b", "node-b", "gpu-3"),
    ]
    chosen, devices = _bind(objects, "compact", None)
    assert chosen == "node-b"
    assert _bind(objects, "none", chosen) == (chosen, devices) == ("node-b", ["gpu-0", "gpu-1"])


def shareable_gpus(count: int) -> list[dict[str, Any]]:
    """GPUs several claims may share, each taking part of the 80Gi (consumable capacity)."""
    return [
        {"name": f"gpu-{i}", "allowMultipleAllocations": True, "attributes": {NUMA: {"int": 0}},
         "capacity": {"memory": {"value": "80Gi"}}}
        for i in range(count)
    ]


def test_capacity_is_taken_from_a_device_already_shared():
    # "shared" has 10Gi of gpu-0 taken; "fresh" nothing. Binpack counts no device in use on
    # either (shares take no device away) and takes the first by name; compact shares gpu-0.
    holder = claim("other", claim_spec(request(capacity={"requests": {"memory": "10Gi"}})))
    holder["status"] = {"allocation": {"devices": {"results": [{
        "request": "gpu", "driver": DRIVER, "pool": "shared", "device": "gpu-0",
        "shareID": "5a1b3c4d-0000-4000-8000-000000000001", "consumedCapacity": {"memory": "10Gi"},
    }]}}}
    objects = [
        device_class(), node("fresh"), node("shared"),
        node_slice("fresh", shareable_gpus(2)), node_slice("shared", shareable_gpus(2)), holder,
    ]
    slice_of_memory = claim_spec(request(capacity={"requests": {"memory": "10Gi"}}))
    assert best_node(objects, "compact", slice_of_memory)[0] == "shared"
    assert best_node(objects, "binpack", slice_of_memory)[0] == "fresh"
