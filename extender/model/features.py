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
from dataclasses import dataclass, fields

# The Kubernetes releases whose gate defaults the table lists: one entry of ``Gate.defaults``
# per release, in this order. The defaults are those of the development branch after 1.36
# (kubernetes/kubernetes pkg/features, the versioned feature specs). Picking defaults by release
# means adding a column here and one value to each row.
RELEASES: tuple[str, ...] = ("1.37",)
DEFAULT_RELEASE = "1.37"


@dataclass(frozen=True, slots=True)
class Gate:
    name: str  # as Kubernetes spells it in --feature-gates
    # The Features field it sets. None: the gate changes nothing the extender decides; a list of
    # enabled gates may name it (ignored), --feature-gates may not (there is nothing to set).
    field: str | None
    defaults: tuple[bool, ...] = ()  # one per RELEASES entry; none for an ignored gate


GATES: tuple[Gate, ...] = (
    #    Kubernetes name                  Features field                  1.37
    Gate("DRAAdminAccess",                "admin_access",                 (True,)),
    Gate("DRAPrioritizedList",            "prioritized_list",             (True,)),
    Gate("DRAPartitionableDevices",       "partitionable_devices",        (True,)),
    Gate("DRADeviceTaints",               "device_taints",                (True,)),
    Gate("DRADeviceTaintRules",           "device_taint_rules",           (True,)),
    Gate("DRAConsumableCapacity",         "consumable_capacity",          (True,)),
    Gate("DRADeviceBindingConditions",    "device_binding_conditions",    (True,)),
    Gate("DRAResourceClaimDeviceStatus",  "resource_claim_device_status", (True,)),
    Gate("DRAExtendedResource",           "extended_resource",            (True,)),
    Gate("DRAListTypeAttributes",         "list_type_attributes",         (False,)),
    # Documented DRA gates that change nothing the extender decides: a gate list copied from
    # a scheduler configuration works, while a typo is still an error.
    Gate("DynamicResourceAllocation",     None),
    Gate("DRASchedulerFilterTimeout",     None),
    Gate("DRANodeAllocatableResources",   None),
    Gate("DRAWorkloadResourceClaims",     None),
    Gate("DRAFractionalCapacityRange",    None),
    Gate("DRAOptionalNodeOperations",     None),
    Gate("DRAPartitionableDevicesType",   None),
    Gate("DRADerivedAttributes",          None),
    Gate("DRADeviceCompatibilityGroups",  None),
)

BY_NAME: Mapping[str, Gate] = {gate.name: gate for gate in GATES}
# The gates that set something, in table order: what --feature-gates may set and /debug shows.
SETTABLE: tuple[Gate, ...] = tuple(gate for gate in GATES if gate.field is not None)


@dataclass(frozen=True, slots=True, kw_only=True)
class Features:
    """The DRA gates in force: one bool per gate the code reads. No field has a default of its
    own; the constructors below take them from the table."""

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

    @classmethod
    def defaults(cls) -> Features:
        """Every gate at its default in DEFAULT_RELEASE."""
        column = RELEASES.index(DEFAULT_RELEASE)
        return cls._of({gate.name: gate.defaults[column] for gate in SETTABLE})

    @classmethod
    def parse(cls, text: str) -> Features:
        """kube-scheduler's ``--feature-gates`` syntax (``A=true,B=false``) over the defaults.

        Only gates that set something may be named: a typo must not silently mean "off".
        Raises ValueError.
        """
        values = cls.defaults().gates()
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            name, sep, value = item.partition("=")
            name, value = name.strip(), value.strip().lower()
            if not sep or value not in ("true", "false"):
                raise ValueError(f"feature gate {item!r}: expected NAME=true or NAME=false")
            if name not in values:
                known = ", ".join(sorted(values))
                raise ValueError(f"unknown feature gate {name!r}; known DRA gates: {known}")
            values[name] = value == "true"
        return cls._of(values)

    @classmethod
    def from_gate_names(cls, names: Iterable[str]) -> Features:
        """The named gates on, every other one off; ignored gates are accepted, an unknown
        name is an error (ValueError) rather than silently ignored."""
        values = dict.fromkeys((gate.name for gate in SETTABLE), False)
        for name in names:
            if name not in BY_NAME:
                raise ValueError(f"unknown DRA feature gate {name!r}; known: {', '.join(BY_NAME)}")
            if name in values:
                values[name] = True
        return cls._of(values)

    @classmethod
    def _of(cls, values: Mapping[str, bool]) -> Features:
        """From a value for every settable gate, by Kubernetes name."""
        by_field = {gate.field: values[gate.name] for gate in SETTABLE if gate.field is not None}
        return cls(**by_field)

    def gates(self) -> dict[str, bool]:
        """Kubernetes gate name -> value, for every gate that sets something (table order)."""
        return {gate.name: bool(getattr(self, gate.field)) for gate in SETTABLE if gate.field is not None}

    @property
    def binding(self) -> bool:
        """Upstream folds the two gates into one "binding and status" switch."""
        return self.device_binding_conditions and self.resource_claim_device_status


def _check_table() -> None:
    """The table and Features must name the same fields, and every settable gate needs a
    default per release: a mismatch is a programming error, caught at import."""
    table = {gate.field for gate in SETTABLE if gate.field is not None}
    declared = {f.name for f in fields(Features)}
    if table != declared:
        raise AssertionError(f"feature table and Features disagree: {sorted(table ^ declared)}")
    for gate in GATES:
        expected = len(RELEASES) if gate.field is not None else 0
        if len(gate.defaults) != expected:
            count = len(gate.defaults)
            raise AssertionError(f"gate {gate.name}: {count} defaults for {len(RELEASES)} releases")


_check_table()
