"""Pods asking for DRA-backed extended resources, through the HTTP app on a local cluster."""

from __future__ import annotations

from typing import Any

from tests.scheduling.cluster import (
    DRIVER,
    Service,
    bind_call,
    device_class,
    filter_call,
    gpus,
    node,
    node_slice,
    pod,
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


def test_resource_only_dra_provides_is_never_passed_silently():
    objs = [mapped_class(), node("n"), node_slice("n", gpus(2)), extended_pod("p", {RESOURCE: "1"})]
    svc = Service(objs)
    p = svc.pod("p")

    async def flow(client):
        return await filter_call(client, p, ["n"]), await bind_call(client, p, "n")

    result, error = svc.run(flow)
    assert result["NodeNames"] == []
    assert RESOURCE in result["FailedAndUnresolvableNodes"]["n"]
    assert RESOURCE in error
    assert svc.state.pod("default", "p").node_name == ""
