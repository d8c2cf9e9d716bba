"""Small builders for API-shaped dicts, so each test states only what it is about."""

from __future__ import annotations

from typing import Any

from extender.allocator import AllocatedState, Allocator, Failure, Features, SliceList
from extender.cel.environment import Environment
from extender.model import (
    AllocationResult,
    DeviceClass,
    Node,
    ResourceClaim,
    ResourceSlice,
    holdings,
    parse_device_class,
    parse_node,
    parse_resource_claim,
    parse_resource_slice,
)
from extender.model.features import DEFAULT_RELEASE

ALL_GATES = [
    "DRAAdminAccess",
    "DRAPrioritizedList",
    "DRAPartitionableDevices",
    "DRADeviceTaints",
    "DRAConsumableCapacity",
    "DRADeviceBindingConditions",
    "DRAResourceClaimDeviceStatus",
]


def node(name: str = "node-1", **labels: str) -> Node:
    return parse_node({"metadata": {"name": name, "labels": labels}})


def device_class(name: str = "class-a", *selectors: str, config: list[Any] | None = None) -> DeviceClass:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": s}} for s in selectors]}
    if config:
        spec["config"] = config
    return parse_device_class({"metadata": {"name": name}, "spec": spec})


def dev(name: str, **attrs: Any) -> dict[str, Any]:
    """A device whose keyword arguments become attributes, typed by their Python type."""
    kinds = {bool: "bool", int: "int", str: "string"}
    return {"name": name, "attributes": {k: {kinds[type(v)]: v} for k, v in attrs.items()}}


def resource_slice(
    name: str = "slice-1",
    devices: list[dict[str, Any]] | None = None,
    *,
    driver: str = "driver-a",
    pool: str = "pool-1",
    generation: int = 1,
    count: int = 1,
    node_name: str | None = "node-1",
    **spec: Any,
) -> ResourceSlice:
    body: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
        "devices": devices if devices is not None else [],
        **spec,
    }
    if node_name is not None and not ({"nodeSelector", "allNodes", "perDeviceNodeSelection"} & spec.keys()):
        body["nodeName"] = node_name
    return parse_resource_slice({"metadata": {"name": name}, "spec": body})


def request(
    name: str = "req-0", cls: str = "class-a", count: int | None = None, **exactly: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": cls, **exactly}
    if count is not None:
        body["count"] = count
    return {"name": name, "exactly": body}


def claim(
    *requests: dict[str, Any], name: str = "claim-0", constraints: list[Any] | None = None, **devices: Any
) -> ResourceClaim:
    body: dict[str, Any] = {"requests": list(requests), **devices}
    if constraints:
        body["constraints"] = constraints
    return parse_resource_claim(
        {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}, "spec": {"devices": body}}
    )


def allocator(
    slices: list[ResourceSlice],
    classes: list[DeviceClass] | None = None,
    gates: list[str] | None = None,
    state: AllocatedState | None = None,
    deadline: float | None = None,
    cel: Environment | None = None,
    release: str = DEFAULT_RELEASE,
) -> Allocator:
    """An allocator over ``slices`` as ``release``'s kube-scheduler allocates; without ``cel``,
    in a CEL environment of its own."""
    classes = classes if classes is not None else [device_class()]
    return Allocator(
        Features.from_gate_names(ALL_GATES if gates is None else gates, release),
        state or AllocatedState(),
        {c.name: c for c in classes},
        SliceList(slices),
        cel or Environment.create(),
        deadline,
    )


def allocated(*allocations: AllocationResult, gates: list[str] | None = None) -> AllocatedState:
    """What existing allocations hold, accounted as the service accounts them (``holdings``)."""
    features = Features.from_gate_names(ALL_GATES if gates is None else gates)
    return AllocatedState.from_holdings(holdings(a, features) for a in allocations)


def failure(results: Any, kind: str = "nofit") -> Failure:
    """``results`` as the failure of ``kind`` they must be."""
    assert isinstance(results, Failure), results
    assert results.kind == kind, results
    return results


def picked(results: Any) -> list[list[tuple[str, str]]]:
    """Per claim: (request, device) pairs in result order."""
    assert not isinstance(results, Failure), results
    return [[(r.request, r.device) for r in result.devices] for result in results]
