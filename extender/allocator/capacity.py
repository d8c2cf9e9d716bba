"""Consumable capacity: how much of a device one request takes and whether it still fits.

Upstream: structured/internal/*/consumable_capacity.go in k8s.io/dynamic-resource-allocation.
"""

from __future__ import annotations

from collections.abc import Mapping

from extender.allocator.outcome import AllocationError
from extender.model import Capacity, Device, RequestPolicy
from extender.model.quantity import Quantity

CapacityMap = Mapping[str, Quantity]
_EMPTY: CapacityMap = {}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _milli(value: Quantity) -> int | None:
    """The value in milli units when that is exact and fits int64 (upstream safeMilliValue)."""
    milli = value.value * 1000
    if milli.denominator != 1 or not _INT64_MIN <= milli.numerator <= _INT64_MAX:
        return None
    return milli.numerator


def _range_in_milli(policy: RequestPolicy, fractional: bool) -> tuple[int, int] | None:
    """(min, step) in milli units when DRAFractionalCapacityRange applies to the range: the
    gate is on, min, max and step are all exact in milli units and step is at least 1m
    (upstream useMilli, which no longer asks for a fractional bound); else None, and
    Value() arithmetic in whole units applies."""
    if not fractional or policy.min is None or policy.step is None:
        return None
    bounds = [_milli(q) for q in (policy.min, policy.max, policy.step) if q is not None]
    low, step = _milli(policy.min), _milli(policy.step)
    if None in bounds or low is None or step is None or step < 1:
        return None
    return low, step


def consumed_for(requested: Quantity | None, cap: Capacity, *, fractional: bool = False) -> Quantity:
    """The amount a request takes from one capacity, rounded up as its policy demands.

    Raises AllocationError for a request that milli-unit arithmetic cannot represent: upstream
    aborts the allocation rather than trying device after device.
    """
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
        milli = _range_in_milli(policy, fractional)
        if milli is not None:
            wanted = _milli(requested)
            if wanted is None:
                raise AllocationError(
                    f"capacity request {requested} cannot be represented in the device's range "
                    "arithmetic: it is not a whole number of milli units"
                )
            low, step = milli
            total = low + step * -(-(wanted - low) // step)
            if total % 1000 == 0:
                return Quantity(total // 1000, 0, False, policy.step.format)
            return Quantity(total, -3, False, policy.step.format)
        low, step = policy.min.ceil_int(), policy.step.ceil_int()
        if step <= 0:
            return requested
        steps = -(-(requested.ceil_int() - low) // step)
        return Quantity.from_int(low + step * steps)
    for value in policy.valid_values:
        if value >= requested:
            return value
    return requested


def violates(value: Quantity, policy: RequestPolicy | None, *, fractional: bool = False) -> bool:
    if policy is None:
        return False
    if policy.default is not None and value == policy.default:
        return False
    if policy.has_range:
        if policy.max is not None and value > policy.max:
            return True
        if policy.step is not None and policy.min is not None:
            milli = _range_in_milli(policy, fractional)
            if milli is not None:
                wanted = _milli(value)
                return wanted is None or (wanted - milli[0]) % milli[1] != 0
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
    *,
    fractional: bool = False,
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
        consumed = consumed_for(requests.get(name), cap, fractional=fractional)
        if violates(consumed, cap.policy, fractional=fractional):
            return False
        total = consumed
        if name in committed:
            total = total.add(committed[name])
        if name in allocating:
            total = total.add(allocating[name])
        if total > cap.value:
            return False
    return True


def consumed_capacity(
    requests: CapacityMap | None, device: Device, *, fractional: bool = False
) -> dict[str, Quantity]:
    requests = requests or _EMPTY
    return {
        name: consumed_for(requests.get(name), cap, fractional=fractional)
        for name, cap in device.capacities.items()
    }
