"""Extended resources backed by DRA: names, the class mapping and per-node decisions."""

from __future__ import annotations

from typing import Any

import pytest

from extender.model import parse_device_class, parse_node
from extender.model.extended import integer_quantity, is_dra_extended_name
from extender.model.pods import parse_pod
from extender.scheduling.extended_resources.claim import in_memory_claim, mappings_of, requests_and_mappings
from extender.scheduling.extended_resources.needs import ExtendedNeeds, class_mapping


def dclass(name: str, extended: str | None = None, created: str | None = None) -> Any:
    meta: dict[str, Any] = {"name": name}
    if created:
        meta["creationTimestamp"] = created
    spec: dict[str, Any] = {"selectors": []}
    if extended:
        spec["extendedResourceName"] = extended
    return parse_device_class({"metadata": meta, "spec": spec})


def classes(*items: Any) -> dict[str, Any]:
    return {c.name: c for c in items}


def pod_with(*containers: dict[str, str], init: tuple[dict[str, str], ...] = ()) -> Any:
    spec = {
        "initContainers": [{"name": f"i{i}", "resources": {"requests": r}} for i, r in enumerate(init)],
        "containers": [{"name": f"c{i}", "resources": {"requests": r}} for i, r in enumerate(containers)],
    }
    return parse_pod({"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec})


def node_with(allocatable: dict[str, str] | None = None) -> Any:
    alloc = {"cpu": "4", **(allocatable or {})}
    return parse_node({"metadata": {"name": "n"}, "status": {"allocatable": alloc}})


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("example.com/gpu", True),
        ("deviceclass.resource.kubernetes.io/gpu", True),
        ("deviceclass.resource.kubernetes.io/", False),
        ("cpu", False),
        ("hugepages-2Mi", False),
        ("kubernetes.io/something", False),
        ("requests.example.com/gpu", False),
    ],
)
def test_which_names_dra_may_back(name, expected):
    assert is_dra_extended_name(name) is expected


def test_integer_quantities_and_clear_errors():
    assert integer_quantity("2", "r") == 2
    assert integer_quantity("1k", "r") == 1000
    with pytest.raises(ValueError, match="whole number"):
        integer_quantity("500m", "r")
    with pytest.raises(ValueError, match=r"^r: "):
        integer_quantity("lots", "r")


def test_every_class_maps_its_implicit_name_and_its_explicit_one():
    mapping = class_mapping(classes(dclass("a", "example.com/gpu"), dclass("b")))
    assert mapping == {
        "deviceclass.resource.kubernetes.io/a": "a",
        "deviceclass.resource.kubernetes.io/b": "b",
        "example.com/gpu": "a",
    }


def test_shared_explicit_name_goes_to_the_newest_class_then_the_smaller_name():
    older = dclass("z-old", "example.com/gpu", "2025-01-01T00:00:00Z")
    newer = dclass("y-new", "example.com/gpu", "2025-06-01T00:00:00Z")
    assert class_mapping(classes(older, newer))["example.com/gpu"] == "y-new"
    tie_b = dclass("b", "example.com/gpu", "2025-06-01T00:00:00Z")
    tie_a = dclass("a", "example.com/gpu", "2025-06-01T00:00:00Z")
    assert class_mapping(classes(tie_b, tie_a))["example.com/gpu"] == "a"


def test_pod_requests_come_from_every_container_and_limits_default_requests():
    raw = {
        "metadata": {"name": "p"},
        "spec": {
            "initContainers": [{"name": "init", "resources": {"limits": {"example.com/gpu": "1"}}}],
            "containers": [
                {"name": "main", "resources": {"requests": {"cpu": "1", "example.com/nic": "0"}}},
            ],
        },
    }
    pod = parse_pod(raw)
    assert [(c.name, c.init, c.request_names) for c in pod.containers] == [
        ("init", True, ("example.com/gpu",)),
        ("main", False, ("cpu", "example.com/nic")),
    ]
    # A zero request asks for nothing (pod-level effective request).
    assert pod.extended_requests == frozenset({"example.com/gpu"})


def test_fractional_extended_request_is_a_clear_error():
    raw = {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "resources": {"requests": {"example.com/gpu": "0.5"}}}]}}
    with pytest.raises(ValueError, match=r"spec.containers\[0\].resources.requests\[example.com/gpu\]"):
        parse_pod(raw)


def test_node_keeps_only_dra_backable_allocatable_rounded_up():
    node = node_with({"example.com/gpu": "2", "vendor.io/x": "500m"})
    assert node.extended_allocatable == {"example.com/gpu": 2, "vendor.io/x": 1}


def test_pod_without_mapped_request_is_not_dras_business():
    pod = pod_with({"vendor.io/fpga": "1"})
    assert ExtendedNeeds.of(pod, classes(dclass("gpu", "example.com/gpu"))) is None


def test_mapped_resource_goes_to_dra_unless_the_node_lists_it():
    pod = pod_with({"example.com/gpu": "1"})
    needs = ExtendedNeeds.of(pod, classes(dclass("gpu", "example.com/gpu")))
    assert needs is not None
    assert needs.on_node(node_with()) == (("example.com/gpu",), "")
    # Listed with zero: no device plugin capacity, so DRA provides it (upstream's allocatable == 0).
    assert needs.on_node(node_with({"example.com/gpu": "0"})) == (("example.com/gpu",), "")
    assert needs.on_node(node_with({"example.com/gpu": "4"})) == ((), "")


def test_unmapped_resource_missing_from_the_node_cannot_fit():
    pod = pod_with({"example.com/gpu": "1", "vendor.io/fpga": "1"})
    needs = ExtendedNeeds.of(pod, classes(dclass("gpu", "example.com/gpu")))
    assert needs is not None
    via_dra, reason = needs.on_node(node_with())
    assert via_dra == ()
    assert reason.startswith("cannot fit resource vendor.io/fpga")
    # The device plugin's resource listed (even with zero): kube-scheduler's fit decides.
    assert needs.on_node(node_with({"vendor.io/fpga": "0"})) == (("example.com/gpu",), "")


def test_request_names_follow_container_index_and_sorted_resource_index():
    pod = pod_with(
        {"cpu": "1", "example.com/gpu": "2", "vendor.io/nic": "1"},
        {"example.com/gpu": "0"},  # a zero request gets no device request
        {"vendor.io/nic": "3"},
        init=({"example.com/gpu": "1"},),
    )
    classes_of = {"example.com/gpu": "gpu-class", "vendor.io/nic": "nic-class"}
    requests, mappings = requests_and_mappings(pod, ("vendor.io/nic", "example.com/gpu"), classes_of)
    # The init container i0 (index 0) runs before c0 starts: c0's request serves it too.
    assert [(r["name"], r["exactly"]["deviceClassName"], r["exactly"]["count"]) for r in requests] == [
        ("container-1-request-1", "gpu-class", 2),  # c0: cpu, example.com/gpu, vendor.io/nic
        ("container-1-request-2", "nic-class", 1),
        ("container-3-request-0", "nic-class", 3),  # c2
    ]
    assert all(r["exactly"]["allocationMode"] == "ExactCount" for r in requests)
    # Resource by resource (sorted); regular containers in order, then the init ones.
    assert [(m["containerName"], m["resourceName"], m["requestName"]) for m in mappings] == [
        ("c0", "example.com/gpu", "container-1-request-1"),
        ("i0", "example.com/gpu", "container-1-request-1"),
        ("c0", "vendor.io/nic", "container-1-request-2"),
        ("c2", "vendor.io/nic", "container-3-request-0"),
    ]


def test_requests_are_ordered_by_name_as_strings():
    containers = [{"example.com/gpu": "1"} for _ in range(11)]
    requests, _ = requests_and_mappings(pod_with(*containers), ("example.com/gpu",), {"example.com/gpu": "g"})
    names = [r["name"] for r in requests]
    assert names == sorted(names) and names[:3] == ["container-0-request-0", "container-1-request-0",
                                                    "container-10-request-0"]


def test_only_the_resources_the_node_leaves_to_dra_get_requests():
    pod = pod_with({"example.com/gpu": "1", "vendor.io/nic": "1"})
    requests, mappings = requests_and_mappings(pod, ("vendor.io/nic",), {"vendor.io/nic": "nic"})
    assert [r["name"] for r in requests] == ["container-0-request-1"]
    assert [m["resourceName"] for m in mappings] == ["vendor.io/nic"]


def test_in_memory_claim_has_upstreams_shape_and_mappings_read_back():
    pod = pod_with({"cpu": "1", "example.com/gpu": "2"}, init=({"example.com/gpu": "3"},))
    extended = in_memory_claim(pod, ("example.com/gpu",), {"example.com/gpu": "gpu"})
    claim = extended.claim
    assert (claim.namespace, claim.name) == ("ns", "<extended-resources>")
    assert [r.name for r in claim.requests] == ["container-0-request-0", "container-1-request-1"]
    body = extended.create_body()
    assert "name" not in body["metadata"] and "uid" not in body["metadata"] and "status" not in body
    assert body["metadata"]["generateName"] == "p-extended-resources-"
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u", "controller": True}
    ]
    assert mappings_of(pod, claim) == list(extended.mappings)


def test_mappings_of_a_claim_not_made_for_the_pod_is_an_error():
    pod = pod_with({"example.com/gpu": "1"})
    other = in_memory_claim(pod_with({"a.io/x": "1"}, {"example.com/gpu": "1"}), ("example.com/gpu",),
                            {"example.com/gpu": "gpu"})
    with pytest.raises(ValueError, match="container-1-request-0 names no request of pod ns/p"):
        mappings_of(pod, other.claim)
