"""The resourceclaim controller's part in the test API server (and the garbage collector's for
claims): what happens to claims when pods go, finish or are replaced, and claims from templates.

The expected behaviour is the real controller's: k8s.io/kubernetes v1.37.2,
pkg/controller/resourceclaim/controller.go (see tests/apiserver/controller.py).
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from tests.apiserver.controller import (
    DELETE_PROTECTION_FINALIZER,
    POD_CLAIM_ANNOTATION,
    collect_garbage,
    generate_name,
    sync_claims,
    sync_pods,
)
from tests.apiserver.resources import BY_KIND
from tests.apiserver.store import ApiError, Store
from tests.kube import objects

CLAIM, POD, GROUP = BY_KIND["ResourceClaim"], BY_KIND["Pod"], BY_KIND["PodGroup"]
TEMPLATE = BY_KIND["ResourceClaimTemplate"]


def reference(obj: dict[str, Any]) -> dict[str, Any]:
    return {"resource": "pods", "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"]}


def reserved_claim(store: Store, name: str, *consumers: dict[str, Any], protected: bool = True,
                   owner: dict[str, Any] | None = None) -> dict[str, Any]:
    """An allocated claim reserved for ``consumers`` (pods, or reservedFor entries as they are)."""
    claim = objects.claim(name)
    if protected:
        claim["metadata"]["finalizers"] = [DELETE_PROTECTION_FINALIZER]
    if owner is not None:
        claim["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "controller": True,
                                                 "name": owner["metadata"]["name"],
                                                 "uid": owner["metadata"]["uid"]}]
    claim["status"] = {
        "allocation": objects.allocation("n"),
        "reservedFor": [c if "resource" in c else reference(c) for c in consumers],
    }
    return store.seed(CLAIM, claim)


def claim(store: Store, name: str) -> dict[str, Any]:
    return store.get(CLAIM, "default", name)


def gone(store: Store, name: str) -> bool:
    try:
        store.get(CLAIM, "default", name)
    except ApiError as exc:
        return exc.code == 404
    return False


def reserved_names(store: Store, name: str) -> list[str]:
    return [r["name"] for r in (claim(store, name).get("status") or {}).get("reservedFor") or ()]


def with_phase(store: Store, name: str, phase: str) -> dict[str, Any]:
    pod = store.get(POD, "default", name)
    pod["status"] = {**(pod.get("status") or {}), "phase": phase}
    return store.update(POD, "default", name, pod, "status")


def bound(store: Store, name: str, node: str = "n") -> None:
    store.bind(POD, "default", name, {"kind": "Binding", "metadata": {"name": name},
                                      "target": {"kind": "Node", "name": node}})


# ----- reservations ------------------------------------------------------------------------------


def test_a_gone_pod_loses_its_reservations_and_a_claim_nobody_uses_is_deallocated() -> None:
    store = Store()
    a, b = (store.seed(POD, objects.pod(n, claim_name="shared")) for n in ("a", "b"))
    reserved_claim(store, "shared", a, b)
    reserved_claim(store, "alone", a)
    assert sync_claims(store) == 0  # everyone still there
    store.delete(POD, "default", "a")
    assert sync_claims(store) == 2
    shared, alone = claim(store, "shared"), claim(store, "alone")
    assert [r["name"] for r in shared["status"]["reservedFor"]] == ["b"] and shared["status"]["allocation"]
    assert shared["metadata"]["finalizers"] == [DELETE_PROTECTION_FINALIZER]
    assert "status" not in alone and "finalizers" not in alone["metadata"]


def test_a_pod_replaced_under_its_name_loses_the_old_ones_reservation() -> None:
    store = Store()
    old = store.seed(POD, objects.pod("a", claim_name="c"))
    reserved_claim(store, "c", old)
    store.delete(POD, "default", "a")
    new = store.seed(POD, objects.pod("a", claim_name="c"))
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert sync_claims(store) == 1
    assert "status" not in claim(store, "c")


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_pod_loses_its_reservation(phase: str) -> None:
    store = Store()
    done, running = (store.seed(POD, objects.pod(n, claim_name="c")) for n in ("done", "running"))
    reserved_claim(store, "c", done, running)
    with_phase(store, "running", "Running")
    with_phase(store, "done", phase)
    assert sync_claims(store) == 1
    assert reserved_names(store, "c") == ["running"]


def test_a_pod_deleted_before_it_was_scheduled_is_done_but_one_terminating_on_its_node_is_not() -> None:
    store = Store()
    pods = {}
    for name in ("unscheduled", "terminating"):
        obj = objects.pod(name, claim_name="c")
        obj["metadata"]["finalizers"] = ["example.com/hold"]  # keeps it while being deleted
        pods[name] = store.seed(POD, obj)
    reserved_claim(store, "c", *pods.values())
    bound(store, "terminating")
    for name in pods:
        store.delete(POD, "default", name)
    assert sync_claims(store) == 1
    assert reserved_names(store, "c") == ["terminating"]


def test_a_claim_without_the_finalizer_keeps_its_allocation_when_its_last_consumer_goes() -> None:
    """Deallocation is for claims with the delete-protection finalizer (every claim a scheduler
    allocates has it); one without is left allocated, as upstream's sanity check does."""
    store = Store()
    pod = store.seed(POD, objects.pod("a", claim_name="c"))
    reserved_claim(store, "c", pod, protected=False)
    store.delete(POD, "default", "a")
    assert sync_claims(store) == 1
    status = claim(store, "c")["status"]
    assert "reservedFor" not in status and status["allocation"]


def test_an_allocated_claim_never_reserved_is_not_deallocated() -> None:
    """Deallocation follows the transition from used to unused: a driver need not reserve when
    it allocates, so an allocated claim reserved for nobody stays allocated."""
    store = Store()
    reserved_claim(store, "c")
    assert sync_claims(store) == 0
    assert claim(store, "c")["status"]["allocation"]


def test_consumers_other_than_pods_are_kept_and_pod_groups_checked_only_with_their_gate() -> None:
    store = Store()
    group = store.seed(GROUP, {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                               "metadata": {"name": "g", "namespace": "default"},
                               "spec": {"schedulingPolicy": {"basic": {}}}})
    gone_group = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "old", "uid": "u-old"}
    live_group = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "g",
                  "uid": group["metadata"]["uid"]}
    other = {"apiGroup": "example.com", "resource": "things", "name": "t", "uid": "u-t"}
    reserved_claim(store, "c", gone_group, live_group, other)
    assert sync_claims(store) == 0
    assert sync_claims(store, workload_resource_claims=True) == 1
    assert reserved_names(store, "c") == ["g", "t"]


def test_the_status_of_deallocated_devices_goes_with_the_allocation() -> None:
    store = Store()
    pod = store.seed(POD, objects.pod("a", claim_name="c"))
    obj = reserved_claim(store, "c", pod)
    obj["status"]["devices"] = [{"driver": objects.DRIVER, "pool": "n", "device": "gpu-0",
                                 "conditions": []}]
    store.update(CLAIM, "default", "c", obj, "status")
    store.delete(POD, "default", "a")
    assert sync_claims(store) == 1
    assert "status" not in claim(store, "c")


# ----- deletion ----------------------------------------------------------------------------------


def test_a_deleted_claim_waits_for_its_consumers_then_goes() -> None:
    store = Store()
    pod = store.seed(POD, objects.pod("a", claim_name="c"))
    reserved_claim(store, "c", pod)
    store.delete(CLAIM, "default", "c")
    assert sync_claims(store) == 0
    assert claim(store, "c")["metadata"]["deletionTimestamp"]
    store.delete(POD, "default", "a")
    assert sync_claims(store) == 1
    assert gone(store, "c")  # it went with its last consumer


def test_a_deleted_claim_reserved_for_nobody_is_deallocated_and_goes() -> None:
    store = Store()
    reserved_claim(store, "c")
    store.delete(CLAIM, "default", "c")
    assert claim(store, "c")["metadata"]["deletionTimestamp"]
    assert sync_claims(store) == 1
    assert gone(store, "c")


def test_another_finalizer_keeps_a_deleted_claim_after_the_controller_let_go() -> None:
    store = Store()
    obj = reserved_claim(store, "c")
    obj["metadata"]["finalizers"].append("example.com/hold")
    store.update(CLAIM, "default", "c", obj)
    store.delete(CLAIM, "default", "c")
    assert sync_claims(store) == 1
    left = claim(store, "c")
    assert left["metadata"]["finalizers"] == ["example.com/hold"] and "status" not in left
    assert sync_claims(store) == 0


# ----- claims generated for a pod ----------------------------------------------------------------


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_the_claim_of_a_finished_pod_is_deallocated_and_deleted(phase: str) -> None:
    store = Store()
    pod = store.seed(POD, objects.pod("a", template_name="gpu"))
    reserved_claim(store, "a-gpu-x", pod, owner=pod)
    with_phase(store, "a", phase)
    assert sync_claims(store) == 1
    assert gone(store, "a-gpu-x")


def test_the_claim_of_a_finished_pod_goes_even_when_it_was_never_reserved() -> None:
    store = Store()
    pod = store.seed(POD, objects.pod("a", template_name="gpu"))
    reserved_claim(store, "never", owner=pod)  # allocated, with the finalizer, reserved for nobody
    assert sync_claims(store) == 0  # the pod may still run
    with_phase(store, "a", "Failed")
    # Deleted while its finalizer holds it; back as deleted, it is deallocated and goes.
    assert sync_claims(store) == 1
    assert gone(store, "never")


def test_the_claim_of_a_replaced_pod_is_deleted_that_of_a_gone_pod_left_to_the_garbage_collector() -> None:
    store = Store()
    replaced = store.seed(POD, objects.pod("a", template_name="gpu"))
    deleted = store.seed(POD, objects.pod("b", template_name="gpu"))
    running = store.seed(POD, objects.pod("c", template_name="gpu"))
    for pod in (replaced, deleted, running):
        reserved_claim(store, f"{pod['metadata']['name']}-gpu", pod, owner=pod)
    store.delete(POD, "default", "a")
    store.seed(POD, objects.pod("a", template_name="gpu"))
    store.delete(POD, "default", "b")
    assert sync_claims(store) == 2
    assert gone(store, "a-gpu")
    left = claim(store, "b-gpu")
    assert "status" not in left and "finalizers" not in left["metadata"]  # deallocated, not deleted
    assert reserved_names(store, "c-gpu") == ["c"]
    assert collect_garbage(store) == 1  # its owner is gone
    assert gone(store, "b-gpu") and not gone(store, "c-gpu")


def test_only_a_controlling_pod_owner_makes_a_claim_generated() -> None:
    store = Store()
    pod = store.seed(POD, objects.pod("a", claim_name="c"))
    obj = reserved_claim(store, "c", owner=pod)
    obj["metadata"]["ownerReferences"][0]["controller"] = False
    store.update(CLAIM, "default", "c", obj)
    with_phase(store, "a", "Succeeded")
    assert sync_claims(store) == 0
    assert not gone(store, "c")


# ----- claims from templates ---------------------------------------------------------------------


def template(store: Store, name: str = "gpu", labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    obj = objects.claim_template(name)
    if labels or annotations:
        obj["spec"]["metadata"] = {"labels": labels or {}, "annotations": annotations or {}}
    return store.seed(TEMPLATE, obj)


def statuses(store: Store, pod: str) -> list[dict[str, Any]]:
    return list((store.get(POD, "default", pod).get("status") or {}).get("resourceClaimStatuses") or ())


def test_a_claim_is_made_from_the_template_as_the_controller_makes_it() -> None:
    store = Store()
    tmpl = template(store, labels={"team": "ml"}, annotations={"note": "from the template"})
    pod = store.seed(POD, objects.pod("trainer", template_name="gpu"))
    assert sync_pods(store) == 1
    (status,) = statuses(store, "trainer")
    name = status["resourceClaimName"]
    assert status["name"] == "gpu" and re.fullmatch(r"trainer-gpu-[bcdfghjklmnpqrstvwxz2456789]{5}", name)
    made = claim(store, name)
    assert made["metadata"]["generateName"] == "trainer-gpu-"
    assert made["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "trainer",
                                                    "uid": pod["metadata"]["uid"], "controller": True}]
    assert made["metadata"]["annotations"] == {"note": "from the template", POD_CLAIM_ANNOTATION: "gpu"}
    assert made["metadata"]["labels"] == {"team": "ml"}
    assert made["spec"] == tmpl["spec"]["spec"] and "finalizers" not in made["metadata"]
    assert sync_pods(store) == 0  # recorded: nothing more to do


def test_the_pod_claim_statuses_are_merged_and_sorted_by_name() -> None:
    store = Store()
    template(store)
    obj = objects.pod("p")
    obj["spec"]["resourceClaims"] = [{"name": "z", "resourceClaimTemplateName": "gpu"},
                                     {"name": "direct", "resourceClaimName": "mine"},
                                     {"name": "a", "resourceClaimTemplateName": "gpu"}]
    store.seed(POD, obj)
    assert sync_pods(store) == 2
    assert [s["name"] for s in statuses(store, "p")] == ["a", "z"]


@pytest.mark.parametrize(
    ("pod_name", "claim_name", "expected"),
    [
        ("p", "gpu", "p-gpu-"),
        ("a" * 40, "b" * 15, "a" * 40 + "-" + "b" * 15 + "-"),  # 57 characters: kept
        ("a" * 40, "b" * 16, "a" * 39 + "-" + "b" * 15),  # cut in proportion, no trailing hyphen
        ("a" * 100, "gpu", "a" * 54 + "-" + "g"),
    ],
)
def test_generate_name_cuts_both_names_in_proportion(pod_name: str, claim_name: str, expected: str) -> None:
    assert generate_name(pod_name, claim_name) == expected


def test_long_names_make_a_claim_name_of_at_most_63_characters() -> None:
    store = Store()
    template(store)
    store.seed(POD, objects.pod("p" * 63, template_name="gpu"))
    assert sync_pods(store) == 1
    (status,) = statuses(store, "p" * 63)
    name = status["resourceClaimName"]
    assert len(name) == 60 and name.startswith("p" * 52 + "-gp") and not gone(store, name)


def test_a_pod_waits_for_its_template() -> None:
    store = Store()
    store.seed(POD, objects.pod("p", template_name="gpu"))
    assert sync_pods(store) == 0 and statuses(store, "p") == []
    template(store)
    assert sync_pods(store) == 1 and len(statuses(store, "p")) == 1


def test_a_claim_made_before_the_pod_status_recorded_it_is_taken_not_made_again() -> None:
    store = Store()
    template(store)
    pod = store.seed(POD, objects.pod("p", template_name="gpu"))
    orphan = objects.claim("p-gpu-made")
    orphan["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                                              "uid": pod["metadata"]["uid"], "controller": True}]
    orphan["metadata"]["annotations"] = {POD_CLAIM_ANNOTATION: "gpu"}
    store.seed(CLAIM, orphan)
    assert sync_pods(store) == 0  # nothing created
    assert statuses(store, "p") == [{"name": "gpu", "resourceClaimName": "p-gpu-made"}]
    assert len(store.list(CLAIM, None)[0]) == 1


def test_a_recorded_claim_that_is_gone_or_not_the_pods_is_made_again() -> None:
    store = Store()
    template(store)
    store.seed(POD, objects.pod("p", template_name="gpu"))
    sync_pods(store)
    (first,) = statuses(store, "p")
    store.delete(CLAIM, "default", first["resourceClaimName"])
    assert sync_pods(store) == 1
    (second,) = statuses(store, "p")
    assert second["resourceClaimName"] != first["resourceClaimName"]
    taken = claim(store, second["resourceClaimName"])
    taken["metadata"]["ownerReferences"][0]["uid"] = "someone-else"
    store.update(CLAIM, "default", second["resourceClaimName"], taken)
    assert sync_pods(store) == 1
    (third,) = statuses(store, "p")
    assert third["resourceClaimName"] not in (first["resourceClaimName"], second["resourceClaimName"])


def test_a_pod_being_deleted_gets_no_claim() -> None:
    store = Store()
    template(store)
    obj = objects.pod("p", template_name="gpu")
    obj["metadata"]["finalizers"] = ["example.com/hold"]
    store.seed(POD, obj)
    store.delete(POD, "default", "p")
    assert sync_pods(store) == 0 and store.list(CLAIM, None)[0] == []


def test_a_pod_bound_without_the_scheduler_gets_its_allocated_claims_reserved() -> None:
    store = Store()
    pod = store.seed(POD, objects.pod("p", claim_name="c"))
    reserved_claim(store, "c")  # allocated, reserved for nobody
    assert sync_pods(store) == 0  # not bound: the scheduler reserves
    bound(store, "p")
    assert sync_pods(store) == 1
    assert claim(store, "c")["status"]["reservedFor"] == [reference(pod)]
    assert sync_pods(store) == 0


def test_a_generated_claim_lives_and_goes_with_its_pod() -> None:
    """From the template to the end: made, allocated and reserved (as a scheduler would), the
    pod finishes, the claim is deallocated and deleted."""
    store = Store()
    template(store)
    store.seed(POD, objects.pod("p", template_name="gpu"))
    sync_pods(store)
    (status,) = statuses(store, "p")
    name, pod = status["resourceClaimName"], store.get(POD, "default", "p")
    made = claim(store, name)
    made["metadata"]["finalizers"] = [DELETE_PROTECTION_FINALIZER]
    made = store.update(CLAIM, "default", name, made)
    allocated = copy.deepcopy(made)
    allocated["status"] = {"allocation": objects.allocation("n"), "reservedFor": [reference(pod)]}
    store.update(CLAIM, "default", name, allocated, "status")
    bound(store, "p")
    assert sync_claims(store) == 0 and sync_pods(store) == 0
    with_phase(store, "p", "Succeeded")
    assert sync_claims(store) == 1
    assert gone(store, name)
