"""Fatal errors, node-local failures and timeouts, with the texts the scheduler reports."""

from __future__ import annotations

import time

import pytest

from extender.allocator import Features
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

SLICES = [resource_slice(devices=[dev("d0", x=1), dev("d1")])]


def fails_with(alloc_claims: list, text: str, **kwargs: object) -> str:
    alloc = allocator(kwargs.pop("slices", SLICES), **kwargs)  # type: ignore[arg-type]
    fatal = failure(alloc.allocate(node(), alloc_claims), "fatal")
    assert text in fatal.reason
    return fatal.reason


def test_cel_compile_error_names_the_class_and_selector() -> None:
    message = fails_with(
        [claim(request())],
        "class class-a: selector #1: CEL compile error:",
        classes=[device_class("class-a", "true", "noSuchVar == 1")],
    )
    assert "noSuchVar" in message


def test_cel_runtime_error_names_claim_selector_and_device() -> None:
    selectors = [
        {"cel": {"expression": "true"}},
        {"cel": {"expression": 'device.attributes["driver-a"].x == 1'}},
    ]
    fails_with(
        [claim(request(selectors=selectors))],
        "claim default/claim-0: selector #1 on device driver-a/pool-1/d1: CEL runtime error: no such key",
        slices=[resource_slice(devices=[dev("d1"), dev("d0", x=1)])],
    )


def test_runtime_error_not_raised_for_devices_an_earlier_selector_rejects() -> None:
    classes = [device_class("class-a", 'device.attributes["driver-a"].x == 1 || false')]
    # d1 lacks x, so the class selector itself fails there: fatal.
    fails_with(
        [claim(request())],
        "class class-a: selector #0 on device driver-a/pool-1/d1",
        classes=classes,
        slices=[resource_slice(devices=[dev("d1"), dev("d0", x=1)])],
    )
    # Guarded by an earlier false selector, the same expression is never evaluated on d1.
    guarded = [
        device_class(
            "class-a", '"x" in device.attributes["driver-a"]', 'device.attributes["driver-a"].x == 1'
        )
    ]
    alloc = allocator([resource_slice(devices=[dev("d1"), dev("d0", x=1)])], guarded)
    assert picked(alloc.allocate(node(), [claim(request())])) == [[("req-0", "d0")]]


def test_validation_errors() -> None:
    fails_with(
        [claim(request(cls="nope"))],
        "claim default/claim-0, request req-0: could not retrieve device class nope: "
        'deviceclasses.resource.k8s.io "nope" not found',
    )
    fails_with([claim(request(cls=""))], "request req-0: missing device class name")
    fails_with(
        [claim({"name": "bare"})], "request bare: missing device class name (unsupported request type?)"
    )
    fails_with([claim(request(allocationMode="Some"))], "request req-0: unsupported count mode Some")
    fails_with([claim(request(selectors=[{}]))], "request req-0, selector #0: CEL expression empty")
    fails_with(
        [claim(request(), constraints=[{"requests": ["req-0"]}])],
        "claim default/claim-0, constraint #0: empty constraint",
    )
    fails_with(
        [claim(request(adminAccess=False))],
        "admin access is requested, but the feature is disabled",
        gates=[],
    )
    fails_with(
        [claim({"name": "r", "firstAvailable": [{"name": "s", "deviceClassName": "class-a"}]})],
        "request r: has subrequests, but the DRAPrioritizedList feature is disabled",
        gates=[],
    )
    fails_with(
        [claim(request(capacity={"requests": {"m": "1"}}))],
        "request req-0: has capacity requests, but the DRAConsumableCapacity feature is disabled",
        gates=[],
    )
    # DRADerivedAttributes off (ALL_GATES does not name it): refused, as upstream does.
    derived = [{"name": "derived/numa", "expression": 'device.attributes["driver-a"].numa'}]
    fails_with(
        [claim(request(derivedAttributes=derived))],
        "request req-0: cannot handle request with derived attributes, the feature is disabled",
    )


def test_claim_limit_counts_the_smallest_subrequest() -> None:
    fails_with(
        [claim(request("a", count=30), request("b", count=3))],
        "claim default/claim-0: number of requested devices 33 exceeds the claim limit of 32",
    )
    prioritized = claim(
        {
            "name": "r",
            "firstAvailable": [
                {"name": "huge", "deviceClassName": "class-a", "count": 500},
                {"name": "one", "deviceClassName": "class-a"},
            ],
        }
    )
    assert picked(allocator(SLICES).allocate(node(), [prioritized])) == [[("r/one", "d0")]]


def test_all_mode_refuses_incomplete_pools_and_constraint_conflicts() -> None:
    incomplete = [*SLICES, resource_slice("other", [dev("o")], driver="driver-b", pool="p", count=2)]
    fails_with(
        [claim(request(allocationMode="All"))],
        "claim default/claim-0, request req-0: asks for all devices, "
        "but resource pool driver-b/p is currently being updated",
        slices=incomplete,
    )
    mixed = [resource_slice(devices=[dev("d0", x=1), dev("d1", x=2)])]
    fails_with(
        [claim(request(allocationMode="All"), constraints=[{"matchAttribute": "driver-a/x"}])],
        "request req-0: cannot add device driver-a/pool-1/d1 "
        "because a claim constraint would not be satisfied",
        slices=mixed,
    )


def test_invalid_pool_only_fails_the_node_when_nothing_else_fits() -> None:
    duplicate = resource_slice("dup", [dev("x"), dev("x")], pool="bad")
    alloc = allocator([*SLICES, duplicate])
    assert picked(alloc.allocate(node(), [claim(request(count=2))])) == [[("req-0", "d0"), ("req-0", "d1")]]
    unusable = failure(alloc.allocate(node(), [claim(request(count=3))]), "unavailable")
    assert "invalid resource pools were encountered" in unusable.reason


def test_deadline_in_the_past_times_out() -> None:
    alloc = allocator(SLICES, deadline=time.monotonic() - 1)
    assert "filter operation aborted" in failure(alloc.allocate(node(), [claim(request())]), "timeout").reason


def test_feature_gate_names() -> None:
    features = Features.from_gate_names(
        ["DRAAdminAccess", "DRADeviceTaintRules", "DynamicResourceAllocation"]
    )
    assert features.admin_access and not features.device_taints
    assert not Features.from_gate_names(["DRADeviceBindingConditions"]).binding
    with pytest.raises(ValueError, match="unknown DRA feature gate 'DRAAdminAcess'"):
        Features.from_gate_names(["DRAAdminAcess"])
