"""DRA feature gates: the one table of the gates the extender knows, and the Features value.

Every layer reads gates through :class:`Features`, one frozen value built once: from
``--feature-gates`` text over the release defaults (:meth:`Features.parse`, the service), or
from a list of enabled gate names with everything else off (:meth:`Features.from_gate_names`,
the conformance cases). The same value goes to the cluster-state cache and to the allocator.

The table lives on the ground floor (``model``) so that the allocator, the state, the
configuration and the tools can all import it without importing upwards.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from enum import Enum

# The Kubernetes releases whose gate defaults the table lists, oldest first: one cell of each
# gate's ``stages`` per release. The cells follow upstream's versioned feature specs
# (staging/src/k8s.io/kube-scheduler/pkg/features/kube_features.go, kubernetes/kubernetes
# 080d02a09a47; for 1.34/1.35 also pkg/features/kube_features.go of the 1.35 cycle): a release's
# default is that of the newest spec not newer than the release. Picking defaults for a new
# release means adding a column here and one cell to each row.
RELEASES: tuple[str, ...] = ("1.34", "1.35", "1.36", "1.37")
OLDEST_RELEASE = RELEASES[0]  # resource.k8s.io/v1, which the extender reads, is GA from 1.34
DEFAULT_RELEASE = RELEASES[-1]  # without a cluster to ask (local mode): the newest

# What /debug/config shows for a gate the extender does not implement, in a release whose
# kube-scheduler has it on by default: neither "on" (it is not) nor "off" (upstream's is on).
NOT_IMPLEMENTED = "not implemented"

# The released allocator's variants, in the order its NewAllocator tries them
# (k8s.io/dynamic-resource-allocation/structured, allocator.go).
VARIANTS: tuple[str, ...] = ("stable", "incubating", "experimental")


class Support(Enum):
    IMPLEMENTED = "implemented"  # sets a Features field
    # Changes allocation upstream, but the extender does not do it yet: off whatever the release
    # says, and --feature-gates NAME=true is an error rather than a switch that does nothing.
    NOT_IMPLEMENTED = "not implemented"
    # Changes nothing the extender decides (a component other than the scheduler reads it, or it
    # is locked on): a list of enabled gates may name it, --feature-gates may not.
    NO_EFFECT = "no effect"


@dataclass(frozen=True, slots=True)
class Stage:
    """A gate in one release: its maturity ("" when the release does not have the gate) and
    its default there."""

    stage: str
    default: bool

    @property
    def exists(self) -> bool:
        return bool(self.stage)

    @classmethod
    def of(cls, cell: str) -> Stage:
        """From a table cell: "-" (not in that release), or alpha, beta or GA, with "+" when on
        by default ("beta+": beta, on; "alpha": alpha, off)."""
        if cell == "-":
            return cls("", False)
        stage = cell.removesuffix("+")
        if stage not in ("alpha", "beta", "GA"):
            raise AssertionError(f"bad gate table cell {cell!r}")
        return cls(stage, cell.endswith("+"))


@dataclass(frozen=True, slots=True)
class Gate:
    name: str  # as Kubernetes spells it in --feature-gates
    field: str | None  # the Features field it sets; None unless IMPLEMENTED
    cells: tuple[str, ...]  # one Stage.of cell per RELEASES entry
    support: Support = Support.IMPLEMENTED

    def stage(self, release: str) -> Stage:
        return Stage.of(self.cells[RELEASES.index(release)])

    def first_release(self) -> str | None:
        return next((r for r in RELEASES if self.stage(r).exists), None)


_NE = Support.NO_EFFECT
GATES: tuple[Gate, ...] = (
    # Kubernetes name, Features field, one cell per release: 1.34, 1.35, 1.36, 1.37
    Gate("DRAAdminAccess", "admin_access", ("beta+", "beta+", "GA+", "GA+")),
    Gate("DRAPrioritizedList", "prioritized_list", ("beta+", "beta+", "GA+", "GA+")),
    Gate("DRAPartitionableDevices", "partitionable_devices", ("alpha", "alpha", "beta+", "beta+")),
    Gate("DRADeviceTaints", "device_taints", ("alpha", "alpha", "beta+", "GA+")),
    # 1.36's beta API (resource.k8s.io/v1beta2) is off by default; the source reads whichever
    # version the API server serves (extender.kube.source).
    Gate("DRADeviceTaintRules", "device_taint_rules", ("-", "alpha", "beta", "GA+")),
    Gate("DRAConsumableCapacity", "consumable_capacity", ("alpha", "alpha", "beta+", "beta+")),
    Gate("DRADeviceBindingConditions", "device_binding_conditions", ("alpha", "alpha", "beta+", "beta+")),
    Gate("DRAResourceClaimDeviceStatus", "resource_claim_device_status", ("beta+", "beta+", "beta+", "GA+")),
    Gate("DRAExtendedResource", "extended_resource", ("alpha", "alpha", "beta+", "GA+")),
    Gate("DRAListTypeAttributes", "list_type_attributes", ("-", "-", "alpha", "alpha")),
    # Claims shared by a PodGroup (docs/scheduling-policy.md, "Claims of a PodGroup").
    Gate("DRAWorkloadResourceClaims", "workload_resource_claims", ("-", "-", "alpha", "beta")),
    # A per-node limit on Filter's allocation (docs/usage.md, "Timeouts").
    Gate("DRASchedulerFilterTimeout", "scheduler_filter_timeout", ("beta+", "beta+", "beta+", "beta+")),
    # 1.37 lists it twice: beta off, and beta on only with --min-compatibility-version=1.37;
    # kube-scheduler's default minimum compatibility is the previous release, so: off.
    Gate("DRAFractionalCapacityRange", "fractional_capacity_range", ("-", "-", "-", "beta")),
    Gate("DRAOptionalNodeOperations", "optional_node_operations", ("-", "-", "-", "alpha")),
    Gate("DRADeviceCompatibilityGroups", "device_compatibility_groups", ("-", "-", "-", "alpha")),
    # Devices that use node CPU, memory, hugepages or ephemeral storage (docs/scheduling-policy.md,
    # "Node-allocatable resources"); plugin at kubernetes/kubernetes 0411cc704533.
    Gate("DRANodeAllocatableResources", "node_allocatable_resources", ("-", "-", "alpha", "alpha")),
    # Constraints read a request's derived attributes (docs/upstream.md, "Derived attributes").
    Gate("DRADerivedAttributes", "derived_attributes", ("-", "-", "-", "alpha")),
    # Locked on from 1.35: the extender is DRA.
    Gate("DynamicResourceAllocation", None, ("GA+", "GA+", "GA+", "GA+"), _NE),
    # Read by kube-apiserver and kube-controller-manager (ResourcePoolStatusRequest), not the scheduler.
    Gate("DRAPartitionableDevicesType", None, ("-", "-", "-", "alpha"), _NE),
)

BY_NAME: Mapping[str, Gate] = {gate.name: gate for gate in GATES}
# The gates that set something, in table order.
SETTABLE: tuple[Gate, ...] = tuple(gate for gate in GATES if gate.support is Support.IMPLEMENTED)


def release_of(version: str) -> str:
    """The RELEASES entry whose defaults apply to Kubernetes ``version`` ("1.35", "v1.35.2",
    "v1.36.0-rc.1", "v1.35.3-gke.100"): a newer release than the table knows gets the newest
    column. Raises ValueError for an older release or text that names none."""
    text = version.strip().removeprefix("v")
    parts = text.split(".")
    minor_digits = parts[1].split("-")[0].split("+")[0] if len(parts) > 1 else ""
    if parts[0] != "1" or not minor_digits.isdigit():
        raise ValueError(f"Kubernetes version {version!r}: expected MAJOR.MINOR such as {DEFAULT_RELEASE}")
    minor = int(minor_digits)
    oldest, newest = (int(r.split(".")[1]) for r in (OLDEST_RELEASE, DEFAULT_RELEASE))
    if minor < oldest:
        raise ValueError(
            f"Kubernetes 1.{minor} is not supported: the extender needs {OLDEST_RELEASE} or newer "
            "(resource.k8s.io/v1)"
        )
    return f"1.{min(minor, newest)}"


def parse_overrides(text: str) -> dict[str, bool]:
    """kube-scheduler's ``--feature-gates`` syntax (``A=true,B=false``), checked against the table
    but not yet against a release. Raises ValueError.

    Only gates that set something may be named (a typo must not silently mean "off"); a gate the
    extender does not implement may be set to false (what it does anyway), not to true.
    """
    values: dict[str, bool] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip().lower()
        if not sep or value not in ("true", "false"):
            raise ValueError(f"feature gate {item!r}: expected NAME=true or NAME=false")
        gate = BY_NAME.get(name)
        if gate is None or gate.support is Support.NO_EFFECT:
            readable = (g.name for g in GATES if g.support is not Support.NO_EFFECT)
            known = ", ".join(sorted(readable))
            what = f"feature gate {name!r} changes nothing the extender decides" if gate else (
                f"unknown feature gate {name!r}"
            )
            raise ValueError(f"{what}; DRA gates the extender reads: {known}")
        if gate.support is Support.NOT_IMPLEMENTED and value == "true":
            raise ValueError(
                f"feature gate {name} is not implemented by the extender: it cannot be turned on "
                "(see docs/deploy.md, supported gates)"
            )
        values[name] = value == "true"
    return values


def view(features: Features, release: str) -> dict[str, bool | str]:
    """What /debug/config shows: every gate ``release``'s kube-scheduler has and the extender
    reads, by name; a gate it does not implement is false, or NOT_IMPLEMENTED where upstream has
    it on by default."""
    values = features.gates()
    shown: dict[str, bool | str] = {}
    for gate in sorted(GATES, key=lambda g: g.name):
        stage = gate.stage(release)
        if not stage.exists or gate.support is Support.NO_EFFECT:
            continue
        if gate.support is Support.NOT_IMPLEMENTED:
            shown[gate.name] = NOT_IMPLEMENTED if stage.default else False
        else:
            shown[gate.name] = values[gate.name]
    return shown


@dataclass(frozen=True, slots=True, kw_only=True)
class Features:
    """The DRA gates in force: one bool per gate the code reads, and the release whose
    allocator the gates are read by (a RELEASES entry: its behaviour differs beyond the gates,
    see :attr:`exact_rollback`). No field has a default of its own; the constructors below
    take them from the table."""

    release: str
    # The allocator variant a conformance case names (tests/conformance/cases/FORMAT.md,
    # allocatorVariant), as upstream's own tests choose one (structured.EnableAllocators): ""
    # for the one kube-scheduler runs for the gates. Set only by :meth:`with_variant`.
    chosen_variant: str

    admin_access: bool
    prioritized_list: bool
    partitionable_devices: bool
    device_taints: bool
    device_taint_rules: bool  # read by the cluster-state cache (DeviceTaintRule taints)
    consumable_capacity: bool
    device_binding_conditions: bool
    resource_claim_device_status: bool
    extended_resource: bool
    list_type_attributes: bool
    workload_resource_claims: bool  # read by claim resolution (extender.scheduling.claims)
    scheduler_filter_timeout: bool  # read by the scheduling context (per-node allocation limit)
    fractional_capacity_range: bool
    optional_node_operations: bool
    device_compatibility_groups: bool
    node_allocatable_resources: bool  # read by the cache (node requests) and the plan
    derived_attributes: bool

    @classmethod
    def defaults(cls, release: str = DEFAULT_RELEASE) -> Features:
        """Every gate at its default in ``release`` (a RELEASES entry); a gate the release does
        not have is off."""
        return cls._of({gate.name: gate.stage(release).default for gate in SETTABLE}, release)

    @classmethod
    def for_release(cls, release: str, overrides: Mapping[str, bool]) -> Features:
        """``overrides`` (from parse_overrides) over ``release``'s defaults. Raises ValueError
        for a gate that ``release``'s kube-scheduler does not have: it would refuse the flag."""
        values = cls.defaults(release).gates()
        for name, value in overrides.items():
            gate = BY_NAME[name]
            if not gate.stage(release).exists:
                first = gate.first_release()
                raise ValueError(
                    f"feature gate {name} does not exist in Kubernetes {release} (it does from {first}); "
                    "--kubernetes-version names the release of your kube-scheduler"
                )
            if gate.support is Support.IMPLEMENTED:
                values[name] = value
        return cls._of(values, release)

    @classmethod
    def parse(cls, text: str, release: str = DEFAULT_RELEASE) -> Features:
        """kube-scheduler's ``--feature-gates`` syntax over ``release``'s defaults. Raises ValueError."""
        return cls.for_release(release, parse_overrides(text))

    @classmethod
    def from_gate_names(cls, names: Iterable[str], release: str = DEFAULT_RELEASE) -> Features:
        """The named gates on, every other one off, read by ``release``'s allocator; gates with
        no effect are accepted, an unknown name or one the extender does not implement is an
        error (ValueError) rather than silently off. The release is not checked to have the
        gates: cases name gates freely."""
        if release not in RELEASES:
            raise ValueError(f"unknown release {release!r}; known: {', '.join(RELEASES)}")
        values = dict.fromkeys((gate.name for gate in SETTABLE), False)
        for name in names:
            gate = BY_NAME.get(name)
            if gate is None:
                raise ValueError(f"unknown DRA feature gate {name!r}; known: {', '.join(BY_NAME)}")
            if gate.support is Support.NOT_IMPLEMENTED:
                raise ValueError(f"DRA feature gate {name} is not implemented by the extender")
            if name in values:
                values[name] = True
        return cls._of(values, release)

    @classmethod
    def _of(cls, values: Mapping[str, bool], release: str) -> Features:
        """From a value for every settable gate, by Kubernetes name."""
        by_field = {gate.field: values[gate.name] for gate in SETTABLE if gate.field is not None}
        return cls(release=release, chosen_variant="", **by_field)

    def gates(self) -> dict[str, bool]:
        """Kubernetes gate name -> value, for every gate that sets something (table order)."""
        return {gate.name: bool(getattr(self, gate.field)) for gate in SETTABLE if gate.field is not None}

    @property
    def binding(self) -> bool:
        """Upstream folds the two gates into one "binding and status" switch."""
        return self.device_binding_conditions and self.resource_claim_device_status

    @property
    def exact_rollback(self) -> bool:
        """The allocator of 1.37 on undoes everything a pick did when the pick is rejected or
        backtracked (its counters, its mark as allocating, its constraint entries, its share's
        capacity entry), and distinctAttribute compares a device with every value accepted
        before. 1.34 to 1.36 left counters consumed by a rejected pick, and distinctAttribute
        remembered one value per request (k8s.io/dynamic-resource-allocation v0.34.4 to
        v0.36.2 against v0.37.2, structured/internal/*: allocateDevice, rollbackDevice,
        distinctAttributeConstraint; docs/upstream.md)."""
        return RELEASES.index(self.release) >= RELEASES.index("1.37")

    def with_variant(self, name: str) -> Features:
        """These gates read by the allocator variant ``name`` instead of :attr:`gates_variant`:
        a later variant runs what an earlier one can, an earlier one than the gates need is an
        error (upstream's NewAllocator finds no allocator then). Raises ValueError."""
        if name not in VARIANTS:
            raise ValueError(f"unknown allocator variant {name!r}; known: {', '.join(VARIANTS)}")
        needed = self.gates_variant
        if VARIANTS.index(name) < VARIANTS.index(needed):
            raise ValueError(
                f"no allocator available: the {name} allocator lacks features these gates need ({needed})"
            )
        return replace(self, chosen_variant=name)

    @property
    def variant(self) -> str:
        """The allocator that runs: the one chosen (:meth:`with_variant`), else the gates'."""
        return self.chosen_variant or self.gates_variant

    @property
    def gates_variant(self) -> str:
        """The allocator kube-scheduler runs for these gates: upstream's NewAllocator takes the
        first of "stable", "incubating" and "experimental" whose features cover the enabled
        ones (k8s.io/dynamic-resource-allocation/structured, allocator.go and each variant's
        SupportedFeatures, v0.37.2). The variants differ beyond their gates: the stable one
        ignores capacity requests and takes pools in no particular order, only the
        experimental one knows slices that skip node operations."""
        if (
            self.list_type_attributes
            or self.optional_node_operations
            or self.device_compatibility_groups
            or self.derived_attributes
        ):
            return "experimental"
        if self.binding or self.consumable_capacity or self.fractional_capacity_range:
            return "incubating"
        return "stable"


def _check_table() -> None:
    """The table and Features must name the same fields, and every gate needs a valid cell per
    release: a mismatch is a programming error, caught at import."""
    table = {gate.field for gate in SETTABLE if gate.field is not None}
    declared = {f.name for f in fields(Features)} - {"release", "chosen_variant"}
    if table != declared:
        raise AssertionError(f"feature table and Features disagree: {sorted(table ^ declared)}")
    for gate in GATES:
        if (gate.field is not None) != (gate.support is Support.IMPLEMENTED):
            raise AssertionError(f"gate {gate.name}: a field exactly when implemented")
        if len(gate.cells) != len(RELEASES):
            raise AssertionError(f"gate {gate.name}: {len(gate.cells)} cells for {len(RELEASES)} releases")
        for cell in gate.cells:
            Stage.of(cell)


_check_table()
