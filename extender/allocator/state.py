"""The allocated state: devices, shares and capacity already taken by committed claims.

What one allocation takes is decided in one place, ``extender.model.holdings``; the service
reads the in-use sets the cluster state keeps from those holdings, and anything else that
starts from allocations sums their holdings here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from extender.model import DeviceID, Holdings
from extender.model.quantity import Quantity


@dataclass
class AllocatedState:
    allocated_devices: set[DeviceID] = field(default_factory=set)
    allocated_shared: set[tuple[DeviceID, str]] = field(default_factory=set)  # (device, shareID)
    aggregated_capacity: dict[DeviceID, dict[str, Quantity]] = field(default_factory=dict)

    @classmethod
    def from_holdings(cls, held: Iterable[Holdings]) -> AllocatedState:
        """Everything the given holdings take; the capacity of a device's shares adds up."""
        state = cls()
        for h in held:
            state.allocated_devices.update(h.devices)
            state.allocated_shared.update(h.shares)
            for (device, _), consumed in h.capacity:
                totals = state.aggregated_capacity.setdefault(device, {})
                for name, amount in consumed.items():
                    totals[name] = totals[name].add(amount) if name in totals else amount
        return state

    def shared_device_ids(self) -> set[DeviceID]:
        return {device for device, _ in self.allocated_shared}
