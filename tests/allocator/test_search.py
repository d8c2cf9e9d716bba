"""Search order and backtracking: results must match upstream device for device."""

from __future__ import annotations

from typing import Any

import pytest

from extender.allocator import AllocatedState, Failure
from tests.allocator.builders import (
    allocator,
    claim,
    dev,
    device_class,
    node,
    picked,
    request,
    resource_slice,
)


def test_pools_sorted_by_driver_then_name_slices_by_name_binding_pools_last() -> None:
    slices = [
        resource_slice("z-slice", [dev("b1")], driver="drv-b", pool="p"),
        resource_slice("s2", [dev("a3"), dev("a2")], pool="p2", count=2),
        resource_slice("s1", [dev("a4")], pool="p2", count=2),
        resource_slice("late", [{"name": "c1", "bindingConditions": ["ready"]}], driver="drv-0", pool="p"),
        resource_slice("early", [dev("a1")], pool="p1"),
    ]
    classes = [device_class("class-a")]
    alloc = allocator(slices, classes)
    got = picked(alloc.allocate(node(), [claim(request(count=6))]))
    assert [d for _, d in got[0]] == ["a1", "a4", "a3", "a2", "b1", "c1"]


def test_backtracks_to_give_the_larger_device_to_the_stricter_request() -> None:
    slices = [resource_slice(devices=[dev("big", size=2), dev("small", size=1)])]
    claims = [
        claim(
            request("req-0", selectors=[{"cel": {"expression": 'device.attributes["driver-a"].size >= 1'}}]),
            request("req-1", selectors=[{"cel": {"expression": 'device.attributes["driver-a"].size >= 2'}}]),
        )
    ]
    assert picked(allocator(slices).allocate(node(), claims)) == [[("req-0", "small"), ("req-1", "big")]]


def test_match_attribute_backtracks_within_request_in_ascending_order() -> None:
    slices = [
        resource_slice(devices=[dev("d0", numa=0), dev("d1", numa=1), dev("d2", numa=2), dev("d3", numa=1)])
    ]
    c = claim(request(count=2), constraints=[{"matchAttribute": "driver-a/numa"}])
    assert picked(allocator(slices).allocate(node(), [c])) == [[("req-0", "d1"), ("req-0", "d3")]]


def test_devices_in_use_or_picked_by_earlier_claims_are_skipped() -> None:
    slices = [resource_slice(devices=[dev("d0"), dev("d1"), dev("d2")])]
    state = AllocatedState(allocated_devices={("driver-a", "pool-1", "d0")})
    claims = [claim(request(), name="first"), claim(request(), name="second")]
    assert picked(allocator(slices, state=state).allocate(node(), claims)) == [
        [("req-0", "d1")],
        [("req-0", "d2")],
    ]


def test_whole_remaining_search_decides_the_subrequest() -> None:
    # Taking the big device for req-0 first would starve req-1, so req-0 falls back to "small".
    slices = [resource_slice(devices=[dev("big", size=2), dev("small", size=1)])]
    big = [{"cel": {"expression": 'device.attributes["driver-a"].size >= 2'}}]
    claims = [
        claim(
            {
                "name": "req-0",
                "firstAvailable": [
                    {"name": "large", "deviceClassName": "class-a", "selectors": big},
                    {"name": "any", "deviceClassName": "class-a"},
                ],
            },
            request("req-1", selectors=big),
        )
    ]
    results = allocator(slices).allocate(node(), claims)
    assert picked(results) == [[("req-0/any", "small"), ("req-1", "big")]]


def test_subrequest_over_the_result_limit_falls_through_to_the_next() -> None:
    slices = [resource_slice(devices=[dev(f"d{i}") for i in range(40)])]
    claims = [
        claim(
            request("req-0", count=20),
            {
                "name": "req-1",
                "firstAvailable": [
                    {"name": "many", "deviceClassName": "class-a", "count": 13},
                    {"name": "few", "deviceClassName": "class-a", "count": 12},
                ],
            },
        )
    ]
    got = picked(allocator(slices).allocate(node(), claims))[0]
    assert len(got) == 32
    assert {r for r, _ in got[20:]} == {"req-1/few"}


def test_admin_access_takes_devices_in_use_but_not_twice_in_one_claim() -> None:
    slices = [resource_slice(devices=[dev("d0"), dev("d1")])]
    state = AllocatedState(allocated_devices={("driver-a", "pool-1", "d0")})
    admin = claim(request("a", adminAccess=True), request("b", adminAccess=True))
    results = allocator(slices, state=state).allocate(node(), [admin])
    assert picked(results) == [[("a", "d0"), ("b", "d1")]]
    assert not isinstance(results, Failure) and all(r.admin_access for r in results[0].devices)
    assert results[0].to_api()["devices"]["results"][0]["adminAccess"] is True


def test_distinct_attribute_remembered_only_the_last_device_per_request_before_1_37() -> None:
    # 1.34 to 1.36: values [a, b, a] pass for one request of count 3; 1.37 compares with all.
    slices = [resource_slice(devices=[dev("d0", m="a"), dev("d1", m="b"), dev("d2", m="a")])]
    c = claim(request(count=3), constraints=[{"distinctAttribute": "driver-a/m"}])
    old = allocator(slices, release="1.36").allocate(node(), [c])
    assert [d for _, d in picked(old)[0]] == ["d0", "d1", "d2"]
    assert isinstance(allocator(slices, release="1.37").allocate(node(), [c]), Failure)


def _partitioned(*devices: dict[str, Any]) -> list[Any]:
    """Devices of one pool that share the counter set "cs" ({"c": 2})."""
    counters = {"name": "cs", "counters": {"c": {"value": "2"}}}
    return [
        resource_slice(name="counters", sharedCounters=[counters], count=2),
        resource_slice(name="devices", devices=list(devices), count=2),
    ]


def _uses(name: str, amount: str, **extra: Any) -> dict[str, Any]:
    consumes = [{"counterSet": "cs", "counters": {"c": {"value": amount}}}]
    return {"name": name, "consumesCounters": consumes, **extra}


@pytest.mark.parametrize(("release", "expected"), [("1.36", None), ("1.37", [[("req-0", "d1")]])])
def test_a_rejected_pick_gives_its_counters_back_from_1_37(release: str, expected: Any) -> None:
    # d0 takes both counters, then its taint rejects it: 1.36 kept the counters consumed, so
    # d1 (one counter) no longer fits; 1.37 gives them back (v0.37.2 rollbackDevice).
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    slices = _partitioned(_uses("d0", "2", taints=[taint]), _uses("d1", "1"))
    results = allocator(slices, release=release).allocate(node(), [claim(request())])
    assert (None if isinstance(results, Failure) else picked(results)) == expected


def test_multi_allocatable_device_is_shared_between_requests_with_fresh_share_ids() -> None:
    shared = {"name": "nic", "allowMultipleAllocations": True, "capacity": {"bw": {"value": "10"}}}
    slices = [resource_slice(devices=[shared])]
    c = claim(
        request("a", capacity={"requests": {"bw": "4"}}),
        request("b", capacity={"requests": {"bw": "6"}}),
    )
    results = allocator(slices).allocate(node(), [c])
    assert not isinstance(results, Failure)
    a, b = results[0].devices
    assert (a.device, b.device) == ("nic", "nic")
    assert a.share_id and b.share_id and a.share_id != b.share_id
    assert (a.consumed_capacity["bw"].value, b.consumed_capacity["bw"].value) == (4, 6)
    over = claim(
        request("a", capacity={"requests": {"bw": "4"}}), request("b", capacity={"requests": {"bw": "7"}})
    )
    assert allocator(slices).allocate(node(), [over]).kind == "nofit"


def test_search_depth_is_not_limited_by_the_python_stack() -> None:
    # 1280 picks: far deeper than Python's default recursion limit would allow.
    slices = [resource_slice(devices=[dev(f"d{i}") for i in range(32 * 40)])]
    claims = [claim(request(count=32), name=f"c{i}") for i in range(40)]
    got = picked(allocator(slices).allocate(node(), claims))
    assert [d for per_claim in got for _, d in per_claim] == [f"d{i}" for i in range(32 * 40)]
