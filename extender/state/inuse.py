"""Devices in use: committed allocations plus in-flight commits, kept incrementally.

Every allocation that holds devices is registered under an *owner* key: ``("claim", uid)`` for
an allocation the cache has seen in a claim's status, ``("inflight", uid)`` for one a bind has
committed in memory but not written yet. A device stays in use while any owner holds it
(reference counts), so the hand-over from in-flight to committed never frees it for a moment,
and two claims that (wrongly) share a device do not free it for each other.

The sets are live: the allocator reads them directly instead of a copy. That is safe because
all mutation happens on the event loop and a filter call never awaits while allocating.
What an allocation holds is ``extender.model.holdings``'s answer, the one accounting rule.
Invalidation: an owner's holdings are replaced whenever its allocation changes (claim
update/delete, in-flight add/remove/expiry); nothing else caches derived data.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from extender.model import AllocationResult, DeviceID, Features, Holdings, holdings
from extender.model.quantity import Quantity

Owner = tuple[str, str]


@dataclass(slots=True)
class InFlight:
    """A claim a bind has committed in memory and is writing."""

    claim_uid: str
    pod_uid: str
    allocation: AllocationResult
    expires_at: float


class InUse:
    """Reference-counted device, share and capacity usage by owner."""

    def __init__(self, features: Features) -> None:
        self.features = features
        self.devices: set[DeviceID] = set()
        self.shared: set[tuple[DeviceID, str]] = set()
        self.capacity: dict[DeviceID, dict[str, Quantity]] = {}
        # Distinct devices in use per (driver, pool): a cheap "could eviction free anything here".
        self.per_pool: Counter[tuple[str, str]] = Counter()
        # Pools whose devices in use changed since the state last turned them into node
        # versions (``ClusterState.node_versions``); a set, so it stays bounded unread.
        self.changed_pools: set[tuple[str, str]] = set()
        self.inflight: dict[str, InFlight] = {}
        # How many changes gave something back (a device, a share or consumed capacity no longer
        # in use): a pod turned away for lack of devices may fit after any of them.
        self.released = 0
        self._owners: dict[Owner, Holdings] = {}
        self._device_refs: Counter[DeviceID] = Counter()
        self._share_refs: Counter[tuple[DeviceID, str]] = Counter()
        self._capacity_parts: dict[DeviceID, dict[Owner, Mapping[str, Quantity]]] = {}

    def set_owner(self, owner: Owner, allocation: AllocationResult | None) -> bool:
        """Replace what ``owner`` holds; returns whether anything changed."""
        new = holdings(allocation, self.features) if allocation else None
        old = self._owners.pop(owner, None)
        if old == new:
            if new is not None:
                self._owners[owner] = new
            return False
        if old is not None:
            self._remove(owner, old)
        if new is not None:
            self._owners[owner] = new
            self._add(owner, new)
        if old is not None and self._gave_back(old):
            self.released += 1
        return True

    def _gave_back(self, old: Holdings) -> bool:
        """Whether something ``old`` held is no longer in use. Judged after the change, so what
        only moved between owners (in flight, then the claim's own echo) is not counted."""
        if any(d not in self.devices for d in old.devices) or any(s not in self.shared for s in old.shares):
            return True
        parts = self._capacity_parts
        return any(consumed not in parts.get(device, {}).values() for device, consumed in old.capacity)

    def _touch(self, c: Holdings) -> None:
        self.changed_pools.update(
            {d[:2] for d in c.devices} | {s[0][:2] for s in c.shares} | {d[:2] for d, _ in c.capacity}
        )

    def _add(self, owner: Owner, c: Holdings) -> None:
        self._touch(c)
        for device in c.devices:
            if self._device_refs[device] == 0:
                self.devices.add(device)
                self.per_pool[device[:2]] += 1
            self._device_refs[device] += 1
        for share in c.shares:
            if self._share_refs[share] == 0:
                self.shared.add(share)
            self._share_refs[share] += 1
        for device, consumed in c.capacity:
            self._capacity_parts.setdefault(device, {})[owner] = consumed
            self._recompute_capacity(device)

    def _remove(self, owner: Owner, c: Holdings) -> None:
        self._touch(c)
        for device in c.devices:
            self._device_refs[device] -= 1
            if self._device_refs[device] == 0:
                del self._device_refs[device]
                self.devices.discard(device)
                self.per_pool[device[:2]] -= 1
                if self.per_pool[device[:2]] == 0:
                    del self.per_pool[device[:2]]
        for share in c.shares:
            self._share_refs[share] -= 1
            if self._share_refs[share] == 0:
                del self._share_refs[share]
                self.shared.discard(share)
        for device, _ in c.capacity:
            parts = self._capacity_parts.get(device, {})
            parts.pop(owner, None)
            if not parts:
                self._capacity_parts.pop(device, None)
            self._recompute_capacity(device)

    def _recompute_capacity(self, device: DeviceID) -> None:
        # Summed afresh from the parts: exact, and no subtraction drift.
        parts = self._capacity_parts.get(device)
        if not parts:
            self.capacity.pop(device, None)
            return
        total: dict[str, Quantity] = {}
        for consumed in parts.values():
            for name, q in consumed.items():
                total[name] = total[name].add(q) if name in total else q
        self.capacity[device] = total

    def add_inflight(self, entry: InFlight) -> None:
        self.inflight[entry.claim_uid] = entry
        self.set_owner(("inflight", entry.claim_uid), entry.allocation)

    def remove_inflight(self, claim_uid: str) -> bool:
        if self.inflight.pop(claim_uid, None) is None:
            return False
        self.set_owner(("inflight", claim_uid), None)
        return True

    def expire(self, now: float | None = None) -> list[str]:
        """Drop in-flight entries past their deadline (an abandoned bind); returns their claim UIDs."""
        now = time.monotonic() if now is None else now
        gone = [uid for uid, entry in self.inflight.items() if entry.expires_at <= now]
        for uid in gone:
            self.remove_inflight(uid)
        return gone

    def without(
        self, owners: Iterable[Owner]
    ) -> tuple[set[DeviceID], set[tuple[DeviceID, str]], dict[DeviceID, dict[str, Quantity]]]:
        """Copies of the in-use sets as if ``owners`` released everything (what-if for preemption)."""
        freed = [(o, self._owners[o]) for o in set(owners) if o in self._owners]
        device_drop: Counter[DeviceID] = Counter(d for _, c in freed for d in c.devices)
        share_drop: Counter[tuple[DeviceID, str]] = Counter(s for _, c in freed for s in c.shares)
        devices = {d for d in self.devices if self._device_refs[d] > device_drop.get(d, 0)}
        shared = {s for s in self.shared if self._share_refs[s] > share_drop.get(s, 0)}
        gone = {o for o, _ in freed}
        capacity: dict[DeviceID, dict[str, Quantity]] = {}
        for device, parts in self._capacity_parts.items():
            total: dict[str, Quantity] = {}
            for owner, consumed in parts.items():
                if owner in gone:
                    continue
                for name, q in consumed.items():
                    total[name] = total[name].add(q) if name in total else q
            if total:
                capacity[device] = total
        return devices, shared, capacity
