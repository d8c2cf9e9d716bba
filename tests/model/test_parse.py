"""Parsing API dicts into the typed model: defaults, validation messages, round trips."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from extender.model import (
    DerivedAttribute,
    Node,
    parse_allocation,
    parse_device_class,
    parse_node,
    parse_resource_claim,
    parse_resource_claim_template,
    parse_resource_slice,
)
from extender.model.kinds import KINDS
from tests.model.mutations import valid_objects

VALID = {obj["kind"]: obj for obj in valid_objects()}


def slice_obj(**spec: Any) -> dict[str, Any]:
    body = {"driver": "drv", "pool": {"name": "p", "generation": 2, "resourceSliceCount": 1}, "nodeName": "n"}
    body.update(spec)
    return {"metadata": {"name": "s"}, "spec": body}


def claim_obj(*requests: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "c", "namespace": "ns", "uid": "u"},
        "spec": {"devices": {"requests": list(requests)}},
        "status": status,
    }


def test_claim_defaults_like_the_api_server() -> None:
    claim = parse_resource_claim(
        claim_obj(
            {"name": "r", "exactly": {"deviceClassName": "c", "tolerations": [{"key": "k", "value": "v"}]}}
        )
    )
    exact = claim.requests[0].exactly
    assert exact is not None
    assert (exact.allocation_mode, exact.count, exact.admin_access, exact.capacity_requests) == (
        "ExactCount",
        1,
        None,
        None,
    )
    assert exact.tolerations[0].operator == "Equal"
    assert exact.tolerations[0].raw == {"key": "k", "value": "v", "operator": "Equal"}
    assert claim.key == "ns/c"


def test_claim_without_namespace_is_rendered_by_name() -> None:
    obj = claim_obj()
    del obj["metadata"]["namespace"]
    assert parse_resource_claim(obj).key == "c"


def test_subrequests_and_explicit_admin_access_false_is_kept() -> None:
    claim = parse_resource_claim(
        claim_obj(
            {"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": "x", "allocationMode": "All"}]},
            {"name": "q", "exactly": {"deviceClassName": "c", "adminAccess": False}},
        )
    )
    sub = claim.requests[0].first_available[0]
    assert (sub.name, sub.allocation_mode, sub.count) == ("a", "All", 0)
    assert claim.requests[1].exactly is not None and claim.requests[1].exactly.admin_access is False


def test_derived_attributes_are_parsed_in_order_on_requests_and_subrequests() -> None:
    derived = [{"name": "derived/numa", "expression": "1"}, {"name": "x.example.com/a", "expression": "2"}]
    claim = parse_resource_claim(
        claim_obj(
            {"name": "r", "exactly": {"deviceClassName": "c", "derivedAttributes": derived}},
            {"name": "q", "firstAvailable": [{"name": "a", "derivedAttributes": derived[1:]}]},
        )
    )
    exact = claim.requests[0].exactly
    assert exact is not None
    assert exact.derived_attributes == (
        DerivedAttribute("derived/numa", "1"),
        DerivedAttribute("x.example.com/a", "2"),
    )
    sub = claim.requests[1].first_available[0]
    assert sub.derived_attributes == (DerivedAttribute("x.example.com/a", "2"),)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            claim_obj({"name": "r", "exactly": {"derivedAttributes": [{"name": "d/x", "expression": 1}]}}),
            "spec.devices.requests[0].exactly.derivedAttributes[0].expression: must be a string, got int",
        ),
        (
            claim_obj({"name": "r", "exactly": {}, "firstAvailable": [{"name": "s"}]}),
            "ResourceClaim ns/c: spec.devices.requests[0]: exactly and firstAvailable are mutually exclusive",
        ),
        (
            claim_obj({"name": "r", "exactly": {"deviceClassName": "c", "count": 0}}),
            "ResourceClaim ns/c: spec.devices.requests[0].exactly.count: must be greater than zero",
        ),
        (
            claim_obj(
                {"name": "r", "exactly": {"deviceClassName": "c", "capacity": {"requests": {"m": "x1"}}}}
            ),
            "spec.devices.requests[0].exactly.capacity.requests[m]: invalid quantity",
        ),
        ({"metadata": {}}, "ResourceClaim <unnamed>: metadata.name: required"),
        (claim_obj("not a request"), "spec.devices.requests[0]: must be an object"),
    ],
)
def test_malformed_claims_are_rejected_with_the_field(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_resource_claim(obj)


def test_slice_devices_are_typed_and_satisfy_the_cel_device_input() -> None:
    s = parse_resource_slice(
        slice_obj(
            devices=[
                {
                    "name": "d",
                    "attributes": {"model": {"string": "a"}, "x.io/ids": {"ints": [1, 2]}, "odd": {}},
                    "capacity": {
                        "mem": {"value": "1Gi", "requestPolicy": {"default": "1", "validValues": ["1"]}}
                    },
                    "allowMultipleAllocations": True,
                }
            ]
        )
    )
    d = s.devices[0]
    assert d.id == ("drv", "p", "d")
    assert (d.driver, d.allow_multiple_allocations, d.cel_memo) == ("drv", True, {})
    assert d.attributes["model"] == {"string": "a"}
    assert d.attribute("drv/model") is not None and d.attribute("drv/model").values == ("a",)  # type: ignore[union-attr]
    assert d.attribute("x.io/ids").is_list  # type: ignore[union-attr]
    assert d.attribute("other.io/model") is None
    assert d.attribute("drv/odd").kind is None  # type: ignore[union-attr]
    assert d.capacities["mem"].value.value == 1024**3
    assert s.pool.generation == 2


def test_node_allocatable_resources_of_a_device() -> None:
    # Field names of resource.k8s.io/v1 Device in the 1.37.0 schema (DRANodeAllocatableResources).
    mapped = {
        "cpu": {"mapping": {"capacityKey": "drv/cores", "capacityMultiplier": "2"}},
        "memory": {"overhead": {"perPod": "1Gi", "perContainer": "100Mi"}},
        "hugepages-2Mi": {"mapping": {"deviceMultiplier": "4Mi"}, "overhead": {"perPod": "2Mi"}},
    }
    s = parse_resource_slice(
        slice_obj(devices=[{"name": "a", "nodeAllocatableResources": mapped}, {"name": "b"}])
    )
    a, b = s.devices
    assert b.node_allocatable == {}
    cpu, memory, huge = (a.node_allocatable[k] for k in ("cpu", "memory", "hugepages-2Mi"))
    assert cpu.overhead is None and cpu.mapping is not None
    assert (cpu.mapping.capacity_key, cpu.mapping.device_multiplier) == ("drv/cores", None)
    assert cpu.mapping.capacity_multiplier is not None and cpu.mapping.capacity_multiplier.value == 2
    assert memory.mapping is None and memory.overhead is not None
    assert memory.overhead.per_pod is not None and memory.overhead.per_pod.value == 1024**3
    assert memory.overhead.per_container is not None and memory.overhead.per_container.value == 100 * 1024**2
    assert huge.mapping is not None and huge.mapping.capacity_key is None
    assert huge.mapping.device_multiplier is not None and str(huge.mapping.device_multiplier) == "4Mi"
    assert huge.overhead is not None and huge.overhead.per_container is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"driver": ""}, "ResourceSlice s: spec.driver: required"),
        (
            {"pool": {"name": "p", "generation": 1}},
            "spec.pool.resourceSliceCount: must be a positive integer",
        ),
        ({"devices": [{"name": "d", "attributes": {"a": {"int": "1"}}}]}, "must hold int values"),
        ({"devices": [{"name": "d", "capacity": {"m": {"value": "lots"}}}]}, "invalid quantity"),
        ({"devices": [{}]}, "spec.devices[0].name: required"),
        (
            {
                "devices": [
                    {"name": "d", "nodeAllocatableResources": {"cpu": {"mapping": {"deviceMultiplier": "x"}}}}
                ]
            },
            "spec.devices[0].nodeAllocatableResources[cpu].mapping.deviceMultiplier: invalid quantity",
        ),
        (
            {"devices": [{"name": "d", "nodeAllocatableResources": {"memory": []}}]},
            "spec.devices[0].nodeAllocatableResources[memory]: must be an object",
        ),
    ],
)
def test_malformed_slices_are_rejected(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_resource_slice(slice_obj(**spec))


def test_node_selector_matching() -> None:
    s = parse_resource_slice(
        slice_obj(
            nodeName=None,
            nodeSelector={
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["3"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["special"]}]},
                ]
            },
        )
    )
    selector = s.node_selector
    assert selector is not None and selector.problem is None
    assert selector.matches(Node("a", {"gen": "4"}))
    assert not selector.matches(Node("a", {"gen": "3"}))
    assert not selector.matches(Node("a", {}))
    assert selector.matches(Node("special", {}))


def test_malformed_node_selector_fails_only_when_matched() -> None:
    s = parse_resource_slice(
        slice_obj(
            nodeName=None,
            nodeSelector={"nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In"}]}]},
        )
    )
    assert s.node_selector is not None
    with pytest.raises(ValueError, match="values set can't be empty"):
        s.node_selector.matches(parse_node({"metadata": {"name": "n"}}))


def test_device_class_keeps_non_cel_selectors_as_none() -> None:
    cls = parse_device_class(
        {
            "metadata": {"name": "c"},
            "spec": {"selectors": [{"cel": {"expression": "true"}}, {}], "config": [{"opaque": {}}]},
        }
    )
    assert cls.selectors == ("true", None)
    assert cls.config == ({"opaque": {}},)


def test_allocation_round_trip() -> None:
    api = {
        "devices": {
            "results": [
                {"request": "r", "driver": "d", "pool": "p/q", "device": "x", "adminAccess": True},
                {
                    "request": "r",
                    "driver": "d",
                    "pool": "p/q",
                    "device": "y",
                    "shareID": "0f",
                    "consumedCapacity": {"m": "1Gi"},
                },
            ],
            "config": [
                {"source": "FromClaim", "requests": ["r"], "opaque": {"driver": "d", "parameters": {}}}
            ],
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}
            ]
        },
    }
    parsed = parse_allocation(api)
    assert parsed.to_api() == api
    assert list(parsed.device_ids()) == [("d", "p/q", "x"), ("d", "p/q", "y")]
    assert parsed.devices[0].admin_access and parsed.devices[1].share_id == "0f"
    claim = parse_resource_claim(
        claim_obj(allocation=api, reservedFor=[{"resource": "pods", "name": "p", "uid": "1"}])
    )
    assert claim.allocation is not None and claim.allocation.to_api() == api
    assert claim.reserved_for[0].name == "p"


def test_an_empty_list_attribute_has_no_value() -> None:
    s = parse_resource_slice(slice_obj(devices=[{"name": "d", "attributes": {"ids": {"ints": []}}}]))
    value = s.devices[0].attribute("drv/ids")
    assert value is not None and value.kind is None


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("annotations", ["a"], r"metadata\.annotations: must be an object, got list"),
        ("annotations", {"a": 1}, r"metadata\.annotations\[a\]: must be a string, got int"),
        ("labels", "x", r"metadata\.labels: must be an object, got str"),
        ("finalizers", -1, r"metadata\.finalizers: must be a list, got int"),
        ("finalizers", [True], r"metadata\.finalizers\[0\]: must be a string, got bool"),
        ("ownerReferences", 1.5, r"metadata\.ownerReferences: must be a list, got float"),
        ("ownerReferences", [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": 1}],
         r"metadata\.ownerReferences\[0\]\.uid: must be a string, got int"),
        ("ownerReferences", [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u",
                              "controller": "yes"}],
         r"metadata\.ownerReferences\[0\]\.controller: must be a boolean, got str"),
        ("deletionTimestamp", 5, r"metadata\.deletionTimestamp: must be a string, got int"),
        ("uid", {"a": 1}, r"metadata\.uid: must be a string, got dict"),
        ("resourceVersion", [1], r"metadata\.resourceVersion: must be a string, got list"),
    ],
)
def test_object_metadata_of_every_kind_is_checked_like_the_api_server_decodes_it(
    field: str, value: Any, message: str
) -> None:
    # What the rest of the extender reads from metadata (annotations, owners, finalizers) has the
    # API's types once parsed, whichever kind it is and wherever it came from.
    for kind in KINDS:
        obj = copy.deepcopy(VALID[kind.name])
        obj["metadata"][field] = value
        with pytest.raises(ValueError, match=rf"^{kind.name} [^:]+: {message}"):
            kind.parse(obj)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"metadata": [], "spec": {}}, r"spec\.metadata: must be an object, got list"),
        ({"metadata": {"labels": {"a": 1}}, "spec": {}}, r"spec\.metadata\.labels\[a\]: must be a string"),
        ({"spec": {"devices": {"requests": 1.5}}},
         r"spec\.spec\.devices\.requests: must be a list, got float"),
        ({"spec": {"devices": {"requests": [{"name": "r", "exactly": {"count": True}}]}}},
         r"spec\.spec\.devices\.requests\[0\]\.exactly\.count: must be an integer, got bool"),
    ],
)
def test_a_claim_template_is_refused_when_the_claims_made_from_it_would_be(spec: Any, message: str) -> None:
    obj = {"metadata": {"name": "t", "namespace": "ns"}, "spec": spec}
    with pytest.raises(ValueError, match=rf"^ResourceClaimTemplate ns/t: {message}"):
        parse_resource_claim_template(obj)
