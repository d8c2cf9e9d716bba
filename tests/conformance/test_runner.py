"""The conformance runner's judging rules and command line, on small synthetic cases."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.cel.environment import Environment
from extender.tools.conformance import build_state, judge, main

CASE: dict[str, Any] = {
    "name": "tiny",
    "node": {"metadata": {"name": "node-1"}},
    "deviceClasses": [{"metadata": {"name": "class-a"}, "spec": {}}],
    "resourceSlices": [
        {
            "metadata": {"name": "slice-1"},
            "spec": {
                "driver": "driver-a",
                "pool": {"name": "pool-1", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "node-1",
                "devices": [{"name": "device-1"}, {"name": "device-2"}],
            },
        }
    ],
    "claims": [
        {
            "metadata": {"name": "claim-0", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "req-0", "exactly": {"deviceClassName": "class-a"}}]}},
        }
    ],
    "expect": {
        "outcome": "allocated",
        "results": [
            {
                "devices": {
                    "results": [
                        {"request": "req-0", "driver": "driver-a", "pool": "pool-1", "device": "device-1"}
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}
                    ]
                },
            }
        ],
    },
}


@pytest.fixture
def cel() -> Environment:
    return Environment.create()


def variant(**changes: Any) -> dict[str, Any]:
    case = copy.deepcopy(CASE)
    case.update(changes)
    return case


def test_matching_case_passes(cel: Environment) -> None:
    assert judge(CASE, cel).passed


def test_wrong_device_fails_with_a_diff(cel: Environment) -> None:
    case = variant()
    case["expect"]["results"][0]["devices"]["results"][0]["device"] = "device-2"
    verdict = judge(case, cel)
    assert not verdict.passed
    assert "device-2" in verdict.diff and "device-1" in verdict.diff


def test_allocated_devices_make_the_case_pick_another(cel: Environment) -> None:
    case = variant(allocatedDevices=["driver-a/pool-1/device-1"])
    case["expect"]["results"][0]["devices"]["results"][0]["device"] = "device-2"
    assert judge(case, cel).passed


def test_unsatisfiable_and_error_outcomes(cel: Environment) -> None:
    taken = variant(allocatedDevices=["driver-a/pool-1/device-1", "driver-a/pool-1/device-2"])
    taken["expect"] = {"outcome": "unsatisfiable"}
    assert judge(taken, cel).passed
    unknown = variant()
    unknown["claims"][0]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "nope"
    unknown["expect"] = {"outcome": "error", "error": "anything"}
    assert judge(unknown, cel).passed
    unknown["expect"] = {"outcome": "unsatisfiable"}
    verdict = judge(unknown, cel)
    assert not verdict.passed and "could not retrieve device class nope" in verdict.diff


def test_node_selector_compared_as_a_set(cel: Environment) -> None:
    case = variant()
    case["resourceSlices"][0]["spec"].pop("nodeName")
    case["resourceSlices"][0]["spec"]["nodeSelector"] = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]
    }
    case["node"]["metadata"]["labels"] = {"zone": "b"}
    case["expect"]["results"][0]["nodeSelector"] = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b", "a"]}]}]
    }
    assert judge(case, cel).passed


def test_state_parses_pool_names_with_slashes() -> None:
    state = build_state(
        {
            "allocatedDevices": ["d/a/b/dev"],
            "allocatedSharedDevices": ["d/p/dev/0f0f"],
            "allocatedCapacity": {"d/p/dev": {"memory": "1Gi"}},
        }
    )
    assert state.allocated_devices == {("d", "a/b", "dev")}
    assert state.allocated_shared == {(("d", "p", "dev"), "0f0f")}
    assert state.aggregated_capacity[("d", "p", "dev")]["memory"].value == 1024**3


def test_cli_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(CASE))
    bad_case = variant(name="bad")
    bad_case["expect"] = {"outcome": "unsatisfiable"}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(bad_case))
    assert main([str(good)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 passed, 0 failed"
    assert main([str(tmp_path), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert (doc["passed"], doc["failed"]) == (1, 1)
    assert [c["name"] for c in doc["cases"] if not c["passed"]] == ["bad"]
