"""Function declarations (static signatures) and implementations of the DRA CEL environment.

One table serves both the checker, which resolves overloads from static types, and the
evaluator, which calls the implementation (dispatching at run time only where ``dyn``
leaves more than one overload possible). Names shared by several libraries (``indexOf`` for
strings and lists, ``compareTo`` for quantities and semvers) are simply several overloads.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import re2

from extender.cel import engine_py_time as cel_time
from extender.cel import k8s_functions
from extender.cel.engine_py_types import (
    BOOL,
    BYTES,
    DOUBLE,
    DURATION,
    DYN,
    INT,
    NULL,
    QUANTITY,
    SEMVER,
    STRING,
    TIMESTAMP,
    TYPE,
    UINT,
    A,
    K,
    Type,
    V,
    list_of,
    map_of,
    optional_of,
)
from extender.cel.engine_py_values import (
    INT_MAX,
    INT_MIN,
    MAX_STRING_SIZE,
    UINT_MAX,
    CelOptional,
    CelType,
    Duration,
    EvalError,
    Timestamp,
    UInt,
    add,
    cel_compare,
    cel_equal,
    check_int,
    check_size,
    div,
    greater,
    greater_eq,
    less,
    less_eq,
    logical_not,
    member_of,
    mod,
    mul,
    negate,
    sub,
    type_name,
)
from extender.cel.quantity import Quantity
from extender.cel.semver import Semver

INCLUDES_MAX_LIST = 48
SET_PAIRS_LIMIT = 1_000_000


@dataclass(frozen=True, slots=True)
class Overload:
    params: tuple[Type, ...]  # the receiver first for member functions
    result: Type
    impl: Callable[..., Any]


# (name, is_member) -> overloads
FUNCTIONS: dict[tuple[str, bool], list[Overload]] = {}

# Type conversions: cel-go folds them over constant arguments when the program is built, so
# a failing constant conversion is a compile error.
CONVERSIONS = frozenset(
    {"int", "uint", "double", "string", "bytes", "bool", "dyn", "type", "duration", "timestamp"}
)

# Functions whose argument at this position, when constant, is a regex compiled up front.
REGEX_ARG = {"matches": 1, "find": 1, "findAll": 1}

# Everything here is deterministic, so a call over constants may be evaluated at compile time.
NOT_SUPPORTED = (k8s_functions.ALL | {"format"}) - {"includes"}


def unsupported_message(name: str) -> str:
    return k8s_functions.unsupported_message(name)


def _decl(name: str, member: bool, params: tuple[Type, ...], result: Type, impl: Callable[..., Any]) -> None:
    FUNCTIONS.setdefault((name, member), []).append(Overload(params, result, impl))


def _both(name: str, params: tuple[Type, ...], result: Type, impl: Callable[..., Any]) -> None:
    """Declare ``name`` callable both as ``f(x, ...)`` and ``x.f(...)``."""
    _decl(name, False, params, result, impl)
    _decl(name, True, params, result, impl)


# --- operators -------------------------------------------------------------------------------

_NUMERIC = (INT, UINT, DOUBLE)

for _op, _fn in (("_<_", less), ("_<=_", less_eq), ("_>_", greater), ("_>=_", greater_eq)):
    for _l in _NUMERIC:
        for _r in _NUMERIC:
            _decl(_op, False, (_l, _r), BOOL, _fn)
    for _t in (STRING, BYTES, BOOL):
        _decl(_op, False, (_t, _t), BOOL, _fn)


def _not_equal(a: Any, b: Any) -> bool:
    return not cel_equal(a, b)


_decl("_==_", False, (A, A), BOOL, cel_equal)
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
_decl("@in", False, (A, list_of(A)), BOOL, member_of)
_decl("@in", False, (K, map_of(K, V)), BOOL, member_of)


# --- conversions -----------------------------------------------------------------------------


# strconv.ParseInt/ParseUint in base 10: no spaces, no underscores, no sign for unsigned.
_GO_INT = re.compile(r"[+-]?[0-9]+")
_GO_UINT = re.compile(r"[0-9]+")
_GO_FLOAT = re.compile(r"[+-]?(?:(?i:inf|infinity|nan)|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)")


def _to_int(v: Any) -> int:
    t = type(v)
    if t is int or t is UInt:
        return check_int(int(v))
    if t is float:
        if math.isnan(v) or math.isinf(v) or not (-(2.0**63) <= v < 2.0**63):
            raise EvalError(f"range error converting {_fmt_double(v)} to int")
        return int(v)
    if t is str:
        if not _GO_INT.fullmatch(v):
            raise EvalError(f'strconv.ParseInt: parsing "{v}": invalid syntax')
        parsed = int(v, 10)
        if parsed < INT_MIN or parsed > INT_MAX:
            raise EvalError(f'strconv.ParseInt: parsing "{v}": value out of range')
        return parsed
    raise EvalError(f"no such overload: int({type_name(v)})")


def _to_uint(v: Any) -> UInt:
    t = type(v)
    if t is int or t is UInt:
        if v < 0 or v > UINT_MAX:
            raise EvalError(f"range error converting {v} to uint")
        return UInt(v)
    if t is float:
        if math.isnan(v) or not (0.0 <= v < 2.0**64):
            raise EvalError(f"range error converting {_fmt_double(v)} to uint")
        return UInt(int(v))
    if t is str:
        if not _GO_UINT.fullmatch(v):
            raise EvalError(f'strconv.ParseUint: parsing "{v}": invalid syntax')
        parsed = int(v, 10)
        if parsed > UINT_MAX:
            raise EvalError(f'strconv.ParseUint: parsing "{v}": value out of range')
        return UInt(parsed)
    raise EvalError(f"no such overload: uint({type_name(v)})")


def _to_double(v: Any) -> float:
    t = type(v)
    if t is float:
        return v
    if t is int or t is UInt:
        return float(v)
    if t is str:
        if not _GO_FLOAT.fullmatch(v):
            raise EvalError(f'strconv.ParseFloat: parsing "{v}": invalid syntax')
        return float(v)
    raise EvalError(f"no such overload: double({type_name(v)})")


def _fmt_double(v: float) -> str:
    """Go's ``strconv.FormatFloat(v, 'g', -1, 64)``, which cel-go uses for ``string(double)``."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == 0:
        return "-0" if math.copysign(1.0, v) < 0 else "0"
    _, digit_tuple, exponent = Decimal(repr(v)).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    sign = "-" if v < 0 else ""
    point = len(digits) + int(exponent)  # digits before the decimal point
    x = point - 1
    if x < -4 or x >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'+' if x >= 0 else '-'}{abs(x):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _to_string(v: Any) -> str:
    t = type(v)
    if t is str:
        return v
    if t is bool:
        return "true" if v else "false"
    if t is int or t is UInt:
        return str(int(v))
    if t is float:
        return _fmt_double(v)
    if t is bytes:
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            raise EvalError("invalid UTF-8 in bytes, cannot convert to string") from None
    raise EvalError(f"no such overload: string({type_name(v)})")


def _to_bytes(v: Any) -> bytes:
    if type(v) is bytes:
        return v
    if type(v) is str:
        return v.encode("utf-8")
    raise EvalError(f"no such overload: bytes({type_name(v)})")


_BOOL_STRINGS = {
    "1": True,
    "t": True,
    "T": True,
    "true": True,
    "TRUE": True,
    "True": True,
    "0": False,
    "f": False,
    "F": False,
    "false": False,
    "FALSE": False,
    "False": False,
}


def _to_bool(v: Any) -> bool:
    if type(v) is bool:
        return v
    if type(v) is str:
        if v in _BOOL_STRINGS:
            return _BOOL_STRINGS[v]
        raise EvalError(f"type conversion error from 'string' to 'bool': {v!r}")
    raise EvalError(f"no such overload: bool({type_name(v)})")


def _identity(v: Any) -> Any:
    return v


def _type_of(v: Any) -> CelType:
    return CelType(type_name(v))


for _t in (INT, UINT, DOUBLE, STRING):
    _decl("int", False, (_t,), INT, _to_int)
    _decl("uint", False, (_t,), UINT, _to_uint)
    _decl("double", False, (_t,), DOUBLE, _to_double)
for _t in (INT, UINT, DOUBLE, STRING, BOOL, BYTES):
    _decl("string", False, (_t,), STRING, _to_string)
for _t in (STRING, BYTES):
    _decl("bytes", False, (_t,), BYTES, _to_bytes)
for _t in (BOOL, STRING):
    _decl("bool", False, (_t,), BOOL, _to_bool)
_decl("dyn", False, (A,), DYN, _identity)
_decl("type", False, (A,), TYPE, _type_of)


# --- size and standard string functions ------------------------------------------------------


def _size(v: Any) -> int:
    t = type(v)
    if t is str or t is bytes or t is list or t is tuple or isinstance(v, dict):
        return len(v)
    raise EvalError(f"no such overload: size({type_name(v)})")


for _t in (STRING, BYTES, list_of(A), map_of(K, V)):
    _both("size", (_t,), INT, _size)


def compile_regex(pattern: str) -> Any:
    try:
        return re2.compile(pattern)
    except re2.error as e:
        msg = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
        raise EvalError(f"invalid regex {pattern!r}: {msg}") from None


_REGEX_CACHE: dict[str, Any] = {}


def _regex(pattern: str) -> Any:
    compiled = _REGEX_CACHE.get(pattern)
    if compiled is None:
        if len(_REGEX_CACHE) > 1024:
            _REGEX_CACHE.clear()
        compiled = _REGEX_CACHE[pattern] = compile_regex(pattern)
    return compiled


def _matches(s: str, pattern: str) -> bool:
    return _regex(pattern).search(s) is not None


def _find(s: str, pattern: str) -> str:
    m = _regex(pattern).search(s)
    return m.group(0) if m else ""


def _find_all(s: str, pattern: str, limit: int = -1) -> list[str]:
    """Go's ``FindAllString``: an empty match right after the previous match is skipped."""
    regex = _regex(pattern)
    out: list[str] = []
    pos, previous_end = 0, -1
    while pos <= len(s) and len(out) != limit:
        m = regex.search(s, pos)
        if m is None:
            break
        start, end = m.span()
        accept = True
        if end == start:
            accept = start != previous_end
            pos = end + 1
        else:
            pos = end
        previous_end = end
        if accept:
            out.append(m.group(0))
    return out


_decl("contains", True, (STRING, STRING), BOOL, lambda s, x: x in s)
_decl("startsWith", True, (STRING, STRING), BOOL, lambda s, x: s.startswith(x))
_decl("endsWith", True, (STRING, STRING), BOOL, lambda s, x: s.endswith(x))
_both("matches", (STRING, STRING), BOOL, _matches)
_decl("find", True, (STRING, STRING), STRING, _find)
_decl("findAll", True, (STRING, STRING), list_of(STRING), _find_all)
_decl("findAll", True, (STRING, STRING, INT), list_of(STRING), _find_all)


# --- strings extension (version 2) -----------------------------------------------------------


def _range_error(i: int) -> EvalError:
    return EvalError(f"index out of range: {i}")


def _char_at(s: str, i: int) -> str:
    if i < 0 or i > len(s):
        raise _range_error(i)
    return s[i : i + 1]


def _index_of(s: str, sub_: str, offset: int = 0) -> int:
    if sub_ == "":
        return offset
    if offset < 0 or offset >= len(s):
        raise _range_error(offset)
    return s.find(sub_, offset)


def _last_index_of(s: str, sub_: str, offset: int | None = None) -> int:
    if sub_ == "":
        return len(s) if offset is None else offset
    if offset is None:
        return s.rfind(sub_)
    if offset < 0 or offset >= len(s):
        raise _range_error(offset)
    return s.rfind(sub_, 0, offset + len(sub_))


def _ascii_case(s: str, upper: bool) -> str:
    table = _UPPER if upper else _LOWER
    return s.translate(table)


_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}
_UPPER = {c: c - 32 for c in range(ord("a"), ord("z") + 1)}


def _replace(s: str, old: str, new: str, n: int = -1) -> str:
    count = s.count(old) if old else len(s) + 1
    if n >= 0:
        count = min(count, n)
    if len(s) + count * (len(new) - len(old)) > MAX_STRING_SIZE:
        raise EvalError("operation cancelled: actual cost limit exceeded")
    return s.replace(old, new, n if n >= 0 else -1)


def _split(s: str, sep: str, n: int = -1) -> list[str]:
    if n == 0:
        return []
    if sep == "":
        chars = list(s)
        if 0 < n < len(chars):
            return [*chars[: n - 1], "".join(chars[n - 1 :])]
        return chars
    return s.split(sep, n - 1 if n > 0 else -1)


def _substring(s: str, start: int, end: int | None = None) -> str:
    if end is None:
        end = len(s)
    elif start > end:
        raise EvalError(f"invalid substring range. start: {start}, end: {end}")
    if start < 0 or start > len(s):
        raise _range_error(start)
    if end < 0 or end > len(s):
        raise _range_error(end)
    return s[start:end]


# Go's unicode.IsSpace; Python's str.isspace also counts the separators U+001C..U+001F.
_NOT_GO_SPACE = frozenset("\x1c\x1d\x1e\x1f")


def _trim(s: str) -> str:
    start, end = 0, len(s)
    while start < end and s[start].isspace() and s[start] not in _NOT_GO_SPACE:
        start += 1
    while end > start and s[end - 1].isspace() and s[end - 1] not in _NOT_GO_SPACE:
        end -= 1
    return s[start:end]


def _join(items: Any, sep: str = "") -> str:
    for x in items:
        if type(x) is not str:
            raise EvalError(f"join: list element is {type_name(x)}, not string")
    return check_size(sep.join(items))


_QUOTE_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def _quote(s: str) -> str:
    return '"' + "".join(_QUOTE_ESCAPES.get(c, c) for c in s) + '"'


_decl("charAt", True, (STRING, INT), STRING, _char_at)
_decl("indexOf", True, (STRING, STRING), INT, _index_of)
_decl("indexOf", True, (STRING, STRING, INT), INT, _index_of)
_decl("lastIndexOf", True, (STRING, STRING), INT, _last_index_of)
_decl("lastIndexOf", True, (STRING, STRING, INT), INT, _last_index_of)
_decl("lowerAscii", True, (STRING,), STRING, lambda s: _ascii_case(s, upper=False))
_decl("upperAscii", True, (STRING,), STRING, lambda s: _ascii_case(s, upper=True))
_decl("replace", True, (STRING, STRING, STRING), STRING, _replace)
_decl("replace", True, (STRING, STRING, STRING, INT), STRING, _replace)
_decl("split", True, (STRING, STRING), list_of(STRING), _split)
_decl("split", True, (STRING, STRING, INT), list_of(STRING), _split)
_decl("substring", True, (STRING, INT), STRING, _substring)
_decl("substring", True, (STRING, INT, INT), STRING, _substring)
_decl("trim", True, (STRING,), STRING, _trim)
_decl("join", True, (list_of(STRING),), STRING, _join)
_decl("join", True, (list_of(STRING), STRING), STRING, _join)
_decl("strings.quote", False, (STRING,), STRING, _quote)


# --- Kubernetes lists library and sets extension ---------------------------------------------


def _is_sorted(items: Any) -> bool:
    return all(cel_compare(items[i], items[i + 1]) <= 0 for i in range(len(items) - 1))


def _sum(items: Any) -> Any:
    if not items:
        return 0
    total = items[0]
    adder = cel_time.add if type(total) is Duration else add
    for x in items[1:]:
        total = adder(total, x)
    if type(total) not in (int, UInt, float, Duration):
        raise EvalError(f"no such overload: sum(list({type_name(total)}))")
    return total


def _extreme(items: Any, want: int, name: str) -> Any:
    if not items:
        raise EvalError(f"{name} called on empty list")
    best = items[0]
    for x in items[1:]:
        if cel_compare(x, best) == want:
            best = x
    if type(best) not in (int, UInt, float, str, bytes, bool, Duration, Timestamp):
        raise EvalError(f"no such overload: {name}(list({type_name(best)}))")
    return best


def _list_index_of(items: Any, x: Any) -> int:
    for i, y in enumerate(items):
        if cel_equal(x, y):
            return i
    return -1


def _list_last_index_of(items: Any, x: Any) -> int:
    for i in range(len(items) - 1, -1, -1):
        if cel_equal(x, items[i]):
            return i
    return -1


_decl("isSorted", True, (list_of(A),), BOOL, _is_sorted)
for _t in (INT, UINT, DOUBLE, DURATION):
    _decl("sum", True, (list_of(_t),), _t, _sum)
_decl("min", True, (list_of(A),), A, lambda items: _extreme(items, -1, "min"))
_decl("max", True, (list_of(A),), A, lambda items: _extreme(items, 1, "max"))
_decl("indexOf", True, (list_of(A), A), INT, _list_index_of)
_decl("lastIndexOf", True, (list_of(A), A), INT, _list_last_index_of)


def _pairwise_budget(a: Any, b: Any) -> None:
    """Kubernetes charges set operations per element pair; an over-budget pair of lists would
    take seconds here, so it fails up front the way it fails there."""
    if len(a) * len(b) > SET_PAIRS_LIMIT:
        raise EvalError("operation cancelled: actual cost limit exceeded")


def _sets_contains(a: Any, b: Any) -> bool:
    _pairwise_budget(a, b)
    return all(member_of(x, a) for x in b)


def _sets_intersects(a: Any, b: Any) -> bool:
    _pairwise_budget(a, b)
    return any(member_of(x, a) for x in b)


_decl("sets.contains", False, (list_of(A), list_of(A)), BOOL, _sets_contains)
_decl(
    "sets.equivalent",
    False,
    (list_of(A), list_of(A)),
    BOOL,
    lambda a, b: _sets_contains(a, b) and _sets_contains(b, a),
)
_decl("sets.intersects", False, (list_of(A), list_of(A)), BOOL, _sets_intersects)


def _includes(target: Any, item: Any) -> bool:
    if type(target) is list or type(target) is tuple:
        if len(target) > INCLUDES_MAX_LIST:
            raise EvalError(f"includes: list has {len(target)} elements, more than {INCLUDES_MAX_LIST}")
        return any(cel_equal(x, item) for x in target)
    return cel_equal(target, item)


_decl("includes", True, (list_of(A), A), BOOL, _includes)
_decl("includes", True, (A, A), BOOL, _includes)


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


# --- Kubernetes quantity library -------------------------------------------------------------


def _quantity(s: str) -> Quantity:
    try:
        return Quantity.parse(s)
    except ValueError as e:
        raise EvalError(str(e)) from None


def _is_quantity(s: str) -> bool:
    try:
        Quantity.parse(s)
    except ValueError:
        return False
    return True


def _q_as_integer(q: Quantity) -> int:
    try:
        return q.as_int()
    except ValueError as e:
        raise EvalError(str(e)) from None


_decl("quantity", False, (STRING,), QUANTITY, _quantity)
_decl("isQuantity", False, (STRING,), BOOL, _is_quantity)
_decl("sign", True, (QUANTITY,), INT, lambda q: q.sign())
_decl("isInteger", True, (QUANTITY,), BOOL, lambda q: q.is_integer())
_decl("asInteger", True, (QUANTITY,), INT, _q_as_integer)
_decl("asApproximateFloat", True, (QUANTITY,), DOUBLE, lambda q: q.as_approximate_float())
for _t in (QUANTITY, INT):
    _decl("add", True, (QUANTITY, _t), QUANTITY, lambda q, o: q.add(o))
    _decl("sub", True, (QUANTITY, _t), QUANTITY, lambda q, o: q.sub(o))
_decl("compareTo", True, (QUANTITY, QUANTITY), INT, lambda a, b: a.compare(b))
_decl("isGreaterThan", True, (QUANTITY, QUANTITY), BOOL, lambda a, b: a.compare(b) > 0)
_decl("isLessThan", True, (QUANTITY, QUANTITY), BOOL, lambda a, b: a.compare(b) < 0)


# --- Kubernetes semver library ---------------------------------------------------------------


def _semver(s: str, normalize: bool = False) -> Semver:
    try:
        return Semver.parse(s, normalize=normalize)
    except ValueError as e:
        raise EvalError(f"could not parse {s!r} as semver: {e}") from None


def _is_semver(s: str, normalize: bool = False) -> bool:
    try:
        Semver.parse(s, normalize=normalize)
    except ValueError:
        return False
    return True


_decl("semver", False, (STRING,), SEMVER, _semver)
_decl("semver", False, (STRING, BOOL), SEMVER, _semver)
_decl("isSemver", False, (STRING,), BOOL, _is_semver)
_decl("isSemver", False, (STRING, BOOL), BOOL, _is_semver)
_decl("major", True, (SEMVER,), INT, lambda v: v.major)
_decl("minor", True, (SEMVER,), INT, lambda v: v.minor)
_decl("patch", True, (SEMVER,), INT, lambda v: v.patch)
_decl("compareTo", True, (SEMVER, SEMVER), INT, lambda a, b: a.compare(b))
_decl("isGreaterThan", True, (SEMVER, SEMVER), BOOL, lambda a, b: a.compare(b) > 0)
_decl("isLessThan", True, (SEMVER, SEMVER), BOOL, lambda a, b: a.compare(b) < 0)

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
TYPE_IDENTS = frozenset({INT, UINT, DOUBLE, BOOL, STRING, BYTES, NULL, "list", "map", TYPE})
