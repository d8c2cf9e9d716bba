"""A cached slice holds each repeated subtree once, and stays the object it was given."""

from __future__ import annotations

import copy
import gc
import weakref
from typing import Any

import pytest

from extender.cel.environment import Environment
from extender.model import Device
from extender.model._shared import shared_json
from extender.state import ClusterState
from tests.scheduling.cluster import gpu, node_slice


def test_shared_json_is_equal_and_makes_equal_subtrees_one_object():
    a = {"x": {"string": "H100"}, "n": [1, 2]}
    b = {"x": {"string": "H100"}, "n": [1, 2]}
    obj = {"a": a, "b": b, "c": {"x": {"string": "A100"}, "n": [1, 2]}}
    out = shared_json(copy.deepcopy(obj))
    assert out == obj
    assert out["a"] is out["b"]
    assert out["a"]["n"] is out["c"]["n"]
    assert out["a"]["x"] is not out["c"]["x"]


def test_shared_json_keeps_json_types_apart():
    # 1 == 1.0 == True in Python, but they are different JSON values.
    out = shared_json([{"v": 1}, {"v": 1.0}, {"v": True}, {"v": None}, {"v": 1}])
    assert [type(d["v"]) for d in out] == [int, float, bool, type(None), int]
    assert out[0] is out[4] and out[0] is not out[1] and out[0] is not out[2]


def test_shared_json_leaves_what_is_not_plain_json():
    odd = ({"a": 1},)  # unhashable, not JSON: parsing is left to judge it
    out = shared_json({"k": odd})
    assert out["k"] is odd


def test_cached_slice_shares_repeated_maps_and_their_parsed_form():
    devices = [gpu(f"gpu-{i}", root="pci-0") for i in range(3)] + [gpu("gpu-3", root="pci-1")]
    obj = node_slice("node-0", devices)
    given = copy.deepcopy(obj)
    state = ClusterState()
    state.apply("ResourceSlice", obj)
    raw = state.raw("ResourceSlice", ("", obj["metadata"]["name"]))
    assert raw == given
    parsed = state.slices.by_name[obj["metadata"]["name"]].devices
    assert parsed[0].attributes is parsed[1].attributes is parsed[2].attributes
    assert parsed[0].typed_attributes is parsed[2].typed_attributes
    assert parsed[0].capacities is parsed[3].capacities  # same memory, other pcieRoot
    assert parsed[3].attributes is not parsed[0].attributes
    assert parsed[3].attribute("resource.kubernetes.io/pcieRoot").values == ("pci-1",)
    assert [d.name for d in parsed] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


def test_cache_does_not_hold_the_callers_slice_object():
    obj = node_slice("node-0", [gpu("gpu-0"), gpu("gpu-1")])
    state = ClusterState()
    state.apply("ResourceSlice", obj)
    obj["spec"]["devices"][0]["capacity"]["memory"]["value"] = "1Gi"
    raw = state.raw("ResourceSlice", ("", obj["metadata"]["name"]))
    assert raw["spec"]["devices"][0]["capacity"]["memory"]["value"] == "40Gi"


def test_errors_still_name_the_first_bad_device():
    good = gpu("gpu-0")
    bad = gpu("gpu-1")
    bad["attributes"]["resource.kubernetes.io/pcieRoot"] = {"int": "zero"}
    where = r"spec\.devices\[1\]\.attributes\[resource\.kubernetes\.io/pcieRoot\]"
    with pytest.raises(ValueError, match=where):
        ClusterState().apply("ResourceSlice", node_slice("node-0", [good, bad, copy.deepcopy(bad)]))


def test_devices_alike_for_cel_share_one_memo():
    alike = [gpu(f"gpu-{i}") for i in range(2)]
    multi = {**gpu("gpu-2"), "allowMultipleAllocations": True}
    other_root = gpu("gpu-3", root="pci-1")
    obj = node_slice("node-0", [*alike, multi, other_root])
    state = ClusterState()
    state.apply("ResourceSlice", obj)
    devices = state.slices.by_name[obj["metadata"]["name"]].devices
    assert devices[0].cel_memo is devices[1].cel_memo
    # CEL sees allowMultipleAllocations and every attribute: those devices keep their own memo.
    assert devices[2].cel_memo is not devices[0].cel_memo
    assert devices[3].cel_memo is not devices[0].cel_memo


def test_a_selector_is_evaluated_once_for_devices_alike():
    obj = node_slice("node-0", [gpu(f"gpu-{i}") for i in range(4)] + [gpu("gpu-4", memory="80Gi")])
    state = ClusterState()
    state.apply("ResourceSlice", obj)
    cel = Environment.create()
    expression = 'device.capacity["gpu.example.com"].memory.compareTo(quantity("50Gi")) < 0'
    selector = cel.compile_selector(expression)
    verdicts = [selector.matches(d) for d in state.slices.by_name[obj["metadata"]["name"]].devices]
    assert verdicts == [True, True, True, True, False]
    assert cel.stats.evaluations == 2


def _devices(state: ClusterState, obj: dict[str, Any]) -> tuple[Device, ...]:
    return state.slices.by_name[obj["metadata"]["name"]].devices


def test_devices_alike_in_different_slices_share_one_memo():
    # Nodes built alike publish the same devices: CEL must run once per content, not per node.
    slices = [node_slice(f"node-{n}", [gpu("gpu-0"), gpu("gpu-1", root="pci-1")]) for n in range(3)]
    state = ClusterState()
    for obj in slices:
        state.apply("ResourceSlice", obj)
    devices = [_devices(state, obj) for obj in slices]
    assert devices[0][0].cel_memo is devices[1][0].cel_memo is devices[2][0].cel_memo
    assert devices[0][1].cel_memo is devices[2][1].cel_memo
    assert devices[0][0].cel_memo is not devices[0][1].cel_memo
    cel = Environment.create()
    selector = cel.compile_selector('device.attributes["resource.kubernetes.io"].pcieRoot == "pci-1"')
    assert [selector.matches(d) for ds in devices for d in ds] == [False, True] * 3
    assert cel.stats.evaluations == 2


def test_what_cel_sees_keeps_memos_apart_across_slices():
    base = node_slice("node-0", [gpu("gpu-0")])
    other_driver = copy.deepcopy(node_slice("node-1", [gpu("gpu-0")]))
    other_driver["metadata"]["name"] = "node-1-other"
    other_driver["spec"]["driver"] = "other.example.com"
    multi = node_slice("node-2", [{**gpu("gpu-0"), "allowMultipleAllocations": True}])
    # Same maps in another order: the view keeps the order, so they are not shared.
    reordered = node_slice("node-3", [{"name": "gpu-0", "attributes": {}, "capacity": {}}])
    reordered["spec"]["devices"][0]["attributes"] = {"b": {"int": 1}, "a": {"int": 1}}
    in_order = node_slice("node-4", [{"name": "gpu-0", "attributes": {"a": {"int": 1}, "b": {"int": 1}}}])
    # 1 and 1.0 are different JSON values, and an unknown member is CEL's business.
    as_float = node_slice("node-5", [{"name": "gpu-0", "attributes": {"x": {"other": 1.0}}}])
    as_int = node_slice("node-6", [{"name": "gpu-0", "attributes": {"x": {"other": 1}}}])
    objs = [base, other_driver, multi, reordered, in_order, as_float, as_int]
    state = ClusterState()
    for obj in objs:
        state.apply("ResourceSlice", obj)
    memos = [_devices(state, obj)[0].cel_memo for obj in objs]
    assert len({id(m) for m in memos}) == len(memos)


def test_a_memo_outlives_no_device():
    state = ClusterState()
    obj = node_slice("node-0", [gpu("gpu-0", root="pci-lonely")])
    state.apply("ResourceSlice", obj)
    memo = weakref.ref(_devices(state, obj)[0].cel_memo)
    state.delete("ResourceSlice", obj)
    gc.collect()
    assert memo() is None
