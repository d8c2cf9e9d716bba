"""The retry book: a pod turned away is handed out once something that could change the answer
changed — and not on changes that cannot help (another pod taking devices)."""

from __future__ import annotations

from typing import Any

from extender.model.pods import parse_pod
from extender.state import ClusterState
from tests.scheduling.cluster import claim, device_class, gpus, node, node_slice, pod


def uid_pod(name: str, uid: str = "", **kwargs: Any) -> dict[str, Any]:
    obj = pod(name, **kwargs)
    obj["metadata"]["uid"] = uid or f"uid-{name}"
    return obj


def allocated(name: str, uid: str, device: str, rv: str) -> dict[str, Any]:
    obj = claim(name)
    obj["metadata"].update(uid=uid, resourceVersion=rv)
    obj["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.example.com", "pool": "node-0", "device": device}]}}}
    return obj


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def cluster() -> ClusterState:
    state = ClusterState()
    for kind, obj in (("Node", node("node-0")), ("DeviceClass", device_class()),
                      ("ResourceSlice", node_slice("node-0", gpus(2)))):
        state.apply(kind, obj)
    return state


def turned_away(state: ClusterState, obj: dict[str, Any]):
    from extender.scheduling.retry import RetryBook

    book = RetryBook(state)
    state.apply("Pod", obj)
    book.turned_away(parse_pod(obj))
    return book


def test_devices_given_back_make_a_turned_away_pod_due_once():
    state = cluster()
    state.apply("ResourceClaim", allocated("a", "ua", "gpu-0", "5"))
    state.apply("ResourceClaim", allocated("b", "ub", "gpu-1", "6"))
    book = turned_away(state, uid_pod("waiting", claims={"gpu": "mine"}))
    assert book.due() == []
    state.delete("ResourceClaim", allocated("a", "ua", "gpu-0", "5"))
    (ref,) = book.due()
    assert (ref.namespace, ref.name, ref.uid) == ("default", "waiting", "uid-waiting")
    assert book.due() == [] and len(book) == 0  # handed out once; a new rejection records it again


def test_devices_taken_by_others_do_not_make_it_due():
    state = cluster()
    book = turned_away(state, uid_pod("waiting", claims={"gpu": "mine"}))
    state.apply("ResourceClaim", allocated("a", "ua", "gpu-0", "5"))
    state.apply("ResourceClaim", allocated("a", "ua", "gpu-0", "7"))  # an update that keeps the device
    assert book.due() == []


def test_a_claim_moving_from_in_flight_to_its_echo_gives_nothing_back():
    from extender.model import parse_allocation
    from extender.state import InFlight

    state = cluster()
    book = turned_away(state, uid_pod("waiting", claims={"gpu": "mine"}))
    echo = allocated("a", "ua", "gpu-0", "5")
    state.add_inflight(InFlight("ua", "p", parse_allocation(echo["status"]["allocation"]), 1e18))
    state.apply("ResourceClaim", echo)
    state.remove_inflight("ua")
    assert book.due() == []
    state.remove_inflight("none")
    state.delete("ResourceClaim", echo)
    assert len(book.due()) == 1


def test_the_claim_it_waits_for_appearing_or_changing_makes_it_due():
    state = cluster()
    book = turned_away(state, uid_pod("waiting", claims={"gpu": "mine"}))
    state.apply("ResourceClaim", allocated("other", "uo", "gpu-0", "3"))
    state.apply("ResourceClaim", {**claim("unrelated"), "metadata": {
        "name": "unrelated", "namespace": "default", "uid": "uu", "resourceVersion": "4"}})
    assert book.due() == []
    mine = claim("mine")
    mine["metadata"].update(uid="um", resourceVersion="9")
    state.apply("ResourceClaim", mine)
    assert len(book.due()) == 1


def test_the_cached_pod_gaining_its_generated_claim_name_makes_it_due():
    state = cluster()
    obj = uid_pod("waiting", templates={"gpu": "one-gpu"})
    book = turned_away(state, obj)
    assert book.due() == []
    obj["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "waiting-gpu-x"}]}
    state.apply("Pod", obj)
    assert len(book.due()) == 1


def test_inventory_changes_make_it_due():
    state = cluster()
    book = turned_away(state, uid_pod("waiting", claims={"gpu": "mine"}))
    state.apply("ResourceSlice", node_slice("node-1", gpus(1)))
    assert len(book.due()) == 1


def test_pods_bound_replaced_finished_or_long_gone_are_forgotten_without_a_retry():
    from extender.scheduling.retry import RetryBook

    state, clock = cluster(), Clock()
    book = RetryBook(state, clock=clock)
    objs = {name: uid_pod(name, claims={"gpu": "mine"}) for name in ("bound", "replaced", "done", "gone")}
    for obj in objs.values():
        state.apply("Pod", obj)
        book.turned_away(parse_pod(obj))
    state.apply("Pod", {**objs["bound"], "spec": {**objs["bound"]["spec"], "nodeName": "node-0"}})
    state.apply("Pod", uid_pod("replaced", uid="another", claims={"gpu": "mine"}))
    state.apply("Pod", {**objs["done"], "status": {"phase": "Succeeded"}})
    state.delete("Pod", objs["gone"])
    state.apply("ResourceSlice", node_slice("node-1", gpus(1)))
    assert book.due() == [] and len(book) == 1  # the unseen pod may be the pod watch lagging
    clock.now += RetryBook.UNSEEN_FOR_S + 1
    assert book.due() == [] and len(book) == 0


def test_a_fit_forgets_the_pod_and_the_book_is_bounded():
    from extender.scheduling.retry import RetryBook

    state = cluster()
    book = RetryBook(state, limit=2)
    for name in ("a", "b", "c"):
        obj = uid_pod(name, claims={"gpu": "mine"})
        state.apply("Pod", obj)
        book.turned_away(parse_pod(obj))
    assert len(book) == 2
    book.fits("uid-b")
    state.apply("ResourceSlice", node_slice("node-1", gpus(1)))
    assert [r.name for r in book.due()] == ["c"]  # a: evicted as the oldest, b: fits


def test_retry_now_hands_the_pod_out_at_once():
    state = cluster()
    obj = uid_pod("waiting", claims={"gpu": "mine"})
    book = turned_away(state, obj)
    assert book.due() == []
    book.retry_now(parse_pod(obj))
    assert [r.name for r in book.due()] == ["waiting"]
