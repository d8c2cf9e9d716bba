"""The pure structured allocator: no I/O, no globals; feature gates are passed in."""

from extender.allocator.allocator import Allocator
from extender.allocator.errors import AllocationError, AllocationTimeout, NodeAllocationFailure
from extender.allocator.sources import SliceList, SliceSource
from extender.allocator.state import AllocatedState
from extender.model import (
    AllocationResult,
    ConfigEntry,
    DeviceID,
    DeviceResult,
    Features,
    Holdings,
    holdings,
    parse_allocation,
)

DeviceRequestAllocationResult = DeviceResult

__all__ = [
    "AllocatedState",
    "AllocationError",
    "AllocationResult",
    "AllocationTimeout",
    "Allocator",
    "ConfigEntry",
    "DeviceID",
    "DeviceRequestAllocationResult",
    "DeviceResult",
    "Features",
    "Holdings",
    "NodeAllocationFailure",
    "SliceList",
    "SliceSource",
    "holdings",
    "parse_allocation",
]
