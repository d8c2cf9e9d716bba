"""The function table of the DRA CEL environment: every overload's static signature and its
implementation (which lives in ``cel/runtime/`` and in ``python/strings.py`` and ``python/k8s.py``).

One table serves both the checker, which resolves overloads from static types, and the
evaluator, which calls the implementation (dispatching at run time only where ``dyn``
leaves more than one overload possible). Names shared by several libraries (``indexOf`` for
strings and lists, ``compareTo`` for quantities and semvers) are simply several overloads.
All implementations are deterministic, so a call over constants may be evaluated at compile time.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from extender.cel.python import k8s
from extender.cel.python import strings as strs
from extender.cel.runtime import conversions as conv
from extender.cel.runtime import k8s_format, k8s_functions, lists, net
from extender.cel.runtime import timestamps as cel_time
from extender.cel.runtime.formatting import format_string
from extender.cel.runtime.semver import Semver
from extender.cel.runtime.types import (
    BOOL,
    BYTES,
    CIDR,
    DOUBLE,
    DURATION,
    DYN,
    FORMAT,
    INT,
    IP,
    NULL,
    QUANTITY,
    SEMVER,
    STRING,
    TIMESTAMP,
    TYPE,
    UINT,
    URL,
    A,
    K,
    Type,
    V,
    list_of,
    map_of,
    optional_of,
)
from extender.cel.runtime.values import (
    CelOptional,
    EvalError,
    UInt,
    add,
    cel_equal,
    div,
    greater,
    greater_eq,
    less,
    less_eq,
    logical_not,
    map_find,
    member_of,
    mod,
    mul,
    negate,
    sub,
)
from extender.model.quantity import Quantity


@dataclass(frozen=True, slots=True)
class Overload:
    params: tuple[Type, ...]  # the receiver first for member functions
    result: Type
    impl: Callable[..., Any]


# (name, is_member) -> overloads, as the declarations of this module fill it while it is
# imported; published read-only as FUNCTIONS at the end of the module.
_DECLARED: dict[tuple[str, bool], list[Overload]] = {}

# Type conversions: cel-go folds them over constant arguments when the program is built, so
# a failing constant conversion is a compile error.
CONVERSIONS = frozenset(
    {"int", "uint", "double", "string", "bytes", "bool", "dyn", "type", "duration", "timestamp"}
)

# Functions whose argument at this position, when constant, is a regex compiled up front.
REGEX_ARG = {"matches": 1, "find": 1, "findAll": 1}

# Kubernetes library functions this engine does not implement: a clear compile error.
NOT_SUPPORTED = k8s_functions.ALL - k8s_functions.IP - k8s_functions.CIDR - k8s_functions.URLS - {"includes"}


def unsupported_message(name: str) -> str:
    return k8s_functions.unsupported_message(name)


def _decl(name: str, member: bool, params: tuple[Type, ...], result: Type, impl: Callable[..., Any]) -> None:
    _DECLARED.setdefault((name, member), []).append(Overload(params, result, impl))


def _both(name: str, params: tuple[Type, ...], result: Type, impl: Callable[..., Any]) -> None:
    """Declare ``name`` callable both as ``f(x, ...)`` and ``x.f(...)``."""
    _decl(name, False, params, result, impl)
    _decl(name, True, params, result, impl)


# --- operators -------------------------------------------------------------------------------

_NUMERIC = (INT, UINT, DOUBLE)
# Element types with an order: what the lists libraries' sort, min, max and isSorted take.
SORTABLE = (INT, UINT, DOUBLE, DURATION, BOOL, TIMESTAMP, STRING, BYTES)

# Loop variables of the declarations in this module, each reused for several kinds of values.
_t: Type
_getter: Callable[..., Any]

for _op, _fn in (("_<_", less), ("_<=_", less_eq), ("_>_", greater), ("_>=_", greater_eq)):
    for _l in _NUMERIC:
        for _r in _NUMERIC:
            _decl(_op, False, (_l, _r), BOOL, _fn)
    for _t in (STRING, BYTES, BOOL):
        _decl(_op, False, (_t, _t), BOOL, _fn)


# Kubernetes' library values compare only with their own type: their Equal answers "no such
# overload" for anything else (null aside, which cel-go settles first), so such a value on the
# left of == with another type on the right is a runtime error; on the right it is not.
# cel-go's != is "Equal is not true" (interpreter/interpretable.go, evalNe), so there the
# error is true; and a list or map is equal unless some element's Equal is false
# (common/types/list.go, map.go), so an element's error counts as equal.
_LIBRARY_VALUES = (Quantity, Semver, net.IPValue, net.CIDRValue, net.URLValue, k8s_format.Format)


_SCALARS = frozenset({str, int, bool, float, UInt, bytes})


def _go_equal(a: Any, b: Any) -> bool | None:
    """cel-go's types.Equal(a, b): True, False, or None where it answers "no such overload"."""
    if type(a) in _SCALARS:  # the common case first: a scalar's Equal never fails
        return cel_equal(a, b)
    if a is None or b is None:
        return a is None and b is None
    ta = type(a)
    if isinstance(a, _LIBRARY_VALUES):
        return None if type(b) is not ta else cel_equal(a, b)
    if ta is list or ta is tuple:
        if type(b) is not list and type(b) is not tuple:
            return False
        return len(a) == len(b) and all(_go_equal(x, y) is not False for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        if len(a) != len(b):
            return False
        for key, value in a.items():
            found, other = map_find(b, key)
            if not found or _go_equal(value, other) is False:
                return False
        return True
    return cel_equal(a, b)


def _equal(a: Any, b: Any) -> bool:
    equal = _go_equal(a, b)
    if equal is None:
        raise EvalError("no such overload")
    return equal


def _not_equal(a: Any, b: Any) -> bool:
    return _go_equal(a, b) is not True


_decl("_==_", False, (A, A), BOOL, _equal)
_decl("_!=_", False, (A, A), BOOL, _not_equal)
for _t in (INT, UINT, DOUBLE, STRING, BYTES):
    _decl("_+_", False, (_t, _t), _t, add)
_decl("_+_", False, (list_of(A), list_of(A)), list_of(A), add)
for _t in _NUMERIC:
    _decl("_-_", False, (_t, _t), _t, sub)
    _decl("_*_", False, (_t, _t), _t, mul)
    _decl("_/_", False, (_t, _t), _t, div)
for _t in (INT, UINT):
    _decl("_%_", False, (_t, _t), _t, mod)
_decl("-_", False, (INT,), INT, negate)
_decl("-_", False, (DOUBLE,), DOUBLE, negate)
_decl("!_", False, (BOOL,), BOOL, logical_not)


def _in_list(item: Any, items: Any) -> bool:
    """``in`` on a list: whether some element's Equal is true; an element's "no such
    overload" counts as false (cel-go common/types/list.go, Contains). A constant list of
    scalars is a Go set instead (see compiler._set_membership)."""
    return any(_go_equal(item, x) is True for x in items)


_decl("@in", False, (A, list_of(A)), BOOL, _in_list)
_decl("@in", False, (K, map_of(K, V)), BOOL, member_of)
# --- conversions -----------------------------------------------------------------------------


for _t in (INT, UINT, DOUBLE, STRING):
    _decl("int", False, (_t,), INT, conv.to_int)
    _decl("uint", False, (_t,), UINT, conv.to_uint)
    _decl("double", False, (_t,), DOUBLE, conv.to_double)
for _t in (INT, UINT, DOUBLE, STRING, BOOL, BYTES):
    _decl("string", False, (_t,), STRING, conv.to_string)
for _t in (STRING, BYTES):
    _decl("bytes", False, (_t,), BYTES, conv.to_bytes)
for _t in (BOOL, STRING):
    _decl("bool", False, (_t,), BOOL, conv.to_bool)
_decl("dyn", False, (A,), DYN, conv.identity)
_decl("type", False, (A,), TYPE, conv.type_of)
# --- size and standard string functions ------------------------------------------------------


for _t in (STRING, BYTES, list_of(A), map_of(K, V)):
    _both("size", (_t,), INT, strs.size)


_decl("contains", True, (STRING, STRING), BOOL, lambda s, x: x in s)
_decl("startsWith", True, (STRING, STRING), BOOL, lambda s, x: s.startswith(x))
_decl("endsWith", True, (STRING, STRING), BOOL, lambda s, x: s.endswith(x))
_both("matches", (STRING, STRING), BOOL, strs.matches)
_decl("find", True, (STRING, STRING), STRING, strs.find)
_decl("findAll", True, (STRING, STRING), list_of(STRING), strs.find_all)
_decl("findAll", True, (STRING, STRING, INT), list_of(STRING), strs.find_all)
# --- strings extension (version 2) -----------------------------------------------------------


_decl("charAt", True, (STRING, INT), STRING, strs.char_at)
_decl("indexOf", True, (STRING, STRING), INT, strs.index_of)
_decl("indexOf", True, (STRING, STRING, INT), INT, strs.index_of)
_decl("lastIndexOf", True, (STRING, STRING), INT, strs.last_index_of)
_decl("lastIndexOf", True, (STRING, STRING, INT), INT, strs.last_index_of)
_decl("lowerAscii", True, (STRING,), STRING, lambda s: strs.ascii_case(s, upper=False))
_decl("upperAscii", True, (STRING,), STRING, lambda s: strs.ascii_case(s, upper=True))
_decl("replace", True, (STRING, STRING, STRING), STRING, strs.replace)
_decl("replace", True, (STRING, STRING, STRING, INT), STRING, strs.replace)
_decl("split", True, (STRING, STRING), list_of(STRING), strs.split)
_decl("split", True, (STRING, STRING, INT), list_of(STRING), strs.split)
_decl("substring", True, (STRING, INT), STRING, strs.substring)
_decl("substring", True, (STRING, INT, INT), STRING, strs.substring)
_decl("trim", True, (STRING,), STRING, strs.trim)
_decl("join", True, (list_of(STRING),), STRING, strs.join)
_decl("join", True, (list_of(STRING), STRING), STRING, strs.join)
_decl("strings.quote", False, (STRING,), STRING, strs.quote)
_decl("format", True, (STRING, list_of(DYN)), STRING, format_string)
# --- Kubernetes lists library and sets extension ---------------------------------------------


# Declared per element type, as upstream: summable, and comparable for the others.
for _t in (INT, UINT, DOUBLE, DURATION):
    _decl("sum", True, (list_of(_t),), _t, k8s.list_sum)
for _t in SORTABLE:
    _decl("isSorted", True, (list_of(_t),), BOOL, k8s.is_sorted)
    _decl("min", True, (list_of(_t),), _t, lambda items: k8s.extreme(items, -1, "min"))
    _decl("max", True, (list_of(_t),), _t, lambda items: k8s.extreme(items, 1, "max"))
_decl("indexOf", True, (list_of(A), A), INT, k8s.list_index_of)
_decl("lastIndexOf", True, (list_of(A), A), INT, k8s.list_last_index_of)


_decl("sets.contains", False, (list_of(A), list_of(A)), BOOL, k8s.sets_contains)
_decl(
    "sets.equivalent",
    False,
    (list_of(A), list_of(A)),
    BOOL,
    lambda a, b: k8s.sets_contains(a, b) and k8s.sets_contains(b, a),
)
_decl("sets.intersects", False, (list_of(A), list_of(A)), BOOL, k8s.sets_intersects)


_decl("includes", True, (list_of(A), A), BOOL, k8s.includes)
_decl("includes", True, (A, A), BOOL, k8s.includes)


# --- cel-go lists extension (version 3) -------------------------------------------------------


_decl("slice", True, (list_of(A), INT, INT), list_of(A), lists.slice_list)
# flatten() takes a list of lists; with a depth any list (cel-go disables its type guards).
_decl("flatten", True, (list_of(list_of(A)),), list_of(A), lists.flatten)
_decl("flatten", True, (list_of(DYN), INT), list_of(DYN), lists.flatten)
_decl("distinct", True, (list_of(A),), list_of(A), lists.distinct)
_decl("reverse", True, (list_of(A),), list_of(A), lists.reverse)
_decl("lists.range", False, (INT,), list_of(INT), lists.list_range)
for _t in SORTABLE:
    _decl("sort", True, (list_of(_t),), list_of(_t), lists.sort_list)
    # What the sortBy macro expands to: the list, and its keys, one per element.
    _decl("@sortByAssociatedKeys", True, (list_of(A), list_of(_t)), list_of(A), lists.sort_by_keys)


# --- optional types --------------------------------------------------------------------------


def _opt_value(o: CelOptional) -> Any:
    if not o.present:
        raise EvalError("optional.none() dereference")
    return o.value


def _opt_of_non_zero(v: Any) -> CelOptional:
    zero = (
        v is None
        or (type(v) in (int, UInt, float, bool, str, bytes, list, tuple) and not v)
        or (isinstance(v, dict) and not v)
    )
    return CelOptional.NONE if zero else CelOptional(v)


_decl("optional.of", False, (A,), optional_of(A), CelOptional)
_decl("optional.ofNonZeroValue", False, (A,), optional_of(A), _opt_of_non_zero)
_decl("optional.none", False, (), optional_of(DYN), lambda: CelOptional.NONE)
_decl("value", True, (optional_of(A),), A, _opt_value)
_decl("hasValue", True, (optional_of(A),), BOOL, lambda o: o.present)
_decl("orValue", True, (optional_of(A), A), A, lambda o, v: o.value if o.present else v)
_decl("or", True, (optional_of(A), optional_of(A)), optional_of(A), lambda o, p: o if o.present else p)
# Optional types version 2 (cel-go ext optional library): a list's first and last element.
_decl("first", True, (list_of(A),), optional_of(A), lambda xs: CelOptional(xs[0]) if xs else CelOptional.NONE)
_decl("last", True, (list_of(A),), optional_of(A), lambda xs: CelOptional(xs[-1]) if xs else CelOptional.NONE)
# --- Kubernetes quantity library -------------------------------------------------------------


_decl("quantity", False, (STRING,), QUANTITY, k8s.quantity)
_decl("isQuantity", False, (STRING,), BOOL, k8s.is_quantity)
# Declared as a global function upstream (cel.Overload), so `q.sign()` does not type-check.
_decl("sign", False, (QUANTITY,), INT, lambda q: q.sign())
_decl("isInteger", True, (QUANTITY,), BOOL, lambda q: q.is_integer())
_decl("asInteger", True, (QUANTITY,), INT, k8s.quantity_as_integer)
_decl("asApproximateFloat", True, (QUANTITY,), DOUBLE, lambda q: q.as_approximate_float())
for _t in (QUANTITY, INT):
    _decl("add", True, (QUANTITY, _t), QUANTITY, lambda q, o: q.add(o))
    _decl("sub", True, (QUANTITY, _t), QUANTITY, lambda q, o: q.sub(o))
_decl("compareTo", True, (QUANTITY, QUANTITY), INT, k8s_functions.compare_to)
_decl("isGreaterThan", True, (QUANTITY, QUANTITY), BOOL, k8s_functions.is_greater_than)
_decl("isLessThan", True, (QUANTITY, QUANTITY), BOOL, k8s_functions.is_less_than)
# --- Kubernetes semver library ---------------------------------------------------------------


_decl("semver", False, (STRING,), SEMVER, k8s.semver)
_decl("semver", False, (STRING, BOOL), SEMVER, k8s.semver)
_decl("isSemver", False, (STRING,), BOOL, k8s.is_semver)
_decl("isSemver", False, (STRING, BOOL), BOOL, k8s.is_semver)
_decl("major", True, (SEMVER,), INT, lambda v: v.major)
_decl("minor", True, (SEMVER,), INT, lambda v: v.minor)
_decl("patch", True, (SEMVER,), INT, lambda v: v.patch)
_decl("compareTo", True, (SEMVER, SEMVER), INT, k8s_functions.compare_to)
_decl("isGreaterThan", True, (SEMVER, SEMVER), BOOL, k8s_functions.is_greater_than)
_decl("isLessThan", True, (SEMVER, SEMVER), BOOL, k8s_functions.is_less_than)

# --- Kubernetes IP, CIDR and URL libraries ---------------------------------------------------


_decl("ip", False, (STRING,), IP, net.ip)
_decl("isIP", False, (STRING,), BOOL, net.is_ip)
_decl("ip.isCanonical", False, (STRING,), BOOL, net.ip_is_canonical)
_decl("family", True, (IP,), INT, net.family)
for _name, _predicate in net.IP_PREDICATES.items():
    _decl(_name, True, (IP,), BOOL, _predicate)
_decl("cidr", False, (STRING,), CIDR, net.cidr)
_decl("isCIDR", False, (STRING,), BOOL, net.is_cidr)
for _t in (IP, STRING):
    _decl("containsIP", True, (CIDR, _t), BOOL, net.contains_ip)
for _t in (CIDR, STRING):
    _decl("containsCIDR", True, (CIDR, _t), BOOL, net.contains_cidr)
_decl("ip", True, (CIDR,), IP, net.cidr_ip)
_decl("masked", True, (CIDR,), CIDR, net.masked)
_decl("prefixLength", True, (CIDR,), INT, net.prefix_length)
_decl("string", False, (IP,), STRING, lambda v: str(v.address))
_decl("string", False, (CIDR,), STRING, lambda v: k8s_functions.prefix_text(v.prefix))
# --- Kubernetes format library ---------------------------------------------------------------


def _named_format(key: str) -> CelOptional:
    fmt = k8s_format.named(key)
    return CelOptional.NONE if fmt is None else CelOptional(fmt)


def _validate_format(fmt: k8s_format.Format, value: str) -> CelOptional:
    errors = k8s_format.validate(fmt, value)
    return CelOptional(errors) if errors else CelOptional.NONE


for _key in k8s_format.FORMATS:
    _decl(f"format.{_key}", False, (), FORMAT, functools.partial(k8s_format.named, _key))
_decl("format.named", False, (STRING,), optional_of(FORMAT), _named_format)
_decl("validate", True, (FORMAT, STRING), optional_of(list_of(STRING)), _validate_format)
_decl("url", False, (STRING,), URL, net.url)
_decl("isURL", False, (STRING,), BOOL, net.is_url)
for _name, _getter in net.URL_STRING_GETTERS.items():
    _decl(_name, True, (URL,), STRING, _getter)
_decl("getQuery", True, (URL,), map_of(STRING, list_of(STRING)), net.get_query)

# --- timestamps and durations ----------------------------------------------------------------


def _ordering(fn: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    return lambda a, b: fn(a.nanos, b.nanos)


for _op, _fn in (("_<_", less), ("_<=_", less_eq), ("_>_", greater), ("_>=_", greater_eq)):
    for _t in (TIMESTAMP, DURATION):
        _decl(_op, False, (_t, _t), BOOL, _ordering(_fn))
_decl("_+_", False, (DURATION, DURATION), DURATION, cel_time.add)
_decl("_+_", False, (TIMESTAMP, DURATION), TIMESTAMP, cel_time.add)
_decl("_+_", False, (DURATION, TIMESTAMP), TIMESTAMP, cel_time.add)
_decl("_-_", False, (DURATION, DURATION), DURATION, cel_time.sub)
_decl("_-_", False, (TIMESTAMP, DURATION), TIMESTAMP, cel_time.sub)
_decl("_-_", False, (TIMESTAMP, TIMESTAMP), DURATION, cel_time.sub)
for _t in (STRING, DURATION):
    _decl("duration", False, (_t,), DURATION, cel_time.to_duration)
for _t in (STRING, INT, TIMESTAMP):
    _decl("timestamp", False, (_t,), TIMESTAMP, cel_time.to_timestamp)
_decl("string", False, (TIMESTAMP,), STRING, cel_time.format_timestamp)
_decl("string", False, (DURATION,), STRING, cel_time.format_duration)
_decl("int", False, (TIMESTAMP,), INT, cel_time.timestamp_to_int)
for _name, _getter in cel_time.TIMESTAMP_GETTERS.items():
    _decl(_name, True, (TIMESTAMP,), INT, _getter)
    _decl(_name, True, (TIMESTAMP, STRING), INT, _getter)
for _name, _getter in cel_time.DURATION_GETTERS.items():
    _decl(_name, True, (DURATION,), INT, _getter)

# Names that are types when used as plain identifiers (``type(x) == int``).
TYPE_IDENTS = frozenset({INT, UINT, DOUBLE, BOOL, STRING, BYTES, NULL, "list", "map", TYPE, "optional_type"})
# Qualified type names that are type values: the well-known protobuf types, and the library
# types Kubernetes registers with cel.Types.
QUALIFIED_TYPE_IDENTS = frozenset({IP, CIDR, TIMESTAMP, DURATION})
# Enum values cel-go's standard environment knows (google/protobuf/struct.proto's NullValue is
# the only enum among the well-known types it declares); the checker makes each an int constant.
ENUM_CONSTANTS: Mapping[str, int] = MappingProxyType({"google.protobuf.NullValue.NULL_VALUE": 0})

# The table, read-only from here on: a constant of the code (every implementation is a
# deterministic function), shared by every python engine like the functions themselves.
FUNCTIONS: Mapping[tuple[str, bool], tuple[Overload, ...]] = MappingProxyType(
    {key: tuple(overloads) for key, overloads in _DECLARED.items()}
)
