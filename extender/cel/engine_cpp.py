"""Google's C++ CEL runtime (``cel_expr_python``) set up as Kubernetes' DRA selector environment.

The C++ checker gives cel-go's static typing; what the library lacks or does differently is
patched here, mostly by rewriting the expression text (see the token scanner below):

- ``device`` is declared as four qualified variables (``device.driver``, ...), because a
  protobuf message cannot hold the map-of-maps that ``attributes`` and ``capacity`` are;
  the checker then rejects unknown fields as an object type would.
- Missing-domain default: ``device.attributes[X]`` runs as ``device.attributes[?X].orValue({})``.
- Library types (kubernetes.Quantity/Semver/URL, net.IP/CIDR) are protobuf messages holding a
  value-canonical key, so CEL's message equality is Kubernetes' equality by value. Functions
  of one name and argument kinds share one Python implementation (a C++ registry limit).
- Checks cel-go does that the C++ one does not: homogeneous aggregate literals, conversions of
  literals and literal regexes at compile time; cross-type comparison of numeric literals
  (``1 < 1.5``) is admitted by widening an operand to dyn.
- ``indexOf``/``lastIndexOf`` (strings and Kubernetes' lists) and ``transformMap`` run through
  aliases, because declared functions cannot be extended.
- Activations are cached per device view and per thread (the library's arenas are thread-bound).
"""

from __future__ import annotations

import datetime
import ipaddress
import itertools
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional
from google.protobuf import descriptor_pb2, descriptor_pool, duration_pb2, message_factory, timestamp_pb2

from extender.cel import CelCompileError, CelRuntimeError
from extender.cel import k8s_functions as lib
from extender.cel.quantity import Quantity
from extender.cel.semver import Semver

if TYPE_CHECKING:
    from extender.cel.device import DeviceView

T = cel.Type
QUANTITY_TYPE_NAME = "kubernetes.Quantity"
SEMVER_TYPE_NAME = "kubernetes.Semver"
# Field holding the canonical key; the name is not reachable from expressions (see _lint).
_KEY_FIELD = "k8s_dra_internal_key"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

DEVICE_FIELDS = ("driver", "attributes", "capacity", "allowMultipleAllocations")
_GO_NUMBER_SYNTAX = {"int": re.compile(r"[+-]?[0-9]+"), "uint": re.compile(r"[0-9]+")}
_CONVERSIONS = frozenset({"int", "uint", "double", "string", "bytes", "bool", "duration", "timestamp"})
# Extensions of Kubernetes' base environment that the C++ library ships (env config names).
_CONFIG_YAML = """\
extensions:
  - name: strings
    version: 2
  - name: sets
  - name: two-var-comprehensions
"""


def _build_messages() -> tuple[descriptor_pool.DescriptorPool, dict[str, type]]:
    """Each library type as a proto3 message with one field: its value-canonical key."""
    pool = descriptor_pool.DescriptorPool()
    classes: dict[str, type] = {}
    for package, names in (("kubernetes", ("Quantity", "Semver", "URL")), ("net", ("IP", "CIDR"))):
        fdp = descriptor_pb2.FileDescriptorProto(
            name=f"extender/{package}_cel_types.proto", package=package, syntax="proto3"
        )
        for name in names:
            fdp.message_type.add(name=name).field.add(
                name=_KEY_FIELD,
                number=1,
                type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
            )
        pool.Add(fdp)
        for name in names:
            full = f"{package}.{name}"
            classes[full] = message_factory.GetMessageClass(pool.FindMessageTypeByName(full))
    return pool, classes


_POOL, _CLASSES = _build_messages()
_QuantityMsg = _CLASSES[QUANTITY_TYPE_NAME]
_SemverMsg = _CLASSES[SEMVER_TYPE_NAME]
_IPMsg = _CLASSES["net.IP"]
_CIDRMsg = _CLASSES["net.CIDR"]
_URLMsg = _CLASSES["kubernetes.URL"]
QT = T(QUANTITY_TYPE_NAME)
ST = T(SEMVER_TYPE_NAME)
IPT = T("net.IP")
CIDRT = T("net.CIDR")
URLT = T("kubernetes.URL")
# The packages of these names are not reachable from expressions (see _lint).
_TYPE_PACKAGES = frozenset({"kubernetes", "net"})


# --- value conversion between the Python objects and the messages -------------------------


def _decimal(value: Fraction) -> tuple[int, int]:
    """``value`` as mantissa and exponent of ten, without trailing zeros in the mantissa."""
    if value == 0:
        return 0, 0
    den = value.denominator
    twos = fives = 0
    while den % 2 == 0:
        den //= 2
        twos += 1
    while den % 5 == 0:
        den //= 5
        fives += 1
    exponent = -max(twos, fives)
    mantissa = int(value * 10**-exponent)
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    return mantissa, exponent


_NOT_INTEGER = "~"


def _quantity_key(q: Quantity) -> str:
    """The value as ``<mantissa>e<exponent>``, marked when upstream's AsInt64 fails on it.

    Messages compare by content, so the key holds the value (80Gi and 81920Mi share one) and
    the one trait of the representation that selectors can observe: isInteger/asInteger
    (upstream's "4000m" is not an integer, its "4" is). The price: those two are unequal here.
    """
    mantissa, exponent = _decimal(q.value)
    key = f"{mantissa}e{exponent}" if exponent else str(mantissa)
    return key if q.is_integer() else key + _NOT_INTEGER


def _parse_key(key: str) -> Quantity:
    """A Quantity with the key's value and integer trait, for a key whose object was forgotten."""
    text = key.removesuffix(_NOT_INTEGER)
    q = Quantity.parse(text)
    if key.endswith(_NOT_INTEGER) and q.is_integer():
        q = Quantity.parse(f"{q.value.numerator}.0")  # an integral value, written with a fraction
    return q


# These tables are plain dicts, emptied when full: library functions run on the evaluating
# thread, and a dict's get and set are atomic where an LRU's bookkeeping is not.
_TABLE_LIMIT = 65536

# Key -> the most recent Quantity with that key, so add/sub/asApproximateFloat see the
# representation a message came from (keys of equal value and trait rarely differ there).
_QUANTITIES: dict[str, Quantity] = {}

# (canonical text, integer trait) -> key and message: devices share few distinct capacities.
# The runtime copies a message it is given, so sharing one is safe.
_MESSAGES: dict[tuple[str, bool], tuple[str, Any]] = {}


def _remember(table: dict[Any, Any], key: Any, value: Any) -> None:
    if len(table) >= _TABLE_LIMIT:
        table.clear()
    table[key] = value


def quantity_message(q: Quantity) -> Any:
    text = (str(q), q.is_integer())
    cached = _MESSAGES.get(text)
    if cached is None:
        key = _quantity_key(q)
        cached = (key, _QuantityMsg(**{_KEY_FIELD: key}))
        _remember(_MESSAGES, text, cached)
    _remember(_QUANTITIES, cached[0], q)
    return cached[1]


def semver_message(v: Semver) -> Any:
    # Build metadata is dropped so message equality ignores it, like Semver.__eq__.
    return _semver_message_for(str(v).split("+", 1)[0])


@lru_cache(maxsize=4096)
def _semver_message_for(key: str) -> Any:
    return _SemverMsg(**{_KEY_FIELD: key})


@lru_cache(maxsize=4096)
def _semver_from_key(key: str) -> Semver:
    return Semver.parse(key)


def _as_quantity(msg: Any) -> Quantity:
    key = getattr(msg, _KEY_FIELD)
    q = _QUANTITIES.get(key)
    if q is None:
        q = _parse_key(key)
        _remember(_QUANTITIES, key, q)
    return q


def _as_semver(msg: Any) -> Semver:
    return _semver_from_key(getattr(msg, _KEY_FIELD))


def _to_cel(value: Any) -> Any:
    """An attribute value as the runtime wants it (semver objects become messages)."""
    if isinstance(value, Semver):
        return semver_message(value)
    if isinstance(value, list):
        return [_to_cel(item) for item in value]
    return value


# --- Kubernetes library functions ---------------------------------------------------------


def _is_quantity(v: Any) -> bool:
    return isinstance(v, _QuantityMsg)


def _is_semver(v: Any) -> bool:
    return isinstance(v, _SemverMsg)


def _quantity(s: str) -> Any:
    return quantity_message(_parse_quantity(s))


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


def _arith(op: str) -> Callable[[Any, Any], Any]:
    def impl(target: Any, other: Any) -> Any:
        q = _as_quantity(target)
        # An int operand goes in as is: Quantity gives it upstream's representation.
        rhs = _as_quantity(other) if _is_quantity(other) else other
        return quantity_message(q.add(rhs) if op == "add" else q.sub(rhs))

    return impl


def _compare(target: Any, other: Any) -> int:
    """compareTo for both library types: the C++ registry keys overloads by argument kind,
    and both types are messages, so one implementation must serve both."""
    if _is_quantity(target) and _is_quantity(other):
        return _as_quantity(target).compare(_as_quantity(other))
    if _is_semver(target) and _is_semver(other):
        return _as_semver(target).compare(_as_semver(other))
    raise ValueError("no such overload")


def _as_integer(target: Any) -> int:
    q = _as_quantity(target)
    if not q.is_integer():
        raise ValueError("cannot convert value to integer")
    value = q.as_int()
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError("cannot convert value to integer")
    return value


def _semver_part(part: str) -> Callable[[Any], int]:
    def impl(target: Any) -> int:
        return int(getattr(_as_semver(target), part))

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


def _declarations() -> Iterator[_Decl]:
    yield _Decl("quantity", "quantity_string", QT, (T.STRING,), False, _quantity)
    yield _Decl("isQuantity", "isQuantity_string", T.BOOL, (T.STRING,), False, _is_quantity_string)
    yield _Decl("sign", "quantity_sign", T.INT, (QT,), True, lambda q: _as_quantity(q).sign())
    yield _Decl(
        "isInteger", "quantity_isInteger", T.BOOL, (QT,), True, lambda q: _as_quantity(q).is_integer()
    )
    yield _Decl("asInteger", "quantity_asInteger", T.INT, (QT,), True, _as_integer)
    yield _Decl(
        "asApproximateFloat",
        "quantity_asApproximateFloat",
        T.DOUBLE,
        (QT,),
        True,
        lambda q: _as_quantity(q).as_approximate_float(),
    )
    for op in ("add", "sub"):
        yield _Decl(op, f"quantity_{op}", QT, (QT, QT), True, _arith(op))
        yield _Decl(op, f"quantity_{op}_int", QT, (QT, T.INT), True, _arith(op))
    yield _Decl("semver", "semver_string", ST, (T.STRING,), False, _semver)
    yield _Decl("semver", "semver_string_bool", ST, (T.STRING, T.BOOL), False, _semver)
    yield _Decl("isSemver", "isSemver_string", T.BOOL, (T.STRING,), False, _is_semver_string)
    yield _Decl("isSemver", "isSemver_string_bool", T.BOOL, (T.STRING, T.BOOL), False, _is_semver_string)
    for part in ("major", "minor", "patch"):
        yield _Decl(part, f"semver_{part}", T.INT, (ST,), True, _semver_part(part))
    for kind, typ in (("quantity", QT), ("semver", ST)):
        yield _Decl("compareTo", f"{kind}_compareTo", T.INT, (typ, typ), True, _compare)
        yield _Decl(
            "isGreaterThan",
            f"{kind}_isGreaterThan",
            T.BOOL,
            (typ, typ),
            True,
            lambda a, b: _compare(a, b) > 0,
        )
        yield _Decl(
            "isLessThan", f"{kind}_isLessThan", T.BOOL, (typ, typ), True, lambda a, b: _compare(a, b) < 0
        )
    for target_name, target in _INCLUDES_TARGETS:
        for arg_name, arg in _INCLUDES_ARGS:
            yield _Decl(
                "includes", f"{target_name}_includes_{arg_name}", T.BOOL, (target, arg), True, lib.includes
            )
    # Result types vary with the element type, yet overloads on list(int), list(double), ...
    # collide in the C++ checker, so these are declared on list(dyn) and return dyn.
    yield _Decl("sum", "list_sum", T.DYN, (T.List(T.DYN),), True, _dyn_result(lib.list_sum))
    yield _Decl("min", "list_min", T.DYN, (T.List(T.DYN),), True, _dyn_result(lib.list_min))
    yield _Decl("max", "list_max", T.DYN, (T.List(T.DYN),), True, _dyn_result(lib.list_max))
    yield _Decl("isSorted", "list_isSorted", T.BOOL, (T.List(T.DYN),), True, lib.list_is_sorted)
    # Internal: value equality of quantities and the probes finding where to use it.
    yield _Decl("k8sdra_equals", "k8sdra_equals", T.BOOL, (QT, QT), True, lambda a, b: _compare(a, b) == 0)
    yield _Decl("k8sdra_quantity_probe", "k8sdra_quantity_probe", QT, (QT,), False, lambda q: q)
    yield _Decl("k8sdra_int_probe", "k8sdra_int_probe", QT, (T.INT,), False, lambda n: n)
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


# The strings extension declares indexOf/lastIndexOf for strings only, and a declared
# function cannot be extended; calls are renamed to these same-length aliases, which serve
# both strings (through the extension itself) and Kubernetes' lists library.
_SEARCH_ALIASES = {"indexOf": "_ndexOf", "lastIndexOf": "_astIndexOf"}


@lru_cache(maxsize=1)
def _strings_env() -> Any:
    return cel.NewEnv(
        config=cel.NewEnvConfigFromYaml(_CONFIG_YAML),
        variables={"s": T.STRING, "sub": T.STRING, "off": T.INT},
    )


@lru_cache(maxsize=4)
def _string_search_program(name: str, with_offset: bool) -> Any:
    return _strings_env().compile(f"s.{name}(sub, off)" if with_offset else f"s.{name}(sub)")


def _string_search(name: str) -> Callable[..., int]:
    def impl(s: str, sub: str, offset: int | None = None) -> int:
        program = _string_search_program(name, offset is not None)
        result = program.eval(data={"s": s, "sub": sub, "off": offset or 0})
        if result.type() == T.ERROR:
            raise ValueError(_status_text(str(result.value())))
        return int(result.value())

    return impl


def _search_declarations() -> Iterator[_Decl]:
    list_impls = {"indexOf": lib.list_index_of, "lastIndexOf": lib.list_last_index_of}
    for name, alias in _SEARCH_ALIASES.items():
        impl = _string_search(name)
        yield _Decl(alias, f"string_{name}", T.INT, (T.STRING, T.STRING), True, impl)
        yield _Decl(alias, f"string_{name}_int", T.INT, (T.STRING, T.STRING, T.INT), True, impl)
        for arg_name, arg in (*_INCLUDES_ARGS, ("bytes", T.BYTES)):
            yield _Decl(alias, f"list_{name}_{arg_name}", T.INT, (T.List(T.DYN), arg), True, list_impls[name])


def _ip_message(address: lib.Address) -> Any:
    return _IPMsg(**{_KEY_FIELD: str(address)})


def _cidr_message(prefix: lib.Prefix) -> Any:
    # The address as written is kept (cidr("10.0.0.1/8").ip() is 10.0.0.1), as in Go.
    return _CIDRMsg(**{_KEY_FIELD: f"{prefix.ip}/{prefix.network.prefixlen}"})


def _ip_of(value: Any) -> lib.Address:
    return lib.parse_ip(value if isinstance(value, str) else getattr(value, _KEY_FIELD))


def _cidr_of(value: Any) -> lib.Prefix:
    return lib.parse_cidr(value if isinstance(value, str) else getattr(value, _KEY_FIELD))


def _ip_declarations() -> Iterator[_Decl]:
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
        return _URLMsg(**{_KEY_FIELD: s})

    def part(getter: Callable[[lib.GoURL], Any]) -> Callable[[Any], Any]:
        return lambda msg: getter(lib.parse_url(getattr(msg, _KEY_FIELD)))

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
    name = t.name()
    return name.split("(", 1)[0].split("<", 1)[0].lower()


def _function_decls() -> list[Any]:
    by_name: dict[str, list[Any]] = {}
    registered: set[tuple[str, bool, tuple[str, ...]]] = set()
    for decl in itertools.chain(
        _declarations(), _search_declarations(), _ip_declarations(), _url_declarations()
    ):
        signature = (decl.name, decl.member, tuple(_kind(p) for p in decl.params))
        kwargs: dict[str, Any] = {}
        if signature not in registered:
            registered.add(signature)
            kwargs["impl"] = decl.impl
        by_name.setdefault(decl.name, []).append(
            cel.Overload(decl.overload_id, decl.result, list(decl.params), is_member=decl.member, **kwargs)
        )
    return [cel.FunctionDecl(name, overloads) for name, overloads in by_name.items()]


# --- source scanning and rewriting ---------------------------------------------------------

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+|//[^\n]*)
  | (?P<str>(?:[rR][bB]?|[bB][rR])(?:'''.*?'''|\"\"\".*?\"\"\"|'[^'\n]*'|"[^"\n]*")
          | [bB]?
            (?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<num>0[xX][0-9a-fA-F]+[uU]?|\d*\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+[uU]?)
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\|\||&&|==|!=|<=|>=|\.\?|[-+*/%!<>?:.,()\[\]{}])
    """,
    re.X | re.S,
)


class _Token(NamedTuple):
    kind: str
    text: str
    start: int
    end: int


def _tokens(source: str) -> list[_Token] | None:
    """Lex ``source``; None when it holds something the lexer does not know (the C++ parser
    has already accepted it, so it is then compiled without rewriting)."""
    out: list[_Token] = []
    pos = 0
    while pos < len(source):
        m = _TOKEN_RE.match(source, pos)
        if m is None:
            return None
        kind = m.lastgroup or ""
        if kind != "ws":
            out.append(_Token(kind, m.group(), m.start(), m.end()))
        pos = m.end()
    return out


def _texts(toks: list[_Token], i: int, n: int) -> tuple[str, ...]:
    return tuple(t.text for t in toks[i : i + n])


def _is_root(toks: list[_Token], i: int) -> bool:
    return i == 0 or toks[i - 1].text not in (".", ".?")


def _closing(toks: list[_Token], i: int) -> int | None:
    """Index of the bracket closing the one at ``i``."""
    depth = 0
    for j in range(i, len(toks)):
        if toks[j].text in ("(", "[", "{"):
            depth += 1
        elif toks[j].text in (")", "]", "}"):
            depth -= 1
            if depth == 0:
                return j
    return None


def field_presence(source: str, toks: list[_Token]) -> str:
    """Turn ``has(device.<field>)`` into ``true``: the device object always has its fields,
    while the checker would type a presence test on a qualified variable as the variable.
    Also give ``indexOf``/``lastIndexOf`` calls their alias (see _SEARCH_ALIASES).
    Every replacement keeps the length, so error positions still match the user's text."""
    for i, tok in enumerate(toks):
        alias = _SEARCH_ALIASES.get(tok.text)
        if alias is not None and i > 0 and toks[i - 1].text == "." and _texts(toks, i + 1, 1) == ("(",):
            source = source[: tok.start] + alias + source[tok.end :]
            continue
        if tok.text != "has" or not _is_root(toks, i) or _texts(toks, i + 1, 3) != ("(", "device", "."):
            continue
        if _texts(toks, i + 4, 2) in {(field, ")") for field in DEVICE_FIELDS}:
            end = toks[i + 5].end
            source = source[: tok.start] + "true".ljust(end - tok.start) + source[end:]
    return source


_OPERAND_END_TEXTS = frozenset({")", "]", "}"})


def _opens_literal(toks: list[_Token], i: int) -> bool:
    """Whether the ``[`` or ``{`` at ``i`` starts a list/map literal (not an index or a
    message construction)."""
    if i == 0:
        return True
    prev = toks[i - 1]
    if prev.kind in ("str", "num") or prev.text in _OPERAND_END_TEXTS:
        return False
    return not (prev.kind == "id" and prev.text != "in")


def _split_top(toks: list[_Token], lo: int, hi: int, sep: str) -> list[tuple[int, int]]:
    """Token ranges of ``toks[lo:hi]`` separated by ``sep`` at bracket depth 0."""
    parts: list[tuple[int, int]] = []
    depth, start = 0, lo
    for j in range(lo, hi):
        text = toks[j].text
        if text in ("(", "[", "{"):
            depth += 1
        elif text in (")", "]", "}"):
            depth -= 1
        elif depth == 0 and text == sep:
            parts.append((start, j))
            start = j + 1
    parts.append((start, hi))
    return [(a, b) for a, b in parts if a < b]


# A variant bigger than this (nested map literals double per level) is not checked.
MAX_PROBE_CHARS = 64 * 1024
# Compilations spent finding which literal a failing variant is about.
MAX_LOCATING_PROBES = 64


def _literal_probe(toks: list[_Token], i: int, close: int, render: Callable[[int, int], str]) -> str:
    """The homogeneity probe of the literal ``toks[i..close]``, its entries spelled by ``render``;
    empty when the literal is not probed."""
    entries = _split_top(toks, i + 1, close, ",")
    if len(entries) < 2:
        return ""
    if toks[i].text == "[":
        return "(" + " + ".join(f"[{render(a, b)}]" for a, b in entries) + ")"
    pairs = [_split_top(toks, a, b, ":") for a, b in entries]
    if any(len(p) != 2 or toks[p[0][0]].text == "?" for p in pairs):
        return ""  # optional entries `?k: v` or a ternary in a key: not probed
    keys = " + ".join(f"[{render(*p[0])}]" for p in pairs)
    values = " + ".join(f"[{render(*p[1])}]" for p in pairs)
    literal = "{" + ", ".join(f"{render(*p[0])}: {render(*p[1])}" for p in pairs) + "}"
    return f"cel.bind(k8sdra_keys, {keys}, cel.bind(k8sdra_values, {values}, {literal}))"


def _literals(toks: list[_Token]) -> Iterator[tuple[int, int]]:
    for i, tok in enumerate(toks):
        if tok.text in ("[", "{") and _opens_literal(toks, i):
            close = _closing(toks, i)
            if close is not None:
                yield i, close


def homogeneity_variant(source: str, toks: list[_Token]) -> str | None:
    """``source`` with every list and map literal of two or more entries spelled so that
    checking fails exactly when some literal's entries differ in type; None if there is none.

    cel-go's HomogeneousAggregateLiterals rejects ``[1, "a"]``; the C++ checker types it
    list(dyn). ``[a] + [b]`` makes it unify the element types instead.
    """
    closes = dict(_literals(toks))

    def render(lo: int, hi: int) -> str:
        out: list[str] = []
        pos = toks[lo].start
        j = lo
        while j < hi:
            close = closes.get(j)
            probe = _literal_probe(toks, j, close, render) if close is not None and close < hi else ""
            if probe:
                out += [source[pos : toks[j].start], probe]
                pos = toks[close].end
                j = close + 1
            else:
                j += 1
        out.append(source[pos : toks[hi - 1].end])
        return "".join(out)

    if not toks or not closes:
        return None
    variant = source[: toks[0].start] + render(0, len(toks)) + source[toks[-1].end :]
    return variant if variant != source and len(variant) <= MAX_PROBE_CHARS else None


def homogeneity_probes(source: str, toks: list[_Token]) -> Iterator[tuple[_Token, str]]:
    """Per literal, ``source`` with only that literal spelled as in :func:`homogeneity_variant`:
    locates the literal a failing variant is about."""

    def text(a: int, b: int) -> str:
        return source[toks[a].start : toks[b - 1].end]

    for i, close in _literals(toks):
        probe = _literal_probe(toks, i, close, text)
        if probe:
            yield toks[i], source[: toks[i].start] + probe + source[toks[close].end :]


# An edit replaces source[start:end] by text. At one position, edits apply by descending
# ``order``, so a lower order ends up earlier in the text: outer constructs open with lower
# and close with higher orders than the ones they contain.
_Edit = tuple[int, int, int, str]


def _domain_default_edits(toks: list[_Token]) -> Iterator[_Edit]:
    """``device.attributes[X]`` -> ``device.attributes[?X].orValue({})`` (and ``.X`` likewise)."""
    for i, tok in enumerate(toks):
        if tok.text != "device" or not _is_root(toks, i):
            continue
        head = _texts(toks, i + 1, 4)
        if len(head) < 3 or head[0] != "." or head[1] not in ("attributes", "capacity"):
            continue
        if head[2] == "[" and (len(head) < 4 or head[3] != "?"):
            close = _closing(toks, i + 3)
            if close is not None:
                yield toks[i + 3].end, toks[i + 3].end, 1, "?"
                yield toks[close].end, toks[close].end, 1, ".orValue({})"
        elif (
            head[2] == "."
            and len(head) == 4
            and toks[i + 4].kind == "id"
            and _texts(toks, i + 5, 1) != ("(",)
            # has(device.attributes.X) tests the domain's presence: no default there.
            and not (_texts(toks, i - 2, 2) == ("has", "(") and _texts(toks, i + 5, 1) == (")",))
        ):
            yield toks[i + 3].start, toks[i + 4].end, 1, f'[?"{toks[i + 4].text}"].orValue({{}})'


# Two-variable comprehensions building maps need a runtime helper (cel.@mapInsert) this C++
# build lacks; they are run as transformList, whose result a Python function turns into the map.
_MAP_TRANSFORMS = {"transformMap": "k8sdra_pairs", "transformMapEntry": "k8sdra_entries"}


def _map_transform_edits(source: str, toks: list[_Token]) -> Iterator[_Edit]:
    """``m.transformMap(k, v, [f,] e)`` -> ``m.transformList(k, v, [f,] [k, e]).k8sdra_pairs()``;
    ``m.transformMapEntry(k, v, [f,] e)`` -> ``m.transformList(k, v, [f,] e).k8sdra_entries()``."""
    for i, tok in enumerate(toks):
        helper = _MAP_TRANSFORMS.get(tok.text)
        if helper is None or i == 0 or toks[i - 1].text != "." or _texts(toks, i + 1, 1) != ("(",):
            continue
        close = _closing(toks, i + 1)
        args = _split_top(toks, i + 2, close, ",") if close is not None else []
        if close is None or len(args) not in (3, 4):
            continue
        yield tok.start, tok.end, 0, "transformList"
        if tok.text == "transformMap":
            key = source[toks[args[0][0]].start : toks[args[0][1] - 1].end]
            first, last = args[-1]
            yield toks[first].start, toks[first].start, 0, f"[{key}, "
            yield toks[last - 1].end, toks[last - 1].end, 3, "]"
        yield toks[close].end, toks[close].end, 3, f".{helper}()"


def _right_operand_end(toks: list[_Token], op: int) -> int:
    """Index just past the right operand of the relation at ``op``."""
    depth = 0
    for j in range(op + 1, len(toks)):
        text = toks[j].text
        if text in ("(", "[", "{"):
            depth += 1
        elif text in (")", "]", "}"):
            if depth == 0:
                return j
            depth -= 1
        elif depth == 0 and text in _OPERAND_STOPS:
            return j
    return len(toks)


def equality_operands(toks: list[_Token]) -> Iterator[tuple[int, int, int]]:
    """For each ``==``/``!=``: start of its left operand, its index, end of its right operand."""
    for op, tok in enumerate(toks):
        if tok.text in ("==", "!="):
            yield _left_operand_start(toks, op), op, _right_operand_end(toks, op)


def _equality_edits(toks: list[_Token], op: int, start: int, end: int) -> Iterator[_Edit]:
    """``A == B`` -> ``(A).k8sdra_equals(B)``; ``A != B`` -> ``!(A).k8sdra_equals(B)``."""
    yield toks[start].start, toks[start].start, 1, "(" if toks[op].text == "==" else "!("
    yield toks[op].start, toks[op].end, 2, ").k8sdra_equals("
    yield toks[end - 1].end, toks[end - 1].end, 2, ")"


def rewrite(source: str, toks: list[_Token], quantity_equalities: Iterable[tuple[int, int, int]] = ()) -> str:
    """What the checked expression needs to run as Kubernetes runs it (see the edit makers);
    ``quantity_equalities`` are the equality_operands comparing two quantities."""
    edits = [*_domain_default_edits(toks), *_map_transform_edits(source, toks)]
    for start, op, end in quantity_equalities:
        edits += _equality_edits(toks, op, start, end)
    for start, end, _, text in sorted(edits, key=lambda e: (e[0], e[2]), reverse=True):
        source = source[:start] + text + source[end:]
    return source


def _literal_conversions(toks: list[_Token]) -> Iterator[tuple[_Token, str, _Token]]:
    """Calls of a conversion function on one literal, e.g. ``uint(-1)``: the function's token,
    the call's source and the literal's token."""
    for i, tok in enumerate(toks):
        if tok.kind != "id" or tok.text not in _CONVERSIONS or not _is_root(toks, i):
            continue
        rest = _texts(toks, i + 1, 4)
        if len(rest) >= 3 and rest[0] == "(" and rest[2] == ")" and toks[i + 2].kind in ("str", "num"):
            yield tok, f"{tok.text}({rest[1]})", toks[i + 2]
        elif len(rest) == 4 and rest[:2] == ("(", "-") and toks[i + 3].kind == "num" and rest[3] == ")":
            yield tok, f"{tok.text}(-{rest[2]})", toks[i + 3]


_REGEX_FUNCTIONS = frozenset({"matches", "find", "findAll"})


def _literal_patterns(toks: list[_Token]) -> Iterator[_Token]:
    """String literals used as the pattern of matches/find/findAll (member or global form)."""
    for i, tok in enumerate(toks):
        if tok.text not in _REGEX_FUNCTIONS or _texts(toks, i + 1, 1) != ("(",):
            continue
        if i > 0 and toks[i - 1].text == ".":
            arg = i + 2
        elif tok.text == "matches" and _is_root(toks, i):
            close = _closing(toks, i + 1)
            args = _split_top(toks, i + 2, close, ",") if close is not None else []
            if len(args) != 2:
                continue
            arg = args[1][0]
        else:
            continue
        if arg < len(toks) and toks[arg].kind == "str" and _texts(toks, arg + 1, 1) in ((")",), (",",)):
            yield toks[arg]


_RELATIONS = frozenset({"<", "<=", ">", ">=", "==", "!=", "in"})
_LITERAL_WORDS = frozenset({"true", "false", "null"})
# Where a relation's left operand ends when scanning leftwards at bracket depth 0.
_OPERAND_STOPS = _RELATIONS | {"&&", "||", "?", ":", ","}
_ERROR_LINE = re.compile(r"^ERROR: <input>:(\d+):(\d+): (.*)$", re.M)
_MIXED_NUMERIC = re.compile(
    r"found no matching overload for '_(?:<|<=|>|>=)_' applied to '\((int|uint|double), (int|uint|double)\)'"
)


def _left_operand_start(toks: list[_Token], op: int) -> int:
    depth = 0
    for j in range(op - 1, -1, -1):
        text = toks[j].text
        if text in (")", "]", "}"):
            depth += 1
        elif text in ("(", "[", "{"):
            if depth == 0:
                return j + 1
            depth -= 1
        elif depth == 0 and text in _OPERAND_STOPS:
            return j + 1
    return 0


def _widen_numeric_comparisons(source: str, toks: list[_Token], message: str) -> str | None:
    """Wrap the left operand of each mixed-type numeric comparison the checker rejected in
    ``dyn()``; None unless those are the only errors.

    cel-go declares ``_<_(int, double)`` and friends (CrossTypeNumericComparisons); the C++
    checker does not, and its declarations cannot be extended, while its runtime compares
    such dyn values correctly.
    """
    errors = _ERROR_LINE.findall(message)
    if not errors:
        return None
    inserts: list[tuple[int, int, str]] = []
    for line, col, text in errors:
        m = _MIXED_NUMERIC.fullmatch(text.strip())
        if m is None or m.group(1) == m.group(2):
            return None
        offset = _offset(source, int(line), int(col))
        op = next((i for i, t in enumerate(toks) if t.start == offset and t.text in _RELATIONS), None)
        if op is None:
            return None
        inserts += [(toks[_left_operand_start(toks, op)].start, 1, "dyn("), (toks[op].start, 0, ")")]
    for pos, _, text in sorted(inserts, reverse=True):
        source = source[:pos] + text + source[pos:]
    return source


def _offset(source: str, line: int, col: int) -> int:
    start = 0
    for _ in range(line - 1):
        start = source.index("\n", start) + 1
    return start + col - 1


def _position(source: str, offset: int) -> tuple[int, int]:
    line = source.count("\n", 0, offset) + 1
    return line, offset - (source.rfind("\n", 0, offset) + 1) + 1


# --- error messages ----------------------------------------------------------------------

_MIXED_LISTS = re.compile(
    r"found no matching overload for '_\+_' applied to '\(list\((.*)\), list\((.*)\)\)'"
)
_STATUS_PREFIX = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX = re.compile(r"\s*\[[A-Z_]+\]\s*$")
_UNDECLARED = re.compile(r"ERROR: <input>:(\d+):(\d+): undeclared reference to '([^']+)'")


def _status_text(raw: str) -> str:
    return _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", raw.strip()))


# cel-go's wording where the C++ runtime's differs.
_RUNTIME_WORDING = {"divide by zero": "division by zero"}


def _runtime_text(raw: str) -> str:
    text = _unalias(_status_text(raw))
    if text.startswith("Key not found in map : "):
        key = text.removeprefix("Key not found in map : ")
        if len(key) >= 2 and key[0] == key[-1] == '"':
            key = key[1:-1]
        return f"no such key: {key}"
    if text.startswith("No matching overloads found : "):
        return "no such overload: " + text.removeprefix("No matching overloads found : ")
    if "Iteration budget exceeded" in text:
        return "operation cancelled: actual cost limit exceeded"
    return _RUNTIME_WORDING.get(text, text)


def _unalias(text: str) -> str:
    for name, alias in _SEARCH_ALIASES.items():
        text = text.replace(alias, name)
    return text


_STRING_OF_NET = re.compile(
    r"found no matching overload for 'string' applied to '\((net\.(?:IP|CIDR)|kubernetes\.URL)\)'"
)


def _compile_text(raw: str, toks: list[_Token] | None) -> str:
    text = _unalias(_status_text(raw))
    m = _STRING_OF_NET.search(text)
    if m is not None:
        # Declared conversions cannot be extended in the C++ checker.
        return f"function string is not supported for {m.group(1)}"
    for m in _UNDECLARED.finditer(text):
        name = m.group(3)
        if name.startswith("device."):
            return f"ERROR: <input>:{m.group(1)}:{m.group(2)}: undefined field '{name.split('.', 1)[1]}'"
        if name in lib.ALL and toks is not None and _called(toks, name):
            return lib.unsupported_message(name)
        if name == "format" and toks is not None:
            # The format library's functions live in the `format` namespace.
            for i, tok in enumerate(toks):
                if tok.text == "format" and _is_root(toks, i) and _texts(toks, i + 1, 1) == (".",):
                    return lib.unsupported_message(f"format.{_texts(toks, i + 2, 1)[0]}")
    return text


def _called(toks: list[_Token], name: str) -> bool:
    return any(t.text == name and _texts(toks, i + 1, 1) == ("(",) for i, t in enumerate(toks))


def _lint(source: str, toks: list[_Token]) -> None:
    """Reject what the message encoding would otherwise expose to expressions."""
    for i, tok in enumerate(toks):
        if tok.text == _KEY_FIELD:
            line, col = _position(source, tok.start)
            raise CelCompileError(f"ERROR: <input>:{line}:{col}: undefined field '{tok.text}'", source)
        if tok.text in _TYPE_PACKAGES and _is_root(toks, i) and _texts(toks, i + 1, 1) == (".",):
            line, col = _position(source, tok.start)
            raise CelCompileError(
                f"ERROR: <input>:{line}:{col}: undeclared reference to '{tok.text}'", source
            )


# --- engine ------------------------------------------------------------------------------


_BUILTIN_TYPE = re.compile(r"\b[A-Z][A-Z0-9_]*\b")


def _type_name(t: Any) -> str:
    """cel-go's spelling of a static type: ``list(string)``, ``kubernetes.Quantity``."""
    name = _BUILTIN_TYPE.sub(lambda m: m.group().lower(), str(t.name()))
    return name.replace("<", "(").replace(">", ")")


def _value_type_name(t: Any) -> str:
    """cel-go's name of a value's runtime type, which carries no parameters: ``list``."""
    return _type_name(t).split("(", 1)[0]


_FOREIGN_ARENA = "No PyCelArena found"


class CppProgram:
    """One compiled selector; evaluation reuses the device's cached activation."""

    __slots__ = ("_compiled", "_engine", "expression")

    def __init__(self, engine: CppEngine, expression: str, compiled: Any) -> None:
        self._engine = engine
        self._compiled = compiled
        self.expression = expression

    def evaluate(self, view: DeviceView) -> bool:
        if view.error is not None:
            raise CelRuntimeError(view.error, self.expression)
        try:
            with self._engine.lock:
                result = self._eval(view)
        except RuntimeError as exc:  # the iteration budget aborts instead of yielding an error
            raise CelRuntimeError(_runtime_text(str(exc)), self.expression) from None
        except (TypeError, ValueError) as exc:  # a device value the runtime cannot take
            raise CelRuntimeError(f"device value not representable in CEL: {exc}", self.expression) from None
        kind = result.type()
        if kind == T.BOOL:
            return bool(result.value())
        if kind == T.ERROR:
            raise CelRuntimeError(_runtime_text(str(result.value())), self.expression)
        raise CelRuntimeError(
            f"CEL result of type {_value_type_name(kind)} could not be converted to bool", self.expression
        )

    def _eval(self, view: DeviceView) -> Any:
        # An activation only works on the thread that built it (cel-expr-python keeps its
        # arenas per thread), so each thread has its own; a thread id reused by a new thread
        # finds a stale one, which is rebuilt once.
        key = (self._engine, threading.get_ident())
        activation = view.engine_cache.get(key)
        if activation is not None:
            try:
                result = self._compiled.eval(activation)
            except RuntimeError as exc:
                if _FOREIGN_ARENA not in str(exc):
                    raise
            else:
                if result.type() != T.ERROR or _FOREIGN_ARENA not in str(result.value()):
                    return result
        activation = view.engine_cache[key] = self._engine.activation(view)
        return self._compiled.eval(activation)


class CppEngine:
    """Engine protocol implementation on cel-expr-python."""

    name = "cpp"

    def __init__(self) -> None:
        # Serializes every use of the C++ environment (compilation, activations, evaluation).
        self.lock = threading.RLock()
        self._env = cel.NewEnv(
            _POOL,
            config=cel.NewEnvConfigFromYaml(_CONFIG_YAML),
            variables={
                "device.driver": T.STRING,
                "device.attributes": T.Map(T.STRING, T.Map(T.STRING, T.DYN)),
                "device.capacity": T.Map(T.STRING, T.Map(T.STRING, QT)),
                "device.allowMultipleAllocations": T.BOOL,
            },
            extensions=[ext_bindings.ExtBindings(), ext_optional.ExtOptional()],
            functions=_function_decls(),
        )

    def compile(self, expression: str) -> CppProgram:
        try:
            expression.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise CelCompileError(f"expression is not valid Unicode text: {exc.reason}", expression) from None
        with self.lock:
            return self._compile(expression)

    def _compile(self, expression: str) -> CppProgram:
        toks = _tokens(expression)
        source = expression if toks is None else field_presence(expression, toks)
        if source != expression:
            toks = _tokens(source)
        checked, source = self._check(expression, source, toks)
        result = checked.return_type()
        if result not in (T.BOOL, T.DYN):
            raise CelCompileError(
                f"must evaluate to bool or the unknown type, not {_type_name(result)}", expression
            )
        if toks is None:
            return CppProgram(self, expression, checked)
        _lint(expression, toks)
        self._check_constants(expression, toks)
        self._check_homogeneous(expression, toks)
        source_toks = toks if source == expression else _tokens(source)
        rewritten = (
            source
            if source_toks is None
            else rewrite(source, source_toks, self._quantity_equalities(source, source_toks))
        )
        if rewritten == source:
            return CppProgram(self, expression, checked)
        try:
            program = self._env.compile(rewritten)
        except RuntimeError:
            # Not expected; the checked expression still runs, only without the rewrites.
            program = checked
        return CppProgram(self, expression, program)

    def _check(self, original: str, source: str, toks: list[_Token] | None) -> tuple[Any, str]:
        """Type-check ``source`` (``original`` after same-length rewrites); returns the checked
        program and the source it was compiled from."""
        try:
            return self._env.compile(source), source
        except RuntimeError as exc:
            raw = str(exc)
        widened = None if toks is None else _widen_numeric_comparisons(source, toks, _status_text(raw))
        if widened is not None:
            try:
                return self._env.compile(widened), widened
            except RuntimeError:
                pass
        raise CelCompileError(_compile_text(raw, toks), original)

    def _quantity_equalities(self, source: str, toks: list[_Token]) -> list[tuple[int, int, int]]:
        """The equalities of ``source`` whose operands are both statically quantities.

        Quantity messages compare by key, which also carries the integer trait (see
        _quantity_key); Kubernetes compares quantities by value alone, so such equalities are
        run by a function. An operand is a quantity when it can be passed where a quantity is
        expected but not where an int is (which a dyn operand could).
        """
        if not any(t.text in ("quantity", "capacity") for t in toks):
            return []
        found = []
        for start, op, end in equality_operands(toks):
            operands = ((start, op), (op + 1, end))
            if all(self._is_quantity_operand(source, toks, a, b) for a, b in operands):
                found.append((start, op, end))
        return found

    def _is_quantity_operand(self, source: str, toks: list[_Token], a: int, b: int) -> bool:
        if a >= b or (b - a == 1 and (toks[a].kind in ("str", "num") or toks[a].text in _LITERAL_WORDS)):
            return False
        head, text, tail = (
            source[: toks[a].start],
            source[toks[a].start : toks[b - 1].end],
            source[toks[b - 1].end :],
        )

        def accepts(probe: str) -> bool:
            try:
                self._env.compile(f"{head}{probe}({text}){tail}")
            except RuntimeError:
                return False
            return True

        return accepts("k8sdra_quantity_probe") and not accepts("k8sdra_int_probe")

    def _check_homogeneous(self, expression: str, toks: list[_Token]) -> None:
        variant = homogeneity_variant(expression, toks)
        if variant is None:
            return
        mismatch = self._mixed_literal(variant)
        if mismatch is None:
            return
        where: _Token | None = None
        for tok, probe in itertools.islice(homogeneity_probes(expression, toks), MAX_LOCATING_PROBES):
            located = self._mixed_literal(probe)
            if located is not None:
                where, mismatch = tok, located
                break
        line, col = _position(expression, where.start) if where else (1, 1)
        raise CelCompileError(
            f"ERROR: <input>:{line}:{col}: expected type '{mismatch[0]}' but found '{mismatch[1]}'",
            expression,
        )

    def _mixed_literal(self, probe: str) -> tuple[str, str] | None:
        """The two element types a probe's checking found different, if it did."""
        try:
            self._env.compile(probe)
        except RuntimeError as exc:
            m = _MIXED_LISTS.search(str(exc))
            if m is not None:
                return m.group(1), m.group(2)
        return None

    def _check_constants(self, expression: str, toks: list[_Token]) -> None:
        """What cel-go settles while building the program: conversions of a literal and
        literal regular expressions; their failure is a compile error."""
        for tok, call, arg in _literal_conversions(toks):
            detail = self._constant_error(call)
            if detail is None and tok.text in _GO_NUMBER_SYNTAX and arg.kind == "str":
                # Go's strconv is stricter than the C++ runtime (no blanks; no sign for uint).
                text = self._env.compile(arg.text).eval().value()
                if not _GO_NUMBER_SYNTAX[tok.text].fullmatch(text):
                    detail = f"cannot convert string to {tok.text}"
            if detail is not None:
                line, col = _position(expression, tok.start)
                raise CelCompileError(f"ERROR: <input>:{line}:{col}: {detail}", expression)
        for pattern in _literal_patterns(toks):
            detail = self._constant_error(f'"".matches({pattern.text})')
            if detail is not None:
                line, col = _position(expression, pattern.start)
                raise CelCompileError(f"ERROR: <input>:{line}:{col}: {detail}", expression)

    def _constant_error(self, source: str) -> str | None:
        """The error evaluating a constant expression gives, if any."""
        try:
            result = self._env.compile(source).eval()
        except RuntimeError as exc:
            return _status_text(str(exc))
        return _status_text(str(result.value())) if result.type() == T.ERROR else None

    def activation(self, view: DeviceView) -> Any:
        return self._env.Activation(
            {
                "device.driver": view.driver,
                "device.attributes": {
                    domain: {name: _to_cel(value) for name, value in values.items()}
                    for domain, values in view.attributes.items()
                },
                "device.capacity": {
                    domain: {name: quantity_message(q) for name, q in values.items()}
                    for domain, values in view.capacity.items()
                },
                "device.allowMultipleAllocations": bool(view.allow_multiple_allocations),
            }
        )


def make() -> CppEngine:
    return CppEngine()
