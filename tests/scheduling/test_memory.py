"""SchedulerMemory: what ages out when, and what each method changes (a fake clock, no cluster)."""

from __future__ import annotations

from extender.allocator import Failure
from extender.scheduling.memory import DELETED_CLAIM_TTL_S, EXPECTED_TTL_S, MAX_VERDICTS, SchedulerMemory
from extender.scheduling.verdicts import NodeVerdict, PodResults, Remembered, SharedVerdict, SpecVerdicts
from tests.scheduling.cluster import DRIVER


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class InFlightTable:
    def __init__(self) -> None:
        self.expired = 0

    def expire_inflight(self) -> list[str]:
        self.expired += 1
        return []


def memory(result_ttl_s: float = 30.0) -> tuple[SchedulerMemory, Clock, InFlightTable]:
    clock, inflight = Clock(), InFlightTable()
    return SchedulerMemory(inflight, result_ttl_s, clock), clock, inflight


class Claim:
    def __init__(self, uid: str) -> None:
        self.uid = uid


def test_expected_placements_end_at_the_next_expire_after_their_ttl_not_on_reads():
    mem, clock, inflight = memory()
    gpu = (DRIVER, "node-0", "gpu-0")
    mem.expect("a", "node-0", frozenset({gpu}), frozenset({"claim-1"}))
    clock.now += EXPECTED_TTL_S
    # Reads never expire anything: the placement holds until the next verb starts.
    assert mem.devices_expected_elsewhere("b") == {"node-0": {gpu}}
    assert mem.placed_with([Claim("claim-1")], "b") is not None
    assert inflight.expired == 0
    mem.expire()
    assert inflight.expired == 1  # in-flight entries (in the state) age out at the same point
    assert dict(mem.placements()) == {}
    assert mem.placed_with([Claim("claim-1")], "b") is None


def test_a_placement_concerns_only_other_pods():
    mem, _, _ = memory()
    mem.expect("a", "node-0", frozenset(), frozenset({"claim-1"}))
    claim = Claim("claim-1")
    assert mem.placed_with([Claim("other"), claim], "b") == (claim, "node-0")
    assert mem.placed_with([claim], "a") is None
    assert mem.devices_expected_elsewhere("a") == {}


def test_begin_bind_ends_the_placement_and_refuses_a_second_bind_until_the_first_ends():
    mem, _, _ = memory()
    mem.expect("a", "node-0", frozenset(), frozenset())
    assert mem.begin_bind("a")
    assert "a" not in mem.placements()
    assert not mem.begin_bind("a")
    mem.end_bind("a")
    assert mem.begin_bind("a")


def test_filter_results_last_their_ttl_or_until_the_pod_is_bound():
    mem, clock, _ = memory(result_ttl_s=30.0)
    entry: Remembered = (1, ("claim-1",), NodeVerdict(True))
    mem.results_for("a").keep("node-0", entry)
    assert mem.results_for("a").get("node-0") is entry
    mem.bound("a")
    assert mem.results_for("a").get("node-0") is None
    mem.results_for("a").keep("node-0", entry)
    clock.now += 30.0
    assert mem.results_for("a").get("node-0") is None


def test_a_detached_pod_results_is_not_memory():
    mem, _, _ = memory()
    PodResults().keep("node-0", (1, (), NodeVerdict(True)))
    assert mem.results_for("a").get("node-0") is None


def test_shared_verdicts_are_dropped_all_at_once_at_the_bound():
    mem, _, _ = memory()
    verdict = SharedVerdict(1, NodeVerdict(True))
    table = mem.shared_verdicts(b"spec")
    for i in range(MAX_VERDICTS // 2):
        table.put(f"node-{i}", verdict, 1)
    for i in range(MAX_VERDICTS // 2 - 1):
        mem.shared_verdicts(b"other").put(f"node-{i}", verdict, 1)
    mem.expire()
    assert table.entries.get("node-0") is verdict
    mem.shared_verdicts(b"other").put("one-more", verdict, 1)
    mem.expire()
    assert table.entries.get("node-0") is None  # emptied in place: a pod's results may name it
    assert not mem.shared_verdicts(b"spec").entries and not mem.shared_verdicts(b"other").entries


def test_a_spec_table_keeps_only_current_verdicts():
    fits = SharedVerdict(5, NodeVerdict(True))
    table = SpecVerdicts()
    table.sync({"node-0": 5}, 1, 5)
    table.put("node-0", fits, 5)
    table.put("node-1", SharedVerdict(1, NodeVerdict.failing(Failure("nofit", "no"))), 1)
    table.put("node-2", SharedVerdict(1, NodeVerdict(True)), 6)  # computed before the node moved
    table.derived["node-0"] = (0, 1, 3)
    assert set(table.entries) == {"node-0", "node-1"} and table.fits == {"node-0"}
    table.sync({"node-0": 5, "node-3": 6}, 1, 6)  # node-3 moved: the others stay
    assert set(table.entries) == {"node-0", "node-1"} and table.derived
    table.sync({"node-3": 6, "node-0": 7}, 1, 7)  # node-0 moved
    assert set(table.entries) == {"node-1"} and not table.fits and not table.derived
    table.sync({}, 8, 8)  # every node moved
    assert not table.entries


def test_deleted_claims_are_remembered_for_their_ttl():
    mem, clock, _ = memory()
    mem.claim_deleted("claim-1")
    assert mem.was_deleted("claim-1") and not mem.was_deleted("claim-2")
    clock.now += DELETED_CLAIM_TTL_S
    assert not mem.was_deleted("claim-1")
