"""The C++ runtime's view of Kubernetes' library types, and conventions shared by the cpp modules.

Library types (kubernetes.Quantity/Semver/URL, net.IP/CIDR) are protobuf messages holding a
value-canonical key, so CEL's message equality is Kubernetes' equality by value.
"""

from __future__ import annotations

import re

from cel_expr_python import cel
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

T = cel.Type
QUANTITY_TYPE_NAME = "kubernetes.Quantity"
SEMVER_TYPE_NAME = "kubernetes.Semver"
# Field holding the canonical key; the name is not reachable from expressions (see lint).
KEY_FIELD = "k8s_dra_internal_key"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# Extensions of Kubernetes' base environment that the C++ library ships (env config names).
# The C++ lists library's version 2 has what cel-go's version 3 (Kubernetes' since 1.34) has.
CONFIG_YAML = """\
extensions:
  - name: strings
    version: 2
  - name: sets
  - name: two-var-comprehensions
  - name: lists
    version: 2
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
                name=KEY_FIELD,
                number=1,
                type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
            )
        pool.Add(fdp)
        for name in names:
            full = f"{package}.{name}"
            classes[full] = message_factory.GetMessageClass(pool.FindMessageTypeByName(full))
    return pool, classes


# Explicit process singleton, built once at import and read-only after: every C++ environment is
# given this descriptor pool, and the library functions recognise library values by these message
# classes (isinstance), so all engines of the process must share one set.
POOL, _CLASSES = _build_messages()
QuantityMsg = _CLASSES[QUANTITY_TYPE_NAME]
SemverMsg = _CLASSES[SEMVER_TYPE_NAME]
IPMsg = _CLASSES["net.IP"]
CIDRMsg = _CLASSES["net.CIDR"]
URLMsg = _CLASSES["kubernetes.URL"]
QT = T(QUANTITY_TYPE_NAME)
ST = T(SEMVER_TYPE_NAME)
IPT = T("net.IP")
CIDRT = T("net.CIDR")
URLT = T("kubernetes.URL")
# The packages of these names are not reachable from expressions (see lint).
TYPE_PACKAGES = frozenset({"kubernetes", "net"})
# A declared function cannot be extended or replaced, so member calls of these are renamed to
# same-length aliases: the strings extension's indexOf/lastIndexOf also serve Kubernetes' lists
# library, and its format runs as cel-go's formatter does (formatting.py).
CALL_ALIASES = {
    "indexOf": "_ndexOf",
    "lastIndexOf": "_astIndexOf",
    "format": "_ormat",
    # A duration's milliseconds are its total in cel-go, the part below a second in C++.
    "getMilliseconds": "_etMilliseconds",
}
# The strings extension's format, by either name: the literal validator exempts its arguments.
FORMAT_CALLS = frozenset({"format", CALL_ALIASES["format"]})
# Global calls renamed alike: bool() of a string follows Go's strconv.ParseBool ("T", "1", ...),
# where the C++ runtime accepts only "true" and "false".
GLOBAL_ALIASES = {"bool": "_ool"}
# Kubernetes adds string() of an IP or CIDR to the standard conversion, which the C++ checker
# cannot extend: the calls it rejects for such an argument are renamed to this (same length).
STRING_ALIAS = "_tring"
STRING_OF_NET = re.compile(
    r"ERROR: <input>:(\d+):(\d+): found no matching overload for 'string' applied to '\(net\.(?:IP|CIDR)\)'"
)

_STATUS_PREFIX = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX = re.compile(r"\s*\[[A-Z_]+\]\s*$")


def status_text(raw: str) -> str:
    """A runtime status message without its code prefix and suffix."""
    return _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", raw.strip()))
