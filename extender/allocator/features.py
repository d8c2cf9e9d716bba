"""Which DRA feature gates the allocator honours; everything else is decided by the caller."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Kubernetes gate name -> Features field
GATE_FIELDS: dict[str, str] = {
    "DRAAdminAccess": "admin_access",
    "DRAPrioritizedList": "prioritized_list",
    "DRAPartitionableDevices": "partitionable_devices",
    "DRADeviceTaints": "device_taints",
    "DRAConsumableCapacity": "consumable_capacity",
    "DRADeviceBindingConditions": "device_binding_conditions",
    "DRAResourceClaimDeviceStatus": "resource_claim_device_status",
    "DRAExtendedResource": "extended_resource",
    "DRAListTypeAttributes": "list_type_attributes",
}

# Documented DRA gates that change nothing inside the allocator: accepted and ignored, so a
# gate list copied from a scheduler configuration works, while a typo is still an error.
IGNORED_GATES = frozenset(
    {
        "DynamicResourceAllocation",
        "DRADeviceTaintRules",
        "DRASchedulerFilterTimeout",
        "DRANodeAllocatableResources",
        "DRAWorkloadResourceClaims",
        "DRAFractionalCapacityRange",
        "DRAOptionalNodeOperations",
        "DRAPartitionableDevicesType",
        "DRADerivedAttributes",
        "DRADeviceCompatibilityGroups",
    }
)


@dataclass(frozen=True, slots=True)
class Features:
    admin_access: bool = False
    prioritized_list: bool = False
    partitionable_devices: bool = False
    device_taints: bool = False
    consumable_capacity: bool = False
    device_binding_conditions: bool = False
    resource_claim_device_status: bool = False
    extended_resource: bool = False
    list_type_attributes: bool = False

    @classmethod
    def from_gate_names(cls, names: Iterable[str]) -> Features:
        """Gates not named are off; an unknown name is an error rather than silently ignored."""
        values = {}
        for name in names:
            if name in GATE_FIELDS:
                values[GATE_FIELDS[name]] = True
            elif name not in IGNORED_GATES:
                raise ValueError(f"unknown DRA feature gate {name!r}; known: {', '.join(GATE_FIELDS)}")
        return cls(**values)

    @property
    def binding(self) -> bool:
        """Upstream folds the two gates into one "binding and status" switch."""
        return self.device_binding_conditions and self.resource_claim_device_status
