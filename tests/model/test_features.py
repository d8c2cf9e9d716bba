"""The one table of feature gates, its releases, and the Features value built from it."""

from __future__ import annotations

import dataclasses

import pytest

from extender.model import features as features_module
from extender.model.features import (
    GATES,
    NOT_IMPLEMENTED,
    RELEASES,
    SETTABLE,
    Features,
    Gate,
    Support,
    parse_overrides,
    release_of,
    view,
)


def test_every_gate_has_a_cell_per_release_and_a_field_exactly_when_implemented() -> None:
    for gate in GATES:
        assert len(gate.cells) == len(RELEASES), gate.name
        assert (gate.field is not None) == (gate.support is Support.IMPLEMENTED), gate.name
    gate_fields = {f.name for f in dataclasses.fields(Features)} - {"release", "chosen_variant"}
    assert {gate.field for gate in SETTABLE} == gate_fields


def test_release_decides_how_picks_are_undone() -> None:
    """1.37's allocator undoes all of a rejected pick; 1.34 to 1.36 did not (docs/upstream.md)."""
    assert [Features.defaults(r).exact_rollback for r in RELEASES] == [False, False, False, True]
    assert Features.from_gate_names([]).release == "1.37"
    assert not Features.from_gate_names([], "1.36").exact_rollback
    assert Features.parse("", "1.34").release == "1.34"
    with pytest.raises(ValueError, match="unknown release"):
        Features.from_gate_names([], "1.33")


def test_features_has_no_defaults_of_its_own() -> None:
    with pytest.raises(TypeError):
        Features()  # type: ignore[call-arg]


# Upstream's defaults per release (kube_features.go's versioned specs): the gates on by default.
_ALWAYS = {"DRAAdminAccess", "DRAPrioritizedList", "DRAResourceClaimDeviceStatus",
           "DRASchedulerFilterTimeout"}
_BETA_IN_1_36 = {"DRAPartitionableDevices", "DRADeviceTaints", "DRAConsumableCapacity",
                 "DRADeviceBindingConditions", "DRAExtendedResource"}
ON_BY_DEFAULT = {
    "1.34": _ALWAYS,
    "1.35": _ALWAYS,
    "1.36": _ALWAYS | _BETA_IN_1_36,
    "1.37": _ALWAYS | _BETA_IN_1_36 | {"DRADeviceTaintRules"},
}
# The gates a release's kube-scheduler has, among those the extender reads (no-effect ones aside).
NEW_IN = {
    "1.35": {"DRADeviceTaintRules"},
    "1.36": {"DRAListTypeAttributes", "DRANodeAllocatableResources", "DRAWorkloadResourceClaims"},
    "1.37": {"DRAFractionalCapacityRange", "DRAOptionalNodeOperations", "DRADeviceCompatibilityGroups",
             "DRADerivedAttributes"},
}


@pytest.mark.parametrize("release", RELEASES)
def test_defaults_per_release_are_upstreams(release: str) -> None:
    on = {name for name, value in Features.defaults(release).gates().items() if value}
    assert on == ON_BY_DEFAULT[release]
    shown = view(Features.defaults(release), release)
    existing = set(view(Features.defaults("1.34"), "1.34"))
    for later in RELEASES[1:RELEASES.index(release) + 1]:
        existing |= NEW_IN[later]
    assert set(shown) == existing
    assert {name for name, value in shown.items() if value is True} == ON_BY_DEFAULT[release]


def test_1_35_and_1_37_differ_as_upstream() -> None:
    old, new = view(Features.defaults("1.35"), "1.35"), view(Features.defaults("1.37"), "1.37")
    changed = {name for name in old if old[name] != new[name]}
    assert changed == _BETA_IN_1_36 | {"DRADeviceTaintRules"}
    assert set(new) - set(old) == NEW_IN["1.36"] | NEW_IN["1.37"]


@pytest.mark.parametrize(
    ("version", "release"),
    [("1.34", "1.34"), ("v1.35.2", "1.35"), ("v1.36.0-rc.1", "1.36"), ("v1.35.3-gke.100", "1.35"),
     ("1.35+", "1.35"), ("v1.37.0", "1.37"), ("v1.41.1", "1.37")],
)
def test_a_version_picks_its_release_and_newer_ones_the_newest(version: str, release: str) -> None:
    assert release_of(version) == release


@pytest.mark.parametrize(
    ("version", "message"),
    [("v1.33.5", "Kubernetes 1.33 is not supported: the extender needs 1.34 or newer"),
     ("2.0", "expected MAJOR.MINOR"), ("latest", "expected MAJOR.MINOR"), ("1", "expected MAJOR.MINOR")],
)
def test_an_older_or_unreadable_version_is_an_error(version: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        release_of(version)


def test_explicit_gates_win_over_the_release_defaults() -> None:
    features = Features.parse("DRAExtendedResource=true,DRAPrioritizedList=false", "1.35")
    assert features.extended_resource and not features.prioritized_list
    assert not Features.defaults("1.35").extended_resource
    assert Features.parse("DRAExtendedResource=false", "1.37").extended_resource is False


def test_a_gate_the_release_does_not_have_is_an_error() -> None:
    missing = r"DRADeviceTaintRules does not exist in Kubernetes 1\.34 \(it does from 1\.35"
    with pytest.raises(ValueError, match=missing):
        Features.parse("DRADeviceTaintRules=true", "1.34")
    with pytest.raises(ValueError, match=r"DRAListTypeAttributes does not exist in Kubernetes 1\.35"):
        Features.parse("DRAListTypeAttributes=false", "1.35")


def _with_unimplemented_gate(monkeypatch, cells: tuple[str, ...]) -> Gate:
    """Every gate of the table is implemented today: a made-up one stands for the next."""
    gate = Gate("DRAFutureGate", None, cells, Support.NOT_IMPLEMENTED)
    gates = (*GATES, gate)
    monkeypatch.setattr(features_module, "GATES", gates)
    monkeypatch.setattr(features_module, "BY_NAME", {g.name: g for g in gates})
    return gate


def test_an_unimplemented_gate_cannot_be_turned_on_but_may_be_turned_off(monkeypatch) -> None:
    gate = _with_unimplemented_gate(monkeypatch, ("-", "-", "-", "alpha"))
    with pytest.raises(ValueError, match=f"{gate.name} is not implemented by the extender"):
        parse_overrides(f"{gate.name}=true")
    assert parse_overrides(f"{gate.name}=false") == {gate.name: False}
    with pytest.raises(ValueError, match="not implemented"):
        Features.from_gate_names([gate.name])
    assert Features.parse("DRAWorkloadResourceClaims=false", "1.36") == Features.defaults("1.36")


def test_an_unimplemented_gate_upstream_turns_on_is_shown_as_not_implemented(monkeypatch) -> None:
    gate = _with_unimplemented_gate(monkeypatch, ("-", "-", "-", "beta+"))
    shown = view(Features.defaults("1.37"), "1.37")
    assert shown[gate.name] == NOT_IMPLEMENTED
    assert shown["DRAFractionalCapacityRange"] is False


def test_derived_attributes_is_an_alpha_gate_of_1_37_read_by_the_experimental_allocator() -> None:
    # k8s.io/dynamic-resource-allocation v0.37.2: only the experimental variant supports
    # DerivedAttributes, so kube-scheduler 1.37 picks it whenever the gate is on.
    assert not Features.defaults("1.37").derived_attributes
    on = Features.parse("DRADerivedAttributes=true", "1.37")
    assert on.derived_attributes and on.variant == "experimental"
    assert Features.from_gate_names(["DRADerivedAttributes"]).variant == "experimental"
    assert view(on, "1.37")["DRADerivedAttributes"] is True
    assert view(Features.defaults("1.37"), "1.37")["DRADerivedAttributes"] is False
    with pytest.raises(ValueError, match=r"DRADerivedAttributes does not exist in Kubernetes 1\.36"):
        Features.parse("DRADerivedAttributes=true", "1.36")


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
        ("DRAAdminAcess=true", "unknown feature gate 'DRAAdminAcess'; DRA gates the extender reads: DRAAd"),
        # Accepted in a list of enabled gates, but setting it would change nothing.
        ("DynamicResourceAllocation=true", "'DynamicResourceAllocation' changes nothing the extender"),
    ],
)
def test_bad_text_is_an_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Features.parse(text)


def test_gate_cells_are_checked() -> None:
    with pytest.raises(AssertionError, match="bad gate table cell 'beta on'"):
        Gate("X", None, ("-", "-", "-", "beta on"), Support.NO_EFFECT).stage("1.37")


def test_a_case_may_choose_a_later_allocator_variant_but_not_an_earlier_one() -> None:
    """allocatorVariant (tests/conformance/cases/FORMAT.md), as upstream's EnableAllocators."""
    stable = Features.from_gate_names([])
    assert stable.variant == "stable"
    assert stable.with_variant("experimental").variant == "experimental"
    assert stable.with_variant("experimental").gates_variant == "stable"
    incubating = Features.from_gate_names(["DRAConsumableCapacity"])
    with pytest.raises(ValueError, match="no allocator available: the stable allocator lacks"):
        incubating.with_variant("stable")
    with pytest.raises(ValueError, match="unknown allocator variant 'newest'"):
        incubating.with_variant("newest")
