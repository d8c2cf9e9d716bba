"""google.protobuf wrapper and JSON literals (``google.protobuf.Int32Value{value: 1}``,
``google.protobuf.Value{number_value: 1.5}``).

cel-go's standard environment knows the well-known wrapper messages; a literal of one checks
as the nullable form of its primitive type and evaluates to the plain primitive (cel-go
unwraps wrappers to primitives), its ``value`` set or the primitive's zero value. A
google.protobuf.Value, Struct or ListValue literal is the JSON value it holds (dyn, a
map(string, dyn), a list(dyn)); an Any literal compiles and fails to evaluate, as in cel-go.
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Callable
from typing import Any

from extender.cel.runtime.timestamps import format_duration, format_timestamp
from extender.cel.runtime.types import BOOL, BYTES, DOUBLE, DYN, INT, STRING, UINT, Type, list_of, map_of
from extender.cel.runtime.values import Duration, EvalError, Timestamp, UInt, type_name

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
UINT32_MAX = 2**32 - 1


def _int32(v: Any) -> Any:
    if v < INT32_MIN or v > INT32_MAX:
        raise EvalError("integer overflow")
    return v


def _uint32(v: Any) -> Any:
    if v > UINT32_MAX:
        raise EvalError("unsigned integer overflow")
    return v


def _float32(v: float) -> float:
    """Go's ``float32(v)``: the nearest single-precision value, infinite past its range."""
    try:
        return float(struct.unpack("f", struct.pack("f", v))[0])
    except OverflowError:
        return math.copysign(math.inf, v)


def _same(v: Any) -> Any:
    return v


class Wrapper:
    """One wrapper message: the primitive it wraps, its zero value and the conversion its
    ``value`` field applies when set."""

    __slots__ = ("convert", "primitive", "zero")

    def __init__(self, primitive: Type, zero: Any, convert: Callable[[Any], Any] = _same) -> None:
        self.primitive = primitive
        self.zero = zero
        self.convert = convert


WRAPPERS: dict[str, Wrapper] = {
    "google.protobuf.BoolValue": Wrapper(BOOL, False),
    "google.protobuf.BytesValue": Wrapper(BYTES, b""),
    "google.protobuf.DoubleValue": Wrapper(DOUBLE, 0.0),
    "google.protobuf.FloatValue": Wrapper(DOUBLE, 0.0, _float32),
    "google.protobuf.Int32Value": Wrapper(INT, 0, _int32),
    "google.protobuf.Int64Value": Wrapper(INT, 0),
    "google.protobuf.StringValue": Wrapper(STRING, ""),
    "google.protobuf.UInt32Value": Wrapper(UINT, UInt(0), _uint32),
    "google.protobuf.UInt64Value": Wrapper(UINT, UInt(0)),
}

FIELD = "value"


# --- the JSON messages ----------------------------------------------------------------------


def _json(v: Any) -> Any:
    """A value as google.protobuf.Value holds it: numbers are doubles, bytes base64 text,
    durations and timestamps their text, lists and maps JSON values (cel-go converts a
    literal's fields to structpb)."""
    t = type(v)
    if t is bool or t is str or v is None:
        return v
    if t is int or t is UInt or t is float:
        return float(v)
    if t is list or t is tuple:
        return [_json(x) for x in v]
    if isinstance(v, dict):
        return {k: _json(x) for k, x in v.items()}
    if t is bytes:
        return base64.b64encode(v).decode("ascii")
    if t is Duration:
        return format_duration(v)
    if t is Timestamp:
        return format_timestamp(v)
    raise EvalError(f"type conversion not supported for '{type_name(v)}'")


def _value(fields: list[tuple[str, Any]]) -> Any:
    """google.protobuf.Value: its kind is a oneof, so the last field set wins; none is null."""
    if not fields:
        return None
    name, v = fields[-1]
    return None if name == "null_value" else _json(v)


def _unsupported_any(_fields: list[tuple[str, Any]]) -> Any:
    # cel-go builds the Any but cannot turn it into a CEL value.
    raise EvalError("unsupported conversion to ref.Val: (*dynamicpb.Message)")


class JsonMessage:
    """A google.protobuf JSON message (or Any): its fields' types, the static type of a
    literal, and the value a literal builds from its (name, value) fields in order."""

    __slots__ = ("build", "fields", "result")

    def __init__(
        self, fields: dict[str, Type], result: Type, build: Callable[[list[tuple[str, Any]]], Any]
    ) -> None:
        self.fields = fields
        self.result = result
        self.build = build


_DYN_MAP = map_of(STRING, DYN)
_DYN_LIST = list_of(DYN)
JSON_MESSAGES: dict[str, JsonMessage] = {
    "google.protobuf.Value": JsonMessage(
        {
            "null_value": INT,
            "number_value": DOUBLE,
            "string_value": STRING,
            "bool_value": BOOL,
            "struct_value": _DYN_MAP,
            "list_value": _DYN_LIST,
        },
        DYN,
        _value,
    ),
    "google.protobuf.Struct": JsonMessage(
        {"fields": _DYN_MAP}, _DYN_MAP, lambda fs: _json(fs[-1][1]) if fs else {}
    ),
    "google.protobuf.ListValue": JsonMessage(
        {"values": _DYN_LIST}, _DYN_LIST, lambda fs: _json(fs[-1][1]) if fs else []
    ),
    "google.protobuf.Any": JsonMessage({"type_url": STRING, "value": BYTES}, DYN, _unsupported_any),
}
