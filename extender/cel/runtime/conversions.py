"""CEL type conversions (``int()``, ``uint()``, ``double()``, ``string()``, ...) as cel-go does them.

Strings are parsed with Go's ``strconv`` rules and doubles printed with Go's shortest ``'g'``
format, because Kubernetes' answers (and its constant-folding compile errors) come from there.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

from extender.cel.runtime.values import (
    INT_MAX,
    INT_MIN,
    UINT_MAX,
    CelType,
    EvalError,
    UInt,
    check_int,
    type_name,
)

# strconv.ParseInt/ParseUint in base 10: no spaces, no underscores, no sign for unsigned.
_GO_INT = re.compile(r"[+-]?[0-9]+")
_GO_UINT = re.compile(r"[0-9]+")
_GO_FLOAT = re.compile(r"[+-]?(?:(?i:inf|infinity|nan)|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)")


def to_int(v: Any) -> int:
    t = type(v)
    if t is int or t is UInt:
        return check_int(int(v))
    if t is float:
        # cel-go's doubleToInt64Checked also rejects -2**63 itself.
        if math.isnan(v) or math.isinf(v) or not (-(2.0**63) < v < 2.0**63):
            raise EvalError(f"range error converting {format_double(v)} to int")
        return int(v)
    if t is str:
        if not _GO_INT.fullmatch(v):
            raise EvalError(f'strconv.ParseInt: parsing "{v}": invalid syntax')
        parsed = int(v, 10)
        if parsed < INT_MIN or parsed > INT_MAX:
            raise EvalError(f'strconv.ParseInt: parsing "{v}": value out of range')
        return parsed
    raise EvalError(f"no such overload: int({type_name(v)})")


def to_uint(v: Any) -> UInt:
    t = type(v)
    if t is int or t is UInt:
        if v < 0 or v > UINT_MAX:
            raise EvalError(f"range error converting {v} to uint")
        return UInt(v)
    if t is float:
        if math.isnan(v) or not (0.0 <= v < 2.0**64):
            raise EvalError(f"range error converting {format_double(v)} to uint")
        return UInt(int(v))
    if t is str:
        if not _GO_UINT.fullmatch(v):
            raise EvalError(f'strconv.ParseUint: parsing "{v}": invalid syntax')
        parsed = int(v, 10)
        if parsed > UINT_MAX:
            raise EvalError(f'strconv.ParseUint: parsing "{v}": value out of range')
        return UInt(parsed)
    raise EvalError(f"no such overload: uint({type_name(v)})")


def to_double(v: Any) -> float:
    if type(v) is float:
        return v
    t = type(v)
    if t is int or t is UInt:
        return float(v)
    if t is str:
        if not _GO_FLOAT.fullmatch(v):
            raise EvalError(f'strconv.ParseFloat: parsing "{v}": invalid syntax')
        return float(v)
    raise EvalError(f"no such overload: double({type_name(v)})")


def format_double(v: float) -> str:
    """Go's ``strconv.FormatFloat(v, 'g', -1, 64)``, which cel-go uses for ``string(double)``."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == 0:
        return "-0" if math.copysign(1.0, v) < 0 else "0"
    _, digit_tuple, exponent = Decimal(repr(v)).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    sign = "-" if v < 0 else ""
    point = len(digits) + int(exponent)  # digits before the decimal point
    x = point - 1
    if x < -4 or x >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'+' if x >= 0 else '-'}{abs(x):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def to_string(v: Any) -> str:
    if type(v) is str:
        return v
    t = type(v)
    if t is bool:
        return "true" if v else "false"
    if t is int or t is UInt:
        return str(int(v))
    if t is float:
        return format_double(v)
    if type(v) is bytes:
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            raise EvalError("invalid UTF-8 in bytes, cannot convert to string") from None
    raise EvalError(f"no such overload: string({type_name(v)})")


def to_bytes(v: Any) -> bytes:
    if type(v) is bytes:
        return v
    if type(v) is str:
        return v.encode("utf-8")
    raise EvalError(f"no such overload: bytes({type_name(v)})")


_BOOL_STRINGS = {
    "1": True,
    "t": True,
    "T": True,
    "true": True,
    "TRUE": True,
    "True": True,
    "0": False,
    "f": False,
    "F": False,
    "false": False,
    "FALSE": False,
    "False": False,
}


def to_bool(v: Any) -> bool:
    if type(v) is bool:
        return v
    if type(v) is str:
        if v in _BOOL_STRINGS:
            return _BOOL_STRINGS[v]
        raise EvalError(f"type conversion error from 'string' to 'bool': {v!r}")
    raise EvalError(f"no such overload: bool({type_name(v)})")


def identity(v: Any) -> Any:
    return v


def type_of(v: Any) -> CelType:
    return CelType(type_name(v))
