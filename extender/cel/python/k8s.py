"""Kubernetes CEL libraries: lists, sets, ``includes``, quantity and semver (value semantics live
in :mod:`extender.model.quantity` and :mod:`extender.cel.runtime.semver`)."""

from __future__ import annotations

from typing import Any

from extender.cel.runtime import timestamps as cel_time
from extender.cel.runtime.semver import Semver
from extender.cel.runtime.values import (
    Duration,
    EvalError,
    Timestamp,
    UInt,
    add,
    cel_equal,
    compare_or_none,
    member_of,
    type_name,
)
from extender.model.quantity import Quantity

SET_PAIRS_LIMIT = 1_000_000


# The lists library's min, max and isSorted take any Comparer: they ignore a comparison's error
# (mixed types, NaN), but fail on an element that cannot be compared at all.
_COMPARERS = (int, UInt, float, str, bytes, bool, Duration, Timestamp)


def _comparers(items: Any, name: str) -> None:
    for x in items:
        if type(x) not in _COMPARERS:
            raise EvalError(f"no such overload: {name}(list({type_name(x)}))")


def is_sorted(items: Any) -> bool:
    _comparers(items, "isSorted")
    return all(compare_or_none(items[i], items[i + 1]) != 1 for i in range(len(items) - 1))


def list_sum(items: Any) -> Any:
    if not items:
        return 0
    total = items[0]
    adder = cel_time.add if type(total) is Duration else add
    for x in items[1:]:
        total = adder(total, x)
    if type(total) not in (int, UInt, float, Duration):
        raise EvalError(f"no such overload: sum(list({type_name(total)}))")
    return total


def extreme(items: Any, want: int, name: str) -> Any:
    _comparers(items, name)
    if not items:
        raise EvalError(f"{name} called on empty list")
    best = items[0]
    for x in items[1:]:
        if compare_or_none(best, x) == -want:
            best = x
    return best


def list_index_of(items: Any, x: Any) -> int:
    for i, y in enumerate(items):
        if cel_equal(x, y):
            return i
    return -1


def list_last_index_of(items: Any, x: Any) -> int:
    for i in range(len(items) - 1, -1, -1):
        if cel_equal(x, items[i]):
            return i
    return -1


def _pairwise_budget(a: Any, b: Any) -> None:
    """Kubernetes charges set operations per element pair; an over-budget pair of lists would
    take seconds here, so it fails up front the way it fails there."""
    if len(a) * len(b) > SET_PAIRS_LIMIT:
        raise EvalError("operation cancelled: actual cost limit exceeded")


def sets_contains(a: Any, b: Any) -> bool:
    _pairwise_budget(a, b)
    return all(member_of(x, a) for x in b)


def sets_intersects(a: Any, b: Any) -> bool:
    _pairwise_budget(a, b)
    return any(member_of(x, a) for x in b)


def includes(target: Any, item: Any) -> bool:
    if type(target) is list or type(target) is tuple:
        return any(cel_equal(x, item) for x in target)
    return cel_equal(target, item)


def quantity(s: str) -> Quantity:
    try:
        return Quantity.parse(s)
    except ValueError as e:
        raise EvalError(str(e)) from None


def is_quantity(s: str) -> bool:
    try:
        Quantity.parse(s)
    except ValueError:
        return False
    return True


def quantity_as_integer(q: Quantity) -> int:
    try:
        return q.as_int()
    except ValueError as e:
        raise EvalError(str(e)) from None


def semver(s: str, normalize: bool = False) -> Semver:
    try:
        return Semver.parse(s, normalize=normalize)
    except ValueError as e:
        raise EvalError(f"could not parse {s!r} as semver: {e}") from None


def is_semver(s: str, normalize: bool = False) -> bool:
    try:
        Semver.parse(s, normalize=normalize)
    except ValueError:
        return False
    return True
