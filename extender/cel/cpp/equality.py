"""CEL's heterogeneous equality over the values the C++ runtime hands to Python, with
Kubernetes' equality by value for quantities (``quantity("4") == quantity("4000m")``).

Quantity messages carry the integer trait in their key (see ``values.QuantityMessages``), so the runtime's
own message equality tells 4 from 4000m; equalities and ``in`` tests that may meet quantities
are rewritten to call these functions instead. Each takes the engine's ``QuantityMessages``,
which leads a quantity message back to its value.
"""

from __future__ import annotations

import datetime
from typing import Any

from extender.cel.cpp.types import CIDRMsg, IPMsg, QuantityMsg, SemverMsg, URLMsg
from extender.cel.cpp.values import QuantityMessages

_NUMBERS = (int, float)
_BYTES = (bytes, bytearray)


def cel_equal(a: Any, b: Any, quantities: QuantityMessages) -> bool:
    """``a == b`` as CEL defines it: numbers by value across int/uint/double, no other
    cross-type equality (so ``true != 1``), lists and maps element by element."""
    if isinstance(a, QuantityMsg) or isinstance(b, QuantityMsg):
        return isinstance(a, QuantityMsg) and isinstance(b, QuantityMsg) and _same_quantity(a, b, quantities)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, _NUMBERS) and isinstance(b, _NUMBERS):
        return a == b
    if isinstance(a, _BYTES) and isinstance(b, _BYTES):
        return bytes(a) == bytes(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(cel_equal(x, y, quantities) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return len(a) == len(b) and all(
            _has_entry(b, key, value, quantities) for key, value in a.items()
        )
    if isinstance(a, datetime.datetime) and isinstance(b, datetime.datetime):
        return a == b
    return type(a) is type(b) and a == b


_LIBRARY_MESSAGES = (QuantityMsg, SemverMsg, IPMsg, CIDRMsg, URLMsg)


def go_equal(a: Any, b: Any, quantities: QuantityMessages) -> bool | None:
    """cel-go's types.Equal(a, b): True, False, or None for "no such overload", which
    Kubernetes' library values answer to a right operand of another type (null aside). A list
    or map is equal unless some element's Equal is false (common/types/list.go, map.go)."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, _LIBRARY_MESSAGES):
        return None if type(b) is not type(a) else cel_equal(a, b, quantities)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(
            go_equal(x, y, quantities) is not False for x, y in zip(a, b, strict=True)
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return len(a) == len(b) and all(
            _entry_not_unequal(b, key, value, quantities) for key, value in a.items()
        )
    return cel_equal(a, b, quantities)


def relation_equal(a: Any, b: Any, quantities: QuantityMessages) -> bool:
    """``a == b`` as the operator evaluates it: "no such overload" is a runtime error."""
    equal = go_equal(a, b, quantities)
    if equal is None:
        raise ValueError("no such overload")
    return equal


def relation_not_equal(a: Any, b: Any, quantities: QuantityMessages) -> bool:
    """``a != b`` as cel-go evaluates it: whether Equal is not true, so "no such overload" is
    true (interpreter/interpretable.go, evalNe)."""
    return go_equal(a, b, quantities) is not True


def cel_in(item: Any, items: Any, quantities: QuantityMessages) -> bool:
    """``item in items`` for a list: whether some element equals ``item``."""
    if not isinstance(items, list):
        raise ValueError("no such overload")
    return any(cel_equal(item, x, quantities) for x in items)


def _same_quantity(a: Any, b: Any, quantities: QuantityMessages) -> bool:
    return quantities.quantity(a).compare(quantities.quantity(b)) == 0


def _entry_not_unequal(
    mapping: dict[Any, Any], key: Any, value: Any, quantities: QuantityMessages
) -> bool:
    return any(
        cel_equal(key, k, quantities) and go_equal(value, v, quantities) is not False
        for k, v in mapping.items()
    )


def _has_entry(mapping: dict[Any, Any], key: Any, value: Any, quantities: QuantityMessages) -> bool:
    # Python merges the keys true and 1, which CEL keeps apart, so keys are matched by CEL's rule.
    return any(
        cel_equal(key, k, quantities) and cel_equal(value, v, quantities) for k, v in mapping.items()
    )
