"""cel-go's lists extension as Kubernetes enables it (``ext.Lists(ext.ListsVersion(3))`` in
k8s.io/apiserver/pkg/cel/environment/base.go, since 1.34): ``slice``, ``flatten``, ``distinct``,
``lists.range``, ``reverse``, ``sort`` and ``sortBy``, with the cost each call is charged.

Costs follow cel-go ext/lists.go's trackers (version 3): a call costs 1, allocating its result
list 10 more, plus a per-element charge; Kubernetes' own estimator leaves these functions to
them. One call over the selector's whole budget fails up front, as it would there.
"""

from __future__ import annotations

import functools
from typing import Any

from extender.cel import COST_EXCEEDED, COST_LIMIT
from extender.cel.runtime.values import Duration, EvalError, Timestamp, UInt, cel_compare, cel_equal

_CALL_COST = 1
_LIST_CREATE_COST = 10
_STRING_TRAVERSAL_FACTOR = 0.1
_COMPARABLE = (int, UInt, float, str, bytes, bool, Duration, Timestamp)
# Element types whose Python order is CEL's (strings by code point, false before true); doubles
# are not among them (NaN).
_NATIVELY_ORDERED = (int, UInt, str, bytes, bool)


def _charge(factor: float, size: int) -> None:
    if int(size * factor) + _CALL_COST + _LIST_CREATE_COST > COST_LIMIT:
        raise EvalError(COST_EXCEEDED)


def charge_self_compare(items: Any) -> None:
    """sort, sortBy and distinct: a worst-case quadratic walk, dearer over strings and bytes."""
    factor = 2.0
    if items and type(items[0]) in (str, bytes):
        factor += _STRING_TRAVERSAL_FACTOR
    _charge(factor, len(items) * len(items))


def charge_range(n: int) -> None:
    """``lists.range(n)``'s charge; a negative ``n`` is an error (cel-go ext/lists.go)."""
    if n < 0:
        raise EvalError(f"lists.range: size must be non-negative, got {n}")
    _charge(1, n)


def list_range(n: int) -> list[int]:
    charge_range(n)
    return list(range(n))


def reverse(items: Any) -> list[Any]:
    _charge(1, len(items))
    return list(reversed(items))


def slice_list(items: Any, start: int, end: int) -> list[Any]:
    if start < 0 or end < 0:
        raise EvalError(f"cannot slice({start}, {end}), negative indexes not supported")
    if start > end:
        raise EvalError(f"cannot slice({start}, {end}), start index must be less than or equal to end index")
    if len(items) < end:
        raise EvalError(f"cannot slice({start}, {end}), list is length {len(items)}")
    _charge(1, end - start)
    return list(items[start:end])


def flatten(items: Any, depth: int = 1) -> list[Any]:
    if depth < 0:
        raise EvalError("level must be non-negative")
    _charge(depth, len(items))
    return _flatten(items, depth)


def _flatten(items: Any, depth: int) -> list[Any]:
    out: list[Any] = []
    for x in items:
        if depth > 0 and type(x) in (list, tuple):
            out += _flatten(x, depth - 1)
        else:
            out.append(x)
    return out


def distinct(items: Any) -> list[Any]:
    charge_self_compare(items)
    unique: list[Any] = []
    for x in items:
        if not any(cel_equal(x, y) for y in unique):
            unique.append(x)
    return unique


def sort_list(items: Any) -> list[Any]:
    return sort_by_keys(items, items)


def sort_by_keys(items: Any, keys: Any) -> list[Any]:
    """``items`` in the order that sorting ``keys`` (one per item) gives: cel-go's
    ``@sortByAssociatedKeys``, which ``sort()`` and the ``sortBy`` macro both use."""
    if len(items) != len(keys):
        raise EvalError(
            "@sortByAssociatedKeys() expected a list of the same size as the associated keys list, "
            f"but got {len(items)} and {len(keys)} elements respectively"
        )
    charge_self_compare(keys)
    if not items:
        return []
    kind = type(keys[0])
    if kind not in _COMPARABLE:
        raise EvalError("list elements must be comparable")
    if any(type(k) is not kind for k in keys):
        raise EvalError("list elements must have the same type")
    if kind in _NATIVELY_ORDERED:  # Python orders these as CEL does: no comparison in Python code
        order = sorted(range(len(keys)), key=keys.__getitem__)
    else:
        order = sorted(range(len(keys)), key=functools.cmp_to_key(lambda i, j: cel_compare(keys[i], keys[j])))
    return [items[i] for i in order]
