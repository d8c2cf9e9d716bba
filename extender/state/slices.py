"""ResourceSlices indexed the way the allocator asks for them (the ``SliceSource`` protocol).

Order is the cache's insertion order, which stands for the informer's list order; an update
keeps a slice's place (dict assignment does). Invalidation: ``_for_node`` and ``pools_by_node``
memoize per-node lists and are cleared on every slice change, as are ``devices_per_pool``
and the device index.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from extender.model import Device, DeviceID, ResourceSlice


def _node_of(rs: ResourceSlice) -> str:
    return rs.node_name


def _pool_of(rs: ResourceSlice) -> tuple[str, str]:
    return (rs.driver, rs.pool.name)


def _device_count(rs: ResourceSlice) -> int:
    return len(rs.devices)


class SliceIndex:
    def __init__(self) -> None:
        self.by_name: dict[str, ResourceSlice] = {}
        self._by_node: dict[str, dict[str, ResourceSlice]] = {}
        self._no_node: dict[str, ResourceSlice] = {}
        self._by_pool: dict[tuple[str, str], dict[str, ResourceSlice]] = {}
        self._for_node: dict[str | None, list[ResourceSlice]] = {}
        # The memo behind pools_for_node; public for the hottest reader (a miss: call that).
        self.pools_by_node: dict[str, tuple[tuple[str, str], ...]] = {}
        self._devices_per_pool: Counter[tuple[str, str]] | None = None
        self._devices: dict[DeviceID, Device] | None = None

    def __len__(self) -> int:
        return len(self.by_name)

    def put(self, rs: ResourceSlice) -> None:
        old = self.by_name.get(rs.name)
        if old is not None and (_node_of(old), _pool_of(old)) != (_node_of(rs), _pool_of(rs)):
            # Node or pool changed (not allowed by the API, but a relist may bring a re-created
            # slice): drop it from the old buckets first.
            self.remove(rs.name)
        self.by_name[rs.name] = rs
        node = _node_of(rs)
        bucket = self._by_node.setdefault(node, {}) if node else self._no_node
        bucket[rs.name] = rs
        self._by_pool.setdefault(_pool_of(rs), {})[rs.name] = rs
        self._invalidate()

    def remove(self, name: str) -> bool:
        rs = self.by_name.pop(name, None)
        if rs is None:
            return False
        node = _node_of(rs)
        bucket = self._by_node.get(node, {}) if node else self._no_node
        bucket.pop(name, None)
        if node and not bucket:
            self._by_node.pop(node, None)
        pool = self._by_pool.get(_pool_of(rs), {})
        pool.pop(name, None)
        if not pool:
            self._by_pool.pop(_pool_of(rs), None)
        self._invalidate()
        return True

    def _invalidate(self) -> None:
        self._for_node.clear()
        self.pools_by_node.clear()
        self._devices_per_pool = None
        self._devices = None

    def for_node(self, node_name: str | None) -> Sequence[ResourceSlice]:
        """The node's own slices, then every slice without ``nodeName`` (both in cache order)."""
        cached = self._for_node.get(node_name)
        if cached is None:
            own = self._by_node.get(node_name, {}) if node_name else {}
            cached = [*own.values(), *self._no_node.values()]
            self._for_node[node_name] = cached
        return cached

    def pool_slices(self, driver: str, pool: str) -> Sequence[ResourceSlice]:
        return list(self._by_pool.get((driver, pool), {}).values())

    def nodes_of_pool(self, pool: tuple[str, str]) -> set[str] | None:
        """The nodes whose slices publish ``pool``; None when some slice of it has no node
        (every node sees it)."""
        nodes = set()
        for rs in self._by_pool.get(pool, {}).values():
            node = _node_of(rs)
            if not node:
                return None
            nodes.add(node)
        return nodes

    def pools_for_node(self, node_name: str) -> tuple[tuple[str, str], ...]:
        """The pools whose devices the node can see, in a stable order."""
        pools = self.pools_by_node.get(node_name)
        if pools is None:
            pools = tuple(dict.fromkeys(_pool_of(rs) for rs in self.for_node(node_name)))
            self.pools_by_node[node_name] = pools
        return pools

    def device(self, device_id: DeviceID) -> Device | None:
        """A published device by (driver, pool, name); the highest pool generation wins."""
        if self._devices is None:
            index: dict[DeviceID, Device] = {}
            generation: dict[DeviceID, int] = {}
            for rs in self.by_name.values():
                for device in rs.devices:
                    if generation.get(device.id, -1) <= rs.pool.generation:
                        index[device.id] = device
                        generation[device.id] = rs.pool.generation
            self._devices = index
        return self._devices.get(device_id)

    def devices_per_pool(self) -> Counter[tuple[str, str]]:
        if self._devices_per_pool is None:
            counts: Counter[tuple[str, str]] = Counter()
            for key, slices in self._by_pool.items():
                counts[key] = sum(_device_count(rs) for rs in slices.values())
            self._devices_per_pool = counts
        return self._devices_per_pool
