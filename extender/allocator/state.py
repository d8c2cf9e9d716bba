"""The allocated state: devices, shares and capacity already taken by committed claims."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from extender.model import AllocationResult, DeviceID
from extender.model.quantity import Quantity


@dataclass
class AllocatedState:
    allocated_devices: set[DeviceID] = field(default_factory=set)
    allocated_shared: set[tuple[DeviceID, str]] = field(default_factory=set)  # (device, shareID)
    aggregated_capacity: dict[DeviceID, dict[str, Quantity]] = field(default_factory=dict)

    @classmethod
    def from_allocations(
        cls, results: Iterable[AllocationResult], consumable_capacity: bool
    ) -> AllocatedState:
        state = cls()
        for result in results:
            state.add(result, consumable_capacity)
        return state

    def add(self, result: AllocationResult, consumable_capacity: bool) -> None:
        """Account one claim's allocation the way the scheduler does (dra-scheduling.md §4.1):
        admin access never consumes a device; with consumable capacity a share counts by
        shareID and its consumed capacity, anything else takes the whole device."""
        for r in result.devices:
            if r.admin_access:
                continue
            if consumable_capacity and r.share_id:
                self.allocated_shared.add((r.id, r.share_id))
                if r.consumed_capacity:
                    totals = self.aggregated_capacity.setdefault(r.id, {})
                    for name, amount in r.consumed_capacity.items():
                        totals[name] = totals[name].add(amount) if name in totals else amount
            else:
                self.allocated_devices.add(r.id)

    def shared_device_ids(self) -> set[DeviceID]:
        return {device for device, _ in self.allocated_shared}
