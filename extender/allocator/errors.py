"""Error classes of one Allocate call, mirroring how the scheduler treats upstream's errors."""

from __future__ import annotations


class AllocationError(Exception):
    """Fatal for the pod's scheduling attempt (invalid claim/class, CEL error, limits, ...)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NodeAllocationFailure(AllocationError):
    """Upstream's ErrFailedAllocationOnNode: only this node is unusable."""


class AllocationTimeout(AllocationError):
    """The caller's deadline passed during the search."""
