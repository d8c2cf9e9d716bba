from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import yaml

from extender.local.cluster import load_local
from extender.state import ClusterState
from loadtest import k8s
from loadtest.cli import main as cli_main
from loadtest.workloads import GENERATORS, WorkloadParams, generate, write_state

SMALL = WorkloadParams(nodes=3, devices_per_node=8, pods=10, seed=7)


def _kinds(objects: list[dict]) -> Counter[str]:
    return Counter(o["kind"] for o in objects)


@pytest.mark.parametrize("name", list(GENERATORS))
def test_objects_pass_the_kubernetes_schema(name: str) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="schema check needs kubernetes-validate")
    workload = generate(name, SMALL)
    for obj in workload.objects + workload.churn_pods:
        kv.validate(obj, "1.36.0", strict=True)


@pytest.mark.parametrize("name", list(GENERATORS))
def test_pools_are_complete_and_consistent(name: str) -> None:
    workload = generate(name, SMALL)
    pools: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for s in (o for o in workload.objects if o["kind"] == "ResourceSlice"):
        pools[(s["spec"]["driver"], s["spec"]["pool"]["name"])].append(s["spec"])
    assert len(pools) == SMALL.nodes
    for slices in pools.values():
        assert all(s["pool"]["resourceSliceCount"] == len(slices) for s in slices)
        counter_sets = {cs["name"]: cs for s in slices for cs in s.get("sharedCounters", [])}
        devices = [d for s in slices for d in s.get("devices", [])]
        assert (
            len({d["name"] for d in devices})
            == len(devices)
            == sum(len(s.get("devices", [])) for s in slices)
        )
        for s in slices:
            assert not (s.get("devices") and s.get("sharedCounters")), "devices and counters share a slice"
            limit = 64 if any("consumesCounters" in d for d in s.get("devices", [])) else 128
            assert len(s.get("devices", [])) <= limit
            assert len(s.get("sharedCounters", [])) <= 8
        for d in devices:
            for use in d.get("consumesCounters", []):
                assert set(use["counters"]) <= set(counter_sets[use["counterSet"]]["counters"])


@pytest.mark.parametrize("name", list(GENERATORS))
def test_pods_reference_existing_claims_or_templates(name: str) -> None:
    workload = generate(name, SMALL)
    templates = {o["metadata"]["name"] for o in workload.objects if o["kind"] == "ResourceClaimTemplate"}
    claims = {o["metadata"]["name"] for o in workload.objects if o["kind"] == "ResourceClaim"}
    pods = workload.pods + workload.churn_pods
    assert pods
    for pod in pods:
        (source,) = pod["spec"]["resourceClaims"]
        assert (
            source.get("resourceClaimTemplateName") in templates or source.get("resourceClaimName") in claims
        )
    uids = [p["metadata"]["uid"] for p in pods]
    assert len(set(uids)) == len(uids)
    assert [o for o in workload.objects if o["kind"] == "Pod"] == workload.pods


@pytest.mark.parametrize("name", list(GENERATORS))
def test_generation_is_deterministic_per_seed(name: str) -> None:
    first, again = generate(name, SMALL), generate(name, SMALL)
    assert first.objects == again.objects and first.churn_pods == again.churn_pods
    other = generate(name, WorkloadParams(nodes=3, devices_per_node=8, pods=10, seed=8))
    assert other.objects != first.objects  # at least the pod UIDs follow the seed


def test_template_counts_only_gpus_the_selector_accepts() -> None:
    workload = generate("template", WorkloadParams(nodes=20, devices_per_node=8, pods=1000))
    memories = Counter(
        d["capacity"]["memory"]["value"]
        for o in workload.objects
        if o["kind"] == "ResourceSlice"
        for d in o["spec"]["devices"]
    )
    assert set(memories) == {"80Gi", "40Gi", "24Gi"}
    assert workload.capacity == memories["80Gi"] + memories["40Gi"]
    assert workload.expected_bound == workload.capacity < 1000
    (tmpl,) = [o for o in workload.objects if o["kind"] == "ResourceClaimTemplate"]
    selector = tmpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]["expression"]
    assert 'quantity("40Gi")) >= 0' in selector


def test_shared_claims_have_five_pods_each() -> None:
    workload = generate("shared", WorkloadParams(nodes=2, devices_per_node=2, pods=23))
    users = Counter(p["spec"]["resourceClaims"][0]["resourceClaimName"] for p in workload.pods)
    assert sorted(users.values()) == [3, 5, 5, 5, 5]
    assert _kinds(workload.objects)["ResourceClaim"] == 5


def test_constraint_capacity_counts_pairs_per_pcie_root() -> None:
    # 10 devices over 2 roots alternating: 5 per root -> 2 pairs per root -> 4 claims per node.
    workload = generate("constraint", WorkloadParams(nodes=3, devices_per_node=10, pods=100))
    assert workload.capacity == 12 and workload.expected_bound == 12
    slice_ = next(o for o in workload.objects if o["kind"] == "ResourceSlice")
    roots = [d["attributes"][k8s.PCIE_ROOT]["string"] for d in slice_["spec"]["devices"]]
    assert roots[0] != roots[1] and Counter(roots) == {"pci0000:00": 5, "pci0001:00": 5}


def test_partitionable_splits_large_nodes_over_slices_within_limits() -> None:
    workload = generate("partitionable", WorkloadParams(nodes=1, devices_per_node=10, pods=5))
    slices = [o["spec"] for o in workload.objects if o["kind"] == "ResourceSlice"]
    # 10 GPUs x 7 partitions = 70 devices -> 2 device slices; 10 counter sets -> 2 counter slices.
    assert len(slices) == 4 and all(s["pool"]["resourceSliceCount"] == 4 for s in slices)
    assert workload.capacity == 20


def test_prioritized_capacity_is_large_gpus_plus_pairs_of_small() -> None:
    workload = generate("prioritized", WorkloadParams(nodes=4, devices_per_node=5, pods=100))
    expected = 0
    for s in (o for o in workload.objects if o["kind"] == "ResourceSlice"):
        memories = Counter(d["capacity"]["memory"]["value"] for d in s["spec"]["devices"])
        expected += memories["80Gi"] + memories["40Gi"] // 2
    assert workload.capacity == expected == workload.expected_bound


def test_steady_starts_half_full_and_churns_the_rest() -> None:
    workload = generate("steady", WorkloadParams(nodes=4, devices_per_node=4, pods=9))
    assert len(workload.pods) == workload.capacity // 2
    assert len(workload.churn_pods) == 9
    assert workload.expected_bound == len(workload.pods) + 9
    assert not {p["metadata"]["name"] for p in workload.churn_pods} & {
        p["metadata"]["name"] for p in workload.pods
    }


def test_state_directory_round_trips(tmp_path: Path) -> None:
    workload = generate("partitionable", SMALL)
    files = write_state(workload, tmp_path)
    loaded = [doc for f in files for doc in yaml.safe_load_all(f.read_text())]
    assert sorted(loaded, key=repr) == sorted(workload.objects, key=repr)
    assert all(f.suffix == ".yaml" for f in files)


def test_state_directory_as_json_loads_like_yaml(tmp_path: Path) -> None:
    workload = generate("partitionable", SMALL)
    files = write_state(workload, tmp_path / "json", fmt="json")
    assert all(f.suffix == ".json" for f in files)
    loaded = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert sorted(loaded, key=repr) == sorted(workload.objects, key=repr)
    write_state(workload, tmp_path / "yaml")
    from_json, from_yaml = ClusterState(), ClusterState()
    load_local(from_json, tmp_path / "json")
    load_local(from_yaml, tmp_path / "yaml")
    assert from_json.counts() == from_yaml.counts() and from_json.counts()["Pod"] == len(workload.pods)


def test_a_state_written_over_another_replaces_it_whatever_the_formats(tmp_path: Path) -> None:
    # The run driver writes each run's state into the same directory under its --out: a
    # bigger YAML cluster left there would otherwise be loaded beside the next run's JSON.
    write_state(generate("template", WorkloadParams(nodes=5, pods=4)), tmp_path)
    small = generate("template", WorkloadParams(nodes=2, pods=3))
    files = write_state(small, tmp_path, fmt="json")
    assert sorted(tmp_path.iterdir()) == sorted(files)
    state = ClusterState()
    load_local(state, tmp_path)
    assert (state.counts()["Node"], state.counts()["Pod"]) == (2, 3)


def test_generate_writes_json_on_request(tmp_path: Path) -> None:
    assert cli_main(["generate", "--nodes", "2", "--format", "json", "--out", str(tmp_path)]) == 0
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".json"] * 5


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("template", WorkloadParams(nodes=0), "nodes"),
        ("template", WorkloadParams(nodes=1, pods=-1), "pods"),
        ("constraint", WorkloadParams(nodes=1, devices_per_node=1), "devices per node"),
        ("bogus", WorkloadParams(nodes=1), "unknown workload"),
    ],
)
def test_bad_parameters_are_refused(name: str, params: WorkloadParams, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        generate(name, params)
