"""google.protobuf wrapper literals (``google.protobuf.Int32Value{value: 1}``).

cel-go's standard environment knows the well-known wrapper messages; a literal of one checks
as the nullable form of its primitive type and evaluates to the plain primitive (cel-go
unwraps wrappers to primitives), its ``value`` set or the primitive's zero value.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any

from extender.cel.runtime.types import BOOL, BYTES, DOUBLE, INT, STRING, UINT, Type
from extender.cel.runtime.values import EvalError, UInt

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
