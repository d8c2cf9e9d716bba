"""The settler, alone: what keeps a device held while a write of unknown fate may still land.

A fake binder stands in for the API server and every wait is tens of milliseconds, so each
rule of ``settle.py`` is pinned down by a test of its own: a claim write that landed, failed or
went unanswered; the read-back and the fence; a Binding that landed, cannot land or is taken
over by a retry; and the stale-claim releases. The end-to-end versions of these (a real client
against the test API server) are in tests/reliability/test_late_writes.py.
"""

from __future__ import annotations

import asyncio
import copy
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from extender.model import parse_resource_claim
from extender.model.refs import PodRef
from extender.scheduling.binder import BindError, WriteUncertain
from extender.scheduling.settle import Fate, Releases, Settler, binding_fate, judge
from extender.state import ClusterState, InFlight
from tests.kube import objects

POD = PodRef("default", "a", "pod-a")
CLAIM_UID = "claim-ca"
VERSION = 10  # the version the uncertain write was conditioned on


def claim_obj(version: int = VERSION, reserved: str | None = None, node: str = "node-a",
              uid: str = CLAIM_UID) -> dict[str, Any]:
    obj = objects.claim("ca")
    obj["metadata"].update(uid=uid, resourceVersion=str(version))
    if reserved is not None:
        obj["status"] = {"allocation": objects.allocation(node),
                         "reservedFor": [{"resource": "pods", "name": "a", "uid": reserved}]}
    return obj


def pod_obj(node: str = "", uid: str = POD.uid, deleting: bool = False) -> dict[str, Any]:
    obj = objects.pod("a", claim_name="ca")
    obj["metadata"]["uid"] = uid
    if node:
        obj["spec"]["nodeName"] = node
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return obj


class FakeBinder:
    """The API server as the settler asks it: each answer set by the test, each call recorded."""

    def __init__(self) -> None:
        self.claim: dict[str, Any] | Exception | None = None
        self.pod: dict[str, Any] | Exception | None = None
        self.fenced_to: dict[str, Any] | Exception | None = None
        self.released: dict[str, Any] | Exception | None = None
        self.calls: list[tuple[Any, ...]] = []

    @staticmethod
    def _answer(value: Any) -> Any:
        if isinstance(value, Exception):
            raise value
        return copy.deepcopy(value)

    async def read_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("read_claim", namespace, name))
        return self._answer(self.claim)

    async def fence_claim(self, claim: dict[str, Any]) -> dict[str, Any] | None:
        self.calls.append(("fence_claim", claim["metadata"]["resourceVersion"]))
        return self._answer(self.fenced_to)

    async def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("read_pod", namespace, name))
        return self._answer(self.pod)

    async def release_claim(self, claim: Any, pod: PodRef, deallocate: bool) -> dict[str, Any] | None:
        self.calls.append(("release_claim", claim.uid, pod.uid, deallocate))
        return self._answer(self.released)

    def called(self, what: str) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] == what]


def world(claim: dict[str, Any] | None = None, pod: dict[str, Any] | None = None) -> ClusterState:
    """A cache holding the claim (unallocated at VERSION by default), the pod, and the claim's
    in-flight entry as a bind leaves it."""
    state = ClusterState()
    state.apply("ResourceClaim", claim if claim is not None else claim_obj())
    if pod is not None:
        state.apply("Pod", pod)
    allocation = parse_resource_claim(claim_obj(reserved=POD.uid)).allocation
    assert allocation is not None
    state.add_inflight(InFlight(CLAIM_UID, POD.uid, allocation, expires_at=0.0))
    return state


def settler(state: ClusterState, binder: FakeBinder, fence_after_s: float = 0.3) -> Settler:
    return Settler(state, binder, write_timeout_s=1.0, fence_after_s=fence_after_s, poll_s=0.005,  # type: ignore[arg-type]
                   readback_s=0.05)


def cached(state: ClusterState) -> Any:
    claim = state.claim("default", "ca")
    assert claim is not None
    return claim


def held(state: ClusterState) -> bool:
    return CLAIM_UID in state.inuse.inflight


async def until(check: Callable[[], bool], within: float = 3.0) -> None:
    loop = asyncio.get_running_loop()
    ends = loop.time() + within
    while not check():
        assert loop.time() < ends, "never happened"
        await asyncio.sleep(0.005)


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())  # type: ignore[arg-type]


# --- what a claim or a pod as seen says -------------------------------------------------------


@pytest.mark.parametrize(
    ("seen", "fate"),
    [
        (None, Fate.IMPOSSIBLE),  # gone
        (claim_obj(uid="another"), Fate.IMPOSSIBLE),  # replaced: the PUT names the old UID
        (claim_obj(version=VERSION + 5, reserved=POD.uid), Fate.LANDED),
        (claim_obj(version=VERSION + 5, reserved="pod-b"), Fate.IMPOSSIBLE),  # someone else's, newer
        (claim_obj(version=VERSION, reserved="pod-b"), Fate.UNKNOWN),
        (claim_obj(version=VERSION), Fate.UNKNOWN),  # unchanged: the write may still come
        (claim_obj(version=VERSION + 1), Fate.IMPOSSIBLE),  # newer without it: that PUT is stale
        (claim_obj(version=VERSION - 1), Fate.UNKNOWN),  # the cache lags behind the write's base
    ],
)
def test_what_a_claim_as_seen_says_about_a_write(seen: dict[str, Any] | None, fate: Fate) -> None:
    claim = None if seen is None else parse_resource_claim(seen)
    assert judge(claim, CLAIM_UID, POD.uid, VERSION) is fate


def test_an_allocation_reserved_for_nobody_is_not_the_write_landing() -> None:
    seen = claim_obj(version=VERSION)
    seen["status"] = {"allocation": objects.allocation("node-a")}
    assert judge(parse_resource_claim(seen), CLAIM_UID, POD.uid, VERSION) is Fate.UNKNOWN


@pytest.mark.parametrize(
    ("seen", "fate"),
    [
        (None, Fate.IMPOSSIBLE),
        (pod_obj(node="node-a", uid="another"), Fate.IMPOSSIBLE),
        (pod_obj(node="node-a"), Fate.LANDED),
        (pod_obj(node="node-b"), Fate.IMPOSSIBLE),  # a pod is bound once
        (pod_obj(deleting=True), Fate.IMPOSSIBLE),
        (pod_obj(), Fate.UNKNOWN),
    ],
)
def test_what_a_pod_as_seen_says_about_a_binding(seen: dict[str, Any] | None, fate: Fate) -> None:
    from extender.model.pods import parse_pod

    assert binding_fate(None if seen is None else parse_pod(seen), POD, "node-a") is fate


# --- claim writes ------------------------------------------------------------------------------


def test_a_write_that_lands_late_is_cached_and_kept_for_the_pod_that_still_wants_it() -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        settle = settler(state, binder)
        write: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        settle.follow(cached(state), POD, write, inflight_uid=CLAIM_UID)
        assert state.inuse.inflight[CLAIM_UID].expires_at == math.inf  # held past any TTL
        await asyncio.sleep(0.05)
        assert held(state) and settle.unsettled == 1
        write.set_result(claim_obj(version=VERSION + 1, reserved=POD.uid))
        await until(lambda: settle.unsettled == 0)
        assert not held(state)
        assert cached(state).allocation is not None  # counted as the claim's from now on
        assert binder.called("release_claim") == []
        await settle.close()

    run(scenario)


def test_a_write_refused_for_good_frees_its_devices_at_once() -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        settle = settler(state, binder)
        write: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        settle.follow(cached(state), POD, write)  # the in-flight entry is the claim's UID by default
        write.set_exception(BindError("403 forbidden"))
        await until(lambda: settle.unsettled == 0)
        assert not held(state) and binder.calls == []
        await settle.close()

    run(scenario)


def test_an_uncertain_write_holds_until_the_claim_moves_on_without_it() -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.claim = claim_obj(version=VERSION)  # read back: unchanged, the write may still come
        settle = settler(state, binder, fence_after_s=60.0)
        write: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        settle.follow(cached(state), POD, write, inflight_uid=CLAIM_UID)
        write.set_exception(WriteUncertain("no answer", VERSION))
        await asyncio.sleep(0.2)  # several read-backs, all unchanged
        assert held(state) and len(binder.called("read_claim")) >= 2
        assert binder.called("fence_claim") == []  # not before fence_after_s
        state.apply("ResourceClaim", claim_obj(version=VERSION + 1))  # the watch: newer, without it
        await until(lambda: not held(state) and settle.unsettled == 0)
        assert binder.called("release_claim") == []
        await settle.close()

    run(scenario)


def test_the_version_of_an_uncertain_write_is_the_one_its_error_names() -> None:
    """A claim at the version the write was based on proves nothing; only a newer one does."""

    async def scenario() -> None:
        state, binder = world(claim_obj(version=VERSION + 3), pod=pod_obj()), FakeBinder()
        binder.claim = claim_obj(version=VERSION + 3)
        settle = settler(state, binder, fence_after_s=60.0)
        write: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        settle.follow(cached(state), POD, write, inflight_uid=CLAIM_UID)
        write.set_exception(WriteUncertain("no answer", VERSION + 3))
        await asyncio.sleep(0.15)
        assert held(state)
        await settle.close()

    run(scenario)


def test_a_write_found_landed_by_a_read_back_is_cached_and_kept() -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.claim = claim_obj(version=VERSION + 1, reserved=POD.uid)  # the watch has not said so yet
        settle = settler(state, binder, fence_after_s=60.0)
        settle.follow(cached(state), POD, None, VERSION)
        await until(lambda: not held(state) and settle.unsettled == 0)
        assert cached(state).resource_version == VERSION + 1 and cached(state).allocation is not None
        assert binder.called("release_claim") == []
        await settle.close()

    run(scenario)


def test_a_read_back_at_the_same_version_changes_nothing_and_failing_read_backs_hold() -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.claim = BindError("503")
        settle = settler(state, binder, fence_after_s=0.05)
        settle.follow(cached(state), POD, None, VERSION)
        await asyncio.sleep(0.2)
        # Unreadable: nothing proven, nothing fenced (a fence needs the claim as it is now).
        assert held(state) and len(binder.called("read_claim")) >= 2
        assert binder.called("fence_claim") == []
        binder.claim = None  # gone: its write can never land
        await until(lambda: not held(state))
        await settle.close()

    run(scenario)


def test_an_unchanged_claim_is_fenced_after_fence_after_s_and_only_then_freed() -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.claim = claim_obj(version=VERSION)
        binder.fenced_to = claim_obj(version=VERSION + 2)
        settle = settler(state, binder, fence_after_s=0.25)
        started = asyncio.get_running_loop().time()
        settle.follow(cached(state), POD, None, VERSION)
        await until(lambda: not held(state))
        assert asyncio.get_running_loop().time() - started >= 0.25
        assert binder.called("fence_claim") == [("fence_claim", str(VERSION))]
        assert cached(state).resource_version == VERSION + 2  # the fenced claim is cached
        await settle.close()

    run(scenario)


def test_a_fence_that_fails_is_tried_again_and_holds_meanwhile() -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.claim = claim_obj(version=VERSION)
        binder.fenced_to = BindError("500")
        settle = settler(state, binder, fence_after_s=0.0)
        settle.follow(cached(state), POD, None, VERSION)
        await until(lambda: len(binder.called("fence_claim")) >= 2)
        assert held(state)
        binder.fenced_to = claim_obj(version=VERSION + 2)
        await until(lambda: not held(state))
        await settle.close()

    run(scenario)


def test_a_fence_that_finds_the_write_landed_keeps_it() -> None:
    """The write went in between the read-back and the fence: the fence returns it, landed."""

    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.claim = claim_obj(version=VERSION)
        binder.fenced_to = claim_obj(version=VERSION + 2, reserved=POD.uid)
        settle = settler(state, binder, fence_after_s=0.0)
        settle.follow(cached(state), POD, None, VERSION)
        await until(lambda: not held(state))
        assert cached(state).allocation is not None and binder.called("release_claim") == []
        await settle.close()

    run(scenario)


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        (None, "the pod is gone"),
        (pod_obj(uid="another"), "the pod was replaced"),
        (pod_obj(deleting=True), "the pod is being deleted"),
        (pod_obj(node="node-b"), "the pod is bound to another node than the allocation's"),
    ],
)
def test_a_late_write_nobody_wants_any_more_is_released(pod: dict[str, Any] | None, why: str) -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod), FakeBinder()
        binder.released = claim_obj(version=VERSION + 2)  # deallocated
        settle = settler(state, binder)
        write: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        settle.follow(cached(state), POD, write, inflight_uid=CLAIM_UID)
        write.set_result(claim_obj(version=VERSION + 1, reserved=POD.uid, node="node-a"))
        await until(lambda: settle.unsettled == 0)
        assert binder.called("release_claim") == [("release_claim", CLAIM_UID, POD.uid, True)], why
        assert cached(state).allocation is None and cached(state).resource_version == VERSION + 2
        assert not held(state)
        await settle.close()

    run(scenario)


@pytest.mark.parametrize("node", ["", "node-a"])
def test_a_late_write_is_kept_for_the_pod_unbound_or_bound_where_it_allocated(node: str) -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj(node=node)), FakeBinder()
        settle = settler(state, binder)
        write: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        settle.follow(cached(state), POD, write, inflight_uid=CLAIM_UID)
        write.set_result(claim_obj(version=VERSION + 1, reserved=POD.uid, node="node-a"))
        await until(lambda: settle.unsettled == 0)
        assert binder.called("release_claim") == [] and not held(state)
        await settle.close()

    run(scenario)


def test_a_release_of_a_late_write_that_fails_still_ends_the_in_flight_entry() -> None:
    """The claim stays allocated in the API server and so in the cache: its device stays counted."""

    async def scenario() -> None:
        state, binder = world(), FakeBinder()  # the pod is gone
        binder.released = BindError("500")
        settle = settler(state, binder)
        write: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        settle.follow(cached(state), POD, write, inflight_uid=CLAIM_UID)
        write.set_result(claim_obj(version=VERSION + 1, reserved=POD.uid))
        await until(lambda: settle.unsettled == 0)
        assert not held(state) and cached(state).allocation is not None
        assert ("default", "ca") in {(c.namespace, c.name) for c in state.claims.values() if c.allocation}
        await settle.close()

    run(scenario)


def test_a_release_that_finds_the_claim_gone_leaves_the_cache_to_the_watch() -> None:
    async def scenario() -> None:
        state, binder = world(), FakeBinder()
        binder.released = None
        settle = settler(state, binder)
        write: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        settle.follow(cached(state), POD, write, inflight_uid=CLAIM_UID)
        write.set_result(claim_obj(version=VERSION + 1, reserved=POD.uid))
        await until(lambda: settle.unsettled == 0)
        assert len(binder.called("release_claim")) == 1 and not held(state)
        await settle.close()

    run(scenario)


def test_close_cancels_what_is_still_followed_and_keeps_its_devices() -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.claim = claim_obj(version=VERSION)
        settle = settler(state, binder, fence_after_s=60.0)
        settle.follow(cached(state), POD, None, VERSION)
        await asyncio.sleep(0.02)
        await settle.close()
        await asyncio.sleep(0.02)
        assert held(state) and settle.unsettled == 0

    run(scenario)


# --- Bindings ----------------------------------------------------------------------------------


class Undo:
    def __init__(self) -> None:
        self.count = 0

    async def __call__(self) -> None:
        self.count += 1


@pytest.mark.parametrize(("seen", "undone"), [(pod_obj(node="node-a"), 0), (pod_obj(node="node-b"), 1),
                                              (None, 1), (pod_obj(deleting=True), 1)])
def test_a_binding_is_kept_when_the_pod_is_seen_bound_there_and_undone_when_it_cannot_land(
    seen: dict[str, Any] | None, undone: int
) -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.pod = pod_obj()  # the API server, asked, says: not bound yet
        undo = Undo()
        settle = settler(state, binder, fence_after_s=60.0)
        settle.follow_binding(POD, "node-a", undo)
        await asyncio.sleep(0.1)
        assert settle.unsettled == 1 and undo.count == 0
        if seen is None:
            state.delete("Pod", pod_obj())
        else:
            state.apply("Pod", seen)  # the watch
        await until(lambda: settle.unsettled == 0)
        assert undo.count == undone
        await settle.close()

    run(scenario)


def test_a_binding_read_back_bound_is_kept_without_the_watch() -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.pod = pod_obj(node="node-a")
        undo = Undo()
        settle = settler(state, binder, fence_after_s=0.0)
        settle.follow_binding(POD, "node-a", undo)
        await until(lambda: settle.unsettled == 0)
        assert undo.count == 0 and binder.called("read_pod") == [("read_pod", "default", "a")]
        await settle.close()

    run(scenario)


def test_a_binding_read_back_gone_is_undone_at_once() -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.pod = None
        undo = Undo()
        settle = settler(state, binder, fence_after_s=60.0)
        settle.follow_binding(POD, "node-a", undo)
        await until(lambda: settle.unsettled == 0, within=0.5)
        assert undo.count == 1
        await settle.close()

    run(scenario)


def test_a_binding_still_unbound_when_read_back_after_fence_after_s_is_undone_and_not_before() -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.pod = pod_obj()
        undo = Undo()
        settle = settler(state, binder, fence_after_s=0.3)
        started = asyncio.get_running_loop().time()
        settle.follow_binding(POD, "node-a", undo)
        await until(lambda: undo.count == 1)
        assert asyncio.get_running_loop().time() - started >= 0.3
        assert len(binder.called("read_pod")) >= 3  # read back every readback_s meanwhile
        await until(lambda: settle.unsettled == 0)
        await settle.close()

    run(scenario)


def test_a_binding_whose_pod_cannot_be_read_back_is_never_undone_by_time_alone() -> None:
    """Only an answer proves the Binding has not landed: an API server that does not answer
    leaves the claims reserved."""

    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.pod = BindError("503")
        undo = Undo()
        settle = settler(state, binder, fence_after_s=0.05)
        settle.follow_binding(POD, "node-a", undo)
        await asyncio.sleep(0.3)
        assert undo.count == 0 and settle.unsettled == 1 and len(binder.called("read_pod")) >= 3
        binder.pod = pod_obj()
        await until(lambda: undo.count == 1)
        await settle.close()

    run(scenario)


def test_a_retry_of_the_pod_takes_over_its_unsettled_binding() -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.pod = pod_obj()
        first, second = Undo(), Undo()
        settle = settler(state, binder, fence_after_s=0.1)
        settle.follow_binding(POD, "node-a", first)
        settle.stop_following_binding("some-other-pod")  # touches nothing of this pod
        assert settle.unsettled == 1
        settle.follow_binding(POD, "node-a", second)  # a new bind of the pod: the first is over
        await until(lambda: second.count == 1)
        assert first.count == 0
        settle.follow_binding(POD, "node-a", first)
        settle.stop_following_binding(POD.uid)
        await asyncio.sleep(0.25)
        assert first.count == 0 and settle.unsettled == 0
        await settle.close()

    run(scenario)


def test_an_undo_that_fails_leaves_the_claims_reserved_and_ends_the_following() -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.pod = None

        async def undo() -> None:
            raise RuntimeError("a bug")

        settle = settler(state, binder)
        settle.follow_binding(POD, "node-a", undo)
        await until(lambda: settle.unsettled == 0)
        await settle.close()

    run(scenario)


# --- stale-claim releases ---------------------------------------------------------------------


def test_one_release_per_pod_at_a_time_and_close_cancels_what_runs() -> None:
    async def scenario() -> None:
        releases = Releases()
        gate = asyncio.Event()
        ran: list[str] = []

        async def work(name: str) -> None:
            ran.append(name)
            await gate.wait()

        assert releases.start("p", work("first"))
        second = work("second")
        assert not releases.start("p", second)
        assert second.cr_frame is None  # closed, never to run
        assert releases.start("q", work("other pod"))
        await asyncio.sleep(0)
        assert releases.running("p") and releases.running("q") and not releases.running("r")
        gate.set()
        await until(lambda: not releases.running("p"))
        assert ran == ["first", "other pod"]
        gate.clear()
        assert releases.start("p", work("again"))
        await asyncio.sleep(0)
        await releases.close()
        await asyncio.sleep(0)
        assert not releases.running("p") and ran == ["first", "other pod", "again"]

    run(scenario)


# --- handover ----------------------------------------------------------------------------------


class FenceBinder:
    """Claims by name as the API server holds them; a fence moves one to the next version."""

    def __init__(self, claims: dict[str, dict[str, Any] | None]) -> None:
        self.claims = claims
        self.refuse: dict[str, int] = {}  # claim name -> fences still to refuse
        self.fenced: list[str] = []

    async def read_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.claims.get(name))

    async def fence_claim(self, claim: dict[str, Any]) -> dict[str, Any] | None:
        name = claim["metadata"]["name"]
        if self.refuse.get(name, 0) > 0:
            self.refuse[name] -= 1
            raise BindError("500")
        current = self.claims.get(name)
        if current is None:
            return None
        current["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
        self.fenced.append(name)
        return copy.deepcopy(current)


def named_claim(name: str, version: int = 5, allocated: bool = False) -> dict[str, Any]:
    obj = objects.claim(name)
    obj["metadata"].update(uid=f"uid-{name}", resourceVersion=str(version))
    if allocated:
        obj["status"] = {"allocation": objects.allocation("node-a"),
                         "reservedFor": [{"resource": "pods", "name": "a", "uid": "pod-a"}]}
    return obj


def synced_state(*claims: dict[str, Any]) -> ClusterState:
    from extender.model.kinds import KIND_NAMES

    state = ClusterState()
    for obj in claims:
        state.apply("ResourceClaim", obj)
    for kind in KIND_NAMES:
        state.mark_synced(kind)
    return state


def handover(state: ClusterState, binder: FenceBinder, term: list[str | None], **kwargs: Any) -> Any:
    from extender.scheduling.settle import Handover

    settings = {"quiet_s": 0.0, "give_up_s": 5.0, "poll_s": 0.01, **kwargs}
    return Handover(state, binder, term=lambda: term[0], **settings)  # type: ignore[arg-type]


async def takeover_done(h: Any, within: float = 3.0) -> None:
    await until(lambda: h.blocks_allocation() is None, within)


def test_without_a_lease_to_follow_nothing_waits() -> None:
    from extender.scheduling.settle import Handover

    async def scenario() -> None:
        h = Handover(synced_state(), FenceBinder({}), term=None, quiet_s=10.0, give_up_s=10.0)  # type: ignore[arg-type]
        assert h.blocks_allocation() is None
        await h.close()

    run(scenario)


def test_allocations_wait_while_the_lease_cannot_be_read() -> None:
    async def scenario() -> None:
        h = handover(synced_state(), FenceBinder({}), [None])
        unread = ("kube-scheduler's Lease could not be read lately; new allocations wait until it is "
                  "(the scheduler retries)")
        assert h.blocks_allocation() == unread
        await asyncio.sleep(0.05)
        assert h.blocks_allocation() == unread  # no takeover of an unknown term
        assert h.last_takeover_s is None
        await h.close()

    run(scenario)


def test_a_takeover_waits_the_quiet_time_then_fences_every_unallocated_claim_once() -> None:
    async def scenario() -> None:
        claims = {"free": named_claim("free"), "used": named_claim("used", allocated=True),
                  "gone": named_claim("gone")}
        binder = FenceBinder({"free": claims["free"], "used": claims["used"], "gone": None})
        state = synced_state(*copy.deepcopy(list(claims.values())))
        term: list[str | None] = ["scheduler-1"]
        h = handover(state, binder, term, quiet_s=0.2)
        started = asyncio.get_running_loop().time()
        assert h.blocks_allocation() == (
            "this replica took over scheduling (a new holding of the Lease): new allocations wait "
            "until the previous leader's claim writes can no longer land (the scheduler retries)")
        await asyncio.sleep(0.1)
        assert binder.fenced == [] and h.blocks_allocation() is not None  # still quiet
        await takeover_done(h)
        assert asyncio.get_running_loop().time() - started >= 0.2
        # Allocated claims need no fence; a claim gone needs none either.
        assert binder.fenced == ["free"] and h.fenced == 1
        assert state.claim("default", "free").resource_version == 6  # the fenced claim is cached
        assert h.last_takeover_s is not None and h.last_takeover_s >= 0.2
        assert h.blocks_allocation() is None  # the term's takeover is over for good
        assert binder.fenced == ["free"]
        await h.close()

    run(scenario)


def test_a_claim_replaced_or_allocated_since_is_not_fenced() -> None:
    async def scenario() -> None:
        replaced = named_claim("r")
        replaced["metadata"]["uid"] = "another"
        binder = FenceBinder({"r": replaced, "a": named_claim("a", version=9, allocated=True)})
        state = synced_state(named_claim("r"), named_claim("a"))
        h = handover(state, binder, ["t"])
        h.blocks_allocation()
        await takeover_done(h)
        assert binder.fenced == [] and h.fenced == 0
        assert state.claim("default", "a").allocation is not None  # what it read is cached
        assert state.claim("default", "r").uid == "uid-r"  # a replacement comes with the watch
        await h.close()

    run(scenario)


def test_a_takeover_waits_for_the_cache_to_be_synced() -> None:
    async def scenario() -> None:
        from extender.model.kinds import KIND_NAMES

        state = ClusterState()
        state.apply("ResourceClaim", named_claim("free"))
        binder = FenceBinder({"free": named_claim("free")})
        h = handover(state, binder, ["t"])
        h.blocks_allocation()
        await asyncio.sleep(0.1)
        assert binder.fenced == [] and h.blocks_allocation() is not None
        for kind in KIND_NAMES:
            state.mark_synced(kind)
        await takeover_done(h)
        assert binder.fenced == ["free"]
        await h.close()

    run(scenario)


def test_a_refused_fence_is_tried_again_and_one_never_possible_is_waited_out() -> None:
    async def scenario() -> None:
        binder = FenceBinder({"x": named_claim("x"), "y": named_claim("y")})
        binder.refuse = {"x": 2, "y": 10_000}
        state = synced_state(named_claim("x"), named_claim("y"))
        h = handover(state, binder, ["t"], give_up_s=0.3)
        started = asyncio.get_running_loop().time()
        h.blocks_allocation()
        await takeover_done(h)
        assert binder.fenced == ["x"] and h.fenced == 1
        assert asyncio.get_running_loop().time() - started >= 0.3  # y: until the request timeout
        await h.close()

    run(scenario)


def test_a_new_term_starts_a_new_takeover_and_the_old_one_is_dropped() -> None:
    async def scenario() -> None:
        binder = FenceBinder({"x": named_claim("x")})
        state = synced_state(named_claim("x"))
        term: list[str | None] = ["first"]
        h = handover(state, binder, term, quiet_s=0.15)
        h.blocks_allocation()
        await asyncio.sleep(0.05)
        h.blocks_allocation()  # the same term: the takeover under way goes on
        term[0] = "second"
        assert "took over" in h.blocks_allocation()
        await takeover_done(h)
        assert binder.fenced == ["x"]  # only the second takeover fenced
        term[0] = "third"
        assert h.blocks_allocation() is not None
        await takeover_done(h)
        assert binder.fenced == ["x", "x"] and h.fenced == 2
        await h.close()

    run(scenario)


def test_a_takeover_starts_when_this_replica_is_seen_leading_before_any_bind() -> None:
    from extender.scheduling.settle import Handover

    async def scenario() -> None:
        binder = FenceBinder({"x": named_claim("x")})
        leading = [False]
        h = Handover(synced_state(named_claim("x")), binder, term=lambda: "t",  # type: ignore[arg-type]
                     leading=lambda: leading[0], quiet_s=0.0, give_up_s=1.0, poll_s=0.01)
        watcher = asyncio.ensure_future(h.watch())
        await asyncio.sleep(0.05)
        assert binder.fenced == []
        leading[0] = True
        await until(lambda: binder.fenced == ["x"])
        watcher.cancel()
        await h.close()

    run(scenario)


# --- how soon, with the periods the context leaves at their defaults ---------------------------


def test_by_default_a_write_the_watch_shows_landed_is_settled_within_a_fraction_of_a_second() -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.claim = claim_obj(version=VERSION)  # the read-back finds nothing yet
        settle = Settler(state, binder, write_timeout_s=1.0, fence_after_s=60.0, readback_s=60.0)  # type: ignore[arg-type]
        settle.follow(cached(state), POD, None, VERSION)
        await asyncio.sleep(0.05)
        state.apply("ResourceClaim", claim_obj(version=VERSION + 1, reserved=POD.uid))
        seen = asyncio.get_running_loop().time()
        await until(lambda: not held(state))
        assert asyncio.get_running_loop().time() - seen < 0.7  # the watch is looked at every 0.2 s
        await settle.close()

    run(scenario)


def test_by_default_a_takeover_tries_a_refused_fence_again_within_a_second() -> None:
    from extender.scheduling.settle import Handover

    async def scenario() -> None:
        binder = FenceBinder({"x": named_claim("x")})
        binder.refuse = {"x": 1}
        h = Handover(synced_state(named_claim("x")), binder, term=lambda: "t",  # type: ignore[arg-type]
                     quiet_s=0.0, give_up_s=30.0)
        started = asyncio.get_running_loop().time()
        h.blocks_allocation()
        await until(lambda: binder.fenced == ["x"])
        assert asyncio.get_running_loop().time() - started < 1.2  # tried again after 0.5 s
        await h.close()

    run(scenario)


def test_a_takeover_fences_at_most_eight_claims_at_once() -> None:
    """The API server is not flooded: a takeover of a cluster of many claims fences in turns."""
    from extender.scheduling.settle import Handover

    class Gate(FenceBinder):
        def __init__(self, claims: dict[str, dict[str, Any] | None]) -> None:
            super().__init__(claims)
            self.now = self.most = 0
            self.open = asyncio.Event()

        async def fence_claim(self, claim: dict[str, Any]) -> dict[str, Any] | None:
            self.now += 1
            self.most = max(self.most, self.now)
            await self.open.wait()
            self.now -= 1
            return await super().fence_claim(claim)

    async def scenario() -> None:
        claims = {f"c{i}": named_claim(f"c{i}") for i in range(20)}
        binder = Gate(copy.deepcopy(claims))  # type: ignore[arg-type]
        h = Handover(synced_state(*claims.values()), binder, term=lambda: "t",  # type: ignore[arg-type]
                     quiet_s=0.0, give_up_s=30.0, poll_s=0.01)
        h.blocks_allocation()
        await until(lambda: binder.now == 8)
        await asyncio.sleep(0.05)
        assert binder.most == 8
        binder.open.set()
        await takeover_done(h)
        assert h.fenced == 20 and binder.most == 8
        await h.close()

    run(scenario)


# --- what the operator reads ------------------------------------------------------------------


def said(caplog: pytest.LogCaptureFixture, level: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "extender.scheduling.settle" and r.levelname == level]


def settled_write(outcome: Any, pod: dict[str, Any] | None = None, **answers: Any) -> ClusterState:
    """Follow a write that ends with ``outcome`` (a claim, or an exception) to its end."""

    async def scenario() -> ClusterState:
        state, binder = world(pod=pod), FakeBinder()
        for name, value in answers.items():
            setattr(binder, name, value)
        settle = settler(state, binder, fence_after_s=60.0)
        write: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        settle.follow(cached(state), POD, write, inflight_uid=CLAIM_UID)
        if isinstance(outcome, BaseException):
            write.set_exception(outcome)
        else:
            write.set_result(outcome)
        await until(lambda: settle.unsettled == 0)
        await settle.close()
        return state

    return asyncio.run(scenario())


def test_the_log_says_what_became_of_each_late_write(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger="extender.scheduling.settle")
    landed = claim_obj(version=VERSION + 1, reserved=POD.uid)
    settled_write(BindError("403 forbidden"), pod_obj())
    settled_write(landed, pod_obj())
    settled_write(landed, None, released=claim_obj(version=VERSION + 2))
    settled_write(landed, None, released=BindError("500 boom"))
    assert said(caplog, "INFO") == [
        "claim default/ca: the write of pod default/a was refused: 403 forbidden",
        "claim default/ca: a late write for pod default/a landed; kept for the pod",
        "claim default/ca: a late write for pod default/a landed; released",
        "claim default/ca: a late write for pod default/a landed; released",
    ]
    assert said(caplog, "WARNING") == [
        "claim default/ca: releasing the late write of pod default/a failed: 500 boom"]


def test_the_log_says_when_a_write_can_no_longer_land_and_why_a_read_back_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("DEBUG", logger="extender.scheduling.settle")

    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.claim = BindError("503 unavailable")
        settle = settler(state, binder, fence_after_s=60.0)
        settle.follow(cached(state), POD, None, VERSION)
        await until(lambda: len(binder.called("read_claim")) >= 1)
        await asyncio.sleep(0.01)
        state.apply("ResourceClaim", claim_obj(version=VERSION + 1))
        await until(lambda: settle.unsettled == 0)
        await settle.close()

    run(scenario)
    assert said(caplog, "DEBUG")[0] == (
        "claim default/ca: reading back or fencing failed, trying again later: 503 unavailable")
    assert said(caplog, "INFO") == [
        "claim default/ca: the write of pod default/a can no longer land; its devices are free"]


def test_a_bug_while_settling_a_write_keeps_its_devices_held_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A write that returns no claim at all (never from an API server): the safe side is to hold."""
    state = settled_write({"kind": "not a claim"}, pod_obj())
    assert held(state)
    [record] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert record.getMessage() == "settling the write of claim default/ca failed; its devices stay held"
    assert record.exc_info is not None


def test_the_log_says_what_became_of_each_binding(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger="extender.scheduling.settle")

    async def follow(answer: Any, undo: Callable[[], Awaitable[None]]) -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.pod = answer
        settle = settler(state, binder, fence_after_s=0.0)
        settle.follow_binding(POD, "node-a", undo)
        await until(lambda: settle.unsettled == 0)
        await settle.close()

    async def failing_undo() -> None:
        raise RuntimeError("a bug")

    async def scenario() -> None:
        await follow(pod_obj(node="node-a"), Undo())
        await follow(pod_obj(), Undo())
        await follow(None, failing_undo)

    run(scenario)
    assert said(caplog, "INFO") == [
        "the Binding of pod default/a to node node-a landed; its claims stay",
        "the Binding of pod default/a to node node-a can no longer land; its bind is undone",
        "the Binding of pod default/a to node node-a can no longer land; its bind is undone",
    ]
    [record] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert record.getMessage() == "settling the Binding of pod default/a failed; its claims stay reserved"
    assert record.exc_info is not None


def test_the_log_says_why_a_pod_could_not_be_read_back(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger="extender.scheduling.settle")

    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.pod = BindError("503 unavailable")
        settle = settler(state, binder, fence_after_s=60.0)
        settle.follow_binding(POD, "node-a", Undo())
        await until(lambda: len(binder.called("read_pod")) >= 1)
        await settle.close()

    run(scenario)
    assert said(caplog, "DEBUG")[0] == (
        "pod default/a: reading it back failed, trying again later: 503 unavailable")


def test_the_log_says_when_a_takeover_starts_and_ends_and_what_it_could_not_fence(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="extender.scheduling.settle")

    async def scenario() -> None:
        binder = FenceBinder({"x": named_claim("x")})
        binder.refuse = {"x": 10_000}
        h = handover(synced_state(named_claim("x")), binder, ["lease-1"], give_up_s=0.05, quiet_s=0.01)
        h.blocks_allocation()
        await takeover_done(h)
        await h.close()

    run(scenario)
    lines = said(caplog, "INFO")
    assert lines[0] == ("took over scheduling (Lease holding lease-1): new allocations wait 0.01s, "
                        "then every unallocated claim is fenced")
    assert "fencing claim default/x at takeover failed, trying again: 500" in lines
    done = r"takeover lease-1 done after 0\.\ds \(1 claims could not be fenced and were waited out\)"
    assert re.fullmatch(done, lines[-1])


# --- how often the API server is asked ------------------------------------------------------------


def test_a_binding_the_watch_already_shows_bound_is_kept_without_asking_the_api_server() -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj(node="node-a")), FakeBinder()
        undo = Undo()
        settle = settler(state, binder, fence_after_s=0.0)
        settle.follow_binding(POD, "node-a", undo)
        await until(lambda: settle.unsettled == 0)
        assert undo.count == 0 and binder.called("read_pod") == []
        await settle.close()

    run(scenario)


def test_a_pod_is_read_back_at_most_once_per_readback_period() -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.pod = pod_obj()
        settle = settler(state, binder, fence_after_s=60.0)  # readback_s 0.05, poll_s 0.005
        settle.follow_binding(POD, "node-a", Undo())
        await asyncio.sleep(0.3)
        assert 2 <= len(binder.called("read_pod")) <= 0.3 / 0.05 + 2
        await settle.close()

    run(scenario)


def test_a_read_back_that_hangs_is_given_up_after_the_readback_period_and_asked_again() -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.pod = pod_obj()
        hung = asyncio.Event()
        answer = binder.read_pod

        async def hangs_once(namespace: str, name: str) -> dict[str, Any] | None:
            if not hung.is_set():
                hung.set()
                await asyncio.Event().wait()  # never answers
            return await answer(namespace, name)

        binder.read_pod = hangs_once  # type: ignore[method-assign]
        undo = Undo()
        settle = settler(state, binder, fence_after_s=0.1)
        settle.follow_binding(POD, "node-a", undo)
        await until(lambda: undo.count == 1, within=2.0)  # not stuck behind the request that hangs
        await settle.close()

    run(scenario)


def test_a_late_write_whose_claim_the_watch_shows_released_since_ends_cleanly() -> None:
    """The reply comes after the watch showed a newer version without the allocation (someone
    released it meanwhile): nothing is left to release, and the in-flight entry ends."""

    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        settle = settler(state, binder)
        write: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        settle.follow(cached(state), POD, write, inflight_uid=CLAIM_UID)
        state.apply("ResourceClaim", claim_obj(version=VERSION + 2))
        write.set_result(claim_obj(version=VERSION + 1, reserved=POD.uid))
        await until(lambda: settle.unsettled == 0)
        assert not held(state) and binder.called("release_claim") == []
        await settle.close()

    run(scenario)


def test_a_release_that_hangs_is_given_up_after_the_write_timeout() -> None:
    async def scenario() -> None:
        state, binder = world(), FakeBinder()  # the pod is gone: the late write is released

        async def hangs(*_: Any, **__: Any) -> None:
            await asyncio.Event().wait()

        binder.release_claim = hangs  # type: ignore[method-assign]
        settle = Settler(state, binder, write_timeout_s=0.1, fence_after_s=60.0,  # type: ignore[arg-type]
                         poll_s=0.005, readback_s=0.05)
        write: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        settle.follow(cached(state), POD, write, inflight_uid=CLAIM_UID)
        write.set_result(claim_obj(version=VERSION + 1, reserved=POD.uid))
        await until(lambda: settle.unsettled == 0, within=2.0)
        assert not held(state)
        await settle.close()

    run(scenario)


def test_a_write_the_watch_shows_landed_for_a_pod_gone_is_released() -> None:
    async def scenario() -> None:
        state, binder = world(), FakeBinder()
        binder.claim = claim_obj(version=VERSION)
        binder.released = claim_obj(version=VERSION + 2)
        settle = settler(state, binder, fence_after_s=60.0)
        settle.follow(cached(state), POD, None, VERSION)
        state.apply("ResourceClaim", claim_obj(version=VERSION + 1, reserved=POD.uid))  # the watch
        await until(lambda: settle.unsettled == 0)
        assert binder.called("release_claim") == [("release_claim", CLAIM_UID, POD.uid, True)]
        await settle.close()

    run(scenario)


def test_a_claim_read_back_that_hangs_is_given_up_after_the_readback_period() -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        binder.claim = None  # once it answers: the claim is gone, its write can never land
        hung = asyncio.Event()
        answer = binder.read_claim

        async def hangs_once(namespace: str, name: str) -> dict[str, Any] | None:
            if not hung.is_set():
                hung.set()
                await asyncio.Event().wait()
            return await answer(namespace, name)

        binder.read_claim = hangs_once  # type: ignore[method-assign]
        settle = settler(state, binder, fence_after_s=60.0)
        settle.follow(cached(state), POD, None, VERSION)
        await until(lambda: not held(state), within=2.0)
        await settle.close()

    run(scenario)


def test_a_write_found_landed_by_a_read_back_for_a_pod_gone_is_released() -> None:
    async def scenario() -> None:
        state, binder = world(), FakeBinder()
        binder.claim = claim_obj(version=VERSION + 1, reserved=POD.uid)
        binder.released = claim_obj(version=VERSION + 2)
        settle = settler(state, binder, fence_after_s=60.0)
        settle.follow(cached(state), POD, None, VERSION)
        await until(lambda: settle.unsettled == 0)
        assert binder.called("release_claim") == [("release_claim", CLAIM_UID, POD.uid, True)]
        assert cached(state).allocation is None
        await settle.close()

    run(scenario)


def test_a_fence_that_finds_the_write_landed_for_a_pod_gone_releases_it() -> None:
    """The write went in between the read-back and the fence, for a pod that is gone by now."""

    async def scenario() -> None:
        state, binder = world(), FakeBinder()
        binder.claim = claim_obj(version=VERSION)
        binder.fenced_to = claim_obj(version=VERSION + 2, reserved=POD.uid)
        binder.released = claim_obj(version=VERSION + 3)
        settle = settler(state, binder, fence_after_s=0.0)
        settle.follow(cached(state), POD, None, VERSION)
        await until(lambda: settle.unsettled == 0)
        assert binder.called("release_claim") == [("release_claim", CLAIM_UID, POD.uid, True)]
        await settle.close()

    run(scenario)


def test_each_write_followed_is_counted_and_cancelled_on_close() -> None:
    async def scenario() -> None:
        state, binder = world(pod=pod_obj()), FakeBinder()
        settle = settler(state, binder)
        loop = asyncio.get_running_loop()
        writes: list[asyncio.Future[Any]] = [loop.create_future(), loop.create_future()]
        settle.follow(cached(state), POD, writes[0], inflight_uid="first")
        settle.follow(cached(state), POD, writes[1], inflight_uid="second")
        settle.follow_binding(POD, "node-a", Undo())
        binder.pod = pod_obj()
        assert settle.unsettled == 3
        await settle.close()
        await asyncio.sleep(0)
        assert all(w.cancelled() or not w.done() for w in writes) and settle.unsettled == 0

    run(scenario)


def test_a_takeover_started_before_the_cache_is_synced_ends_on_its_own_once_it_is() -> None:
    """Nobody needs to ask again: the takeover waits for the cache, then fences and ends."""

    async def scenario() -> None:
        from extender.model.kinds import KIND_NAMES

        state = ClusterState()
        state.apply("ResourceClaim", named_claim("free"))
        binder = FenceBinder({"free": named_claim("free")})
        h = handover(state, binder, ["t"])
        assert h.blocks_allocation() is not None
        await asyncio.sleep(0.1)
        for kind in KIND_NAMES:
            state.mark_synced(kind)
        await asyncio.sleep(0.2)
        assert binder.fenced == ["free"]
        assert h.blocks_allocation() is None
        await h.close()

    run(scenario)


def test_without_a_lease_the_first_allocation_still_waits_for_a_takeover() -> None:
    """No Lease (a kube-scheduler that does not elect itself: term "") is a holding too: the
    replica before this one, of the same scheduler, may have left writes on their way."""

    async def scenario() -> None:
        binder = FenceBinder({"x": named_claim("x")})
        h = handover(synced_state(named_claim("x")), binder, [""])
        assert h.blocks_allocation() is not None
        await takeover_done(h)
        assert binder.fenced == ["x"]
        await h.close()

    run(scenario)
