"""Shared counters of partitionable devices.

Upstream: checkAvailableCounters (structured/internal/*/allocator_*.go in
k8s.io/dynamic-resource-allocation).
"""

from __future__ import annotations

from extender.allocator.pools import Pool
from extender.allocator.state import AllocatedState
from extender.model import Device, DeviceID
from extender.model.quantity import Quantity

CounterValues = dict[str, dict[str, Quantity]]  # counter set -> counter -> amount
PoolKey = tuple[str, str]  # (driver, pool name): two drivers may use the same pool name

_ZERO = Quantity.from_int(0)


def _add(target: CounterValues, device: Device, sign: int) -> None:
    for consumption in device.consumes_counters:
        counters = target.setdefault(consumption.name, {})
        for name, amount in consumption.counters.items():
            have = counters.get(name, _ZERO)
            counters[name] = have.add(amount) if sign > 0 else have.sub(amount)


def available_counters(pool: Pool, state: AllocatedState, shared: set[DeviceID]) -> CounterValues:
    """Counter-set values minus what committed allocations hold; may go negative."""
    available: CounterValues = {name: dict(cs.counters) for name, cs in pool.counter_sets.items()}
    for device in pool.all_devices():
        if not device.consumes_counters:
            continue
        dev_id = device.id
        if dev_id in state.allocated_devices or dev_id in shared or dev_id in state.aggregated_capacity:
            for consumption in device.consumes_counters:
                counters = available.get(consumption.name)
                if counters is None:
                    continue
                for name, amount in consumption.counters.items():
                    if name in counters:
                        counters[name] = counters[name].sub(amount)
    return available


class CounterLedger:
    """Counters consumed within one Allocate call, checked against the pool's availability.

    ``available`` is the allocator object's cache, keyed like upstream's by driver and pool
    name (kubernetes/kubernetes 4426859839df, allocator_experimental.go: availableCounters
    and consumedCounters by PoolID). It is valid as long as the allocated state and slices
    given to the allocator, i.e. its lifetime.
    """

    def __init__(self, available: dict[PoolKey, CounterValues], state: AllocatedState) -> None:
        self._available = available
        self._state = state
        self._shared: set[DeviceID] | None = None
        self._consumed: dict[PoolKey, CounterValues] = {}

    def _available_for(self, pool: Pool) -> CounterValues:
        key = (pool.driver, pool.name)
        values = self._available.get(key)
        if values is None:
            if self._shared is None:
                self._shared = self._state.shared_device_ids()
            values = available_counters(pool, self._state, self._shared)
            self._available[key] = values
        return values

    def try_consume(self, pool: Pool, device: Device) -> bool:
        available = self._available_for(pool)
        consumed = self._consumed.setdefault((pool.driver, pool.name), {})
        _add(consumed, device, +1)
        for set_name, counters in available.items():
            used = consumed.get(set_name, {})
            for name, amount in counters.items():
                if amount < used.get(name, _ZERO):
                    _add(consumed, device, -1)
                    return False
        return True

    def release(self, pool: Pool, device: Device) -> None:
        _add(self._consumed[(pool.driver, pool.name)], device, -1)
