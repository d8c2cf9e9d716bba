"""Kubernetes' CEL libraries declared to the C++ runtime, bound to Python implementations.

Functions of one name and argument kinds share one Python implementation (a C++ registry limit).
"""

from __future__ import annotations

import datetime
import ipaddress
import itertools
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from cel_expr_python import cel
from google.protobuf import duration_pb2, timestamp_pb2

from extender.cel.cpp.equality import cel_in, relation_equal, relation_not_equal
from extender.cel.cpp.formatting import format_values
from extender.cel.cpp.types import (
    CALL_ALIASES,
    CIDRT,
    CONFIG_YAML,
    GLOBAL_ALIASES,
    INT64_MAX,
    INT64_MIN,
    IPT,
    KEY_FIELD,
    QT,
    ST,
    STRING_ALIAS,
    URLT,
    CIDRMsg,
    IPMsg,
    QuantityMsg,
    SemverMsg,
    T,
    URLMsg,
    status_text,
)
from extender.cel.cpp.values import QuantityMessages, as_semver, semver_message
from extender.cel.runtime import k8s_functions as lib
from extender.cel.runtime.conversions import format_double, to_bool, to_double, to_int, to_uint
from extender.cel.runtime.semver import Semver
from extender.cel.runtime.timestamps import time_zone
from extender.cel.runtime.values import EvalError
from extender.model.quantity import Quantity

# --- Kubernetes library functions ---------------------------------------------------------


def _is_quantity(v: Any) -> bool:
    return isinstance(v, QuantityMsg)


def _quantity(quantities: QuantityMessages) -> Callable[[str], Any]:
    return lambda s: quantities.message(_parse_quantity(s))


# A pure function of a string whose answer (a Quantity) is never changed, bounded by
# least-recent eviction: shared by every engine.
@lru_cache(maxsize=4096)
def _parse_quantity(s: str) -> Quantity:
    """Selectors repeat the same literals (``quantity("40Gi")``) on every device."""
    return Quantity.parse(s)


def _is_quantity_string(s: str) -> bool:
    try:
        Quantity.parse(s)
    except ValueError:
        return False
    return True


def _semver(s: str, normalize: bool = False) -> Any:
    return semver_message(Semver.parse(s, normalize=normalize))


def _is_semver_string(s: str, normalize: bool = False) -> bool:
    try:
        Semver.parse(s, normalize=normalize)
    except ValueError:
        return False
    return True


def _arith(op: str, quantities: QuantityMessages) -> Callable[[Any, Any], Any]:
    def impl(target: Any, other: Any) -> Any:
        q = quantities.quantity(target)
        # An int operand goes in as is: Quantity gives it upstream's representation.
        rhs = quantities.quantity(other) if _is_quantity(other) else other
        return quantities.message(q.add(rhs) if op == "add" else q.sub(rhs))

    return impl


def _native(value: Any, quantities: QuantityMessages) -> Quantity | Semver:
    """A quantity or semver message as its runtime value. The C++ registry keys overloads by
    argument kind, and both types are messages: one implementation of each order function serves
    both (the checker has made sure both arguments are of one type)."""
    return quantities.quantity(value) if _is_quantity(value) else as_semver(value)


def _ordering(order: Callable[[Any, Any], Any], quantities: QuantityMessages) -> Callable[[Any, Any], Any]:
    """An order function of the quantity and semver libraries over the messages the runtime passes."""

    def impl(target: Any, other: Any) -> Any:
        return order(_native(target, quantities), _native(other, quantities))

    return impl


def _as_integer(target: Any, quantities: QuantityMessages) -> int:
    q = quantities.quantity(target)
    if not q.is_integer():
        raise ValueError("cannot convert value to integer")
    value = q.as_int()
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError("cannot convert value to integer")
    return value


def _semver_part(part: str) -> Callable[[Any], int]:
    def impl(target: Any) -> int:
        return int(getattr(as_semver(target), part))

    return impl


def _dyn_result(fn: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
    """A dyn result goes back to the runtime by its Python type, which has no case for
    durations and timestamps; their well-known messages are unwrapped into them."""

    def impl(items: list[Any]) -> Any:
        result = fn(items)
        if isinstance(result, datetime.timedelta):
            message = duration_pb2.Duration()
            message.FromTimedelta(result)
            return message
        if isinstance(result, datetime.datetime):
            message = timestamp_pb2.Timestamp()
            message.FromDatetime(result)
            return message
        return result

    return impl


def _map_of_pairs(pairs: list[list[Any]]) -> dict[Any, Any]:
    return {key: value for key, value in pairs}


def _map_of_entries(entries: list[dict[Any, Any]]) -> dict[Any, Any]:
    merged: dict[Any, Any] = {}
    for entry in entries:
        for key, value in entry.items():
            if key in merged:
                raise ValueError(f"insert failed: key {key} already exists")
            merged[key] = value
    return merged


@dataclass(frozen=True)
class _Decl:
    name: str
    overload_id: str
    result: Any
    params: tuple[Any, ...]
    member: bool
    impl: Callable[..., Any]


_INCLUDES_TARGETS = (
    ("list", T.List(T.DYN)),
    ("int", T.INT),
    ("uint", T.UINT),
    ("double", T.DOUBLE),
    ("string", T.STRING),
    ("bool", T.BOOL),
    ("semver", ST),
)
_INCLUDES_ARGS = (
    ("int", T.INT),
    ("uint", T.UINT),
    ("double", T.DOUBLE),
    ("string", T.STRING),
    ("bool", T.BOOL),
    ("semver", ST),
    ("quantity", QT),
)


# Functions that only type-check: an operand passed to one is a quantity, a list of them or a
# map to them exactly when it fits the quantity probe of its kind but not the int one (which a
# dyn operand would also fit). Name, result type (kept, so the rest still checks), parameter.
PROBES = (
    ("k8sdra_quantity_probe", QT, QT),
    ("k8sdra_int_probe", QT, T.INT),
    ("k8sdra_quantities_probe", T.List(QT), T.List(QT)),
    ("k8sdra_ints_probe", T.List(QT), T.List(T.INT)),
    ("k8sdra_quantity_map_probe", T.Map(T.DYN, QT), T.Map(T.DYN, QT)),
    ("k8sdra_int_map_probe", T.Map(T.DYN, QT), T.Map(T.DYN, T.INT)),
)


def _declarations(quantities: QuantityMessages) -> Iterator[_Decl]:
    of = quantities.quantity
    yield _Decl("quantity", "quantity_string", QT, (T.STRING,), False, _quantity(quantities))
    yield _Decl("isQuantity", "isQuantity_string", T.BOOL, (T.STRING,), False, _is_quantity_string)
    # Global upstream (cel.Overload, not MemberOverload): `q.sign()` does not type-check.
    yield _Decl("sign", "quantity_sign", T.INT, (QT,), False, lambda q: of(q).sign())
    yield _Decl("isInteger", "quantity_isInteger", T.BOOL, (QT,), True, lambda q: of(q).is_integer())
    yield _Decl("asInteger", "quantity_asInteger", T.INT, (QT,), True, lambda q: _as_integer(q, quantities))
    yield _Decl(
        "asApproximateFloat",
        "quantity_asApproximateFloat",
        T.DOUBLE,
        (QT,),
        True,
        lambda q: of(q).as_approximate_float(),
    )
    for op in ("add", "sub"):
        yield _Decl(op, f"quantity_{op}", QT, (QT, QT), True, _arith(op, quantities))
        yield _Decl(op, f"quantity_{op}_int", QT, (QT, T.INT), True, _arith(op, quantities))
    yield _Decl("semver", "semver_string", ST, (T.STRING,), False, _semver)
    yield _Decl("semver", "semver_string_bool", ST, (T.STRING, T.BOOL), False, _semver)
    yield _Decl("isSemver", "isSemver_string", T.BOOL, (T.STRING,), False, _is_semver_string)
    yield _Decl("isSemver", "isSemver_string_bool", T.BOOL, (T.STRING, T.BOOL), False, _is_semver_string)
    for part in ("major", "minor", "patch"):
        yield _Decl(part, f"semver_{part}", T.INT, (ST,), True, _semver_part(part))
    for kind, typ in (("quantity", QT), ("semver", ST)):
        for name, order, result in (
            ("compareTo", lib.compare_to, T.INT),
            ("isGreaterThan", lib.is_greater_than, T.BOOL),
            ("isLessThan", lib.is_less_than, T.BOOL),
        ):
            yield _Decl(name, f"{kind}_{name}", result, (typ, typ), True, _ordering(order, quantities))
    for target_name, target in _INCLUDES_TARGETS:
        # Upstream's includes takes any argument (list_includes_dyn_dyn): a value of another
        # kind is simply not found.
        for arg_name, arg in (*_INCLUDES_ARGS, *_SEARCH_ONLY_ARGS):
            yield _Decl(
                "includes", f"{target_name}_includes_{arg_name}", T.BOOL, (target, arg), True, lib.includes
            )
    # Result types vary with the element type, yet overloads on list(int), list(double), ...
    # collide in the C++ checker, so these are declared on list(dyn) and return dyn.
    yield _Decl("sum", "list_sum", T.DYN, (T.List(T.DYN),), True, _dyn_result(lib.list_sum))
    yield _Decl("min", "list_min", T.DYN, (T.List(T.DYN),), True, _dyn_result(lib.list_min))
    yield _Decl("max", "list_max", T.DYN, (T.List(T.DYN),), True, _dyn_result(lib.list_max))
    yield _Decl("isSorted", "list_isSorted", T.BOOL, (T.List(T.DYN),), True, lib.list_is_sorted)
    # Internal: equality with quantities by value, and the probes finding where it is needed.
    yield _Decl(
        "k8sdra_equal", "k8sdra_equal", T.BOOL, (T.List(T.DYN),), True,
        lambda ab: relation_equal(ab[0], ab[1], quantities),
    )
    yield _Decl(
        "k8sdra_not_equal", "k8sdra_not_equal", T.BOOL, (T.List(T.DYN),), True,
        lambda ab: relation_not_equal(ab[0], ab[1], quantities),
    )
    yield _Decl("k8sdra_no_such_overload", "k8sdra_no_such_overload", T.BOOL, (), False, _no_such_overload)
    yield _Decl(UNHASHABLE, UNHASHABLE, T.BOOL, (T.List(T.DYN),), False, _unhashable)
    yield _Decl(
        "k8sdra_in", "k8sdra_in", T.BOOL, (T.List(T.DYN),), True, lambda ab: cel_in(ab[0], ab[1], quantities)
    )
    for probe, result, param in PROBES:
        yield _Decl(probe, probe, result, (param,), False, lambda v: v)
    yield _Decl("k8sdra_pairs", "k8sdra_pairs", T.Map(T.DYN, T.DYN), (T.List(T.DYN),), True, _map_of_pairs)
    yield _Decl(
        "k8sdra_entries", "k8sdra_entries", T.Map(T.DYN, T.DYN), (T.List(T.DYN),), True, _map_of_entries
    )
    yield _Decl("find", "string_find", T.STRING, (T.STRING, T.STRING), True, lib.regex_find)
    yield _Decl("findAll", "string_findAll", T.List(T.STRING), (T.STRING, T.STRING), True, lib.regex_find_all)
    yield _Decl(
        "findAll",
        "string_findAll_int",
        T.List(T.STRING),
        (T.STRING, T.STRING, T.INT),
        True,
        lib.regex_find_all,
    )


class _StringSearch:
    """The strings extension's own indexOf/lastIndexOf, for the aliases that replace them (see
    CALL_ALIASES), run in a small C++ environment built on first use.

    One per engine (``function_decls`` makes it), so like the engine's own environment it is
    only used under that engine's lock; its programs are never invalidated (they are fixed).
    """

    def __init__(self) -> None:
        self._env: Any = None
        self._programs: dict[tuple[str, bool], Any] = {}

    def function(self, name: str) -> Callable[..., int]:
        def impl(s: str, sub: str, offset: int | None = None) -> int:
            # cel-go (ext/strings.go, released versions) finds nothing past the end; the
            # C++ runtime calls that out of range.
            if offset is not None and sub and offset >= len(s):
                return -1
            program = self._program(name, offset is not None)
            result = program.eval(data={"s": s, "sub": sub, "off": offset or 0})
            if result.type() == T.ERROR:
                raise ValueError(status_text(str(result.value())))
            return int(result.value())

        return impl

    def _program(self, name: str, with_offset: bool) -> Any:
        program = self._programs.get((name, with_offset))
        if program is None:
            if self._env is None:
                self._env = cel.NewEnv(
                    config=cel.NewEnvConfigFromYaml(CONFIG_YAML),
                    variables={"s": T.STRING, "sub": T.STRING, "off": T.INT},
                )
            source = f"s.{name}(sub, off)" if with_offset else f"s.{name}(sub)"
            program = self._programs[(name, with_offset)] = self._env.compile(source)
        return program


_SEARCH_ONLY_ARGS = (
    ("bytes", T.BYTES),
    ("timestamp", T.TIMESTAMP),
    ("duration", T.DURATION),
    ("list", T.List(T.DYN)),
    ("map", T.Map(T.DYN, T.DYN)),
    ("null", T.NULL),
    ("ip", IPT),
    ("cidr", CIDRT),
    ("url", URLT),
)


def _search_declarations() -> Iterator[_Decl]:
    list_impls = {"indexOf": lib.list_index_of, "lastIndexOf": lib.list_last_index_of}
    strings = _StringSearch()
    for name in list_impls:
        alias = CALL_ALIASES[name]
        impl = strings.function(name)
        yield _Decl(alias, f"string_{name}", T.INT, (T.STRING, T.STRING), True, impl)
        yield _Decl(alias, f"string_{name}_int", T.INT, (T.STRING, T.STRING, T.INT), True, impl)
        # Upstream declares list(A).indexOf(A): any element type, compared by CEL equality.
        for arg_name, arg in (*_INCLUDES_ARGS, *_SEARCH_ONLY_ARGS):
            yield _Decl(alias, f"list_{name}_{arg_name}", T.INT, (T.List(T.DYN), arg), True, list_impls[name])


def _duration_millis(d: datetime.timedelta) -> int:
    """Go's Duration.Milliseconds(): the total, truncated toward zero."""
    micros = d // datetime.timedelta(microseconds=1)
    return micros // 1000 if micros >= 0 else -(-micros // 1000)


def _timestamp_millis(t: datetime.datetime, zone: str | None = None) -> int:
    if zone is not None:
        try:
            time_zone(zone)  # a zone offset never has a fraction of a second, but must be valid
        except EvalError as exc:
            raise ValueError(str(exc)) from None
    return t.microsecond // 1000


def _go_bool(value: Any) -> bool:
    try:
        return to_bool(value)
    except EvalError as exc:
        raise ValueError(str(exc)) from None


def _go_number_text(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Pass a value to the C++ conversion unchanged, after checking a string against Go's
    strconv syntax (the C++ runtime also accepts blanks and a few strtod forms)."""

    def check(value: Any) -> Any:
        if isinstance(value, str):
            try:
                convert(value)
            except EvalError as exc:
                raise ValueError(str(exc)) from None
        return value

    return check


def _go_number_declarations() -> Iterator[_Decl]:
    for target, convert in (("int", to_int), ("uint", to_uint), ("double", to_double)):
        wrapper = GO_NUMBER_TEXT[target]
        check = _go_number_text(convert)
        for kind, typ in (("string", T.STRING), ("int", T.INT), ("uint", T.UINT), ("double", T.DOUBLE)):
            yield _Decl(wrapper, f"{wrapper}_{kind}", typ, (typ,), False, check)
        if target == "int":
            yield _Decl(wrapper, f"{wrapper}_timestamp", T.TIMESTAMP, (T.TIMESTAMP,), False, check)


def _bool_declarations() -> Iterator[_Decl]:
    alias = GLOBAL_ALIASES["bool"]
    yield _Decl(alias, "bool_to_bool", T.BOOL, (T.BOOL,), False, _go_bool)
    yield _Decl(alias, "string_to_bool", T.BOOL, (T.STRING,), False, _go_bool)


def _millis_declarations() -> Iterator[_Decl]:
    alias = CALL_ALIASES["getMilliseconds"]
    yield _Decl(alias, "duration_getMilliseconds", T.INT, (T.DURATION,), True, _duration_millis)
    yield _Decl(alias, "timestamp_getMilliseconds", T.INT, (T.TIMESTAMP,), True, _timestamp_millis)
    yield _Decl(
        alias, "timestamp_getMilliseconds_tz", T.INT, (T.TIMESTAMP, T.STRING), True, _timestamp_millis
    )


def _format_declarations() -> Iterator[_Decl]:
    yield _Decl(
        CALL_ALIASES["format"], "string_format", T.STRING, (T.STRING, T.List(T.DYN)), True, format_values
    )


def _ip_message(address: lib.Address) -> Any:
    return IPMsg(**{KEY_FIELD: str(address)})


def _cidr_message(prefix: lib.Prefix) -> Any:
    # The address as written is kept (cidr("10.0.0.1/8").ip() is 10.0.0.1), as in Go.
    return CIDRMsg(**{KEY_FIELD: f"{prefix.ip}/{prefix.network.prefixlen}"})


def _ip_of(value: Any) -> lib.Address:
    return lib.parse_ip(value if isinstance(value, str) else getattr(value, KEY_FIELD))


def _cidr_of(value: Any) -> lib.Prefix:
    return lib.parse_cidr(value if isinstance(value, str) else getattr(value, KEY_FIELD))


_FRACTION_ZEROS = re.compile(r"(\.[0-9]*?)0+(?=Z$|s$)")


def go_time_text(text: str) -> str:
    """The C++ runtime's string of a timestamp or duration as Go writes it: the fraction of a
    second without trailing zeros (``.500Z`` -> ``.5Z``, ``1.500s`` -> ``1.5s``)."""
    return _FRACTION_ZEROS.sub(lambda m: m.group(1) if len(m.group(1)) > 1 else "", text)


def _go_string_declarations() -> Iterator[_Decl]:
    """STRING_ALIAS on a double formats it as Go does (``+Inf``, ``NaN``); GO_TIME_TEXT wraps
    string() of a timestamp or duration (see go_time_text)."""
    yield _Decl(STRING_ALIAS, "double_to_string", T.STRING, (T.DOUBLE,), False, format_double)
    yield _Decl(GO_TIME_TEXT, GO_TIME_TEXT, T.STRING, (T.STRING,), False, go_time_text)


def _ip_declarations() -> Iterator[_Decl]:
    for arg_name, arg in (("ip", IPT), ("cidr", CIDRT)):
        # The key is Go's String() of the address or prefix.
        yield _Decl(
            STRING_ALIAS, f"{arg_name}_to_string", T.STRING, (arg,), False, lambda m: getattr(m, KEY_FIELD)
        )
    yield _Decl("ip", "string_to_ip", IPT, (T.STRING,), False, lambda s: _ip_message(lib.parse_ip(s)))
    yield _Decl("isIP", "is_ip", T.BOOL, (T.STRING,), False, lambda s: lib.is_valid(lib.parse_ip, s))
    yield _Decl("ip.isCanonical", "ip_is_canonical", T.BOOL, (T.STRING,), False, lib.ip_is_canonical)
    predicates: dict[str, Callable[[lib.Address], Any]] = {
        "family": lib.ip_family,
        "isUnspecified": lambda a: a.is_unspecified,
        "isLoopback": lambda a: a.is_loopback,
        "isLinkLocalMulticast": lib.ip_is_link_local_multicast,
        "isLinkLocalUnicast": lambda a: a.is_link_local,
        "isGlobalUnicast": lib.ip_is_global_unicast,
    }
    for name, predicate in predicates.items():
        result = T.INT if name == "family" else T.BOOL
        yield _Decl(name, f"ip_{name}", result, (IPT,), True, lambda m, p=predicate: p(_ip_of(m)))
    yield _Decl(
        "cidr", "string_to_cidr", CIDRT, (T.STRING,), False, lambda s: _cidr_message(lib.parse_cidr(s))
    )
    yield _Decl("isCIDR", "is_cidr", T.BOOL, (T.STRING,), False, lambda s: lib.is_valid(lib.parse_cidr, s))

    def contains_ip(cidr: Any, address: Any) -> bool:
        return lib.cidr_contains_ip(_cidr_of(cidr), _ip_of(address))

    def contains_cidr(cidr: Any, other: Any) -> bool:
        return lib.cidr_contains_cidr(_cidr_of(cidr), _cidr_of(other))

    yield _Decl("containsIP", "cidr_contains_ip_ip", T.BOOL, (CIDRT, IPT), True, contains_ip)
    yield _Decl("containsIP", "cidr_contains_ip_string", T.BOOL, (CIDRT, T.STRING), True, contains_ip)
    yield _Decl("containsCIDR", "cidr_contains_cidr", T.BOOL, (CIDRT, CIDRT), True, contains_cidr)
    yield _Decl("containsCIDR", "cidr_contains_cidr_string", T.BOOL, (CIDRT, T.STRING), True, contains_cidr)
    yield _Decl("ip", "cidr_ip", IPT, (CIDRT,), True, lambda c: _ip_message(_cidr_of(c).ip))
    yield _Decl(
        "masked",
        "cidr_masked",
        CIDRT,
        (CIDRT,),
        True,
        lambda c: _cidr_message(ipaddress.ip_interface(_cidr_of(c).network)),
    )
    yield _Decl(
        "prefixLength", "cidr_prefix_length", T.INT, (CIDRT,), True, lambda c: _cidr_of(c).network.prefixlen
    )


def _url_declarations() -> Iterator[_Decl]:
    # The message keeps the text: parsing is cheap and its parts are all derived from it.
    def url(s: str) -> Any:
        lib.parse_url(s)
        return URLMsg(**{KEY_FIELD: s})

    def part(getter: Callable[[lib.GoURL], Any]) -> Callable[[Any], Any]:
        return lambda msg: getter(lib.parse_url(getattr(msg, KEY_FIELD)))

    yield _Decl("url", "string_to_url", URLT, (T.STRING,), False, url)
    yield _Decl("isURL", "is_url", T.BOOL, (T.STRING,), False, lambda s: lib.is_valid(lib.parse_url, s))
    getters: dict[str, tuple[Any, Callable[[lib.GoURL], Any]]] = {
        "getScheme": (T.STRING, lambda u: u.scheme),
        "getHost": (T.STRING, lambda u: u.host),
        "getHostname": (T.STRING, lib.url_hostname),
        "getPort": (T.STRING, lib.url_port),
        "getEscapedPath": (T.STRING, lib.url_escaped_path),
        "getQuery": (T.Map(T.STRING, T.List(T.STRING)), lib.url_query),
    }
    for name, (result, getter) in getters.items():
        yield _Decl(name, f"url_{name}", result, (URLT,), True, part(getter))


def _kind(t: Any) -> str:
    """The runtime registry's key for a parameter type: all messages share one kind, all lists
    another; overloads whose kinds coincide must share one implementation."""
    if t in (QT, ST, IPT, CIDRT, URLT):
        return "message"
    name: str = t.name()  # cel_expr_python is untyped: a cel.Type's name() is its str
    return name.split("(", 1)[0].split("<", 1)[0].lower()


# Kubernetes' lists library declares sum on lists of summable and min/max/isSorted on lists
# of comparable element types; the runtime functions take list(dyn) (see above), so a probe
# copy of each, declared (never run) on the upstream parameter types, lets the checker reject
# the others. A probe name has the length of the function's, keeping error positions.
_SUMMABLE = (T.INT, T.UINT, T.DOUBLE, T.DURATION)
_COMPARABLE = (*_SUMMABLE, T.BOOL, T.TIMESTAMP, T.STRING, T.BYTES)
GO_TIME_TEXT = "k8sdra_go_time_text"
# Wrappers of a string converted by int(), uint() or double(), checked against Go's syntax.
GO_NUMBER_TEXT = {
    "int": "k8sdra_go_int_text",
    "uint": "k8sdra_go_uint_text",
    "double": "k8sdra_go_double_text",
}
LIST_FUNCTION_PROBES = {
    "sum": "_um",
    "min": "_in",
    "max": "_ax",
    "isSorted": "_sSorted",
    "flatten": "_latten",
}
def _no_such_overload() -> bool:
    raise ValueError("no such overload")


# cel-go panics hashing a version or bytes into the Go set a constant ``in`` list becomes; its
# Eval recovers the panic as the evaluation's error, which no && or || absorbs. The guard
# calling UNHASHABLE notes the panic here, per thread, for the program to raise after the
# runtime has finished (see CppProgram.evaluate).
UNHASHABLE = "k8sdra_unhashable"
ABORTED = threading.local()


def _unhashable(values: list[Any]) -> bool:
    kind = "cel.Semver" if isinstance(values[0], SemverMsg) else "types.Bytes"
    ABORTED.message = f"internal error: runtime error: hash of unhashable type {kind}"
    raise ValueError(ABORTED.message)


def _list_probe_decls() -> list[Any]:
    decls = []
    for name, probe in LIST_FUNCTION_PROBES.items():
        if name == "flatten":
            # cel-go's flatten() takes lists of lists only; with a depth, any list. The C++
            # library's flatten() takes any list.
            overloads = [
                cel.Overload(f"{probe}_0", T.List(T.DYN), [T.List(T.List(T.DYN))], is_member=True),
                cel.Overload(f"{probe}_1", T.List(T.DYN), [T.List(T.DYN), T.INT], is_member=True),
            ]
            decls.append(cel.FunctionDecl(probe, overloads))
            continue
        elements = _SUMMABLE if name == "sum" else _COMPARABLE
        overloads = [
            cel.Overload(f"{probe}_{i}", T.DYN, [T.List(element)], is_member=True)
            for i, element in enumerate(elements)
        ]
        decls.append(cel.FunctionDecl(probe, overloads))
    return decls


def function_decls(quantities: QuantityMessages) -> list[Any]:
    """Kubernetes' functions for one engine's environment (call once per engine: the string
    search functions get an environment of their own, see _StringSearch), the quantity
    functions bound to the engine's ``quantities``."""
    by_name: dict[str, list[Any]] = {}
    registered: set[tuple[str, bool, tuple[str, ...]]] = set()
    for decl in itertools.chain(
        _declarations(quantities),
        _search_declarations(),
        _format_declarations(),
        _millis_declarations(),
        _bool_declarations(),
        _go_number_declarations(),
        _go_string_declarations(),
        _ip_declarations(),
        _url_declarations(),
    ):
        signature = (decl.name, decl.member, tuple(_kind(p) for p in decl.params))
        kwargs: dict[str, Any] = {}
        if signature not in registered:
            registered.add(signature)
            kwargs["impl"] = decl.impl
        by_name.setdefault(decl.name, []).append(
            cel.Overload(decl.overload_id, decl.result, list(decl.params), is_member=decl.member, **kwargs)
        )
    return [cel.FunctionDecl(name, overloads) for name, overloads in by_name.items()] + _list_probe_decls()
