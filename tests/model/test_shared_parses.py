"""Claims with the same spec, and devices with the same attribute or capacity maps in any slice,
share one parse; values that differ, even subtly, never do."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

from extender.model import parse_resource_claim, parse_resource_claim_template, parse_resource_slice
from extender.model._shared import ContentMemo, SharedJson


def claim(name: str, exactly: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def test_claims_with_one_spec_share_its_parse_and_keep_their_own_identity() -> None:
    a = parse_resource_claim(claim("a", {"deviceClassName": "gpu", "count": 2}))
    b = parse_resource_claim(claim("b", {"deviceClassName": "gpu", "count": 2}))
    assert b.requests is a.requests
    assert (a.name, a.uid, b.name, b.uid) == ("a", "uid-a", "b", "uid-b")


@pytest.mark.parametrize(
    "other",
    [
        {"deviceClassName": "gpu", "count": 3},
        {"deviceClassName": "tpu", "count": 2},
        {"count": 2, "deviceClassName": "gpu"},  # same content in another order: parsed alike
        {"deviceClassName": "gpu", "count": 2, "selectors": [{"cel": {"expression": "true"}}]},
    ],
)
def test_a_claim_with_another_spec_gets_the_parse_of_its_own(other: dict[str, Any]) -> None:
    parse_resource_claim(claim("a", {"deviceClassName": "gpu", "count": 2}))
    b = parse_resource_claim(claim("b", other))
    exact = b.requests[0].exactly
    assert exact is not None
    assert (exact.device_class_name, exact.count) == (other["deviceClassName"], other["count"])
    assert exact.selectors == tuple(s["cel"]["expression"] for s in other.get("selectors", ()))


def test_a_bad_spec_is_reported_for_each_claim_that_has_it() -> None:
    bad = {"deviceClassName": "gpu", "count": 0}
    for name in ("a", "b"):
        with pytest.raises(ValueError) as caught:
            parse_resource_claim(claim(name, dict(bad)))
        assert str(caught.value) == (
            f"ResourceClaim ns/{name}: spec.devices.requests[0].exactly.count: "
            "must be greater than zero, got 0"
        )


def test_a_template_is_refused_at_its_own_path_after_claims_with_its_spec_were_refused() -> None:
    with pytest.raises(ValueError, match=r"^ResourceClaim ns/a: spec\.devices"):
        parse_resource_claim(claim("a", {"count": True}))
    template = {
        "metadata": {"name": "t", "namespace": "ns"},
        "spec": {"spec": claim("t", {"count": True})["spec"]},
    }
    with pytest.raises(ValueError) as caught:
        parse_resource_claim_template(template)
    assert str(caught.value) == (
        "ResourceClaimTemplate ns/t: spec.spec.devices.requests[0].exactly.count: "
        "must be an integer, got bool"
    )


def test_values_json_writes_alike_are_not_taken_for_each_other() -> None:
    # orjson writes a datetime as its ISO text and NaN as null: the text alone would match.
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    parse_resource_claim(claim("a", {"deviceClassName": when.isoformat()}))
    with pytest.raises(ValueError, match=r"exactly\.deviceClassName: must be a string, got datetime"):
        parse_resource_claim(claim("b", {"deviceClassName": when}))
    parse_resource_claim(claim("c", {"deviceClassName": "gpu", "count": None}))
    with pytest.raises(ValueError, match=r"exactly\.count: must be an integer, got float"):
        parse_resource_claim(claim("d", {"deviceClassName": "gpu", "count": float("nan")}))


def slice_of(node: str, *devices: dict[str, Any]) -> dict[str, Any]:
    pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
    return {
        "metadata": {"name": f"{node}-gpus"},
        "spec": {"driver": "gpu.example.com", "nodeName": node, "pool": pool, "devices": list(devices)},
    }


def gpu(name: str, index: Any, memory: Any) -> dict[str, Any]:
    return {"name": name, "attributes": {"index": {"int": index}}, "capacity": {"memory": {"value": memory}}}


def test_devices_alike_in_two_slices_share_their_parsed_maps_and_keep_their_identity() -> None:
    a = parse_resource_slice(slice_of("n1", gpu("gpu-0", 0, "80Gi"), gpu("gpu-1", 1, "40Gi")))
    b = parse_resource_slice(slice_of("n2", gpu("gpu-0", 0, "80Gi"), gpu("gpu-1", 1, "80Gi")))
    assert b.devices[0].typed_attributes is a.devices[0].typed_attributes
    assert b.devices[0].capacities is a.devices[0].capacities
    assert [d.id for d in b.devices] == [("gpu.example.com", "n2", f"gpu-{i}") for i in (0, 1)]
    assert b.devices[1].typed_attributes["index"].values == (1,)
    assert a.devices[1].capacities["memory"].value.value == 40 * 2**30
    assert b.devices[1].capacities["memory"].value.value == 80 * 2**30


def test_a_bad_device_map_is_reported_in_its_own_slice_after_a_good_one_alike() -> None:
    parse_resource_slice(slice_of("n1", gpu("gpu-0", 0, "80Gi")))
    with pytest.raises(ValueError) as caught:
        parse_resource_slice(slice_of("n2", gpu("gpu-0", True, "80Gi")))
    assert str(caught.value) == (
        "ResourceSlice n2-gpus: spec.devices[0].attributes[index].int: must hold int values, got True"
    )
    when = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)
    made = {"name": "gpu-0", "attributes": {"made": {"string": when.isoformat()}}}
    parse_resource_slice(slice_of("n3", made))
    where = r"^ResourceSlice n4-gpus: spec\.devices\[0\]\.attributes\[made\]\.string: must hold string"
    with pytest.raises(ValueError, match=where):
        parse_resource_slice(slice_of("n4", {"name": "gpu-0", "attributes": {"made": {"string": when}}}))


def test_a_value_that_is_not_json_is_parsed_as_it_is() -> None:
    memo: ContentMemo[int] = ContentMemo(4)
    assert memo.parse({1: "a key that is not a string"}, lambda: 7) == 7
    assert memo.parse([2**70], lambda: 8) == 8
    assert len(memo) == 0


def test_the_memo_keeps_at_most_its_size_newest_first() -> None:
    memo: ContentMemo[str] = ContentMemo(2)
    for n in range(5):
        assert memo.parse({"n": n}, lambda n=n: f"parse {n}") == f"parse {n}"
    assert len(memo) == 2
    assert memo.parse({"n": 4}, lambda: "parsed again") == "parse 4"
    assert memo.parse({"n": 0}, lambda: "parsed again") == "parsed again"


def test_shared_json_across_documents_makes_their_equal_subtrees_one_object() -> None:
    share = SharedJson(1000)
    first = {"devices": [{"name": "d0", "attributes": {"a": {"int": 0}}}, {"name": "d1", "n": [1, 2]}]}
    second = {"devices": [{"name": "d1", "n": [1, 2]}, {"name": "d2", "attributes": {"a": {"int": 0}}}]}
    given = copy.deepcopy((first, second))
    a, b = share(first), share(second)
    assert (a, b) == given
    assert b["devices"][0] is a["devices"][1]  # found by content, not walked again
    assert b["devices"][1]["attributes"] is a["devices"][0]["attributes"]
    assert a is not first and a["devices"][0] is not first["devices"][0]  # the caller's stay theirs


def test_shared_json_across_documents_starts_afresh_past_its_size() -> None:
    share = SharedJson(5)
    a = share({"devices": [{"name": "d0", "x": {"v": 1}}]})
    for n in range(5):
        share({"devices": [{"name": f"other-{n}"}]})
    b = share({"devices": [{"name": "d0", "x": {"v": 1}}, {"name": "d1", "x": {"v": 1}}]})
    assert b == {"devices": [{"name": "d0", "x": {"v": 1}}, {"name": "d1", "x": {"v": 1}}]}
    assert b["devices"][0] is not a["devices"][0]
    assert b["devices"][0]["x"] is b["devices"][1]["x"]


def test_a_device_seen_in_an_earlier_slice_shares_maps_with_the_new_devices_of_a_slice() -> None:
    root = {"resource.kubernetes.io/pcieRoot": {"string": "pci-7"}}
    parse_resource_slice(slice_of("n1", {"name": "gpu-0", "attributes": root}))
    b = parse_resource_slice(
        slice_of("n2", {"name": "gpu-0", "attributes": root}, {"name": "gpu-1", "attributes": root})
    )
    assert b.devices[0].attributes is b.devices[1].attributes
    assert b.raw["spec"]["devices"][0]["attributes"] is b.devices[1].attributes


def test_a_device_in_another_pool_or_of_another_driver_is_its_own() -> None:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]}]}
    device = {"name": "gpu-0", "nodeSelector": {"nodeSelectorTerms": [term]}, "attributes": {"i": {"int": 0}}}
    a = parse_resource_slice(slice_of("n1", copy.deepcopy(device)))
    b = parse_resource_slice(slice_of("n2", copy.deepcopy(device)))
    other = slice_of("n3", copy.deepcopy(device))
    other["spec"]["driver"] = "tpu.example.com"
    c = parse_resource_slice(other)
    assert b.devices[0].node_selector is a.devices[0].node_selector  # parsed once
    drivers = ["gpu.example.com", "gpu.example.com", "tpu.example.com"]
    ids = [(d, n, "gpu-0") for d, n in zip(drivers, ("n1", "n2", "n3"), strict=True)]
    assert [s.devices[0].id for s in (a, b, c)] == ids
    assert [s.devices[0].driver for s in (a, b, c)] == drivers
    assert c.devices[0].attribute("tpu.example.com/i") is not None
    assert a.devices[0].cel_memo is b.devices[0].cel_memo is not c.devices[0].cel_memo
