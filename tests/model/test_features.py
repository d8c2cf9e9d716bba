"""The one table of feature gates and the Features value built from it."""

from __future__ import annotations

import dataclasses

import pytest

from extender.model.features import GATES, RELEASES, SETTABLE, Features


def test_every_gate_that_sets_something_has_a_default_per_release_and_ignored_ones_have_none() -> None:
    for gate in GATES:
        assert len(gate.defaults) == (len(RELEASES) if gate.field else 0), gate.name
    assert {gate.field for gate in SETTABLE} == {f.name for f in dataclasses.fields(Features)}


def test_features_has_no_defaults_of_its_own() -> None:
    with pytest.raises(TypeError):
        Features()  # type: ignore[call-arg]


def test_gate_names_turn_on_exactly_the_named_gates() -> None:
    features = Features.from_gate_names(["DRADeviceTaintRules", "DynamicResourceAllocation"])
    assert features.device_taint_rules
    assert [name for name, on in features.gates().items() if on] == ["DRADeviceTaintRules"]
    assert not any(Features.from_gate_names([]).gates().values())
    with pytest.raises(ValueError, match="unknown DRA feature gate 'DRANope'"):
        Features.from_gate_names(["DRANope"])


def test_text_sets_gates_over_the_defaults_and_round_trips() -> None:
    defaults = Features.defaults()
    assert defaults.consumable_capacity and not defaults.list_type_attributes and defaults.binding
    changed = Features.parse("DRAResourceClaimDeviceStatus=false,DRAListTypeAttributes=true")
    assert not changed.binding and changed.list_type_attributes
    restored = dataclasses.replace(changed, resource_claim_device_status=True, list_type_attributes=False)
    assert restored == defaults
    text = ",".join(f"{name}={str(on).lower()}" for name, on in changed.gates().items())
    assert Features.parse(text) == changed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("DRAAdminAccess", "feature gate 'DRAAdminAccess': expected NAME=true or NAME=false"),
        ("DRAAdminAccess=yes", "expected NAME=true or NAME=false"),
        ("DRAAdminAcess=true", "unknown feature gate 'DRAAdminAcess'; known DRA gates: DRAAdminAccess, "),
        # Accepted in a list of enabled gates, but setting it would change nothing.
        ("DynamicResourceAllocation=true", "unknown feature gate 'DynamicResourceAllocation'"),
    ],
)
def test_bad_text_is_an_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Features.parse(text)
