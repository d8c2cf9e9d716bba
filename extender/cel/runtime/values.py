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


class EvalAbort(Exception):
    """cel-go panicked while evaluating (hashing a value Go cannot hash): its Eval recovers the
    panic as the whole evaluation's error, which no ``&&``, ``||`` or loop absorbs."""


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


class BuiltMap(dict):  # type: ignore[type-arg]
    """A map the expression built (a map literal, ``transformMap``): cel-go keeps it in a Go map
    of CEL values (common/types/map.go, NewRefValMap), whose lookups hash the key unless the
    map is empty, so a bytes or version key makes Go panic (EvalAbort) where a device's maps
    simply lack it. Its keys are all of one kind among int, uint, bool, string and null; any
    other built map is a GoKeyedMap."""

    __slots__ = ()


# The key kinds a BuiltMap holds: Python's dict tells them apart as Go's map does, as long as
# one map holds one kind (1, 1u, 1.0 and true are one key for Python, four for Go).
_PLAIN_KEYS = frozenset({int, UInt, bool, str, type(None)})


class GoKey:
    """A map key as cel-go's Go map compares it (common/types/map.go, NewRefValMap).

    Numbers, strings, bools, null, durations, timestamps, types, IPs and CIDRs are Go values
    hashed by value, each of its own kind, a NaN equal to nothing. Lists and maps are Go
    pointers, one key per value: cel-go builds a constant literal once per program and
    evaluates a bound name once, and so does the python engine (it folds constant literals
    and binds once), so a list key is found by the very list and never by an equal one. A
    present optional is a new key every time: cel-go makes a new pointer whenever it reads
    one, even from a bound name. Bytes and versions cannot be hashed: Go panics (EvalAbort).

    Chosen where cel-go's answer depends on which pointers its evaluation happens to share:
    quantities and URLs, pointers in cel-go (``quantity('1')`` twice is two keys, a device's
    capacity read twice is one), are keys by value here; the python engine caches parsed
    quantities, so following their identity would not even be deterministic.
    """

    __slots__ = ("_same", "value")

    def __init__(self, value: Any) -> None:
        self.value = value
        kind = type(value)
        if kind is list or kind is tuple or isinstance(value, dict) or value is CelOptional.NONE:
            self._same: Any = id(value)  # a pointer (kept alive by self.value)
        elif (kind is float and value != value) or kind is CelOptional:
            self._same = object()  # equal to nothing
        elif kind is bytes or kind is Semver:
            raise EvalAbort(f"internal error: runtime error: hash of unhashable type {go_type_name(value)}")
        else:
            self._same = (kind, value)

    def __hash__(self) -> int:
        return hash(self._same)

    def __eq__(self, other: object) -> bool:
        return type(other) is GoKey and other._same == self._same


class GoKeyedMap(BuiltMap):
    """A built map whose keys Python's dict would merge or cannot hold (see GoKey): they are
    stored as GoKeys and read back as the values they wrap."""

    __slots__ = ()

    def __iter__(self) -> Any:
        return (k.value for k in dict.__iter__(self))

    def keys(self) -> Any:
        return [k.value for k in dict.__iter__(self)]

    def items(self) -> Any:
        return [(k.value, v) for k, v in dict.items(self)]

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, GoKey(key))

    def __getitem__(self, key: Any) -> Any:
        return dict.__getitem__(self, GoKey(key))

    def __setitem__(self, key: Any, value: Any) -> None:
        dict.__setitem__(self, GoKey(key), value)

    def __delitem__(self, key: Any) -> None:
        dict.__delitem__(self, GoKey(key))

    def find(self, key: Any) -> tuple[bool, Any]:
        """cel-go's lookup (refValMapAccessor.Find): nothing in an empty map (no key hashed),
        else the key itself, then a double as the int or uint it equals, an int as a uint, a
        uint as an int; never a number as a double."""
        if not self:
            return False, None
        for candidate in _go_numeric_aliases(key):
            wrapped = GoKey(candidate)
            if dict.__contains__(self, wrapped):
                return True, dict.__getitem__(self, wrapped)
        return False, None


def _go_numeric_aliases(key: Any) -> tuple[Any, ...]:
    kind = type(key)
    if kind is float and key.is_integer():
        as_int = (int(key),) if INT_MIN <= key < 2.0**63 else ()
        as_uint = (UInt(int(key)),) if 0 <= key < 2.0**64 else ()
        return (key, *as_int, *as_uint)
    if kind is int:
        return (key, UInt(key)) if key >= 0 else (key,)
    if kind is UInt:
        return (key, int(key)) if key <= INT_MAX else (key,)
    return (key,)


def map_insert(m: BuiltMap, key: Any, value: Any) -> BuiltMap:
    """``m`` with ``key`` set to ``value`` as Go's map sets it (the key hashed: EvalAbort if Go
    cannot); returned, a GoKeyedMap if ``key`` is of another kind than the map's keys."""
    m = _holding(m, key)
    if type(m) is BuiltMap and key in m:
        del m[key]  # the repeated key moves to the end, as if inserted again
    m[key] = value
    return m


def map_delete(m: BuiltMap, key: Any) -> BuiltMap:
    """``m`` without ``key`` (a ``?k: v`` entry whose ``v`` is absent), hashed as Go does."""
    m = _holding(m, key)
    if key in m:
        del m[key]
    return m


def _holding(m: BuiltMap, key: Any) -> BuiltMap:
    """``m``, or ``m`` as a GoKeyedMap where its dict cannot tell ``key`` from its keys."""
    if type(m) is BuiltMap and (type(key) not in _PLAIN_KEYS or (m and type(next(iter(m))) is not type(key))):
        return _go_keyed(m)
    return m


def _go_keyed(m: BuiltMap) -> GoKeyedMap:
    out = GoKeyedMap()
    for k, v in dict.items(m):
        out[k] = v
    return out


# Go's names of the types cel-go reports hashing or qualifying with (``%T``).
_GO_TYPE_NAMES = {
    bytes: "types.Bytes",
    type(None): "types.Null",
    list: "*types.baseList",
    tuple: "*types.baseList",
    dict: "*types.baseMap",
    BuiltMap: "*types.baseMap",
    GoKeyedMap: "*types.baseMap",
    CelType: "*types.Type",
    CelOptional: "*types.Optional",
    Semver: "cel.Semver",
}


def go_type_name(v: Any) -> str:
    return _GO_TYPE_NAMES.get(type(v), f"types.{type(v).__name__}")


# The index values cel-go turns into a qualifier (interpreter/attributes.go, newQualifier).
QUALIFIER_KINDS = (str, int, UInt, float, bool)


def check_qualifier(key: Any) -> None:
    """An index must be a string, number or bool: anything else cannot qualify a value."""
    if type(key) not in QUALIFIER_KINDS:
        raise EvalError(f"invalid qualifier type: {go_type_name(key)}")


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
    """Find ``key`` as cel-go's maps do: an int, uint or double key is found by a number of
    another kind that equals it (a double key only by a double, see GoKeyedMap.find), bool
    keys never match numbers (Python's ``True == 1`` must not leak through), and a key of a
    kind the map cannot hold is absent, unless Go must hash it to look (BuiltMap)."""
    if type(m) is GoKeyedMap:
        return m.find(key)
    tk = type(key)
    if tk is bool:
        for k, v in m.items():
            if type(k) is bool and k == key:
                return True, v
        return False, None
    if tk is float:
        if not key.is_integer():
            return False, None  # only a GoKeyedMap holds double keys
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
    if tk is str:
        if key in m:
            return True, m[key]
        return False, None
    if m and isinstance(m, BuiltMap):
        GoKey(key)  # Go hashes the key to look in a map with keys: EvalAbort if it cannot
    return False, None


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
