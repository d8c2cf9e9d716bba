"""Consumable capacity: how much of a device one request takes and whether it still fits.

Upstream: structured/internal/*/consumable_capacity.go in k8s.io/dynamic-resource-allocation.
"""

from __future__ import annotations

from collections.abc import Mapping

from extender.model import Capacity, Device, RequestPolicy
from extender.model.quantity import Quantity

CapacityMap = Mapping[str, Quantity]
_EMPTY: CapacityMap = {}


def consumed_for(requested: Quantity | None, cap: Capacity) -> Quantity:
    """The amount a request takes from one capacity, rounded up as its policy demands."""
    policy = cap.policy
    if requested is None:
        if policy is not None and policy.default is not None:
            return policy.default
        return cap.value
    if policy is None:
        return requested
    if policy.min is not None:
        if requested < policy.min:
            return policy.min
        if policy.step is None:
            return requested
        low, step = policy.min.ceil_int(), policy.step.ceil_int()
        if step <= 0:
            return requested
        steps = -(-(requested.ceil_int() - low) // step)
        return Quantity.from_int(low + step * steps)
    for value in policy.valid_values:
        if value >= requested:
            return value
    return requested


def violates(value: Quantity, policy: RequestPolicy | None) -> bool:
    if policy is None:
        return False
    if policy.default is not None and value == policy.default:
        return False
    if policy.has_range:
        if policy.max is not None and value > policy.max:
            return True
        if policy.step is not None and policy.min is not None:
            step = policy.step.ceil_int()
            return step > 0 and (value.ceil_int() - policy.min.ceil_int()) % step != 0
        return False
    if policy.valid_values:
        return all(value != v for v in policy.valid_values)
    return False


def capacity_fits(
    requests: CapacityMap | None,
    device: Device,
    committed: CapacityMap | None,
    allocating: CapacityMap | None,
) -> bool:
    """Whether the request's demand fits next to what is committed and picked in this call.

    A request naming a capacity the device lacks is upstream's error case; it only skips the
    device, so it is reported as "does not fit".
    """
    requests = requests or _EMPTY
    for name in requests:
        if name not in device.capacities:
            return False
    committed = committed or _EMPTY
    allocating = allocating or _EMPTY
    for name, cap in device.capacities.items():
        consumed = consumed_for(requests.get(name), cap)
        if violates(consumed, cap.policy):
            return False
        total = consumed
        if name in committed:
            total = total.add(committed[name])
        if name in allocating:
            total = total.add(allocating[name])
        if total > cap.value:
            return False
    return True


def consumed_capacity(requests: CapacityMap | None, device: Device) -> dict[str, Quantity]:
    requests = requests or _EMPTY
    return {name: consumed_for(requests.get(name), cap) for name, cap in device.capacities.items()}
