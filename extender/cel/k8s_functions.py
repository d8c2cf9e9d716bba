"""Names of the functions Kubernetes' CEL libraries add to the DRA selector environment.

Engines that leave one of these out must reject an expression using it with
:func:`unsupported_message` rather than cel's generic "undeclared reference", so the user
learns the selector is valid Kubernetes CEL that this scheduler cannot run.
"""

from __future__ import annotations

import ipaddress
import itertools
import re
from typing import Any

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
# `format.named(...)` and `.validate(...)`; the bare word `format` is also the strings
# extension's `"%d".format([1])`, so only the library's own names are listed.
FORMAT = frozenset({"named", "validate"})
# DRAListTypeAttributes' member function on attribute values.
DRA = frozenset({"includes"})

ALL = QUANTITY | SEMVER | REGEX | LISTS | URLS | IP | CIDR | FORMAT | DRA


def unsupported_message(name: str) -> str:
    return f"function {name} is not supported"


# --- engine-neutral implementations over plain Python values ------------------------------
# Values as CEL runtimes hand them to Python: bool, int, float, str, bytes, list, dict, ...
# Errors are ValueError with the message the selector's runtime error should carry.

MAX_INCLUDES_LIST = 48
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
        if len(target) > MAX_INCLUDES_LIST:
            raise ValueError(f"includes: list has {len(target)} elements, more than {MAX_INCLUDES_LIST}")
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


def list_min(items: list[Any]) -> Any:
    _homogeneous(items, "min")
    if not items:
        raise ValueError("min called on empty list")
    return min(items)


def list_max(items: list[Any]) -> Any:
    _homogeneous(items, "max")
    if not items:
        raise ValueError("max called on empty list")
    return max(items)


def list_is_sorted(items: list[Any]) -> bool:
    _homogeneous(items, "isSorted")
    return all(a <= b for a, b in itertools.pairwise(items))


def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"error parsing regexp: {exc}") from None


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
