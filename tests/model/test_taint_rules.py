"""DeviceTaintRules appended to the devices they select."""

from __future__ import annotations

from typing import Any

import pytest

from extender.model import parse_resource_slice
from extender.model.taint_rules import apply_taint_rules, parse_device_taint_rule


def rule(name: str, selector: dict[str, str] | None, key: str = "k", effect: str = "NoSchedule") -> Any:
    spec: dict[str, Any] = {
        "taint": {"key": key, "value": "v", "effect": effect, "timeAdded": "2026-01-01T00:00:00Z"}
    }
    if selector is not None:
        spec["deviceSelector"] = selector
    return parse_device_taint_rule({"metadata": {"name": name}, "spec": spec})


SLICE = parse_resource_slice(
    {
        "metadata": {"name": "s"},
        "spec": {
            "driver": "drv",
            "nodeName": "n",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": "a", "taints": [{"key": "own", "effect": "NoExecute"}]},
                {"name": "b"},
            ],
        },
    }
)


def test_rules_append_taints_in_rule_order_to_selected_devices_only() -> None:
    tainted = apply_taint_rules(
        SLICE,
        [
            rule("all", {}, key="first"),
            rule("none", None, key="never"),
            rule("only-a", {"device": "a"}, key="second"),
            rule("x", {"pool": "q"}),
        ],
    )
    a, b = tainted.devices
    assert [t.key for t in a.taints] == ["own", "first", "second"]
    assert [t.key for t in b.taints] == ["first"]
    assert a.taints[1].raw["timeAdded"] == "2026-01-01T00:00:00Z"
    assert a.cel_memo is SLICE.devices[0].cel_memo
    assert SLICE.devices[1].taints == ()  # the original slice is untouched


def test_slice_without_matching_rules_is_returned_unchanged() -> None:
    assert apply_taint_rules(SLICE, [rule("other", {"driver": "other"})]) is SLICE


def test_a_rule_without_device_selector_selects_no_device() -> None:
    # resource/v1 DeviceTaintRuleSpec: "Without a selector, no devices are matched."
    assert apply_taint_rules(SLICE, [rule("unselective", None)]) is SLICE


def test_rule_without_taint_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"DeviceTaintRule r: spec\.taint: required"):
        parse_device_taint_rule({"metadata": {"name": "r"}, "spec": {}})
