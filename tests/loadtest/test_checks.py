from __future__ import annotations

from typing import Any

from loadtest.checks import find_double_allocations, find_misplaced_pods, find_unreserved_pods


def claim(
    name: str, devices: list[str], node: str | None = None, pods: tuple[str, ...] = (), **extra: Any
) -> dict:
    results = [{"request": "gpu", "driver": "d", "pool": "p", "device": dev, **extra} for dev in devices]
    allocation: dict[str, Any] = {"devices": {"results": results}}
    if node:
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        allocation["nodeSelector"] = {"nodeSelectorTerms": [term]}
    status = {
        "allocation": allocation,
        "reservedFor": [{"resource": "pods", "name": p, "uid": p} for p in pods],
    }
    return {"metadata": {"namespace": "ns", "name": name}, "status": status}


def test_planted_double_allocation_is_found() -> None:
    claims = [claim("a", ["gpu-0", "gpu-1"]), claim("b", ["gpu-2"]), claim("c", ["gpu-1"])]
    (double,) = find_double_allocations(claims)
    assert double.device == ("d", "p", "gpu-1")
    assert double.claims == ("ns/a", "ns/c")
    assert "d/p/gpu-1" in str(double)


def test_distinct_devices_and_unallocated_claims_pass() -> None:
    pending = {"metadata": {"namespace": "ns", "name": "x"}, "status": {}}
    assert find_double_allocations([claim("a", ["gpu-0"]), claim("b", ["gpu-1"]), pending]) == []


def test_same_device_name_in_other_pool_is_not_a_double() -> None:
    other = claim("b", ["gpu-0"])
    other["status"]["allocation"]["devices"]["results"][0]["pool"] = "q"
    assert find_double_allocations([claim("a", ["gpu-0"]), other]) == []


def test_admin_access_and_shares_are_excepted() -> None:
    claims = [
        claim("a", ["gpu-0"]),
        claim("admin", ["gpu-0"], adminAccess=True),
        claim("share-1", ["gpu-9"], shareID="1"),
        claim("share-2", ["gpu-9"], shareID="2"),
    ]
    assert find_double_allocations(claims) == []


def test_pod_on_a_node_its_claim_cannot_reach_is_misplaced() -> None:
    claims = [claim("a", ["gpu-0"], node="n1", pods=("p1", "p2")), claim("b", ["gpu-1"], pods=("p3",))]
    problems = find_misplaced_pods(claims, {("ns", "p1"): "n1", ("ns", "p2"): "n2", ("ns", "p3"): "n9"})
    assert len(problems) == 1 and "ns/p2 bound to n2" in problems[0]


def test_bound_pod_missing_from_reserved_for_is_reported() -> None:
    claims = [claim("a", ["gpu-0"], pods=("p1",))]
    assert find_unreserved_pods(claims, [("ns", "p1"), ("ns", "p2")]) == ["ns/p2"]
