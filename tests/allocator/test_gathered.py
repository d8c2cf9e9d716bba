"""Gathered pools kept across allocators (``GatheredPools``): used only where they are the
allocator's own, and gathered again for a node object they were not gathered for."""

from __future__ import annotations

from extender.allocator import AllocatedState, Allocator, Features, SliceList
from extender.allocator.alike import GatheredPools
from extender.cel.environment import Environment
from extender.model import ResourceSlice
from tests.allocator.builders import (
    ALL_GATES,
    claim,
    dev,
    device_class,
    node,
    picked,
    request,
    resource_slice,
)

FEATURES = Features.from_gate_names(ALL_GATES)


def _allocator(source: SliceList, gathered: GatheredPools, features: Features = FEATURES) -> Allocator:
    classes = {"class-a": device_class()}
    return Allocator(features, AllocatedState(), classes, source, Environment.create(), gathered=gathered)


def _labelled_slice() -> ResourceSlice:
    selector = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["yes"]}]}]
    }
    return resource_slice("s", [dev("gpu-0")], pool="shared", nodeSelector=selector)


def test_a_later_allocator_reads_the_pools_an_earlier_one_gathered() -> None:
    source = SliceList([resource_slice("s", [dev("gpu-0")], node_name="node-1")])
    gathered = GatheredPools(source, FEATURES)
    target = node("node-1")
    assert picked(_allocator(source, gathered).allocate(target, [claim(request())])) == [[("req-0", "gpu-0")]]
    first = gathered.for_node(target)
    assert picked(_allocator(source, gathered).allocate(target, [claim(request())])) == [[("req-0", "gpu-0")]]
    assert gathered.for_node(target) is first and len(gathered) == 1


def test_a_node_object_that_differs_is_gathered_for_itself() -> None:
    source = SliceList([_labelled_slice()])
    gathered = GatheredPools(source, FEATURES)
    labelled, unlabelled = node("node-1", gpu="yes"), node("node-1")
    claims = [claim(request())]
    assert picked(_allocator(source, gathered).allocate(labelled, claims)) == [[("req-0", "gpu-0")]]
    # The same name with other labels (a request's newer copy): the slice no longer selects it.
    assert _allocator(source, gathered).allocate(unlabelled, claims).kind == "nofit"
    assert picked(_allocator(source, gathered).allocate(labelled, claims)) == [[("req-0", "gpu-0")]]


def test_pools_over_other_slices_or_gates_are_not_used() -> None:
    old = SliceList([resource_slice("s", [dev("gpu-0")], node_name="node-1")])
    gathered = GatheredPools(old, FEATURES)
    gathered.fill([node("node-1")])
    new = SliceList([resource_slice("s", [dev("gpu-7")], node_name="node-1")])
    assert picked(_allocator(new, gathered).allocate(node("node-1"), [claim(request())])) == [
        [("req-0", "gpu-7")]
    ]
    # Without the partitionable-devices gate, a slice with shared counters is not seen at all.
    counters = [{"name": "set", "counters": {"mem": {"value": "8"}}}]
    partitioned = SliceList(
        [resource_slice("s", [dev("gpu-0")], node_name="node-1", sharedCounters=counters)]
    )
    fewer = Features.from_gate_names([g for g in ALL_GATES if g != "DRAPartitionableDevices"])
    everything = GatheredPools(partitioned, FEATURES)
    everything.fill([node("node-1")])
    outcome = _allocator(partitioned, everything, fewer).allocate(node("node-1"), [claim(request())])
    assert outcome.kind == "nofit"


def test_fill_gathers_each_node_and_its_shape_once() -> None:
    source = SliceList(
        [resource_slice(f"s{i}", [dev("gpu-0")], pool=f"p{i}", node_name=f"node-{i}") for i in range(3)]
    )
    gathered = GatheredPools(source, FEATURES)
    nodes = [node(f"node-{i}") for i in range(3)]
    gathered.fill(nodes)
    entries = [gathered.for_node(n) for n in nodes]
    assert len(gathered) == 3
    assert [e.shape().prefixes for e in entries] == [entries[0].shape().prefixes] * 3  # alike: one numbering
    assert [e.only_here().terms[0].match_fields[0].values for e in entries] == [(n.name,) for n in nodes]
