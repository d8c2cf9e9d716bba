"""The allocated state: devices, shares and capacity already taken by committed claims."""

from __future__ import annotations

from dataclasses import dataclass, field

from extender.cel.quantity import Quantity
from extender.model import DeviceID


@dataclass
class AllocatedState:
    allocated_devices: set[DeviceID] = field(default_factory=set)
    allocated_shared: set[tuple[DeviceID, str]] = field(default_factory=set)  # (device, shareID)
    aggregated_capacity: dict[DeviceID, dict[str, Quantity]] = field(default_factory=dict)

    def shared_device_ids(self) -> set[DeviceID]:
        return {device for device, _ in self.allocated_shared}
