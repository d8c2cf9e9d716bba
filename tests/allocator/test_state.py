"""What existing allocations hold: the one rule (``holdings``), summed by AllocatedState and
kept, reference-counted, by the service's in-use state."""

from __future__ import annotations

import pytest

from extender.allocator import AllocatedState, Features, Holdings, holdings
from extender.model import parse_allocation
from extender.model.quantity import Quantity
from extender.state.inuse import InUse
from tests.allocator.builders import allocated

CONSUMABLE = Features.from_gate_names(["DRAConsumableCapacity"])
EXCLUSIVE = Features.from_gate_names([])


def result(*devices: dict) -> dict:
    return {"devices": {"results": [{"request": "r", "driver": "d", "pool": "p", **d} for d in devices]}}


ALLOCATIONS = [
    parse_allocation(result({"device": "a"}, {"device": "b", "adminAccess": True})),
    parse_allocation(result({"device": "s", "shareID": "1", "consumedCapacity": {"bw": "2"}})),
    parse_allocation(result({"device": "s", "shareID": "2", "consumedCapacity": {"bw": "3"}})),
]


def test_admin_access_holds_nothing_and_a_share_holds_its_capacity() -> None:
    whole = Holdings(devices=(("d", "p", "a"),), shares=(), capacity=())
    assert holdings(ALLOCATIONS[0], CONSUMABLE) == whole
    share = holdings(ALLOCATIONS[1], CONSUMABLE)
    assert share.devices == () and share.shares == ((("d", "p", "s"), "1"),)
    assert share.capacity == (((("d", "p", "s"), "1"), {"bw": Quantity.parse("2")}),)


def test_without_consumable_capacity_a_share_takes_the_device() -> None:
    assert holdings(ALLOCATIONS[1], EXCLUSIVE) == Holdings(devices=(("d", "p", "s"),), shares=(), capacity=())


def test_allocated_state_sums_the_holdings_and_shares_aggregate_capacity() -> None:
    state = allocated(*ALLOCATIONS)
    assert state.allocated_devices == {("d", "p", "a")}
    assert state.allocated_shared == {(("d", "p", "s"), "1"), (("d", "p", "s"), "2")}
    assert state.aggregated_capacity[("d", "p", "s")]["bw"].value == 5
    assert allocated(*ALLOCATIONS, gates=[]).allocated_devices == {("d", "p", "a"), ("d", "p", "s")}


@pytest.mark.parametrize("features", [CONSUMABLE, EXCLUSIVE], ids=["consumable", "exclusive"])
def test_the_in_use_state_holds_what_allocated_state_sums(features: Features) -> None:
    inuse = InUse(features)
    for i, allocation in enumerate(ALLOCATIONS):
        inuse.set_owner(("claim", str(i)), allocation)
    state = AllocatedState.from_holdings(holdings(a, features) for a in ALLOCATIONS)
    assert inuse.devices == state.allocated_devices
    assert inuse.shared == state.allocated_shared
    assert inuse.capacity == state.aggregated_capacity
    inuse.set_owner(("claim", "2"), None)
    first_two = AllocatedState.from_holdings(holdings(a, features) for a in ALLOCATIONS[:2])
    assert inuse.capacity == first_two.aggregated_capacity
