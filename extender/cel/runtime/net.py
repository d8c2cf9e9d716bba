"""Kubernetes' IP, CIDR and URL libraries for the pure-Python engine: the runtime values and
thin adapters over the Go-faithful helpers in :mod:`extender.cel.runtime.k8s_functions`, which the
C++ engine shares, so both engines give the same answers."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from extender.cel.runtime import k8s_functions as lib
from extender.cel.runtime.values import EvalError


@dataclass(frozen=True, slots=True)
class IPValue:
    """A ``net.IP``: equal when the addresses are (``ip("::1") == ip("0::1")``)."""

    cel_type_name: ClassVar[str] = "net.IP"
    address: lib.Address


@dataclass(frozen=True, slots=True)
class CIDRValue:
    """A ``net.CIDR`` keeping its address as written, as Go's netip.Prefix does, so
    ``cidr("10.0.0.1/8") != cidr("10.0.0.0/8")``."""

    cel_type_name: ClassVar[str] = "net.CIDR"
    prefix: lib.Prefix


@dataclass(frozen=True, slots=True)
class URLValue:
    """A ``kubernetes.URL``: equal when written the same, as the C++ engine compares them."""

    cel_type_name: ClassVar[str] = "kubernetes.URL"
    text: str
    parts: lib.GoURL = field(compare=False)


def _checked(parse: Callable[[str], Any], s: str) -> Any:
    try:
        return parse(s)
    except ValueError as e:
        raise EvalError(str(e)) from None


def ip(s: str) -> IPValue:
    return IPValue(_checked(lib.parse_ip, s))


def is_ip(s: str) -> bool:
    return lib.is_valid(lib.parse_ip, s)


def ip_is_canonical(s: str) -> bool:
    return bool(_checked(lib.ip_is_canonical, s))


IP_PREDICATES: dict[str, Callable[[IPValue], Any]] = {
    "isUnspecified": lambda v: v.address.is_unspecified,
    "isLoopback": lambda v: v.address.is_loopback,
    "isLinkLocalMulticast": lambda v: lib.ip_is_link_local_multicast(v.address),
    "isLinkLocalUnicast": lambda v: v.address.is_link_local,
    "isGlobalUnicast": lambda v: lib.ip_is_global_unicast(v.address),
}


def family(v: IPValue) -> int:
    return lib.ip_family(v.address)


def cidr(s: str) -> CIDRValue:
    return CIDRValue(_checked(lib.parse_cidr, s))


def is_cidr(s: str) -> bool:
    return lib.is_valid(lib.parse_cidr, s)


def contains_ip(c: CIDRValue, address: IPValue | str) -> bool:
    other = address if isinstance(address, IPValue) else ip(address)
    return lib.cidr_contains_ip(c.prefix, other.address)


def contains_cidr(c: CIDRValue, prefix: CIDRValue | str) -> bool:
    other = prefix if isinstance(prefix, CIDRValue) else cidr(prefix)
    return lib.cidr_contains_cidr(c.prefix, other.prefix)


def cidr_ip(c: CIDRValue) -> IPValue:
    return IPValue(c.prefix.ip)


def masked(c: CIDRValue) -> CIDRValue:
    return CIDRValue(ipaddress.ip_interface(c.prefix.network))


def prefix_length(c: CIDRValue) -> int:
    return c.prefix.network.prefixlen


def url(s: str) -> URLValue:
    return URLValue(s, _checked(lib.parse_url, s))


def is_url(s: str) -> bool:
    return lib.is_valid(lib.parse_url, s)


URL_STRING_GETTERS: dict[str, Callable[[URLValue], str]] = {
    "getScheme": lambda u: u.parts.scheme,
    "getHost": lambda u: u.parts.host,
    "getHostname": lambda u: lib.url_hostname(u.parts),
    "getPort": lambda u: lib.url_port(u.parts),
    "getEscapedPath": lambda u: lib.url_escaped_path(u.parts),
}


def get_query(u: URLValue) -> dict[str, list[str]]:
    return lib.url_query(u.parts)
