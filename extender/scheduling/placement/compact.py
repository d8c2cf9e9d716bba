"""The ``compact`` score policy: place so that big requests stay placeable.

The allocation on each node is the allocator's own (upstream's first fit in slice order), so
every result stays one the upstream allocator returns; only the choice *between nodes* is
ours. A node's allocation is judged by what it *breaks* (finds wholly free and leaves partly
used; what it takes whole is not broken), compared in this order (fewer wins):

1. a free node (no unit of the allocation's drivers in use): an 8-GPU job needs one;
2. free topology domains (a NUMA node, a PCIe root): a 4-GPU job with ``matchAttribute`` on
   NUMA needs one; a 2-GPU job that fills a free PCIe root breaks nothing;
3. free units: a partition taken from an untouched GPU leaves one whole GPU fewer, taken from
   a GPU already partitioned (or consumable capacity from a device already shared) as many;
4. topology spread of the allocation itself: how many values of each topology attribute its
   devices span beyond one, whether or not the claim requires them to match;
5. whole free units left on the node afterwards (bin packing, counted in units, so that
   partitions of one GPU do not count as many free devices).
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.model import DeviceID
from extender.scheduling.placement.profiles import NodeProfiles
from extender.scheduling.verdicts import NodeVerdict
from extender.state import ClusterState

# Each figure is far below this, so one integer orders nodes as the figures in turn would.
_PLACE = 1 << 24


class CompactRanker:
    """Ranks one prioritize call's nodes; made per call over the live in-use sets."""

    def __init__(self, state: ClusterState, profiles: NodeProfiles) -> None:
        inuse = state.inuse
        self._exclusive = inuse.devices
        # Devices partly in use: consumed capacity (the live map), or shares of a
        # multi-allocatable device (gathered per call, and only when there are any).
        self._capacity = inuse.capacity
        self._shared = {device for device, _ in inuse.shared} if inuse.shared else frozenset()
        self._profiles = profiles

    def figures(self, node: str, verdict: NodeVerdict) -> tuple[int, int, int, int, int]:
        """The five figures of the module docstring for ``verdict`` on ``node``, fewer better.

        Plain loops: this runs for every fitting node whose devices in use moved since it was
        last ranked (the rank is kept with the shared verdict until then)."""
        drivers = verdict.drivers
        if not drivers:
            return (0, 0, 0, 0, 0)
        profile = self._profiles.of(node)
        mine = profile.units_of(drivers)
        busy = self._busy(mine, profile.unit_devices)
        unit_of, whole = profile.unit_of, profile.whole
        touched: set[int] = set()
        filled: set[int] = set()  # units the allocation takes whole: nothing of them is left to break
        for device in verdict.devices:
            unit = unit_of.get(device)
            if unit is not None:
                touched.add(unit)
                if device in whole:
                    filled.add(unit)
        broken = touched - filled - busy  # were whole, are partly used now
        breaks_node = int(bool(touched) and not busy and not filled.issuperset(mine))
        unit_domains, domain_units = profile.unit_domains, profile.domain_units
        domains = {domain for unit in touched for domain in unit_domains[unit]}
        broken_domains = spread = 0
        attributes: set[str] = set()
        for domain in domains:
            units = domain_units[domain]
            broken_domains += busy.isdisjoint(units) and not filled.issuperset(units)
            # Each value of an attribute beyond its first one spreads the allocation.
            if domain[2] in attributes:
                spread += 1
            else:
                attributes.add(domain[2])
        free_after = len(mine) - len(busy | touched)
        return (breaks_node, broken_domains, len(broken), spread, free_after)

    def _busy(self, units: Sequence[int], unit_devices: Sequence[Sequence[DeviceID]]) -> set[int]:
        """The ``units`` with a device in use. Plain loops: this runs for every node scored."""
        busy = set()
        exclusive, capacity, shared = self._exclusive, self._capacity, self._shared
        if not capacity and not shared:
            for i in units:
                for d in unit_devices[i]:
                    if d in exclusive:
                        busy.add(i)
                        break
            return busy
        for i in units:
            for d in unit_devices[i]:
                if d in exclusive or d in capacity or d in shared:
                    busy.add(i)
                    break
        return busy

    def rank(self, node: str, verdict: NodeVerdict) -> int:
        """The figures as one integer, higher better (prioritize's packing key)."""
        total = 0
        for figure in self.figures(node, verdict):
            total = total * _PLACE + (figure if figure < _PLACE else _PLACE - 1)
        return -total
