"""The device view: name splitting, value conversion, malformed attributes, memoization."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from extender.cel.device import DeviceView, build_device_view, split_qualified_name, view_for
from extender.cel.runtime.semver import Semver
from extender.model.quantity import Quantity


@dataclass
class FakeDevice:
    driver: str = "gpu.example.com"
    attributes: dict[str, dict[str, Any]] = field(default_factory=dict)
    capacity: dict[str, dict[str, Any]] = field(default_factory=dict)
    allow_multiple_allocations: bool = False
    cel_memo: dict[Any, Any] = field(default_factory=dict)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("model", ("gpu.example.com", "model")),
        ("gpu.example.com/model", ("gpu.example.com", "model")),
        ("other.org/model", ("other.org", "model")),
        ("a.b/c/d", ("a.b", "c/d")),
        ("/x", ("", "x")),
    ],
)
def test_split_qualified_name(name: str, expected: tuple[str, str]) -> None:
    assert split_qualified_name(name, "gpu.example.com") == expected


def test_values_are_converted_and_grouped_by_domain() -> None:
    device = FakeDevice(
        attributes={
            "model": {"string": "a100"},
            "cores": {"int": 8},
            "ecc": {"bool": True},
            "driverVersion": {"version": "1.2.3-rc.1+b"},
            "numa.example.org/node": {"int": 1},
            "services": {"strings": ["a", "b"]},
            "ids": {"ints": [1, 2]},
            "flags": {"bools": [True, False]},
            "versions": {"versions": ["1.0.0", "2.0.0"]},
        },
        capacity={
            "memory": {"value": "80Gi", "requestPolicy": {"default": "1Gi"}},
            "numa.example.org/bw": {"value": "100M"},
        },
        allow_multiple_allocations=True,
    )
    view = build_device_view(device)
    assert view.error is None
    assert view.driver == "gpu.example.com"
    assert view.allow_multiple_allocations is True
    gpu = view.attributes["gpu.example.com"]
    assert gpu["model"] == "a100"
    assert gpu["cores"] == 8 and type(gpu["cores"]) is int
    assert gpu["ecc"] is True
    assert gpu["driverVersion"] == Semver.parse("1.2.3-rc.1")
    assert str(gpu["driverVersion"]) == "1.2.3-rc.1+b"
    assert gpu["services"] == ["a", "b"]
    assert gpu["ids"] == [1, 2]
    assert gpu["flags"] == [True, False]
    assert gpu["versions"] == [Semver.parse("1.0.0"), Semver.parse("2.0.0")]
    assert view.attributes["numa.example.org"] == {"node": 1}
    assert view.capacity["gpu.example.com"]["memory"] == Quantity.parse("81920Mi")
    assert str(view.capacity["gpu.example.com"]["memory"]) == "80Gi"
    assert view.capacity["numa.example.org"]["bw"] == 100_000_000
    assert set(view.attributes) == {"gpu.example.com", "numa.example.org"}


def test_bare_and_qualified_names_share_the_driver_domain() -> None:
    view = build_device_view(FakeDevice(attributes={"a": {"int": 1}, "gpu.example.com/b": {"int": 2}}))
    assert view.attributes == {"gpu.example.com": {"a": 1, "b": 2}}


def test_lists_win_over_scalars_and_scalars_follow_upstream_order() -> None:
    view = build_device_view(
        FakeDevice(
            attributes={
                "both": {"string": "s", "ints": [3]},
                "two": {"string": "s", "int": 4},
                "nulls": {"int": None, "bool": False},
            }
        )
    )
    assert view.attributes["gpu.example.com"] == {"both": [3], "two": 4, "nulls": False}


@pytest.mark.parametrize(
    ("attribute", "error"),
    [
        ({}, "attribute bad: unsupported attribute value"),
        ({"float": 1.5}, "attribute bad: unsupported attribute value"),
        ({"int": None}, "attribute bad: unsupported attribute value"),
        ("oops", "attribute bad: unsupported attribute value"),
        ({"version": "1.2"}, "attribute bad: parse semantic version: No Major.Minor.Patch elements found"),
        (
            {"version": "v1.2.3"},
            'attribute bad: parse semantic version: Invalid character(s) found in major number "v1"',
        ),
        (
            {"versions": ["1.0.0", "01.0.0"]},
            'attribute bad: parse semantic version: Major number must not contain leading zeroes "01"',
        ),
        ({"int": "5"}, "attribute bad: int value must be an integer, not str"),
        ({"int": True}, "attribute bad: int value must be an integer, not bool"),
        ({"int": 2**63}, "attribute bad: int value 9223372036854775808 is outside the int64 range"),
        ({"bool": 1}, "attribute bad: bool value expected, got int"),
        ({"string": 5}, "attribute bad: string value expected, got int"),
        ({"version": 1}, "attribute bad: version must be a string, not int"),
        ({"strings": "ab"}, "attribute bad: strings must be a list, not str"),
        ({"ints": [1, "2"]}, "attribute bad: int value must be an integer, not str"),
    ],
)
def test_malformed_attribute_poisons_the_whole_device(attribute: Any, error: str) -> None:
    view = build_device_view(
        FakeDevice(attributes={"good": {"int": 1}, "bad": attribute}, capacity={"m": {"value": "1"}})
    )
    assert view.error == error
    assert view.attributes == {} and view.capacity == {}


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1Gi", 2**30), (8, 8), (1.5, Quantity.parse("1500m")), (Quantity.parse("2k"), 2000)],
)
def test_capacity_values(value: Any, expected: Quantity | int) -> None:
    view = build_device_view(FakeDevice(capacity={"m": {"value": value}}))
    assert view.error is None
    assert view.capacity["gpu.example.com"]["m"] == expected


@pytest.mark.parametrize(
    ("capacity", "error"),
    [
        ({"value": "lots"}, "capacity m: quantities must match the regular expression"),
        ({"value": None}, "capacity m: value must be a quantity"),
        ({}, "capacity m: value must be a quantity"),
        ({"value": True}, "capacity m: value must be a quantity"),
        ("1Gi", "capacity m: value must be a quantity"),
    ],
)
def test_malformed_capacity_is_a_clear_error(capacity: Any, error: str) -> None:
    view = build_device_view(FakeDevice(capacity={"m": capacity}))
    assert view.error is not None and view.error.startswith(error)


def test_empty_device() -> None:
    view = build_device_view(FakeDevice(driver=""))
    assert view == DeviceView("", {}, {}, False, None)


def test_view_is_memoized_per_device() -> None:
    device = FakeDevice(attributes={"model": {"string": "a100"}})
    first = view_for(device)
    assert view_for(device) is first
    assert device.cel_memo["view"] is first
    other = FakeDevice(attributes={"model": {"string": "h100"}})
    assert view_for(other) is not first
    assert view_for(other).attributes["gpu.example.com"]["model"] == "h100"


def test_view_is_frozen_but_engine_cache_is_writable() -> None:
    view = build_device_view(FakeDevice())
    with pytest.raises(AttributeError):
        view.driver = "x"  # type: ignore[misc]
    view.engine_cache["engine"] = "activation"
    assert view.engine_cache == {"engine": "activation"}
    assert build_device_view(FakeDevice()).engine_cache == {}
