"""Capacity policy arithmetic, taint toleration and shared counters."""

from __future__ import annotations

from typing import Any

import pytest

from extender.allocator import AllocatedState, Failure
from extender.allocator.capacity import capacity_fits, consumed_for, violates
from extender.allocator.outcome import AllocationError
from extender.allocator.taints import tolerates
from extender.model import Device, Taint, Toleration, apply_taint_rules, parse_device_taint_rule
from extender.model.quantity import Quantity
from tests.allocator.builders import allocator, claim, node, picked, request, resource_slice


def device_with(policy: dict[str, Any], value: str = "10") -> Device:
    raw = {
        "name": "d",
        "allowMultipleAllocations": True,
        "capacity": {"m": {"value": value, "requestPolicy": policy}},
    }
    return resource_slice(devices=[raw]).devices[0]


def q(text: str) -> Quantity:
    return Quantity.parse(text)


RANGE = {"default": "2", "validRange": {"min": "2", "step": "2", "max": "4"}}


@pytest.mark.parametrize(("requested", "consumed", "ok"), [("1", 2, True), ("3", 4, True), ("6", 6, False)])
def test_range_policy_rounds_up_and_enforces_max(requested: str, consumed: int, ok: bool) -> None:
    cap = device_with(RANGE).capacities["m"]
    amount = consumed_for(q(requested), cap)
    assert amount.value == consumed
    assert violates(amount, cap.policy) is not ok


@pytest.mark.parametrize(("values", "requested", "consumed"), [(["1", "2"], "2", 2), (["1", "3"], "2", 3)])
def test_valid_values_take_the_first_value_not_below_the_request(
    values: list[str], requested: str, consumed: int
) -> None:
    cap = device_with({"default": values[0], "validValues": values}).capacities["m"]
    assert consumed_for(q(requested), cap).value == consumed


def test_zero_default_policy_rejects_a_request_of_one() -> None:
    cap = device_with({"default": "0", "validValues": ["0"]}).capacities["m"]
    assert violates(consumed_for(q("1"), cap), cap.policy)
    assert consumed_for(None, cap).value == 0


def test_fits_counts_committed_and_in_call_consumption_and_unknown_names() -> None:
    device = device_with(RANGE)
    assert capacity_fits({"m": q("4")}, device, {"m": q("4")}, {"m": q("2")})
    assert not capacity_fits({"m": q("4")}, device, {"m": q("4")}, {"m": q("4")})
    assert not capacity_fits({"other": q("1")}, device, None, None)


def taint(key: str = "k", value: str = "v", effect: str = "NoSchedule") -> Taint:
    return Taint(key=key, value=value, effect=effect, raw={})


def toleration(key: str = "", operator: str = "Equal", value: str = "", effect: str = "") -> Toleration:
    return Toleration(key=key, operator=operator, value=value, effect=effect, raw={})


def test_toleration_matching() -> None:
    assert tolerates(toleration(key="k", value="v"), taint())
    assert not tolerates(toleration(key="k", value="w"), taint())
    assert tolerates(toleration(operator="Exists"), taint())
    assert not tolerates(toleration(operator="Exists", effect="NoExecute"), taint())
    assert not tolerates(toleration(key="other", operator="Exists"), taint())
    assert not tolerates(toleration(key="k", operator="Lt", value="v"), taint())


def test_taints_block_unless_tolerated_and_only_blocking_effects_count() -> None:
    devices = [
        {"name": "tainted", "taints": [{"key": "k", "value": "v", "effect": "NoExecute"}]},
        {"name": "soft", "taints": [{"key": "k", "value": "v", "effect": "None"}]},
    ]
    slices = [resource_slice(devices=devices)]
    assert picked(allocator(slices).allocate(node(), [claim(request())])) == [[("req-0", "soft")]]
    tolerant = request(tolerations=[{"key": "k", "operator": "Exists"}])
    results = allocator(slices).allocate(node(), [claim(tolerant)])
    assert picked(results) == [[("req-0", "tainted")]]
    assert results[0].to_api()["devices"]["results"][0]["tolerations"] == [
        {"key": "k", "operator": "Exists"}
    ]
    assert picked(allocator(slices, gates=[]).allocate(node(), [claim(request())])) == [
        [("req-0", "tainted")]
    ]


def partitionable(consumed: str) -> list:
    counters = resource_slice(
        "counters", [], sharedCounters=[{"name": "gpu", "counters": {"mem": {"value": "8"}}}], count=2
    )
    parts = [
        {
            "name": f"part-{i}",
            "consumesCounters": [{"counterSet": "gpu", "counters": {"mem": {"value": consumed}}}],
        }
        for i in range(3)
    ]
    return [counters, resource_slice("devices", parts, count=2)]


def test_shared_counters_limit_partitions_including_committed_ones() -> None:
    slices = partitionable("4")
    assert len(picked(allocator(slices).allocate(node(), [claim(request(count=2))]))[0]) == 2
    assert allocator(slices).allocate(node(), [claim(request(count=3))]).kind == "nofit"
    state = AllocatedState(allocated_devices={("driver-a", "pool-1", "part-0")})
    assert picked(allocator(slices, state=state).allocate(node(), [claim(request())])) == [
        [("req-0", "part-1")]
    ]
    full = AllocatedState(
        allocated_devices={("driver-a", "pool-1", "part-0"), ("driver-a", "pool-1", "part-1")}
    )
    assert allocator(slices, state=full).allocate(node(), [claim(request())]).kind == "nofit"


def test_taints_from_device_taint_rules_block_allocation() -> None:
    maintenance = parse_device_taint_rule(
        {
            "metadata": {"name": "maintenance"},
            "spec": {"deviceSelector": {"device": "d0"}, "taint": {"key": "m", "effect": "NoSchedule"}},
        }
    )
    slices = [apply_taint_rules(resource_slice(devices=[{"name": "d0"}, {"name": "d1"}]), [maintenance])]
    assert picked(allocator(slices).allocate(node(), [claim(request())])) == [[("req-0", "d1")]]


# DRAFractionalCapacityRange: upstream consumable_capacity_test.go (testViolateCapacityRequestPolicy,
# testCalculateConsumedCapacity, testUseMilli), kubernetes/kubernetes 4426859839df.
FRACTIONAL = {"default": "200m", "validRange": {"min": "200m", "step": "100m", "max": "1"}}


@pytest.mark.parametrize(("requested", "violated"), [("300m", False), ("250m", True), ("2", True)])
def test_fractional_range_checks_steps_in_milli_units(requested: str, violated: bool) -> None:
    cap = device_with(FRACTIONAL).capacities["m"]
    assert violates(q(requested), cap.policy, fractional=True) is violated


@pytest.mark.parametrize(("requested", "whole", "milli"), [("250m", "1", "300m"), ("100m", "200m", "200m")])
def test_fractional_range_rounds_to_the_next_milli_step_only_with_the_gate(
    requested: str, whole: str, milli: str
) -> None:
    cap = device_with(FRACTIONAL).capacities["m"]
    # Gate off: Value() arithmetic rounds min, step and request up to whole units.
    assert consumed_for(q(requested), cap) == q(whole)
    assert consumed_for(q(requested), cap, fractional=True) == q(milli)


def test_fractional_range_falls_back_to_whole_units_for_a_sub_milli_step() -> None:
    cap = device_with({"default": "1", "validRange": {"min": "1", "step": "1u"}}).capacities["m"]
    assert consumed_for(q("1500m"), cap, fractional=True) == q("2")


def test_a_request_finer_than_milli_units_is_an_allocation_error() -> None:
    cap = device_with(FRACTIONAL).capacities["m"]
    with pytest.raises(AllocationError, match="cannot be represented"):
        consumed_for(q("250500u"), cap, fractional=True)


def test_committed_partitions_count_against_counters_after_a_device_without_counters() -> None:
    # A device that consumes no counters comes first in the pool: the partitions committed after
    # it still use up the counter set (8 = 4 + 4), so the third partition does not fit.
    counters, _ = partitionable("4")
    kind = {"kind": {"string": "part"}}
    parts = [{"name": "plain"}] + [
        {"name": f"part-{i}", "attributes": kind,
         "consumesCounters": [{"counterSet": "gpu", "counters": {"mem": {"value": "4"}}}]}
        for i in range(3)
    ]
    slices = [counters, resource_slice("devices", parts, count=2)]
    full = AllocatedState(
        allocated_devices={("driver-a", "pool-1", "part-0"), ("driver-a", "pool-1", "part-1")}
    )
    is_part = '"kind" in device.attributes["driver-a"]'
    a_part = claim(request(selectors=[{"cel": {"expression": is_part}}]))
    assert isinstance(allocator(slices, state=full).allocate(node(), [a_part]), Failure)
    assert picked(allocator(slices).allocate(node(), [a_part])) == [[("req-0", "part-0")]]


def test_a_partition_held_only_as_a_share_counts_against_counters() -> None:
    # Allocated as a share (allowMultipleAllocations) with no capacity consumed: it holds its
    # counters all the same, so with part-1 also taken nothing is left for part-2.
    slices = partitionable("4")
    held = AllocatedState(
        allocated_devices={("driver-a", "pool-1", "part-1")},
        allocated_shared={(("driver-a", "pool-1", "part-0"), "share-1")},
    )
    assert isinstance(allocator(slices, state=held).allocate(node(), [claim(request())]), Failure)
