"""Kubernetes' CEL libraries for DRA selectors: their function names, and engine-neutral
implementations over plain Python values (lists, regex, includes, IP/CIDR, URL).

Engines that leave a library function out must reject an expression using it with
:func:`unsupported_message` rather than cel's generic "undeclared reference", so the user
learns the selector is valid Kubernetes CEL that this scheduler cannot run. The
implementations follow Go's semantics (regexp, net/netip, net/url) where Python's differ.
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
from dataclasses import dataclass
from typing import Any, Protocol

import re2

QUANTITY = frozenset(
    {
        "quantity",
        "isQuantity",
        "sign",
        "isInteger",
        "asInteger",
        "asApproximateFloat",
        "add",
        "sub",
        "compareTo",
        "isGreaterThan",
        "isLessThan",
    }
)
SEMVER = frozenset(
    {"semver", "isSemver", "major", "minor", "patch", "compareTo", "isGreaterThan", "isLessThan"}
)
REGEX = frozenset({"find", "findAll"})
LISTS = frozenset({"isSorted", "sum", "min", "max", "indexOf", "lastIndexOf"})
URLS = frozenset(
    {"url", "isURL", "getScheme", "getHost", "getHostname", "getPort", "getEscapedPath", "getQuery"}
)
IP = frozenset(
    {
        "ip",
        "isIP",
        "isCanonical",
        "family",
        "isUnspecified",
        "isLoopback",
        "isLinkLocalMulticast",
        "isLinkLocalUnicast",
        "isGlobalUnicast",
    }
)
CIDR = frozenset({"cidr", "isCIDR", "containsIP", "containsCIDR", "masked", "prefixLength"})
# DRAListTypeAttributes' member function on attribute values.
DRA = frozenset({"includes"})

ALL = QUANTITY | SEMVER | REGEX | LISTS | URLS | IP | CIDR | DRA
# Declared as global functions only (cel.Overload), so a member-style call does not type-check.
GLOBAL_ONLY = frozenset(
    {"quantity", "isQuantity", "sign", "semver", "isSemver", "url", "isURL", "ip", "isIP", "cidr", "isCIDR"}
)


class _Ordered(Protocol):
    def compare(self, other: Any) -> int: ...


# The order functions of the quantity and semver libraries, shared by both engines so that
# one definition (and one set of boundary cases, equal values included) covers them.
def compare_to(a: _Ordered, b: _Ordered) -> int:
    """``compareTo``: -1, 0 or 1."""
    return a.compare(b)


def is_greater_than(a: _Ordered, b: _Ordered) -> bool:
    """``isGreaterThan``: strictly greater (equal values are not)."""
    return a.compare(b) > 0


def is_less_than(a: _Ordered, b: _Ordered) -> bool:
    """``isLessThan``: strictly less (equal values are not)."""
    return a.compare(b) < 0


def unsupported_message(name: str) -> str:
    return f"function {name} is not supported"


# --- engine-neutral implementations over plain Python values ------------------------------
# Values as CEL runtimes hand them to Python: bool, int, float, str, bytes, list, dict, ...
# Errors are ValueError with the message the selector's runtime error should carry.

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def cel_equal(a: Any, b: Any) -> bool:
    """CEL heterogeneous equality on plain values: bool is never a number, numbers compare
    across int and float, containers compare element-wise."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(cel_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(cel_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def includes(target: Any, arg: Any) -> bool:
    """``target.includes(arg)``: list membership, or equality for a scalar attribute."""
    if isinstance(target, list):
        return any(cel_equal(item, arg) for item in target)
    return cel_equal(target, arg)


def _kind(value: Any, numbers_mix: bool) -> str:
    """A value's type for the lists library; ints and doubles compare with each other (cross-type
    comparison) but do not add up (no int + double overload)."""
    if isinstance(value, bool):
        return "bool"
    if numbers_mix and isinstance(value, int | float):
        return "number"
    return type(value).__name__


def _homogeneous(items: list[Any], function: str, numbers_mix: bool = True) -> None:
    kinds = {_kind(item, numbers_mix) for item in items}
    if len(kinds) > 1:
        raise ValueError(f"no such overload: {function} on a list of mixed types")
    if kinds and kinds <= {"list", "dict", "NoneType"}:
        raise ValueError(f"no such overload: {function} on a list of {kinds.pop()}")


def list_sum(items: list[Any]) -> Any:
    _homogeneous(items, "sum", numbers_mix=False)
    if not items:
        return 0
    if isinstance(items[0], str | bytes | bool):
        raise ValueError(f"no such overload: sum on a list of {_kind(items[0], False)}")
    total = items[0]
    for item in items[1:]:
        total = total + item
    if isinstance(total, int) and not INT64_MIN <= total <= INT64_MAX:
        raise ValueError("integer overflow")
    return total


# min, max and isSorted take any element cel-go can order, ignoring a comparison's error (mixed
# types, NaN) as the lists library does; an element it cannot order at all is an error.
_ORDERED_KINDS = frozenset({"number", "bool", "str", "bytes", "bytearray", "datetime", "timedelta"})


def _order(a: Any, b: Any) -> int | None:
    """cel-go's Compare of two values of ordered kinds: -1, 0, 1, or None for its error."""
    if _kind(a, True) != _kind(b, True) or a != a or b != b:  # mixed kinds, or NaN
        return None
    return -1 if a < b else (1 if a > b else 0)


def _ordered(items: list[Any], function: str) -> None:
    for item in items:
        if _kind(item, True) not in _ORDERED_KINDS:
            raise ValueError(f"no such overload: {function} on a list of {_kind(item, True)}")


def _extreme(items: list[Any], function: str, replace_when: int) -> Any:
    _ordered(items, function)
    if not items:
        raise ValueError(f"{function} called on empty list")
    best = items[0]
    for item in items[1:]:
        if _order(best, item) == replace_when:
            best = item
    return best


def list_min(items: list[Any]) -> Any:
    return _extreme(items, "min", 1)


def list_max(items: list[Any]) -> Any:
    return _extreme(items, "max", -1)


def list_is_sorted(items: list[Any]) -> bool:
    _ordered(items, "isSorted")
    return all(_order(a, b) != 1 for a, b in itertools.pairwise(items))


RE2_OPTIONS = re2.Options()
RE2_OPTIONS.log_errors = False  # a bad pattern is reported to the selector, not to stderr


# A pure function of the pattern (a compiled RE2 is immutable; errors are not kept), bounded
# by least-recent eviction: shared by every engine, like the code itself.
@functools.lru_cache(maxsize=1024)
def _regex(pattern: str) -> Any:
    """RE2, as Kubernetes: its syntax, and linear time whatever the pattern."""
    try:
        return re2.compile(pattern, RE2_OPTIONS)
    except re2.error as exc:
        detail = (
            exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        )
        raise ValueError(f"error parsing regexp: {detail}") from None


def regex_find(s: str, pattern: str) -> str:
    m = _regex(pattern).search(s)
    return m.group(0) if m else ""


def regex_find_all(s: str, pattern: str, limit: int = -1) -> list[str]:
    """Go's ``FindAllString``: an empty match right where the previous match ended is skipped
    (Python's ``finditer`` keeps it)."""
    rx = _regex(pattern)
    found: list[str] = []
    pos, prev_end = 0, -1
    while pos <= len(s) and (limit < 0 or len(found) < limit):
        m = rx.search(s, pos)
        if m is None:
            break
        accept = True
        if m.end() == pos:
            accept = m.start() != prev_end
            pos += 1
        else:
            pos = m.end()
        prev_end = m.end()
        if accept:
            found.append(m.group(0))
    return found


def list_index_of(items: list[Any], value: Any) -> int:
    return next((i for i, item in enumerate(items) if cel_equal(item, value)), -1)


def list_last_index_of(items: list[Any], value: Any) -> int:
    return next((i for i in range(len(items) - 1, -1, -1) if cel_equal(items[i], value)), -1)


# --- IP and CIDR (Go netip semantics, as Kubernetes' ip/cidr libraries) ------------------

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Prefix = ipaddress.IPv4Interface | ipaddress.IPv6Interface


def _reject_zone_and_mapped(s: str, kind: str, address: Address) -> None:
    if "%" in s:
        raise ValueError(f"{kind} with zone value is not allowed")
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise ValueError(f"IPv4-mapped IPv6 {kind} is not allowed")


def parse_ip(s: str) -> Address:
    try:
        address = ipaddress.ip_address(s)
    except ValueError as exc:
        raise ValueError(f"IP Address {s!r} parse error during conversion from string: {exc}") from None
    _reject_zone_and_mapped(s, "IP address", address)
    return address


def parse_cidr(s: str) -> Prefix:
    """A prefix keeping its address as written (``10.0.0.1/8``), like Go's netip.Prefix."""
    if "/" not in s:
        raise ValueError(f"network address parse error during conversion from string: no '/' in {s!r}")
    address_text, _, bits = s.partition("/")
    if not bits.isascii() or not bits.isdigit() or (len(bits) > 1 and bits[0] == "0"):
        raise ValueError(f"network address parse error during conversion from string: bad bits in {s!r}")
    try:
        prefix = ipaddress.ip_interface(s)
    except ValueError as exc:
        raise ValueError(f"network address parse error during conversion from string: {exc}") from None
    _reject_zone_and_mapped(address_text, "subnet address", prefix.ip)
    return prefix


def prefix_text(prefix: Prefix) -> str:
    """Go's netip.Prefix.String(): the address as written, then the prefix length."""
    return f"{prefix.ip}/{prefix.network.prefixlen}"


def is_valid(parse: Any, s: str) -> bool:
    try:
        parse(s)
    except ValueError:
        return False
    return True


def ip_is_canonical(s: str) -> bool:
    return str(parse_ip(s)) == s


def ip_family(a: Address) -> int:
    return a.version


def ip_is_link_local_multicast(a: Address) -> bool:
    if a.version == 4:
        return a in ipaddress.IPv4Network("224.0.0.0/24")
    return (int(a) >> 112) & 0xFF0F == 0xFF02


def ip_is_global_unicast(a: Address) -> bool:
    """Go's IsGlobalUnicast: private ranges count as global, unlike Python's is_global."""
    if a.version == 4 and int(a) == 0xFFFFFFFF:
        return False
    return not (a.is_unspecified or a.is_loopback or a.is_multicast or a.is_link_local)


def cidr_contains_ip(prefix: Prefix, address: Address) -> bool:
    return address.version == prefix.version and address in prefix.network


def cidr_contains_cidr(prefix: Prefix, other: Prefix) -> bool:
    return (
        other.version == prefix.version
        and other.ip in prefix.network
        and prefix.network.prefixlen <= other.network.prefixlen
    )


# --- URLs (Go net/url semantics, as Kubernetes' url library) -----------------------------


@dataclass(frozen=True)
class GoURL:
    """The parts of a Go ``url.URL`` the url library exposes."""

    scheme: str
    host: str  # unescaped, with port
    raw_path: str  # as written
    raw_query: str


_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.")
_HOST_SUB_DELIMS = frozenset("!$&'()*+,;=:[]<>\"")
_PATH_SUB_DELIMS = frozenset("!$&'()*+,;=:@[]%")
_UNRESERVED = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~")
_USERINFO_OK = _UNRESERVED | frozenset("!$&'()*+,;=:%@")


def _split_scheme(raw: str) -> tuple[str, str]:
    for i, c in enumerate(raw):
        if c == ":":
            if i == 0:
                raise ValueError("missing protocol scheme")
            return raw[:i].lower(), raw[i + 1 :]
        if c not in _SCHEME_CHARS or (i == 0 and not c.isalpha()):
            return "", raw
    return "", raw


def _unescape(s: str, host: bool = False, plus_is_space: bool = False) -> str:
    out = bytearray()
    i = 0
    raw = s.encode("utf-8")
    while i < len(raw):
        c = raw[i]
        if c == ord("%"):
            digits = raw[i + 1 : i + 3]
            if len(digits) < 2 or not all(chr(d) in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError(f"invalid URL escape {raw[i : i + 3].decode('utf-8', 'replace')!r}")
            out.append(int(digits, 16))
            i += 3
            continue
        if host and c < 0x80 and chr(c) not in _UNRESERVED and chr(c) not in _HOST_SUB_DELIMS:
            raise ValueError(f"invalid character {chr(c)!r} in host name")
        out.append(ord(" ") if plus_is_space and c == ord("+") else c)
        i += 1
    return out.decode("utf-8", "replace")


def _valid_port(port: str) -> bool:
    return port == "" or (port[0] == ":" and all(c in "0123456789" for c in port[1:]))


def _parse_host(host: str) -> str:
    if host.startswith("["):
        end = host.rfind("]")
        if end < 0:
            raise ValueError("missing ']' in host")
        if not _valid_port(host[end + 1 :]):
            raise ValueError(f"invalid port {host[end + 1 :]!r} after host")
    else:
        colon = host.rfind(":")
        if colon >= 0 and not _valid_port(host[colon:]):
            raise ValueError(f"invalid port {host[colon:]!r} after host")
    return _unescape(host, host=True)


def _go_parse(raw: str, via_request: bool) -> GoURL:
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
        raise ValueError("net/url: invalid control character in URL")
    if raw == "" and via_request:
        raise ValueError("empty url")
    if raw == "*":
        return GoURL("", "", "*", "")
    scheme, rest = _split_scheme(raw)
    if rest.endswith("?") and rest.count("?") == 1:
        rest, query = rest[:-1], ""
    else:
        rest, _, query = rest.partition("?")
    if not rest.startswith("/"):
        if scheme:
            return GoURL(scheme, "", "", query)  # opaque, e.g. mailto:x
        if via_request:
            raise ValueError("invalid URI for request")
        if ":" in rest.partition("/")[0]:
            raise ValueError("first path segment in URL cannot contain colon")
    host = ""
    if (scheme or (not via_request and not rest.startswith("///"))) and rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        rest = slash + path
        userinfo, at, hostport = authority.rpartition("@")
        if at and not all(c in _USERINFO_OK for c in userinfo):
            raise ValueError("net/url: invalid userinfo")
        host = _parse_host(hostport if at else authority)
    _unescape(rest)  # a bad escape in the path is a parse error
    return GoURL(scheme, host, rest, query)


def go_parse_request_uri(s: str) -> None:
    """Go's url.ParseRequestURI: raises ValueError with the error it returns (without the
    ``parse "s": `` prefix of url.Error)."""
    _go_parse(s, via_request=True)


def parse_url(s: str) -> GoURL:
    """``url(s)``: ``ParseRequestURI`` validates, ``Parse`` (fragment split off) gives the parts."""
    try:
        _go_parse(s, via_request=True)
        return _go_parse(s.partition("#")[0], via_request=False)
    except ValueError as exc:
        raise ValueError(f"URL parse error during conversion from string: {exc}") from None


def url_hostname(u: GoURL) -> str:
    return _split_host_port(u.host)[0]


def url_port(u: GoURL) -> str:
    return _split_host_port(u.host)[1]


def _split_host_port(host: str) -> tuple[str, str]:
    port = ""
    colon = host.rfind(":")
    if colon >= 0 and _valid_port(host[colon:]):
        host, port = host[:colon], host[colon + 1 :]
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, port


def url_escaped_path(u: GoURL) -> str:
    """Go's ``EscapedPath``: the path as written when it is a valid encoding, else re-escaped."""
    if all(c in _UNRESERVED or c in _PATH_SUB_DELIMS or c == "/" for c in u.raw_path):
        return u.raw_path
    path = _unescape(u.raw_path).encode("utf-8")
    safe = _UNRESERVED | frozenset("$&+,/:;=@")
    return "".join(chr(b) if chr(b) in safe else f"%{b:02X}" for b in path)


def url_query(u: GoURL) -> dict[str, list[str]]:
    """Go's ``Query``: pairs with a ';' or a bad escape are dropped."""
    query: dict[str, list[str]] = {}
    for pair in u.raw_query.split("&"):
        if not pair or ";" in pair:
            continue
        key, _, value = pair.partition("=")
        try:
            key, value = _unescape(key, plus_is_space=True), _unescape(value, plus_is_space=True)
        except ValueError:
            continue
        query.setdefault(key, []).append(value)
    return query
