"""The tables verdicts are kept in: one claim spec's verdicts shared by node (``SpecVerdicts``)
and one pod's filter results for its prioritize and bind (``PodResults``).

Both are valid per node version (glossary in docs/architecture.md): ``ClusterState`` gives a
node a new version whenever anything its verdicts depend on changes, and a verdict is read
only at the version it was computed at.
"""

from __future__ import annotations

from collections.abc import Callable

from extender.allocator import Failure
from extender.scheduling.verdicts.values import Remembered, SharedVerdict


class SpecVerdicts:
    """The shared verdicts of one claim spec by node name, current after ``sync``.

    ``entries`` holds only verdicts computed at the node's current version (``put`` refuses
    others), and ``sync`` drops every node whose version moved since the previous sync, so
    after a sync every entry is current. ``fits`` names the entries that fit; ``derived``
    keeps what readers compute from a fitting entry (prioritize's figures), dropped with it.
    """

    __slots__ = ("_base", "_failures", "_synced", "derived", "entries", "fits")

    def __init__(self) -> None:
        self.entries: dict[str, SharedVerdict] = {}
        self.fits: set[str] = set()
        self.derived: dict[str, int] = {}
        # Each distinct failure once: nodes that fail alike then share one object, which a
        # pod reads with its claims' names once (``PodVerdicts``), not once per node.
        self._failures: dict[Failure, Failure] = {}
        self._base = -1
        self._synced = -1

    def __len__(self) -> int:
        return len(self.entries)

    def sync(self, versions: dict[str, int], base: int, latest: int) -> None:
        """Drop the nodes whose version moved since the last sync (``node_versions``' view:
        ``versions`` in the order they were given out, ``base`` the version of every node not
        listed, ``latest`` the last one given out)."""
        if base != self._base:
            self.clear()
            self._base = base
        elif latest != self._synced:
            entries, fits, derived, synced = self.entries, self.fits, self.derived, self._synced
            for name in reversed(versions):  # the latest changes first
                if versions[name] <= synced:
                    break
                if entries.pop(name, None) is not None:
                    fits.discard(name)
                    derived.pop(name, None)
        self._synced = latest

    def put(self, name: str, shared: SharedVerdict, version: int) -> None:
        """Keep ``shared`` for ``name`` if it was computed at the node's ``version`` (current)."""
        if shared.version != version:
            return
        failure = shared.verdict.failure
        if failure is not None:
            known = self._failures.setdefault(failure, failure)
            if known is not failure:
                shared = SharedVerdict(shared.version, shared.verdict._replace(failure=known))
        self.entries[name] = shared
        self.derived.pop(name, None)
        if shared.verdict.fits:
            self.fits.add(name)
        else:
            self.fits.discard(name)

    def clear(self) -> None:
        self._failures.clear()
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
