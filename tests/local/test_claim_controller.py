"""The embedded resourceclaim controller: generated claims, waiting pods, pods and claims going away."""

from __future__ import annotations

import dataclasses
from typing import Any

from extender.local import claim_controller
from extender.local.claim_controller import POD_CLAIM_ANNOTATION, generated_claim_name
from extender.local.cluster import LocalCluster
from extender.model import kinds
from extender.model.pods import PodInfo, parse_pod
from extender.state import ClusterState
from tests.local.builders import loaded
from tests.scheduling.cluster import claim, claim_spec, gpu_cluster, pod, request, template

ALLOCATION = {"devices": {"results": [{"request": "gpu", "driver": "d", "pool": "p", "device": "x"}]}}


def reserve(local: LocalCluster, name: str, *consumers: str) -> None:
    """What a bind leaves on a claim: the finalizer, an allocation and the consumers."""
    obj = dict(local.state.claim("default", name).raw)
    obj["metadata"] = {**obj["metadata"], "finalizers": ["resource.kubernetes.io/delete-protection"]}
    pods = [local.state.pod("default", p) for p in consumers]
    obj["status"] = {"allocation": ALLOCATION, "reservedFor": [
        {"resource": "pods", "name": p.name, "uid": p.uid} for p in pods
    ]}
    local.write("ResourceClaim", obj)


def test_generated_names_follow_generate_name_rules():
    short = generated_claim_name("trainer-0", "uid-1", "gpu")
    assert short.startswith("trainer-0-gpu-") and len(short) == len("trainer-0-gpu-") + 5
    assert short == generated_claim_name("trainer-0", "uid-1", "gpu")  # deterministic
    assert short != generated_claim_name("trainer-0", "uid-2", "gpu")
    pod_name, claim_name = "p" * 50, "c" * 20
    long = generated_claim_name(pod_name, "uid", claim_name)
    # base "<pod>-<claim>-" is 72 > 57: both cut proportionally, the trailing hyphen is lost.
    assert long[:-5] == "p" * (50 * 57 // 72) + "-" + "c" * (20 * 57 // 72)
    assert len(long) <= 63


def test_template_claims_are_generated_and_recorded_in_the_pod():
    local = loaded(template("one", claim_spec(request(count=2))), pod("p", templates={"gpu": "one"}))
    info = local.state.pod("default", "p")
    name = info.claim_statuses["gpu"]
    generated = local.state.claim("default", name).raw
    assert name == generated_claim_name("p", info.uid, "gpu")
    owner = generated["metadata"]["ownerReferences"][0]
    assert owner == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "p",
        "uid": info.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert generated["metadata"]["annotations"][POD_CLAIM_ANNOTATION] == "gpu"
    assert generated["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2


def test_pod_waits_for_a_template_that_arrives_later():
    local = LocalCluster(ClusterState())
    local.apply(pod("p", templates={"gpu": "late"}))
    assert local.state.pod("default", "p").claim_statuses == {}
    local.apply(template("late"))
    assert "gpu" in local.state.pod("default", "p").claim_statuses


def test_deleting_a_pod_releases_and_deallocates_its_claims():
    local = loaded(*gpu_cluster(nodes=1), template("one"), claim("shared"))
    local.apply(pod("a", templates={"gpu": "one"}, claims={"s": "shared"}))
    local.apply(pod("b", claims={"s": "shared"}))
    generated = local.state.pod("default", "a").claim_statuses["gpu"]
    reserve(local, generated, "a")
    reserve(local, "shared", "a", "b")
    assert local.delete("Pod", "default", "a")
    assert local.state.claim("default", generated) is None  # generated: deleted with its pod
    shared = local.state.claim("default", "shared")
    assert [r.name for r in shared.reserved_for] == ["b"] and shared.allocation is not None
    assert local.delete("Pod", "default", "b")
    shared = local.state.claim("default", "shared")
    assert shared.allocation is None and not shared.reserved_for
    assert "finalizers" not in shared.raw["metadata"]
    assert not local.delete("Pod", "default", "b")


def test_a_claim_in_use_waits_for_its_last_consumer_before_it_goes():
    local = loaded(*gpu_cluster(nodes=1), claim("c"), pod("a", claims={"gpu": "c"}))
    reserve(local, "c", "a")
    assert local.delete("ResourceClaim", "default", "c")
    held = local.state.claim("default", "c")
    assert held is not None and held.raw["metadata"]["deletionTimestamp"]
    assert local.delete("Pod", "default", "a")
    assert local.state.claim("default", "c") is None


def _pods_of_every_shape() -> list[dict[str, Any]]:
    waiting = pod("waits", templates={"gpu": "later"})
    recorded = pod("recorded", templates={"gpu": "one", "other": "one"})
    done = [{"name": "gpu", "resourceClaimName": "x"}]
    recorded["status"] = {"phase": "Running", "resourceClaimStatuses": done}
    empty_phase = pod("empty-phase", templates={"gpu": "one"})
    empty_phase["status"] = {"phase": None, "resourceClaimStatuses": None}
    nominated = pod("nominated", claims={"gpu": "own"})
    nominated["status"] = {"nominatedNodeName": "node-0"}
    templated = pod("templated", templates={"a": "one", "b": "one"})
    return [pod("plain"), templated, waiting, recorded, empty_phase, nominated]


def test_a_pod_is_parsed_once_and_cached_as_the_parser_reads_what_was_written(monkeypatch):
    # The controller reads each pod before writing it; the cache keeps that reading (with the
    # phase and claim statuses the controller set) instead of parsing the pod again.
    parsed: list[str] = []

    def counting(obj: Any) -> PodInfo:
        parsed.append(obj["metadata"]["name"])
        return parse_pod(obj)

    monkeypatch.setattr(claim_controller, "parse_pod", counting)
    monkeypatch.setattr(kinds, "POD", dataclasses.replace(kinds.POD, parse=counting))
    pods = _pods_of_every_shape()
    local = loaded(template("one"), *pods)
    assert sorted(parsed) == sorted(p["metadata"]["name"] for p in pods)
    monkeypatch.undo()
    for info in local.state.pods.values():
        assert info == parse_pod(info.raw)
        assert info.raw["metadata"]["resourceVersion"]
    assert local.state.pod("default", "templated").phase == "Pending"
    assert local.state.pod("default", "empty-phase").phase == ""  # null is kept, as parsing reads it
    assert set(local.state.pod("default", "recorded").claim_statuses) == {"gpu", "other"}
    assert list(local.state.nominated) == [("default", "nominated")]
    # The template arrives: the waiting pod is synced again, and read again once.
    parsed.clear()
    monkeypatch.setattr(claim_controller, "parse_pod", counting)
    monkeypatch.setattr(kinds, "POD", dataclasses.replace(kinds.POD, parse=counting))
    local.apply(template("later"))
    assert parsed == ["waits"]
    monkeypatch.undo()
    waits = local.state.pod("default", "waits")
    assert waits == parse_pod(waits.raw) and waits.claim_statuses["gpu"]


def test_a_generated_claim_shares_nothing_with_its_template():
    # The controller hands the claim it builds over to admission, which defaults it in place.
    local = loaded(template("one", claim_spec(request(count=2))), pod("p", templates={"gpu": "one"}))
    made = local.state.claim("default", local.state.pod("default", "p").claim_statuses["gpu"])
    held = local.state.templates[("default", "one")]
    assert made.raw["spec"] == held["spec"]["spec"]
    made.raw["spec"]["devices"]["requests"][0]["exactly"]["count"] = 5
    assert held["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2
