"""Devices in use: committed allocations plus in-flight commits, kept incrementally.

Every allocation that holds devices is registered under an *owner* key: ``("claim", uid)`` for
an allocation the cache has seen in a claim's status, ``("inflight", uid)`` for one a bind has
committed in memory but not written yet. A device stays in use while any owner holds it
(reference counts), so the hand-over from in-flight to committed never frees it for a moment,
and two claims that (wrongly) share a device do not free it for each other. A share is held the
same way, and the capacity it consumes counts once while any owner holds it: the in-flight
copy and the committed echo of one claim name the same share, not two.

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
        # How many changes gave something back (a device or a share, with the capacity it
        # consumed, no longer in use): a pod turned away for lack of devices may fit after any.
        self.released = 0
        self._owners: dict[Owner, Holdings] = {}
        self._device_refs: Counter[DeviceID] = Counter()
        self._share_refs: Counter[tuple[DeviceID, str]] = Counter()
        # What each share in use consumes, by device and shareID: the consumption the share was
        # taken with, kept until its last owner lets it go.
        self._consumed: dict[DeviceID, dict[str, Mapping[str, Quantity]]] = {}

    def set_owner(self, owner: Owner, allocation: AllocationResult | None) -> None:
        """Replace what ``owner`` holds (nothing when ``allocation`` is None)."""
        new = None if allocation is None else holdings(allocation, self.features)
        old = self._owners.pop(owner, None)
        if new is not None:
            self._owners[owner] = new
        if old == new:
            return  # an echo of what is held: no pool changed, nothing to recount
        if new is not None:
            self._add(new)
        if old is not None:
            # After the new holdings are in: what both hold never drops out of use meanwhile.
            self._remove(old)
            if any(d not in self.devices for d in old.devices) or any(
                s not in self.shared for s in old.shares
            ):
                self.released += 1

    def _touch(self, c: Holdings) -> None:
        # Capacity is consumed by shares only, so the shares name every pool it touches.
        self.changed_pools.update({d[:2] for d in c.devices} | {device[:2] for device, _ in c.shares})

    def _add(self, c: Holdings) -> None:
        self._touch(c)
        for device in c.devices:
            if device not in self._device_refs:
                self.devices.add(device)
                self.per_pool[device[:2]] += 1
            self._device_refs[device] += 1
        for share in c.shares:
            if share not in self._share_refs:
                self.shared.add(share)
            self._share_refs[share] += 1
        for (device, share_id), consumed in c.capacity:
            self._consumed.setdefault(device, {}).setdefault(share_id, consumed)
            self._recount(device)

    def _remove(self, c: Holdings) -> None:
        self._touch(c)
        for device in c.devices:
            left = self._device_refs.pop(device) - 1
            if left:
                self._device_refs[device] = left
                continue
            self.devices.discard(device)
            pool = device[:2]
            in_pool = self.per_pool.pop(pool) - 1
            if in_pool:
                self.per_pool[pool] = in_pool
        for share in c.shares:
            left = self._share_refs.pop(share) - 1
            if left:
                self._share_refs[share] = left
            else:
                self.shared.discard(share)
        # A set: an allocation naming one share twice lets it go once.
        for device, share_id in {share for share, _ in c.capacity if share not in self.shared}:
            del self._consumed[device][share_id]
            self._recount(device)

    def _recount(self, device: DeviceID) -> None:
        """The device's aggregated capacity, summed afresh from its shares: no subtraction drift."""
        on_device = self._consumed[device]
        if on_device:
            self.capacity[device] = _total(on_device.values())
        else:
            del self._consumed[device]
            del self.capacity[device]

    def add_inflight(self, entry: InFlight) -> None:
        self.inflight[entry.claim_uid] = entry
        self.set_owner(("inflight", entry.claim_uid), entry.allocation)

    def remove_inflight(self, claim_uid: str) -> None:
        if self.inflight.pop(claim_uid, None) is not None:
            self.set_owner(("inflight", claim_uid), None)

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
        freed = [self._owners[o] for o in set(owners) if o in self._owners]
        device_drop = Counter(d for c in freed for d in c.devices)
        share_drop = Counter(s for c in freed for s in c.shares)
        devices = {d for d, refs in self._device_refs.items() if refs > device_drop[d]}
        shared = {s for s, refs in self._share_refs.items() if refs > share_drop[s]}
        capacity: dict[DeviceID, dict[str, Quantity]] = {}
        for device, on_device in self._consumed.items():
            kept = [consumed for share_id, consumed in on_device.items() if (device, share_id) in shared]
            if kept:
                capacity[device] = _total(kept)
        return devices, shared, capacity


def _total(consumptions: Iterable[Mapping[str, Quantity]]) -> dict[str, Quantity]:
    total: dict[str, Quantity] = {}
    for consumed in consumptions:
        for name, q in consumed.items():
            total[name] = total[name].add(q) if name in total else q
    return total
