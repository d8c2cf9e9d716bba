"""Static CEL types for the pure-Python engine's checker.

A type is a string (``"int"``, ``"dyn"``, ...; single capitals are type parameters) or a tuple
``("list", T)``, ``("map", K, V)``, ``("optional_type", T)``, ``("wrapper", T)``. ``dyn`` unifies
with anything, at any depth, as in cel-go. A wrapper type is its primitive that also takes
null (cel-go's nullable types).
"""

from __future__ import annotations

from typing import Any, Union

from extender.cel.runtime.k8s_format import Format
from extender.cel.runtime.net import CIDRValue, IPValue, URLValue
from extender.cel.runtime.semver import Semver
from extender.cel.runtime.values import CelOptional, CelType, DeviceValue, Duration, Timestamp, UInt
from extender.model.quantity import Quantity

Type = Union[str, tuple["Type", ...]]  # noqa: UP007 (a recursive alias reads better this way)

INT, UINT, DOUBLE, BOOL, STRING, BYTES = "int", "uint", "double", "bool", "string", "bytes"
NULL, DYN, TYPE = "null_type", "dyn", "type"
QUANTITY, SEMVER = "kubernetes.Quantity", "kubernetes.Semver"
IP, CIDR, URL = IPValue.cel_type_name, CIDRValue.cel_type_name, URLValue.cel_type_name
FORMAT = Format.cel_type_name
DEVICE = "kubernetes.DRADevice"
TIMESTAMP, DURATION = "google.protobuf.Timestamp", "google.protobuf.Duration"
A, B, K, V = "A", "B", "K", "V"
TYPE_PARAMS = frozenset({A, B, K, V})


def list_of(t: Type) -> Type:
    return ("list", t)


def map_of(k: Type, v: Type) -> Type:
    return ("map", k, v)


def optional_of(t: Type) -> Type:
    return ("optional_type", t)


def wrapper_of(t: Type) -> Type:
    return ("wrapper", t)


def unwrapped(t: Type) -> Type:
    """The primitive of a wrapper type; any other type as it is."""
    return t[1] if isinstance(t, tuple) and t[0] == "wrapper" else t


DEVICE_FIELDS: dict[str, Type] = {
    "driver": STRING,
    "attributes": map_of(STRING, map_of(STRING, DYN)),
    "capacity": map_of(STRING, map_of(STRING, QUANTITY)),
    "allowMultipleAllocations": BOOL,
}


def display(t: Type) -> str:
    if isinstance(t, str):
        return t
    return f"{t[0]}({', '.join(display(p) for p in t[1:])})"


def unify(param: Type, arg: Type, bindings: dict[str, Type]) -> bool:
    """Whether ``arg`` fits ``param``, binding type parameters in ``bindings`` as it goes."""
    if arg == DYN or param == DYN:
        if isinstance(param, str) and param in TYPE_PARAMS and param not in bindings:
            bindings[param] = DYN
        return True
    if isinstance(param, str) and param in TYPE_PARAMS:
        bound = bindings.get(param)
        if bound is None:
            bindings[param] = arg
            return True
        if bound == NULL and arg in _NULLABLE_MESSAGES:
            bindings[param] = arg
            return True
        if unify(bound, arg, {}):
            if bound == DYN or _has_dyn(bound):
                bindings[param] = arg if not _has_dyn(arg) else bound
            return True
        return False
    if unwrapped(param) != param or unwrapped(arg) != arg:
        return NULL in (param, arg) or unify(unwrapped(param), unwrapped(arg), bindings)
    if (arg == NULL and param in _NULLABLE_MESSAGES) or (param == NULL and arg in _NULLABLE_MESSAGES):
        return True
    if isinstance(param, str) or isinstance(arg, str):
        return param == arg
    return (
        param[0] == arg[0]
        and len(param) == len(arg)
        and all(unify(p, a, bindings) for p, a in zip(param[1:], arg[1:], strict=True))
    )


# Timestamp and Duration are messages to cel-go's checker, and Kubernetes' library types
# (quantity, semver, IP, CIDR, URL, format) are object types: null is assignable to all of them
# (checker/types.go isAssignable): ``null < timestamp(0)`` and ``q.isLessThan(null)`` compile and
# fail when evaluated, ``device.capacity[d].memory == null`` is false.
_NULLABLE_MESSAGES = frozenset({TIMESTAMP, DURATION, QUANTITY, SEMVER, IP, CIDR, URL, FORMAT})


def _has_dyn(t: Type) -> bool:
    return t == DYN or (isinstance(t, tuple) and any(_has_dyn(p) for p in t[1:]))


def substitute(t: Type, bindings: dict[str, Type]) -> Type:
    if isinstance(t, str):
        return bindings.get(t, DYN) if t in TYPE_PARAMS else t
    return (t[0], *(substitute(p, bindings) for p in t[1:]))


def join(types: list[Type]) -> Type:
    """The type of a value that is one of ``types``: the common one, else ``dyn``."""
    first = types[0]
    if all(t == first for t in types[1:]):
        return first
    nullable = first == NULL or first in _NULLABLE_MESSAGES
    if nullable and all(t in (first, NULL) or (first == NULL and t in _NULLABLE_MESSAGES) for t in types):
        # null is assignable to a message or object type, and the first type binds:
        # ``c ? timestamp(0) : null`` is a timestamp, ``c ? null : timestamp(0)`` null.
        return first
    if isinstance(first, tuple) and all(
        isinstance(t, tuple) and t[0] == first[0] and len(t) == len(first) for t in types[1:]
    ):
        # One constructor throughout: join its parameters (cel-go's most general type, so
        # optional(dyn) and optional(int) make optional(dyn), not dyn).
        return (first[0], *(join([t[i] for t in types]) for i in range(1, len(first))))
    return DYN


_RUNTIME_CHECKS: dict[str, Any] = {
    INT: int,
    UINT: UInt,
    DOUBLE: float,
    BOOL: bool,
    STRING: str,
    BYTES: bytes,
    QUANTITY: Quantity,
    SEMVER: Semver,
    IP: IPValue,
    CIDR: CIDRValue,
    URL: URLValue,
    FORMAT: Format,
    TYPE: CelType,
    DEVICE: DeviceValue,
    TIMESTAMP: Timestamp,
    DURATION: Duration,
}


def value_fits(t: Type, v: Any) -> bool:
    """Runtime overload dispatch: does value ``v`` belong to (the top level of) type ``t``?"""
    if isinstance(t, str):
        if t == DYN or t in TYPE_PARAMS:
            return True
        if t == NULL:
            return v is None
        return type(v) is _RUNTIME_CHECKS[t]
    kind = t[0]
    if kind == "list":
        return type(v) is list or type(v) is tuple
    if kind == "map":
        return isinstance(v, dict)
    return type(v) is CelOptional
