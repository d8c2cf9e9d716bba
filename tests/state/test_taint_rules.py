"""DeviceTaintRules in the cache: the allocator sees slices with the rules' taints appended."""

from __future__ import annotations

from typing import Any

from extender.model import Features
from extender.state import ClusterState
from tests.scheduling.cluster import (
    DRIVER,
    Service,
    claim,
    claim_spec,
    filter_call,
    gpu_cluster,
    pod,
    request,
    schedule,
)


def rule(name: str, effect: str = "NoSchedule", **selector: str) -> dict[str, Any]:
    # An empty deviceSelector selects every device.
    spec: dict[str, Any] = {
        "taint": {"key": "maintenance", "value": name, "effect": effect},
        "deviceSelector": selector,
    }
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": name},
            "spec": spec}


def taints(state: ClusterState, slice_name: str) -> dict[str, list[str]]:
    """Device name -> the values of the taints the allocator sees on it."""
    return {d.name: [t.value for t in d.taints] for d in state.slices.by_name[slice_name].devices}


def loaded(*objs: dict[str, Any], features: Features | None = None) -> ClusterState:
    state = ClusterState(features or Features.defaults())
    for obj in objs:
        state.apply(obj["kind"], obj)
    return state


def test_a_rule_taints_the_devices_its_selector_names_in_rule_order() -> None:
    cluster = gpu_cluster(nodes=2, per_node=2)
    state = loaded(*cluster, rule("all"), rule("one", device="gpu-1", pool="node-0"))
    assert taints(state, f"node-0-{DRIVER}") == {"gpu-0": ["all"], "gpu-1": ["all", "one"]}
    assert taints(state, f"node-1-{DRIVER}") == {"gpu-0": ["all"], "gpu-1": ["all"]}


def test_a_slice_arriving_after_the_rule_is_tainted_and_the_published_one_is_kept() -> None:
    cluster = gpu_cluster(nodes=1, per_node=1)
    state = loaded(rule("drain", driver=DRIVER), *cluster)
    assert taints(state, f"node-0-{DRIVER}") == {"gpu-0": ["drain"]}
    # /debug and relists see the slice as its driver wrote it.
    assert "taints" not in state.raw("ResourceSlice", ("", f"node-0-{DRIVER}"))["spec"]["devices"][0]


def test_changing_or_deleting_a_rule_re_taints_and_changes_the_node_version() -> None:
    state = loaded(*gpu_cluster(nodes=1, per_node=2), rule("r", device="gpu-0"))
    before = state.node_version("node-0")
    state.apply("DeviceTaintRule", rule("r", device="gpu-1"))
    assert taints(state, f"node-0-{DRIVER}") == {"gpu-0": [], "gpu-1": ["r"]}
    assert state.node_version("node-0") != before
    state.delete("DeviceTaintRule", rule("r"))
    assert taints(state, f"node-0-{DRIVER}") == {"gpu-0": [], "gpu-1": []}
    assert state.counts()["DeviceTaintRule"] == 0


def test_rules_are_ignored_when_either_taint_gate_is_off() -> None:
    for gate in ("DRADeviceTaints", "DRADeviceTaintRules"):
        state = loaded(*gpu_cluster(nodes=1, per_node=1), rule("r"), features=Features.parse(f"{gate}=false"))
        assert taints(state, f"node-0-{DRIVER}") == {"gpu-0": []}
        assert state.counts()["DeviceTaintRule"] == 1


def test_a_tainted_device_is_not_allocated_unless_the_request_tolerates_it() -> None:
    tolerant = request(tolerations=[{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}])
    svc = Service([
        *gpu_cluster(nodes=2, per_node=1),
        rule("drain-node-0", pool="node-0"),
        claim("plain"), claim("tolerant", claim_spec(tolerant)),
        pod("p", claims={"gpu": "plain"}), pod("t", claims={"gpu": "tolerant"}),
    ])

    async def flow(client: Any) -> None:
        result = await filter_call(client, svc.pod("p"), ["node-0", "node-1"])
        assert result["NodeNames"] == ["node-1"]
        assert "node-0" in {**result["FailedNodes"], **result["FailedAndUnresolvableNodes"]}
        placed, why = await schedule(client, svc.pod("t"), ["node-0"])
        assert placed == "node-0", why
        tolerations = svc.claims()["tolerant"]["status"]["allocation"]["devices"]["results"][0]["tolerations"]
        assert tolerations == [{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}]

    svc.run(flow)
