"""Runtime values of the pure-Python CEL engine and the operators Kubernetes' cel-go applies to them.

CEL has more scalar types than Python distinguishes (int vs uint, bool is not a number), so
dispatch is always on ``type(v)``, never ``isinstance``. Failures raise :class:`EvalError`;
the evaluator turns the first one that is not absorbed into a ``CelRuntimeError``.
"""

from __future__ import annotations

import math
from collections.abc import Sized
from typing import Any, TypeVar

from extender.cel.runtime.semver import Semver
from extender.model.quantity import Quantity

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
UINT_MAX = 2**64 - 1


class EvalError(Exception):
    """A CEL runtime error value; carried as an exception so `&&`/`||` can absorb it."""


class UInt(int):
    """CEL ``uint``: a distinct type so that ``1u`` and ``1`` differ in overload dispatch."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{int(self)}u"


class CelOptional:
    """CEL ``optional_type``: an absent value or exactly one present value."""

    __slots__ = ("value",)
    NONE: CelOptional

    def __init__(self, value: Any = None) -> None:
        self.value = value

    @property
    def present(self) -> bool:
        return self is not CelOptional.NONE


CelOptional.NONE = CelOptional(None)


class CelType:
    """A CEL type value, as produced by ``type(x)`` or the identifiers ``int``, ``string``, ..."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return type(other) is CelType and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


# Timestamps run from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z (Unix-epoch nanoseconds).
TIMESTAMP_MIN_NANOS = -62135596800 * 10**9
TIMESTAMP_MAX_NANOS = 253402300800 * 10**9 - 1


class Duration:
    __slots__ = ("nanos",)
    cel_type_name = "google.protobuf.Duration"

    def __init__(self, nanos: int) -> None:
        if nanos < INT_MIN or nanos > INT_MAX:
            raise EvalError("integer overflow")
        self.nanos = nanos

    def __eq__(self, other: object) -> bool:
        return type(other) is Duration and other.nanos == self.nanos

    def __hash__(self) -> int:
        return hash(("duration", self.nanos))

    def __lt__(self, other: Duration) -> bool:
        return self.nanos < other.nanos

    def __gt__(self, other: Duration) -> bool:
        return self.nanos > other.nanos


class Timestamp:
    __slots__ = ("nanos",)  # since the Unix epoch, UTC
    cel_type_name = "google.protobuf.Timestamp"

    def __init__(self, nanos: int) -> None:
        if nanos < TIMESTAMP_MIN_NANOS or nanos > TIMESTAMP_MAX_NANOS:
            raise EvalError("timestamp out of range")
        self.nanos = nanos

    def __eq__(self, other: object) -> bool:
        return type(other) is Timestamp and other.nanos == self.nanos

    def __hash__(self) -> int:
        return hash(("timestamp", self.nanos))

    def __lt__(self, other: Timestamp) -> bool:
        return self.nanos < other.nanos

    def __gt__(self, other: Timestamp) -> bool:
        return self.nanos > other.nanos


class DomainMap(dict):  # type: ignore[type-arg]
    """``device.attributes`` / ``device.capacity``: an unknown domain indexes to an empty map.

    Membership (``in``) and iteration still see only the domains the device really has.
    """

    __slots__ = ()


# What an unknown domain indexes to (see DomainMap): one shared value, so never mutated.
EMPTY_DOMAIN: dict[str, Any] = {}


class DeviceValue(dict):  # type: ignore[type-arg]
    """The ``device`` variable: a map of its four declared fields, typed apart from plain maps."""

    __slots__ = ()


def type_name(v: Any) -> str:
    """The cel-go name of a runtime value's type, for error messages."""
    t = type(v)
    if t is bool:
        return "bool"
    if t is int:
        return "int"
    if t is UInt:
        return "uint"
    if t is float:
        return "double"
    if t is str:
        return "string"
    if t is bytes:
        return "bytes"
    if v is None:
        return "null_type"
    if t is list or t is tuple:
        return "list"
    if isinstance(v, dict):
        return "map"
    if t is Quantity:
        return "kubernetes.Quantity"
    if t is Semver:
        return "kubernetes.Semver"
    if t is CelOptional:
        return "optional_type"
    if t is CelType:
        return "type"
    return str(getattr(t, "cel_type_name", t.__name__))


# Kubernetes charges string and list growth to the cost budget (about 0.1 per character);
# without cost tracking, capping one value's size keeps doubling tricks from eating memory.
MAX_STRING_SIZE = 10_000_000
MAX_LIST_SIZE = 1_000_000
_Sized = TypeVar("_Sized", bound=Sized)


def check_size(v: _Sized) -> _Sized:
    limit = MAX_LIST_SIZE if type(v) is list else MAX_STRING_SIZE
    if len(v) > limit:
        raise EvalError("operation cancelled: actual cost limit exceeded")
    return v


def check_int(v: int) -> int:
    if v < INT_MIN or v > INT_MAX:
        raise EvalError("integer overflow")
    return v


def check_uint(v: int) -> UInt:
    if v < 0 or v > UINT_MAX:
        raise EvalError("unsigned integer overflow")
    return UInt(v)


def _is_num(t: type) -> bool:
    return t is int or t is UInt or t is float


def cel_equal(a: Any, b: Any) -> bool:
    """Heterogeneous equality: values of different kinds are unequal, numbers compare by value."""
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is list or ta is tuple:
            return len(a) == len(b) and all(cel_equal(x, y) for x, y in zip(a, b, strict=True))
        if isinstance(a, dict):
            return _map_equal(a, b)
        if ta is CelOptional:
            if a.present != b.present:
                return False
            return not a.present or cel_equal(a.value, b.value)
        return bool(a == b)
    if _is_num(ta) and _is_num(tb):
        return _numeric_order(a, b) == 0 and a == a and b == b  # NaN equals nothing
    if (ta is list or ta is tuple) and (tb is list or tb is tuple):
        return len(a) == len(b) and all(cel_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return _map_equal(a, b)
    return False


def _map_equal(a: dict[Any, Any], b: dict[Any, Any]) -> bool:
    if len(a) != len(b):
        return False
    for k, v in a.items():
        found, other = map_find(b, k)
        if not found or not cel_equal(v, other):
            return False
    return True


def map_find(m: dict[Any, Any], key: Any) -> tuple[bool, Any]:
    """Find ``key`` with CEL key semantics: numerically equal int/uint/double keys match,
    bool keys never match numbers (Python's ``True == 1`` must not leak through)."""
    tk = type(key)
    if tk is bool:
        for k, v in m.items():
            if type(k) is bool and k == key:
                return True, v
        return False, None
    if tk is float:
        if not key.is_integer():
            # A double key of a map literal (cel-go keeps any hashable key in its Go map).
            return (True, m[key]) if key in m else (False, None)
        key = int(key)
        tk = int
    if key is None:  # null, a key cel-go's map literals allow too
        return (True, m[None]) if None in m else (False, None)
    if tk is int or tk is UInt:
        if key in m:
            if key == 0 or key == 1:
                # Only 0 and 1 can collide with False/True keys; resolve exactly.
                for k, v in m.items():
                    if type(k) is not bool and _is_num(type(k)) and k == key:
                        return True, v
                return False, None
            return True, m[key]
        return False, None
    if tk is str or tk is bytes:
        if key in m:
            return True, m[key]
        return False, None
    raise EvalError(f"unsupported key type: {type_name(key)}")


def map_contains(m: dict[Any, Any], key: Any) -> bool:
    return map_find(m, key)[0]


def cel_compare(a: Any, b: Any) -> int:
    """Ordering with cross-type numeric comparison; other mixed kinds have no overload."""
    ta, tb = type(a), type(b)
    if _is_num(ta) and _is_num(tb):
        if (ta is float and math.isnan(a)) or (tb is float and math.isnan(b)):
            raise _NaNCompare
        return _numeric_order(a, b)
    if ta is tb and ta in (str, bytes, bool, Duration, Timestamp):
        return -1 if a < b else (1 if a > b else 0)
    raise EvalError(f"no such overload: {type_name(a)} < {type_name(b)}")


def _numeric_order(a: Any, b: Any) -> int:
    """cel-go's order of two numbers (common/types/compare.go): ints and uints exactly, an
    integer against a double as a double once the double is within the integer type's range,
    so 2**63 - 1 and 2.0**63 are equal."""
    if type(a) is float and type(b) is not float:
        return _double_integer_order(a, b)
    if type(b) is float and type(a) is not float:
        return -_double_integer_order(b, a)
    return -1 if a < b else (1 if a > b else 0)


def _double_integer_order(d: float, i: int) -> int:
    low, high = (0.0, float(UINT_MAX)) if type(i) is UInt else (float(INT_MIN), float(INT_MAX))
    if d < low:
        return -1
    if d > high:
        return 1
    f = float(i)
    return -1 if d < f else (1 if d > f else 0)


class _NaNCompareError(Exception):
    """Any ordering against NaN is false (IEEE), signalled past cel_compare's int result."""


_NaNCompare = _NaNCompareError()


def compare_or_none(a: Any, b: Any) -> int | None:
    """cel-go's Compare where its error (mixed types, NaN) is ignored, as the lists library's
    min, max and isSorted do: None then."""
    try:
        return cel_compare(a, b)
    except (EvalError, _NaNCompareError):
        return None


def less(a: Any, b: Any) -> bool:
    try:
        return cel_compare(a, b) < 0
    except _NaNCompareError:
        return False


def less_eq(a: Any, b: Any) -> bool:
    try:
        return cel_compare(a, b) <= 0
    except _NaNCompareError:
        return False


def greater(a: Any, b: Any) -> bool:
    try:
        return cel_compare(a, b) > 0
    except _NaNCompareError:
        return False


def greater_eq(a: Any, b: Any) -> bool:
    try:
        return cel_compare(a, b) >= 0
    except _NaNCompareError:
        return False


def add(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is int:
            return check_int(a + b)
        if ta is UInt:
            return check_uint(int(a) + int(b))
        if ta is float:
            return a + b
        if ta is str or ta is bytes:
            return check_size(a + b)
    if (ta is list or ta is tuple) and (tb is list or tb is tuple):
        return check_size([*a, *b])
    raise EvalError(f"no such overload: {type_name(a)} + {type_name(b)}")


def sub(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is int:
            return check_int(a - b)
        if ta is UInt:
            return check_uint(int(a) - int(b))
        if ta is float:
            return a - b
    raise EvalError(f"no such overload: {type_name(a)} - {type_name(b)}")


def mul(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is int:
            return check_int(a * b)
        if ta is UInt:
            return check_uint(int(a) * int(b))
        if ta is float:
            return a * b
    raise EvalError(f"no such overload: {type_name(a)} * {type_name(b)}")


def div(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is int or ta is UInt:
            if b == 0:
                raise EvalError("division by zero")
            q = abs(int(a)) // abs(int(b))
            if (a < 0) != (b < 0):
                q = -q
            return check_int(q) if ta is int else UInt(q)
        if ta is float:
            return _float_div(a, b)
    raise EvalError(f"no such overload: {type_name(a)} / {type_name(b)}")


def _float_div(a: float, b: float) -> float:
    if b == 0.0:
        if a == 0.0 or math.isnan(a):
            return math.nan
        negative = (a < 0) != (math.copysign(1.0, b) < 0)
        return -math.inf if negative else math.inf
    return a / b


def mod(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is tb and (ta is int or ta is UInt):
        if b == 0:
            raise EvalError("modulus by zero")
        if ta is int and a == INT_MIN and b == -1:
            raise EvalError("integer overflow")
        r = abs(int(a)) % abs(int(b))
        return (-r if a < 0 else r) if ta is int else UInt(r)
    raise EvalError(f"no such overload: {type_name(a)} % {type_name(b)}")


def negate(a: Any) -> Any:
    ta = type(a)
    if ta is int:
        return check_int(-a)
    if ta is float:
        return -a
    raise EvalError(f"no such overload: -{type_name(a)}")


def logical_not(a: Any) -> bool:
    if type(a) is bool:
        return not a
    raise EvalError(f"no such overload: !{type_name(a)}")


def member_of(item: Any, container: Any) -> bool:
    """The ``in`` operator: list membership by heterogeneous equality, map key presence."""
    tc = type(container)
    if tc is list or tc is tuple:
        return any(cel_equal(item, x) for x in container)
    if isinstance(container, dict):
        return map_contains(container, item)
    raise EvalError(f"no such overload: {type_name(item)} in {type_name(container)}")
