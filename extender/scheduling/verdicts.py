"""Verdicts: one node's answer for one pod, and the tables that let pods asking alike share them.

A verdict is computed by ``plan.PodPlan`` and read by every verb; ``SpecVerdicts`` keeps the
verdicts of one claim spec by node, valid while the node's version
(``ClusterState.node_versions``) is unchanged; ``PodResults`` is what one pod's filter leaves
for its prioritize and bind.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from extender.allocator.alike import takes_of
from extender.model import AllocationResult, DeviceID

TIMEOUT = "timed out trying to allocate devices"


class NodeVerdict(NamedTuple):
    """One node's answer for one pod: fits (with the allocation), or why not.

    Immutable, as verdicts are shared between pods; a named tuple rather than a frozen
    dataclass because a filter's first lap over a big cluster makes one per node, and a frozen
    dataclass of these fields costs 0.9 µs to make against 0.25 µs (docs/performance.md)."""

    fits: bool
    reason: str = ""
    resolvable: bool = False  # preemption might help
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
        return cls(True, "", False, results, takes.devices, takes.drivers, takes.taken, takes.shares)


FITS = NodeVerdict(True)


class SharedVerdict(NamedTuple):
    """A node's answer for one claim-spec signature, shared by pods asking alike (see ``PodPlan``).

    A named tuple for the reason ``NodeVerdict`` is one."""

    node_signature: int  # the node's version it was computed at
    claim_keys: tuple[str, ...]  # "ns/name" of the claims it was computed for (named in reasons)
    verdict: NodeVerdict
    # A rejection's reason with those claim names as numbered slots (see ``PodPlan``): equal
    # across nodes that fail alike, so each pod fills it in once rather than once per node.
    reason_template: str = ""


# A filter decision kept for bind, valid only while the node's version is unchanged:
# (node version, UIDs of the claims it allocates, verdict). A plain tuple: a named tuple
# costs several times as much to make.
Remembered = tuple[int, tuple[str, ...], NodeVerdict]


class SpecVerdicts:
    """The shared verdicts of one claim spec by node name, current after ``sync``.

    ``entries`` holds only verdicts computed at the node's current version (``put`` refuses
    others), and ``sync`` drops every node whose version moved since the previous sync, so
    after a sync every entry is current. ``fits`` names the entries that fit; ``derived``
    keeps what readers compute from a fitting entry (prioritize's figures), dropped with it.
    """

    __slots__ = ("_floor", "_synced", "derived", "entries", "fits")

    def __init__(self) -> None:
        self.entries: dict[str, SharedVerdict] = {}
        self.fits: set[str] = set()
        self.derived: dict[str, tuple[int, int, int]] = {}
        self._floor = -1
        self._synced = -1

    def __len__(self) -> int:
        return len(self.entries)

    def sync(self, stamps: dict[str, int], floor: int, clock: int) -> None:
        """Drop the nodes whose version moved since the last sync (``node_versions``' view:
        ``stamps`` in the order they were given out, ``clock`` the latest)."""
        if floor != self._floor:
            self.clear()
            self._floor = floor
        elif clock != self._synced:
            entries, fits, derived, synced = self.entries, self.fits, self.derived, self._synced
            for name in reversed(stamps):  # the latest changes first
                if stamps[name] <= synced:
                    break
                if entries.pop(name, None) is not None:
                    fits.discard(name)
                    derived.pop(name, None)
        self._synced = clock

    def put(self, name: str, shared: SharedVerdict, version: int) -> None:
        """Keep ``shared`` for ``name`` if it was computed at the node's ``version`` (current)."""
        if shared.node_signature != version:
            return
        self.entries[name] = shared
        self.derived.pop(name, None)
        if shared.verdict.fits:
            self.fits.add(name)
        else:
            self.fits.discard(name)

    def clear(self) -> None:
        self.entries.clear()
        self.fits.clear()
        self.derived.clear()


class PodResults:
    """One pod's filter results for bind and prioritize, as memory hands them to a plan.

    A fitting verdict the filter read from a spec's shared table is not copied per node:
    ``shared`` names the table (and the UIDs of the claims its verdicts allocate), which stays
    current on its own. ``get`` and ``keep`` (the pod's own verdicts by node name: computed
    over devices held for nominated pods, or never shared) are the map's own bound methods.
    A plan that must not leave anything behind (what-if) gets one that memory does not hold.
    """

    __slots__ = ("get", "keep", "shared")

    def __init__(self) -> None:
        by_node: dict[str, Remembered] = {}
        self.get: Callable[[str], Remembered | None] = by_node.get
        self.keep: Callable[[str, Remembered], None] = by_node.__setitem__
        self.shared: tuple[SpecVerdicts, tuple[str, ...]] | None = None
