"""Building the allocated state from existing allocations."""

from __future__ import annotations

from extender.allocator import AllocatedState
from extender.model import parse_allocation


def result(*devices: dict) -> dict:
    return {"devices": {"results": [{"request": "r", "driver": "d", "pool": "p", **d} for d in devices]}}


def test_admin_access_is_ignored_and_shares_aggregate_capacity() -> None:
    allocations = [
        parse_allocation(result({"device": "a"}, {"device": "b", "adminAccess": True})),
        parse_allocation(result({"device": "s", "shareID": "1", "consumedCapacity": {"bw": "2"}})),
        parse_allocation(result({"device": "s", "shareID": "2", "consumedCapacity": {"bw": "3"}})),
    ]
    state = AllocatedState.from_allocations(allocations, consumable_capacity=True)
    assert state.allocated_devices == {("d", "p", "a")}
    assert state.allocated_shared == {(("d", "p", "s"), "1"), (("d", "p", "s"), "2")}
    assert state.aggregated_capacity[("d", "p", "s")]["bw"].value == 5


def test_without_consumable_capacity_a_share_takes_the_device() -> None:
    allocation = parse_allocation(result({"device": "s", "shareID": "1", "consumedCapacity": {"bw": "2"}}))
    state = AllocatedState.from_allocations([allocation], consumable_capacity=False)
    assert state.allocated_devices == {("d", "p", "s")}
    assert not state.allocated_shared and not state.aggregated_capacity
