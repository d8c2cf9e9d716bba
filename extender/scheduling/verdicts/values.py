"""The values a decision is made of: what a node is asked to allocate (``Variant``), its answer
(``NodeVerdict``), what is shared of it between pods (``SharedVerdict``), what bind commits
(``Placement``).

A verdict is computed by ``plan.PodPlan`` for one node; shared verdicts are kept by
``table.SpecVerdicts`` and read through ``pod.PodVerdicts``. A failure in a verdict is the
allocator's ``Failure``: in a shared verdict it names the claims by position only, and a pod
reads it with its own claims' names filled in (``Failure.naming``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from extender.allocator import Failure
from extender.allocator.alike import takes_of
from extender.model import AllocationResult, DeviceID, ResourceClaim
from extender.scheduling.extended_resources.claim import ExtendedClaim, extended_status
from extender.state.pod_requests import ClaimFootprint

TIMEOUT = "timed out trying to allocate devices"


class NodeVerdict(NamedTuple):
    """One node's answer for one pod: fits (with the allocation), or the failure.

    Immutable, as verdicts are shared between pods; a named tuple rather than a frozen
    dataclass because a filter's first lap over a big cluster makes one per node, and a frozen
    dataclass of these fields costs 0.9 µs to make against 0.25 µs (docs/performance.md)."""

    fits: bool
    failure: Failure | None = None  # set exactly when it does not fit
    results: Sequence[AllocationResult] = ()  # a node alike's are built when first read
    # What ``results`` take (see ``fitting``): verdicts are shared by every pod of a template,
    # and prioritize reads these for each node of each pod.
    devices: frozenset[DeviceID] = frozenset()
    drivers: frozenset[str] = frozenset()
    taken: int = 0  # devices the allocation takes away from others (admin access takes none)
    shares: bool = False  # whether a device is allocated by share ID (fresh per allocation)

    @classmethod
    def fitting(cls, results: Sequence[AllocationResult]) -> NodeVerdict:
        takes = takes_of(results)
        return cls(True, None, results, takes.devices, takes.drivers, takes.taken, takes.shares)

    @classmethod
    def failing(cls, failure: Failure) -> NodeVerdict:
        return cls(False, failure)


FITS = NodeVerdict(True)


class SharedVerdict(NamedTuple):
    """A node's answer for one claim spec, shared by the pods asking alike: it names none of
    their claims (a failure's reason names them by position).

    A named tuple for the reason ``NodeVerdict`` is one."""

    version: int  # the node version it was computed at
    verdict: NodeVerdict


# A filter decision kept for bind, valid only while the node's version is unchanged:
# (node version, UIDs of the claims it allocates, verdict). A plain tuple: a named tuple
# costs several times as much to make.
Remembered = tuple[int, tuple[str, ...], NodeVerdict]


@dataclass(frozen=True, slots=True)
class Variant:
    """The claims to allocate on a node: the pod's unallocated claims plus, where the node
    leaves extended resources to DRA, that node's variant of the extended-resource claim."""

    claims: tuple[ResourceClaim, ...]
    extended: ExtendedClaim | None
    keys: tuple[str, ...]  # "ns/name", what a failure's claim slots are filled with
    uids: tuple[str, ...]
    spec: bytes  # what verdicts are shared by

    @classmethod
    def of(cls, claims: tuple[ResourceClaim, ...], extended: ExtendedClaim | None = None) -> Variant:
        if extended is not None:
            claims = (*claims, extended.claim)
        return cls(
            claims,
            extended,
            tuple(f"{c.namespace}/{c.name}" for c in claims),
            tuple(c.uid for c in claims),
            b"\n".join(c.spec_key() for c in claims),
        )


@dataclass(frozen=True, slots=True)
class ExtendedStatus:
    """``pod.status.extendedResourceClaimStatus`` to record; claim "" = the one bind creates."""

    claim_name: str
    mappings: tuple[Mapping[str, str], ...]

    def fields(self, created_name: str) -> dict[str, Any]:
        """The pod status fields to set, ``created_name`` naming the claim bind created."""
        return extended_status(self.claim_name or created_name, self.mappings)


@dataclass(frozen=True, slots=True)
class Placement:
    """Everything bind commits on its node, decided before anything is held or written."""

    variant: Variant  # ``variant.claims`` get ``results``, in order
    results: Sequence[AllocationResult]
    reserve: tuple[ResourceClaim, ...]  # allocated claims that do not list the pod in reservedFor yet
    status: ExtendedStatus | None  # what the pod's status must say about its extended-resource claim
    # The extended-resource claim of ``variant`` exists only in memory: bind creates it from this.
    create: dict[str, Any] | None = None
    # What the claims cost the node (``pod.status.nodeAllocatableResourceClaimStatuses``).
    footprints: tuple[ClaimFootprint, ...] = ()
