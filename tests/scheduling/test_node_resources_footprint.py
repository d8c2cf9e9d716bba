"""What one claim costs the node, device by device (upstream's buildNodeAllocatableDRAInfo and
addDeviceMapping, kubernetes/kubernetes nodeallocatabledynamicresources.go, v1.37.2)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.model import Features
from extender.model.quantity import Quantity
from extender.scheduling.node_resources.footprint import footprints
from tests.scheduling.cluster import DRIVER, claim, local_context, node, node_slice, pod

ON = Features.parse("DRANodeAllocatableResources=true,DRAConsumableCapacity=true", "1.37")


def q(text: str) -> Quantity:
    return Quantity.parse(text)


def _footprints(device: dict[str, Any], result_extra: dict[str, Any] | None = None, containers: int = 1):
    objs = [node("node-0"), node_slice("node-0", [device]), claim("c")]
    p = pod("p", claims={"dev": "c"})
    p["spec"]["containers"] = [
        {"name": f"c{i}", "image": "img", "resources": {"claims": [{"name": "dev"}]}}
        for i in range(containers)
    ]
    objs.append(p)
    result = {
        "request": "gpu",
        "driver": DRIVER,
        "pool": "node-0",
        "device": device["name"],
        **(result_extra or {}),
    }
    objs[2]["status"] = {"allocation": {"devices": {"results": [result]}}}
    ctx, _ = local_context(objs, feature_gates=ON)
    state = ctx.state
    c = state.claim("default", "c")
    assert c is not None and c.allocation is not None
    return footprints(state, state.pods[("default", "p")], state.nodes["node-0"], [(c, c.allocation)])


def test_capacity_times_its_multiplier_maps_to_the_node_resource():
    device = {
        "name": "mem-0",
        "capacity": {"size": {"value": "8Gi"}},
        "allowMultipleAllocations": True,
        "nodeAllocatableResources": {
            "memory": {"mapping": {"capacityKey": "size", "capacityMultiplier": "1500m"}}
        },
    }
    (found,) = _footprints(device, {"consumedCapacity": {"size": "2Gi"}}, containers=2)
    assert found.to_api() == {
        "resourceClaimName": "c",
        "containers": ["c0", "c1"],
        "mapping": [{"name": "memory", "quantity": "3Gi"}],
        "overhead": [],
    }


def test_a_capacity_key_without_consumed_capacity_fails_the_node():
    device = {"name": "mem-0", "nodeAllocatableResources": {"memory": {"mapping": {"capacityKey": "size"}}}}
    with pytest.raises(ValueError, match="ConsumedCapacity is nil, but Capacity key 'size' is set"):
        _footprints(device)


def test_a_capacity_the_allocation_did_not_consume_adds_nothing():
    device = {
        "name": "mem-0",
        "nodeAllocatableResources": {
            "memory": {"mapping": {"capacityKey": "size"}},
            "cpu": {"overhead": {"perPod": "100m"}},
        },
    }
    (found,) = _footprints(device, {"consumedCapacity": {"other": "1"}})
    assert found.to_api()["mapping"] == []
    assert found.to_api()["overhead"] == [{"name": "cpu", "perPod": "100m"}]


def test_a_claim_without_node_resources_has_no_footprint():
    assert _footprints({"name": "gpu-0"}) == ()


def test_a_capacity_key_is_looked_up_as_written():
    """kube-scheduler 1.37.2 does not qualify the key with the driver's name."""
    device = {
        "name": "cpu-0",
        "nodeAllocatableResources": {
            "cpu": {"mapping": {"capacityKey": f"{DRIVER}/cores"}},
            "memory": {"overhead": {"perPod": "1Mi"}},
        },
    }
    (found,) = _footprints(device, {"consumedCapacity": {"cores": "4"}})
    assert found.to_api()["mapping"] == []
    assert found.to_api()["overhead"] == [{"name": "memory", "perPod": "1Mi"}]
