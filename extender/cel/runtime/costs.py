"""What one function call costs at run time, counted as cel-go counts it for Kubernetes.

cel-go's tracker (interpreter/runtimecost.go, ``CostTracker.costCall``) asks, in this order:
the overload trackers of the extensions (ext/lists.go and ext/sets.go: list allocation and
element-pair costs), then Kubernetes' estimator (k8s.io/apiserver/pkg/cel/library/cost.go,
``CostEstimator.CallCost``, by function name), then its own size-based rules by overload
(string comparison and concatenation, ``in`` over a list, ``matches``, ``contains``, ...);
every other call costs 1. The constants are cel-go's (common/cost.go).

:data:`SIZED_BY_NAME` (Kubernetes' functions) and :data:`SIZED_BY_OVERLOAD` (cel-go's and
the extensions' rules, which apply only to a call whose overload the checker resolved: one
dispatched at run time on a dyn argument has no overload id there and costs 1) name the
functions whose cost can differ from 1; an engine charges :func:`call_cost` for those after
the call and the plain 1 for every other.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

from extender.cel.runtime.values import CelOptional

STRING_TRAVERSAL_FACTOR = 0.1
REGEX_LENGTH_FACTOR = 0.25
CALL_COST = 1
LIST_CREATE_COST = 10
MAP_CREATE_COST = 30
STRUCT_CREATE_COST = 40


def actual_size(v: Any) -> int:
    """cel-go's ``actualSize``: the size of a string (code points), bytes, list or map, the
    size of a present optional's value, else 1."""
    if isinstance(v, str | bytes | list | tuple | dict):
        return len(v)
    if type(v) is CelOptional and v.present:
        return actual_size(v.value)
    return 1


def _traversal(v: Any) -> int:
    """Kubernetes' ``traversalCost``: a tenth of each string's length (rounded down), summed
    over the elements of lists and the keys and values of maps; 1 for anything else."""
    if isinstance(v, str | bytes):
        return int(len(v) * STRING_TRAVERSAL_FACTOR)
    if isinstance(v, list | tuple):
        return sum(_traversal(x) for x in v)
    if isinstance(v, dict):
        return sum(_traversal(k) + _traversal(x) for k, x in v.items())
    return 1


def _tenth(v: Any, factor: float = 1.0) -> int:
    return math.ceil(actual_size(v) * factor * STRING_TRAVERSAL_FACTOR)


def _regex(text: Any, pattern: Any) -> int:
    text_cost = math.ceil((1.0 + actual_size(text)) * STRING_TRAVERSAL_FACTOR)
    return text_cost * math.ceil(actual_size(pattern) * REGEX_LENGTH_FACTOR)


def _allocating(factor: float, size: int) -> int:
    """ext/lists.go ``trackAllocatingListCall``."""
    return int(size * factor) + CALL_COST + LIST_CREATE_COST


def _self_compare(items: Any) -> int:
    """ext/lists.go ``trackListSelfCompare``: sort, sortBy and distinct, a quadratic walk."""
    size = actual_size(items)
    factor = 2.0
    if size and isinstance(items[0], str | bytes):
        factor += STRING_TRAVERSAL_FACTOR
    return _allocating(factor, size * size)


def _is_text(v: Any) -> bool:
    return isinstance(v, str | bytes)


def _lists(name: str, args: Sequence[Any], result: Any) -> int:
    if name in ("slice", "lists.range", "reverse"):
        return _allocating(1.0, actual_size(result))
    if name == "flatten":
        depth = float(args[1]) if len(args) == 2 else 1.0
        return _allocating(depth if depth >= 0 else 1.0, actual_size(args[0]))
    if name in ("distinct", "sort"):
        return _self_compare(args[0])
    return _self_compare(args[1])  # @sortByAssociatedKeys: the keys


def _sets(name: str, args: Sequence[Any], result: Any) -> int:
    factor = 2.0 if name == "sets.equivalent" else 1.0
    return CALL_COST + int(actual_size(args[0]) * actual_size(args[1]) * factor)


def _kubernetes(name: str, args: Sequence[Any], result: Any) -> int:
    """Kubernetes' ``CallCost`` for the library functions whose cost is not 1."""
    if name in ("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf", "includes"):
        return _traversal(args[0]) if args else 0
    if name in ("url", "lowerAscii", "upperAscii", "substring", "trim", "cidr", "isIP", "isCIDR",
                "quantity", "isQuantity", "semver", "isSemver"):
        return _tenth(args[0])
    if name in ("replace", "split"):
        return _tenth(args[0], 2)
    if name == "join":
        return _tenth(result, 2)
    if name in ("find", "findAll"):
        return _regex(args[0], args[1])
    if name == "ip":
        return _tenth(args[0]) if isinstance(args[0], str) else CALL_COST  # cidr.ip(): 1
    if name == "ip.isCanonical":
        return _tenth(args[0], 2)
    # containsIP/containsCIDR: the CIDR itself has no size (1); a string argument adds its own.
    if name == "containsIP":
        return 1 + (_tenth(args[1]) if isinstance(args[1], str) else 0)
    return 3 + (_tenth(args[1]) if isinstance(args[1], str) else 0)  # containsCIDR


def _cel_go(name: str, args: Sequence[Any], result: Any) -> int:
    """cel-go's own size-based rules (by overload; other overloads of these names cost 1)."""
    if name in ("_==_", "_!=_"):
        return _equality(args, result)
    if name in ("_<_", "_<=_", "_>_", "_>=_"):
        if _is_text(args[0]):
            return math.ceil(min(actual_size(args[0]), actual_size(args[1])) * STRING_TRAVERSAL_FACTOR)
        return CALL_COST
    if name == "_+_":
        if _is_text(args[0]):
            return math.ceil((actual_size(args[0]) + actual_size(args[1])) * STRING_TRAVERSAL_FACTOR)
        return CALL_COST
    if name == "@in":
        return actual_size(args[1]) if isinstance(args[1], list | tuple) else CALL_COST
    if name == "matches":
        return _regex(args[0], args[1])
    if name == "contains":
        return _tenth(args[0]) * _tenth(args[1])
    if name in ("startsWith", "endsWith"):
        return _tenth(args[1])
    if name in ("string", "bytes"):  # bytes <-> string only; every other conversion costs 1
        return _tenth(args[0]) if _is_text(args[0]) and type(result) is not type(args[0]) else CALL_COST
    return _tenth(args[0])  # strings.quote, format: the text


_LISTS = frozenset(
    {"slice", "lists.range", "reverse", "flatten", "distinct", "sort", "@sortByAssociatedKeys"}
)
_SETS = frozenset({"sets.contains", "sets.intersects", "sets.equivalent"})
_KUBERNETES = frozenset({
    "isSorted", "sum", "max", "min", "indexOf", "lastIndexOf", "includes", "url", "lowerAscii",
    "upperAscii", "substring", "trim", "cidr", "isIP", "isCIDR", "quantity", "isQuantity", "semver",
    "isSemver", "replace", "split", "join", "find", "findAll", "ip", "ip.isCanonical", "containsIP",
    "containsCIDR",
})
_CEL_GO = frozenset({
    "_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "_+_", "@in", "matches", "contains", "startsWith",
    "endsWith", "string", "bytes", "strings.quote", "format",
})
SIZED_BY_NAME = _KUBERNETES
SIZED_BY_OVERLOAD = _LISTS | _SETS | _CEL_GO


_SIZED = (str, bytes, list, tuple, dict)


def _equality(args: Sequence[Any], result: Any) -> int:
    """``==`` and ``!=``: a tenth of the shorter operand's size (1 for values without one)."""
    x, y = args
    size = min(
        len(x) if type(x) in _SIZED else actual_size(x), len(y) if type(y) in _SIZED else actual_size(y)
    )
    return math.ceil(size * STRING_TRAVERSAL_FACTOR)


CostFunction = Callable[[Sequence[Any], Any], int]


def cost_function(name: str) -> CostFunction:
    """``call_cost`` for calls of ``name``, looked up once (a selector's equalities are its
    most frequent sized calls)."""
    if name in ("_==_", "_!=_"):
        return _equality
    return functools.partial(call_cost, name)


def call_cost(name: str, args: Sequence[Any], result: Any) -> int:
    """The cost cel-go charges for one call of ``name`` (a sized name, see above) on
    ``args`` (the receiver first) that returned ``result``."""
    if name in _LISTS:
        return _lists(name, args, result)
    if name in _SETS:
        return _sets(name, args, result)
    if name in _KUBERNETES:
        return _kubernetes(name, args, result)
    return _cel_go(name, args, result)
