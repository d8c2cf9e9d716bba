"""A node's devices as placement sees them: physical units and topology domains.

A *unit* is what a big request needs whole: a counter set with every device drawing on it (a
partitionable GPU and its partitions), or a device that draws on no counters. A *domain* is
one value of a topology attribute on the node (``numaNode`` 0, ``pcieRoot`` pci0000:00, …): the
units whose devices carry it. Both are read from the node's slices once and kept until those
slices change (``NodeProfiles.of``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from extender.model import DeviceID
from extender.model.resource_slice import ResourceSlice
from extender.state import ClusterState

# Attribute identifiers (the part after the domain, if any) that name a topology domain: the
# standard ``resource.kubernetes.io/pcieRoot`` and the NUMA node drivers publish. Devices that
# share one value of such an attribute are close; an allocation within one is preferred.
TOPOLOGY_ATTRIBUTES = ("numaNode", "numa", "pcieRoot")

_TOPOLOGY = frozenset(TOPOLOGY_ATTRIBUTES)

Domain = tuple[str, str, str, object]  # (driver, pool, attribute identifier, value)


@dataclass(frozen=True, slots=True)
class NodeProfile:
    """The node's units and domains, by driver."""

    unit_of: dict[DeviceID, int]  # device -> index of its unit
    # Devices that take their unit whole: a device of its own, or one consuming every counter
    # of its counter set (the whole GPU beside its partitions).
    whole: frozenset[DeviceID]
    unit_devices: tuple[tuple[DeviceID, ...], ...]
    unit_driver: tuple[str, ...]
    unit_domains: tuple[tuple[Domain, ...], ...]
    domain_units: dict[Domain, tuple[int, ...]]
    by_driver: dict[str, tuple[int, ...]]  # the units of each driver

    def units_of(self, drivers: frozenset[str]) -> tuple[int, ...]:
        """The units of ``drivers`` (an allocation's), in unit order."""
        if len(drivers) == 1:
            (driver,) = drivers
            return self.by_driver.get(driver, ())
        return tuple(i for i, driver in enumerate(self.unit_driver) if driver in drivers)


def build_profile(slices: Sequence[ResourceSlice]) -> NodeProfile:
    """The units and domains of ``slices`` (a node's own slices and those every node sees)."""
    unit_index: dict[tuple[str, str, str], int] = {}
    counter_sets = {
        (rs.driver, rs.pool.name, counter_set.name): counter_set.counters
        for rs in slices
        for counter_set in rs.shared_counters
    }
    whole: set[DeviceID] = set()
    unit_of: dict[DeviceID, int] = {}
    devices: list[list[DeviceID]] = []
    drivers: list[str] = []
    domains: list[set[Domain]] = []
    for rs in slices:
        for device in rs.devices:
            device_id = device.id
            if device_id in unit_of:
                continue  # an older generation of the pool lists it too
            consumes = device.consumes_counters
            index = None
            if consumes:
                # A device drawing on several counter sets belongs to the first one's unit.
                key = (device.driver, device.pool, consumes[0].name)
                index = unit_index.get(key)
                if index is None:
                    unit_index[key] = len(devices)
                if consumes[0].counters == counter_sets.get(key):
                    whole.add(device_id)
            else:
                whole.add(device_id)  # a unit of its own (its ID is seen once: a new unit)
            if index is None:
                index = len(devices)
                devices.append([])
                drivers.append(device.driver)
                domains.append(set())
            unit_of[device_id] = index
            devices[index].append(device_id)
            for name, value in device.typed_attributes.items():
                ident = name.rpartition("/")[2]  # the identifier, after the domain if any
                if ident in _TOPOLOGY and value.values and not value.is_list:
                    domains[index].add((device.driver, device.pool, ident, value.values[0]))
    domain_units: dict[Domain, list[int]] = {}
    for index, unit_domains in enumerate(domains):
        for domain in unit_domains:
            domain_units.setdefault(domain, []).append(index)
    return NodeProfile(
        unit_of,
        frozenset(whole),
        tuple(tuple(d) for d in devices),
        tuple(drivers),
        tuple(tuple(d) for d in domains),  # read only as sets: order does not matter
        {domain: tuple(units) for domain, units in domain_units.items()},
        {driver: tuple(i for i, d in enumerate(drivers) if d == driver) for driver in set(drivers)},
    )


class NodeProfiles:
    """Each node's profile, built on first use.

    Invalidation: a profile is kept with the very list ``SliceIndex.for_node`` returned when it
    was built; that index makes a new list whenever any slice changes, so a changed inventory
    rebuilds the profile on next use. One entry per node that was ever scored.
    """

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._profiles: dict[str, tuple[Sequence[ResourceSlice], NodeProfile]] = {}

    def of(self, node: str) -> NodeProfile:
        slices = self._state.slices.for_node(node)
        kept = self._profiles.get(node)
        if kept is not None and kept[0] is slices:
            return kept[1]
        profile = build_profile(slices)
        self._profiles[node] = (slices, profile)
        return profile
