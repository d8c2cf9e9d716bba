"""Where the allocator reads slices from (``SliceSource``, and ``SliceList`` over a plain list),
and gathering the resource pools one node can use from them, in upstream's search order.

Upstream: GatherPools (structured/internal/*/pools_*.go in k8s.io/dynamic-resource-allocation).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from extender.allocator.outcome import AllocationError
from extender.model import CounterSet, Device, Node, NodeSelector, ResourceSlice
from extender.model.features import Features


class SliceSource(Protocol):
    def for_node(self, node_name: str | None) -> Sequence[ResourceSlice]:
        """Slices with spec.nodeName == node (input order), then those without nodeName."""
        ...

    def pool_slices(self, driver: str, pool: str) -> Sequence[ResourceSlice]:
        """Every slice of that pool in the cluster, in input order."""
        ...


class SliceList:
    """A SliceSource over a fixed list, indexed once at construction."""

    def __init__(self, slices: Iterable[ResourceSlice]) -> None:
        self._slices = list(slices)
        self._by_node: dict[str, list[ResourceSlice]] = {}
        self._unbound: list[ResourceSlice] = []
        self._by_pool: dict[tuple[str, str], list[ResourceSlice]] = {}
        for s in self._slices:
            if s.node_name:
                self._by_node.setdefault(s.node_name, []).append(s)
            else:
                self._unbound.append(s)
            self._by_pool.setdefault((s.driver, s.pool.name), []).append(s)

    def for_node(self, node_name: str | None) -> Sequence[ResourceSlice]:
        if not node_name:
            return self._unbound
        return self._by_node.get(node_name, []) + self._unbound

    def pool_slices(self, driver: str, pool: str) -> Sequence[ResourceSlice]:
        return self._by_pool.get((driver, pool), [])


@dataclass(slots=True, eq=False)
class Candidate:
    """A device at its position in the node's search order."""

    index: int
    device: Device
    slice: ResourceSlice
    pool: Pool


@dataclass(slots=True, eq=False)
class Pool:
    driver: str
    name: str
    incomplete: bool = False
    invalid: str | None = None  # why the pool cannot be used
    # Targeting device slices, sorted by name: the only source of candidates.
    slices: list[ResourceSlice] = field(default_factory=list)
    # Device slices of the pool not visible on this node; they still consume counters.
    other_slices: list[ResourceSlice] = field(default_factory=list)
    counter_sets: dict[str, CounterSet] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)

    @property
    def usable(self) -> bool:
        return not self.incomplete and self.invalid is None

    def all_devices(self) -> list[Device]:
        return [d for s in (*self.slices, *self.other_slices) for d in s.devices]


def node_matches(
    node: Node | None, name: str, all_nodes: bool, selector: NodeSelector | None, what: str
) -> bool:
    if name:
        return node is not None and node.name == name
    if all_nodes:
        return True
    if selector is not None:
        try:
            return node is not None and selector.matches(node)
        except ValueError as exc:
            raise AllocationError(f"failed to perform node selection for {what}: {exc}") from None
    return False


def device_matches_node(node: Node | None, device: Device) -> bool:
    return node_matches(
        node, device.node_name, device.all_nodes, device.node_selector, f"device {'/'.join(device.id)}"
    )


def _relevant(node: Node | None, s: ResourceSlice, features: Features) -> bool:
    if not features.partitionable_devices and (s.per_device_node_selection is not None or s.shared_counters):
        return False
    if s.shared_counters and features.variant == "stable":
        # The stable allocator takes every counter-set slice, whatever node it names: a pool
        # whose slices it then does not all see is incomplete (pools_stable.go, v0.37.2). The
        # others find a counter-set slice through the pool of a device slice for the node.
        return True
    if s.node_name or s.all_nodes or s.node_selector is not None:
        return node_matches(node, s.node_name, s.all_nodes, s.node_selector, f"slice {s.name}")
    if s.per_device_node_selection:
        return any(device_matches_node(node, d) for d in s.devices)
    return False


def _uses_groups(s: ResourceSlice) -> bool:
    """Whether a device of the slice declares compatibility groups. With the gate off the
    allocator cannot check them, so such a slice is left out of its pool, which is then
    incomplete (upstream GatherPools, v0.37.2)."""
    return any(use.compatibility_groups for d in s.devices for use in d.consumes_counters)


def _name(s: ResourceSlice) -> str:
    return s.name


def _build(
    pool: Pool, relevant: list[ResourceSlice], full: list[ResourceSlice] | None, features: Features
) -> None:
    counter_slices: list[ResourceSlice] = []
    for s in sorted(relevant, key=_name) if len(relevant) > 1 else relevant:
        if features.partitionable_devices and s.shared_counters:
            counter_slices.append(s)
        else:
            pool.slices.append(s)
    if full is not None and len(full) > len(relevant):
        names = {s.name for s in relevant}
        for s in full:
            if s.name in names:
                continue
            if features.partitionable_devices and s.shared_counters:
                counter_slices.append(s)
            else:
                pool.other_slices.append(s)
    device_names = [d.name for s in pool.slices for d in s.devices]
    if len(set(device_names)) < len(device_names):
        seen: set[str] = set()
        for name in device_names:
            if name in seen:
                pool.invalid = f"duplicate device name {name}"
                return
            seen.add(name)
    if not features.partitionable_devices:
        return
    for s in counter_slices:
        for cs in s.shared_counters:
            if cs.name in pool.counter_sets:
                pool.invalid = f"duplicate counter set name {cs.name}"
                return
            pool.counter_sets[cs.name] = cs
    for s in (*pool.slices, *pool.other_slices):
        for d in s.devices:
            for consumption in d.consumes_counters:
                counter_set = pool.counter_sets.get(consumption.name)
                if counter_set is None:
                    pool.invalid = f"counter set {consumption.name} not found"
                    return
                for counter in consumption.counters:
                    if counter not in counter_set.counters:
                        pool.invalid = f"counter {counter} not found in counter set {consumption.name}"
                        return


def gather_pools(source: SliceSource, node: Node | None, features: Features) -> list[Pool]:
    """The node's pools in search order; incomplete and invalid pools are included but flagged."""
    grouped: dict[tuple[str, str], list[ResourceSlice]] = {}
    groups = features.device_compatibility_groups
    for s in source.for_node(node.name if node is not None else None):
        if not groups and _uses_groups(s):
            continue
        if not _relevant(node, s, features):
            continue
        key = (s.driver, s.pool.name)
        current = grouped.get(key)
        if current is None or s.pool.generation > current[0].pool.generation:
            grouped[key] = [s]
        elif s.pool.generation == current[0].pool.generation:
            current.append(s)

    pools: list[Pool] = []
    for (driver, name), relevant in grouped.items():
        pool = Pool(driver=driver, name=name)
        generation = relevant[0].pool.generation
        count = relevant[0].pool.resource_slice_count
        if len(relevant) == count:
            _build(pool, relevant, None, features)
        else:
            everything = source.pool_slices(driver, name)
            if any(s.pool.generation > generation for s in everything):
                continue  # obsolete: a newer generation exists elsewhere, silently unusable
            same = [
                s for s in everything if s.pool.generation == generation and (groups or not _uses_groups(s))
            ]
            if len(same) != count:
                pool.incomplete = True
            else:
                _build(pool, relevant, same, features)
        pools.append(pool)

    # Pools by ID; the incubating and experimental allocators try pools with binding
    # conditions last (they delay binding). The stable one takes pools in Go's map order,
    # binding conditions or not (pools_stable.go, v0.37.2): by ID is one of the orders it can
    # take, the others are as right.
    binding_last = features.variant != "stable"

    def order(p: Pool) -> tuple[bool, str, str]:
        return (binding_last and any(s.has_binding_conditions for s in p.slices), p.driver, p.name)

    pools.sort(key=order)
    index = 0
    for pool in pools:
        if not pool.usable:
            continue
        for s in pool.slices:
            pool.candidates += [Candidate(i, d, s, pool) for i, d in enumerate(s.devices, index)]
            index += len(s.devices)
    return pools
