"""The pure structured allocator: no I/O, no globals; feature gates are passed in."""

from extender.allocator.allocator import Allocator
from extender.allocator.outcome import Failure, FailureKind, claim_slot
from extender.allocator.pools import SliceList, SliceSource
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
    "AllocationResult",
    "Allocator",
    "ConfigEntry",
    "DeviceID",
    "DeviceRequestAllocationResult",
    "DeviceResult",
    "Failure",
    "FailureKind",
    "Features",
    "Holdings",
    "SliceList",
    "SliceSource",
    "claim_slot",
    "holdings",
    "parse_allocation",
]
