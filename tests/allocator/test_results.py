"""Result assembly: node selectors of network-attached devices, config, the reason of a failure."""

from __future__ import annotations

from extender.allocator import AllocatedState, Failure
from tests.allocator.builders import (
    allocator,
    claim,
    dev,
    device_class,
    failure,
    node,
    picked,
    request,
    resource_slice,
)


def selector(*expressions: dict) -> dict:
    return {"nodeSelectorTerms": [{"matchExpressions": list(expressions)}]}


RACK = {"key": "rack", "operator": "In", "values": ["r1", "r2"]}
RACK_REORDERED = {"key": "rack", "operator": "In", "values": ["r2", "r1"]}
ZONE = {"key": "zone", "operator": "Exists"}


def test_network_attached_selectors_are_merged_into_one_term_without_duplicates() -> None:
    slices = [
        resource_slice("a", [dev("n0")], pool="p0", nodeSelector=selector(RACK)),
        resource_slice("b", [dev("n1")], pool="p1", nodeSelector=selector(RACK_REORDERED, ZONE)),
    ]
    results = allocator(slices).allocate(node(rack="r1", zone="z"), [claim(request(count=2))])
    assert not isinstance(results, Failure)
    assert results[0].to_api()["nodeSelector"] == {"nodeSelectorTerms": [{"matchExpressions": [RACK, ZONE]}]}


def test_node_local_device_pins_the_claim_to_the_node() -> None:
    slices = [
        resource_slice("a", [dev("n0")], pool="p0", nodeSelector=selector(RACK)),
        resource_slice("b", [dev("local")], pool="p1"),
    ]
    results = allocator(slices).allocate(node(rack="r1"), [claim(request(count=2))])
    assert not isinstance(results, Failure)
    assert results[0].to_api()["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}
        ]
    }


def test_all_nodes_devices_need_no_selector() -> None:
    results = allocator([resource_slice(devices=[dev("d")], allNodes=True)]).allocate(
        node(), [claim(request())]
    )
    assert not isinstance(results, Failure) and results[0].node_selector is None
    assert "nodeSelector" not in results[0].to_api()


def test_binds_to_node_pins_even_a_network_device() -> None:
    device = {"name": "d", "bindsToNode": True}
    results = allocator([resource_slice(devices=[device], allNodes=True)]).allocate(
        node("n7"), [claim(request())]
    )
    assert not isinstance(results, Failure)
    assert results[0].to_api()["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n7"]


def test_selector_with_two_terms_is_a_fatal_error() -> None:
    two = {"nodeSelectorTerms": [{"matchExpressions": [RACK]}, {"matchExpressions": [ZONE]}]}
    alloc = allocator([resource_slice(devices=[dev("d")], nodeSelector=two)])
    fatal = failure(alloc.allocate(node(rack="r1"), [claim(request())]), "fatal")
    assert "unsupported ResourceSlice.NodeSelector with 2 terms" in fatal.reason


def test_malformed_slice_selector_is_a_fatal_error() -> None:
    bad = selector({"key": "rack", "operator": "Near", "values": ["r1"]})
    alloc = allocator([resource_slice(devices=[dev("d")], nodeSelector=bad)])
    fatal = failure(alloc.allocate(node(rack="r1"), [claim(request())]), "fatal")
    assert "failed to perform node selection for slice slice-1" in fatal.reason


def test_per_device_node_selection() -> None:
    devices = [
        {"name": "elsewhere", "nodeName": "node-2"},
        {"name": "here", "nodeName": "node-1"},
        {"name": "rack", "nodeSelector": selector(RACK)},
    ]
    alloc = allocator([resource_slice(devices=devices, perDeviceNodeSelection=True)])
    results = alloc.allocate(node(rack="r2"), [claim(request(count=2))])
    assert picked(results) == [[("req-0", "here"), ("req-0", "rack")]]
    assert not isinstance(results, Failure) and results[0].node_selector is not None
    assert results[0].node_selector.terms[0].match_fields[0].values == ("node-1",)


def test_class_config_deduplicated_per_class_and_claim_config_normalised() -> None:
    opaque = {"opaque": {"driver": "driver-a", "parameters": {"k": 1}}}
    classes = [device_class("class-a", config=[opaque]), device_class("class-b", config=[opaque])]
    slices = [resource_slice(devices=[dev("d0"), dev("d1"), dev("d2")])]
    c = claim(
        request("req-0"),
        request("req-1"),
        request("req-2", cls="class-b"),
        config=[
            {"requests": ["req-0", "req-1", "req-2"], **opaque},
            {"requests": ["req-2"], **opaque},
            {"requests": ["missing"], **opaque},
        ],
    )
    results = allocator(slices, classes).allocate(node(), [c])
    assert not isinstance(results, Failure)
    config = results[0].to_api()["devices"]["config"]
    assert [(e["source"], e.get("requests")) for e in config] == [
        ("FromClass", ["req-0", "req-1"]),
        ("FromClass", ["req-2"]),
        ("FromClaim", None),
        ("FromClaim", ["req-2"]),
    ]


def test_a_failure_explains_devices_in_use() -> None:
    slices = [resource_slice(devices=[dev("d0"), dev("d1")])]
    state = AllocatedState(allocated_devices={("driver-a", "pool-1", "d0"), ("driver-a", "pool-1", "d1")})
    alloc = allocator(slices, state=state)
    nofit = failure(alloc.allocate(node(), [claim(request(name="gpu"), name="x")]))
    assert (
        nofit.naming(["default/x"]).reason
        == "claim default/x, request gpu: 0 of 1 devices available (2 match the selectors, 2 in use)"
    )


def test_a_failure_when_only_the_combination_fails_names_the_claims_by_position() -> None:
    slices = [resource_slice(devices=[dev("d0", numa=0), dev("d1", numa=1)])]
    c = claim(request(count=2), constraints=[{"matchAttribute": "driver-a/numa"}])
    alloc = allocator(slices)
    nofit = failure(alloc.allocate(node(), [c]))
    assert "default/" not in nofit.reason  # shared between pods asking alike: no names of its own
    assert nofit.naming(["ns/mine"]).reason == (
        "claims ns/mine: no combination of devices satisfies all requests and constraints"
    )


def test_a_failure_mentions_pools_being_updated_and_taints() -> None:
    slices = [
        resource_slice(devices=[{"name": "d0", "taints": [{"key": "k", "effect": "NoSchedule"}]}]),
        resource_slice("partial", [dev("p0")], pool="pool-2", count=2),
    ]
    alloc = allocator(slices)
    nofit = failure(alloc.allocate(node(), [claim(request())]))
    assert nofit.naming(["default/claim-0"]).reason == (
        "claim default/claim-0, request req-0: 0 of 1 devices available (1 match the selectors, 0 in use, "
        "1 tainted); resource pools being updated: driver-a/pool-2"
    )
