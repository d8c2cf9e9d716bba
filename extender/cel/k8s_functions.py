"""Names of the functions Kubernetes' CEL libraries add to the DRA selector environment.

Engines that leave one of these out must reject an expression using it with
:func:`unsupported_message` rather than cel's generic "undeclared reference", so the user
learns the selector is valid Kubernetes CEL that this scheduler cannot run.
"""

from __future__ import annotations

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
