"""The in-use accounting (extender/state/inuse.py): what committed and in-flight allocations
hold, reference-counted by owner. A device or share counted out of use too early is handed
out twice; one counted in use too long is lost to every pod, and a release not counted leaves
a pod turned away that would now fit."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.allocator import AllocatedState, Features, holdings
from extender.model import AllocationResult, parse_allocation
from extender.model.quantity import Quantity
from extender.state.inuse import InFlight, InUse, Owner
from tests.scheduling.cluster import (
    Service,
    claim,
    claim_spec,
    device_class,
    node,
    node_slice,
    pod,
    request,
    schedule,
)

CONSUMABLE = Features.from_gate_names(["DRAConsumableCapacity"])

# Devices a, b of pool p and c of pool q; shares of the multi-allocatable m (pool p) and n (q).
RESULTS: dict[str, dict[str, Any]] = {
    "a": {"pool": "p", "device": "a"},
    "b": {"pool": "p", "device": "b"},
    "c": {"pool": "q", "device": "c"},
    "a-admin": {"pool": "p", "device": "a", "adminAccess": True},
    "m1": {"pool": "p", "device": "m", "shareID": "1", "consumedCapacity": {"bw": "2"}},
    "m2": {"pool": "p", "device": "m", "shareID": "2", "consumedCapacity": {"bw": "3", "mem": "1Gi"}},
    "m3": {"pool": "p", "device": "m", "shareID": "3"},
    "n1": {"pool": "q", "device": "n", "shareID": "1", "consumedCapacity": {"bw": "5"}},
}
M, N = ("d", "p", "m"), ("d", "q", "n")


def allocation(*names: str) -> AllocationResult:
    results = [{"request": "r", "driver": "d", **RESULTS[n]} for n in names]
    return parse_allocation({"devices": {"results": results}})


def q(text: str) -> Quantity:
    return Quantity.parse(text)


def expected(held: dict[Owner, AllocationResult], features: Features = CONSUMABLE) -> AllocatedState:
    """What the owners hold together, computed afresh: every share (device, shareID) once."""
    state = AllocatedState()
    counted: set[tuple[tuple[str, str, str], str]] = set()
    for allocation_ in held.values():
        h = holdings(allocation_, features)
        state.allocated_devices.update(h.devices)
        state.allocated_shared.update(h.shares)
        for share, consumed in h.capacity:
            if share in counted:
                continue
            counted.add(share)
            totals = state.aggregated_capacity.setdefault(share[0], {})
            for name, amount in consumed.items():
                totals[name] = totals[name].add(amount) if name in totals else amount
    return state


def assert_holds(inuse: InUse, held: dict[Owner, AllocationResult]) -> None:
    state = expected(held)
    assert inuse.devices == state.allocated_devices
    assert inuse.shared == state.allocated_shared
    assert inuse.capacity == state.aggregated_capacity
    # per_pool: distinct devices in use per pool, and no pool listed with none ("in" is read).
    assert dict(inuse.per_pool) == dict(Counter(d[:2] for d in state.allocated_devices))


def assert_holds_nothing(inuse: InUse) -> None:
    """Everything given back leaves nothing behind: a long-running extender does not grow."""
    assert_holds(inuse, {})
    assert not (inuse._owners or inuse._device_refs or inuse._share_refs or inuse._consumed)


def test_the_hand_over_from_in_flight_to_committed_keeps_everything_in_use_and_counts_a_share_once() -> None:
    inuse = InUse(CONSUMABLE)
    held = allocation("a", "m1")
    inuse.add_inflight(InFlight("u", "pod", held, expires_at=1e18))
    inuse.set_owner(("claim", "u"), held)  # the watch's echo of the write
    # One claim's share, named by its in-flight copy and its echo: 2, not 4.
    assert inuse.capacity == {M: {"bw": q("2")}}
    assert_holds(inuse, {("claim", "u"): held})
    inuse.remove_inflight("u")
    assert_holds(inuse, {("claim", "u"): held})
    assert inuse.released == 0  # nothing was given back: a turned-away pod still does not fit
    inuse.set_owner(("claim", "u"), None)
    assert inuse.released == 1
    assert_holds_nothing(inuse)


def test_two_shares_of_one_device_in_one_claim_both_consume_its_capacity() -> None:
    inuse = InUse(CONSUMABLE)
    inuse.set_owner(("claim", "u"), allocation("m1", "m2"))
    assert inuse.capacity == {M: {"bw": q("5"), "mem": q("1Gi")}}
    inuse.set_owner(("claim", "u"), allocation("m1"))
    assert inuse.capacity == {M: {"bw": q("2")}}
    assert inuse.released == 1  # share 2 and its capacity came back


def test_a_device_two_claims_hold_stays_in_use_until_both_let_it_go() -> None:
    inuse = InUse(CONSUMABLE)
    inuse.set_owner(("claim", "1"), allocation("a", "m1"))
    inuse.set_owner(("claim", "2"), allocation("a", "m1"))
    inuse.set_owner(("claim", "1"), None)
    assert ("d", "p", "a") in inuse.devices and (M, "1") in inuse.shared
    assert inuse.capacity == {M: {"bw": q("2")}}
    assert inuse.per_pool == Counter({("d", "p"): 1})
    assert inuse.released == 0
    inuse.set_owner(("claim", "2"), None)
    assert inuse.released == 1
    assert ("d", "p") not in inuse.per_pool
    assert_holds_nothing(inuse)


def test_each_release_is_counted_once_and_taking_more_is_not_a_release() -> None:
    inuse = InUse(CONSUMABLE)
    inuse.set_owner(("claim", "1"), allocation("a"))
    inuse.set_owner(("claim", "1"), allocation("a", "b"))
    assert inuse.released == 0
    inuse.set_owner(("claim", "1"), allocation("b"))
    assert inuse.released == 1
    inuse.set_owner(("claim", "2"), allocation("m3"))
    inuse.set_owner(("claim", "2"), None)  # a share without consumed capacity
    assert inuse.released == 2
    inuse.set_owner(("claim", "1"), None)
    assert inuse.released == 3


def test_an_echo_of_what_is_held_changes_no_pool_and_releases_nothing() -> None:
    inuse = InUse(CONSUMABLE)
    inuse.set_owner(("claim", "1"), allocation("a", "m1", "n1"))
    assert inuse.changed_pools == {("d", "p"), ("d", "q")}
    inuse.changed_pools.clear()
    inuse.set_owner(("claim", "1"), allocation("a", "m1", "n1"))  # e.g. reservedFor changed
    inuse.set_owner(("claim", "2"), None)  # a claim that holds nothing, deleted
    assert inuse.changed_pools == set() and inuse.released == 0
    inuse.set_owner(("claim", "1"), allocation("a"))  # the shares of q and p go
    assert inuse.changed_pools == {("d", "p"), ("d", "q")}
    inuse.changed_pools.clear()
    inuse.set_owner(("claim", "1"), None)
    assert inuse.changed_pools == {("d", "p")}
    assert_holds_nothing(inuse)


def test_admin_access_holds_nothing_and_marks_no_pool() -> None:
    inuse = InUse(CONSUMABLE)
    inuse.set_owner(("claim", "1"), allocation("a-admin"))
    assert_holds(inuse, {})
    assert inuse.changed_pools == set()


def test_an_in_flight_entry_expires_at_its_deadline_and_not_before() -> None:
    inuse = InUse(CONSUMABLE)
    inuse.add_inflight(InFlight("early", "pod", allocation("a"), expires_at=10.0))
    inuse.add_inflight(InFlight("late", "pod", allocation("b"), expires_at=20.0))
    assert inuse.expire(now=9.0) == []
    assert inuse.expire(now=10.0) == ["early"]
    assert inuse.devices == {("d", "p", "b")} and set(inuse.inflight) == {"late"}
    assert inuse.released == 1
    # Without a time given, the monotonic clock decides (far past 20 s on any running host).
    assert inuse.expire(now=None if time.monotonic() > 20.0 else 20.0) == ["late"]
    assert_holds_nothing(inuse)
    inuse.remove_inflight("late")  # already gone: nothing happens
    assert inuse.released == 2


def test_expire_by_default_reads_the_monotonic_clock() -> None:
    inuse = InUse(CONSUMABLE)
    now = time.monotonic()
    inuse.add_inflight(InFlight("past", "pod", allocation("a"), expires_at=now - 1))
    inuse.add_inflight(InFlight("future", "pod", allocation("b"), expires_at=now + 3600))
    assert inuse.expire() == ["past"]
    # A time given is the one used, even one before the clock's.
    assert inuse.expire(now=0.0) == []
    assert set(inuse.inflight) == {"future"}


def test_removing_an_unknown_in_flight_entry_leaves_a_committed_claim_alone() -> None:
    inuse = InUse(CONSUMABLE)
    inuse.set_owner(("claim", "u"), allocation("a"))
    inuse.remove_inflight("u")
    assert inuse.devices == {("d", "p", "a")}


def test_the_preemption_what_if_frees_only_what_no_remaining_owner_holds() -> None:
    inuse = InUse(CONSUMABLE)
    inuse.set_owner(("claim", "victim"), allocation("a", "c", "m1", "m2", "n1"))
    inuse.set_owner(("claim", "other"), allocation("a", "m1"))
    before = (set(inuse.devices), set(inuse.shared), dict(inuse.capacity))
    devices, shared, capacity = inuse.without([("claim", "victim"), ("claim", "victim"), ("claim", "gone")])
    assert devices == {("d", "p", "a")}
    assert shared == {(M, "1")}
    assert capacity == {M: {"bw": q("2")}}
    # A what-if: the live state is untouched.
    assert (inuse.devices, inuse.shared, inuse.capacity) == before
    assert inuse.without([]) == before
    assert inuse.without([("claim", "victim"), ("claim", "other")]) == (set(), set(), {})


OWNERS: list[Owner] = [("claim", "1"), ("claim", "2"), ("inflight", "1"), ("inflight", "2")]
ALLOCATIONS = st.none() | st.lists(st.sampled_from(sorted(RESULTS)), min_size=1, max_size=3, unique=True)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    steps=st.lists(st.tuples(st.sampled_from(OWNERS), ALLOCATIONS), max_size=12),
    gone=st.lists(st.sampled_from([*OWNERS, ("claim", "never")]), max_size=4),
)
def test_any_sequence_of_changes_holds_what_the_owners_hold_together(
    steps: list[tuple[Owner, list[str] | None]], gone: list[Owner]
) -> None:
    """After every change: the sets equal what the owners hold, computed afresh; a release is
    counted exactly when a device or share left; the pools marked are the ones that changed.
    And the preemption what-if equals the state built without the owners it removes."""
    inuse = InUse(CONSUMABLE)
    held: dict[Owner, AllocationResult] = {}
    for owner, names in steps:
        new = None if names is None else allocation(*names)
        before = expected(held)
        old_alloc = held.pop(owner, None)
        if new is not None:
            held[owner] = new
        released, inuse.changed_pools = inuse.released, set()
        inuse.set_owner(owner, new)
        assert_holds(inuse, held)
        after = expected(held)
        gave_back = bool(before.allocated_devices - after.allocated_devices) or bool(
            before.allocated_shared - after.allocated_shared
        )
        assert inuse.released == released + gave_back
        changed = [h for h in (old_alloc, new) if h is not None]
        same = old_alloc is not None and new is not None and holdings(old_alloc, CONSUMABLE) == holdings(
            new, CONSUMABLE
        )
        pools = {
            d[:2]
            for a in ([] if same else changed)
            for d in (*holdings(a, CONSUMABLE).devices, *(s[0] for s in holdings(a, CONSUMABLE).shares))
        }
        assert inuse.changed_pools == pools
    remaining = {o: a for o, a in held.items() if o not in gone}
    state = expected(remaining)
    assert inuse.without(gone) == (state.allocated_devices, state.allocated_shared, state.aggregated_capacity)
    for owner in list(held):
        inuse.set_owner(owner, None)
    assert_holds_nothing(inuse)


def test_a_claim_with_two_shares_of_one_device_leaves_the_rest_and_no_more_to_the_next_pod() -> None:
    """Through the service: one claim's two requests take 30Gi each of one 80Gi device (two
    shares, the allocator hands a multi-allocatable device to each request); a pod asking for 30Gi
    more must not fit (20Gi are left), and one asking for 20Gi must."""
    device = {"name": "gpu-0", "allowMultipleAllocations": True, "capacity": {"memory": {"value": "80Gi"}}}

    def memory(amount: str, name: str = "gpu") -> dict[str, Any]:
        return request(name, capacity={"requests": {"memory": amount}})

    objects = [
        device_class(), node("node-0"), node_slice("node-0", [device]),
        claim("two", claim_spec(memory("30Gi", "a"), memory("30Gi", "b"))),
        claim("more", claim_spec(memory("30Gi"))),
        claim("rest", claim_spec(memory("20Gi"))),
        pod("p-two", claims={"gpu": "two"}), pod("p-more", claims={"gpu": "more"}),
        pod("p-rest", claims={"gpu": "rest"}),
    ]
    service = Service(objects, feature_gates=CONSUMABLE)

    async def scenario(client: Any) -> list[tuple[str | None, str]]:
        names = ("p-two", "p-more", "p-rest")
        return [await schedule(client, service.pod(name), ["node-0"]) for name in names]

    two, more, rest = service.run(scenario)
    assert two[0] == "node-0", two
    shares = service.claims()["two"]["status"]["allocation"]["devices"]["results"]
    assert [r["device"] for r in shares] == ["gpu-0", "gpu-0"]
    assert more[0] is None, "30Gi more of a device with 20Gi left"
    assert rest[0] == "node-0", rest
