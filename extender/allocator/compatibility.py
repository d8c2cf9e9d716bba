"""DRADeviceCompatibilityGroups: devices drawing from one counter set are co-allocated only
when their compatibility groups intersect.

Upstream: compatibility_groups.go and checkAndConsumeCompatibilityGroups /
skipForDisabledCompatibilityGroups in structured/internal/experimental/allocator_experimental.go
(kubernetes/kubernetes 4426859839df).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from extender.allocator.pools import Pool
from extender.allocator.state import AllocatedState
from extender.model import Device

PoolKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Intersection:
    """The groups every device placed on one counter set so far declares. A device without
    groups goes only with other devices without groups, which a plain set intersection
    cannot say, hence ``all_empty``."""

    has_members: bool = False
    all_empty: bool = False
    groups: frozenset[str] = frozenset()

    def admits(self, groups: frozenset[str]) -> bool:
        if not self.has_members:
            return True
        if not groups:
            return self.all_empty
        return not self.all_empty and not self.groups.isdisjoint(groups)

    def add(self, groups: frozenset[str]) -> Intersection:
        if not self.has_members:
            return Intersection(True, not groups, groups)
        if self.all_empty or not groups:
            return self
        return Intersection(True, False, self.groups & groups)


def _held(pool: Pool, state: AllocatedState) -> list[Device]:
    """The pool's devices that committed allocations hold, as for counters."""
    shared = state.shared_device_ids()
    return [
        d
        for d in pool.all_devices()
        if d.id in state.allocated_devices or d.id in shared or d.id in state.aggregated_capacity
    ]


class GroupLedger:
    """The running intersection per pool and counter set within one Allocate call, seeded
    from the devices committed allocations hold (their groups read from the slices)."""

    def __init__(self, state: AllocatedState) -> None:
        self._state = state
        self._baseline: dict[PoolKey, dict[str, Intersection]] = {}
        self._running: dict[PoolKey, dict[str, Intersection]] = {}

    def _baseline_for(self, pool: Pool) -> dict[str, Intersection]:
        key = (pool.driver, pool.name)
        baseline = self._baseline.get(key)
        if baseline is None:
            baseline = self._baseline[key] = {}
            for device in _held(pool, self._state):
                for use in device.consumes_counters:
                    current = baseline.get(use.name, Intersection())
                    baseline[use.name] = current.add(frozenset(use.compatibility_groups))
        return baseline

    def try_consume(self, pool: Pool, device: Device) -> Callable[[], None] | None:
        """Fold the device's groups in; the undo action, or None (nothing changed) when the
        device is incompatible with what its counter sets already hold."""
        running = self._running.setdefault((pool.driver, pool.name), {})
        baseline = self._baseline_for(pool)
        saved: list[tuple[str, Intersection | None]] = []

        def undo() -> None:
            for name, previous in reversed(saved):
                if previous is None:
                    del running[name]
                else:
                    running[name] = previous

        for use in device.consumes_counters:
            previous = running.get(use.name)
            current = baseline.get(use.name, Intersection()) if previous is None else previous
            groups = frozenset(use.compatibility_groups)
            if not current.admits(groups):
                undo()
                return None
            saved.append((use.name, previous))
            running[use.name] = current.add(groups)
        return undo

