"""Local mode: manifests, API-server defaults, the claim controller, the demo cluster, the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from extender.cli import main
from extender.local.cluster import (
    POD_CLAIM_ANNOTATION,
    LocalCluster,
    ManifestError,
    generated_claim_name,
    load_local,
)
from extender.state import ClusterState
from tests.scheduling.cluster import claim, claim_spec, gpu_cluster, pod, request, template


def cluster(*objs: dict) -> LocalCluster:
    local = LocalCluster(ClusterState())
    local.load((f"object {i}", obj) for i, obj in enumerate(objs))
    return local


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


def test_api_server_defaults_are_applied():
    toleration = {"key": "k", "effect": "NoSchedule"}
    spec = claim_spec(
        {"name": "a", "exactly": {"deviceClassName": "x", "tolerations": [toleration]}},
        {"name": "b", "firstAvailable": [{"name": "s", "deviceClassName": "x"}]},
        {"name": "c", "exactly": {"deviceClassName": "x", "allocationMode": "All"}},
    )
    local = cluster(claim("c", spec))
    raw = local.state.claim("default", "c").raw
    a, b, c = raw["spec"]["devices"]["requests"]
    assert a["exactly"]["allocationMode"] == "ExactCount" and a["exactly"]["count"] == 1
    assert a["exactly"]["tolerations"][0]["operator"] == "Equal"
    assert b["firstAvailable"][0]["count"] == 1
    assert c["exactly"]["allocationMode"] == "All" and "count" not in c["exactly"]
    meta = raw["metadata"]
    assert meta["uid"] and meta["resourceVersion"].isdigit() and meta["creationTimestamp"].endswith("Z")


def test_template_claims_are_generated_and_recorded_in_the_pod():
    local = cluster(template("one", claim_spec(request(count=2))), pod("p", templates={"gpu": "one"}))
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
    local = cluster(*gpu_cluster(nodes=1), template("one"), claim("shared"))
    local.apply(pod("a", templates={"gpu": "one"}, claims={"s": "shared"}))
    local.apply(pod("b", claims={"s": "shared"}))
    a, b = local.state.pod("default", "a"), local.state.pod("default", "b")
    allocation = {"devices": {"results": [{"request": "gpu", "driver": "d", "pool": "p", "device": "x"}]}}
    for name, consumers in ((a.claim_statuses["gpu"], [a]), ("shared", [a, b])):
        obj = dict(local.state.claim("default", name).raw)
        obj["metadata"] = {**obj["metadata"], "finalizers": ["resource.kubernetes.io/delete-protection"]}
        reserved = [{"resource": "pods", "name": p.name, "uid": p.uid} for p in consumers]
        obj["status"] = {"allocation": allocation, "reservedFor": reserved}
        local.write("ResourceClaim", obj)
    assert local.delete("Pod", "default", "a")
    assert local.state.claim("default", a.claim_statuses["gpu"]) is None  # generated: deleted with its pod
    shared = local.state.claim("default", "shared")
    assert [r.name for r in shared.reserved_for] == ["b"] and shared.allocation is not None
    assert local.delete("Pod", "default", "b")
    shared = local.state.claim("default", "shared")
    assert shared.allocation is None and not shared.reserved_for
    assert "finalizers" not in shared.raw["metadata"]
    assert not local.delete("Pod", "default", "b")


def test_invalid_file_is_rejected_with_its_name(tmp_path: Path):
    (tmp_path / "good.yaml").write_text(yaml.safe_dump_all(gpu_cluster(nodes=1)))
    bad = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"}, "spec": []}
    (tmp_path / "zz-bad.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ManifestError, match=r"zz-bad\.yaml \(document 1\): .*ResourceClaim"):
        load_local(ClusterState(), tmp_path)
    (tmp_path / "zz-bad.yaml").write_text("kind: [unclosed")
    with pytest.raises(ManifestError, match=r"zz-bad\.yaml"):
        load_local(ClusterState(), tmp_path)
    (tmp_path / "zz-bad.yaml").write_text(
        yaml.safe_dump({"apiVersion": "resource.k8s.io/v1beta1", "kind": "DeviceClass"})
    )
    with pytest.raises(ManifestError, match="v1beta1"):
        load_local(ClusterState(), tmp_path)


def test_cli_exits_non_zero_on_bad_state_and_bad_gates(tmp_path: Path, capsys):
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"kind": "Gadget", "metadata": {"name": "x"}}))
    assert main(["serve", "--state", str(tmp_path)]) != 0
    assert "bad.yaml" in capsys.readouterr().err
    assert main(["serve", "--feature-gates", "DRANope=true"]) != 0
    assert "unknown feature gate" in capsys.readouterr().err


def test_multi_document_directory_loads_every_kind(tmp_path: Path):
    rule = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": "drain"},
            "spec": {"taint": {"key": "maintenance", "effect": "NoSchedule"}}}
    objs = [*gpu_cluster(nodes=2), template("one"), pod("p", templates={"gpu": "one"}), rule]
    (tmp_path / "a.yaml").write_text(yaml.safe_dump_all(objs[:3]))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump_all(objs[3:]))
    (tmp_path / "ignored.txt").write_text("not yaml")
    state = ClusterState()
    load_local(state, tmp_path)
    assert state.synced
    assert state.counts() == {
        "Node": 2,
        "DeviceClass": 1,
        "ResourceSlice": 2,
        "DeviceTaintRule": 1,
        "ResourceClaim": 1,
        "ResourceClaimTemplate": 1,
        "Pod": 1,
    }


def test_demo_cluster_loads_with_generated_claims():
    state = ClusterState()
    load_local(state, None)
    assert state.synced and len(state.nodes) == 3 and len(state.slices) == 2
    pods = {p.name: p for p in state.pods.values()}
    assert all(state.claim("default", n) for p in pods.values() for n in p.claim_statuses.values())
    assert any(not p.claims for p in pods.values())  # one pod needs no device at all
