"""The strings extension's ``format`` as Kubernetes runs it (cel-go's formatter of strings
version 2, with the en_US locale): ``"%s has %d".format([name, n])``.

Clauses: ``%s`` (any value; lists and maps are spelled as CEL literals), ``%d``, ``%f``
(doubles, with locale grouping: ``1,234.500000``), ``%e`` (doubles; cel-go reads the
precision as a width, so it is always 6), ``%b``, ``%x``/``%X``, ``%o`` and ``%%``. When the
format is a literal and the arguments a list literal, cel-go checks the clauses against the
arguments' types and count at compile time: see :func:`check_format`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from extender.cel.runtime.conversions import to_string
from extender.cel.runtime.quoting import go_quote
from extender.cel.runtime.timestamps import format_duration, format_timestamp
from extender.cel.runtime.types import (
    BOOL,
    BYTES,
    DOUBLE,
    DURATION,
    DYN,
    INT,
    NULL,
    STRING,
    TIMESTAMP,
    TYPE,
    UINT,
    Type,
    display,
)
from extender.cel.runtime.values import CelType, Duration, EvalError, Timestamp, UInt, type_name

_SPECIAL_DOUBLES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_SUPERSCRIPTS = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def format_string(template: str, args: list[Any]) -> str:
    """``template.format(args)``; raises :class:`EvalError` like cel-go does."""
    out: list[str] = []
    used = 0
    for literal, verb, precision in _clauses(template):
        out.append(literal)
        if verb is None:
            continue
        if used >= len(args):
            raise EvalError(f"index {used} out of range")
        out.append(_FORMATTERS[verb](args[used], precision))
        used += 1
    return "".join(out)


def check_format(template: str, arg_type: Type, count: int) -> str | None:
    """What cel-go's validator rejects in ``template.format([...])`` with ``count`` arguments of
    static type ``arg_type`` (list literals are homogeneous), or None."""
    requested = 0
    try:
        for _, verb, _ in _clauses(template):
            if verb is None:
                continue
            if requested >= count:
                return f"index {requested} out of range"
            if arg_type != DYN and arg_type not in _STATIC_TYPES[verb] and not _static_ok(verb, arg_type):
                return _type_error(verb, display(arg_type))
            requested += 1
    except EvalError as e:
        return str(e)
    if count > requested:
        return f"too many arguments supplied to string.format (expected {requested}, got {count})"
    return None


def _clauses(template: str) -> Iterator[tuple[str, str | None, int | None]]:
    """Split ``template`` into (literal text, verb, precision); a trailing literal has no verb."""
    literal: list[str] = []
    i, n = 0, len(template)
    while i < n:
        c = template[i]
        i += 1
        if c != "%":
            literal.append(c)
            continue
        if i < n and template[i] == "%":
            literal.append("%")
            i += 1
            continue
        precision = None
        if i < n and template[i] == ".":
            j = i + 1
            while j < n and template[j].isdigit():
                j += 1
            if j == i + 1:
                raise EvalError("could not parse formatting clause: invalid precision")
            precision = int(template[i + 1 : j])
            i = j
        if i >= n:
            raise EvalError("could not parse formatting clause: unexpected end of string")
        verb = template[i]
        i += 1
        if verb not in _FORMATTERS:
            raise EvalError(f'could not parse formatting clause: unrecognized formatting clause "{verb}"')
        yield "".join(literal), verb, precision
        literal = []
    yield "".join(literal), None, None


# --- clauses -------------------------------------------------------------------------------


def _type_error(verb: str, given: str) -> str:
    return f"error during formatting: {_CLAUSE_ERRORS[verb]}, was given {given}"


def _fail(verb: str, v: Any) -> EvalError:
    return EvalError(_type_error(verb, type_name(v)))


def _string_clause(v: Any, _precision: int | None) -> str:
    t = type(v)
    if t is list or t is tuple:
        return _literal_list(v)
    if isinstance(v, dict):
        return _literal_map(v)
    if v is None:
        return "null"
    if type(v) is CelType:
        return v.name
    if t is Duration:
        return format_duration(v)
    if t is Timestamp:
        return format_timestamp(v)
    if t in (str, bool, int, UInt, float, bytes):
        return to_string(v)
    raise _fail("s", v)


def _decimal_clause(v: Any, _precision: int | None) -> str:
    if type(v) is int or type(v) is UInt:
        return str(int(v))
    raise _fail("d", v)


def _as_double(verb: str, v: Any) -> float:
    if type(v) is float:
        return v
    if type(v) is str and v in _SPECIAL_DOUBLES:
        return _SPECIAL_DOUBLES[v]
    raise _fail(verb, v)


def _non_finite(x: float) -> str | None:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    return None


def _fixed_clause(v: Any, precision: int | None) -> str:
    # The locale printer drops the sign of a negative zero (-0.0 prints as 0.000000).
    x = _as_double("f", v) + 0.0
    return _non_finite(x) or f"{x:,.{6 if precision is None else precision}f}"


def _scientific_clause(v: Any, precision: int | None) -> str:
    """cel-go hands ``%e``'s precision to x/text's printer as the width (6 without one): six
    digits always, the whole padded on the left with blanks to that width (``   NaN``)."""
    x = _as_double("e", v) + 0.0  # a negative zero prints as 0, as in %f
    text = _non_finite(x)
    if text is None:
        mantissa, exponent = f"{x:.6e}".split("e")
        # x/text's en scientific notation (golang.org/x/text v0.40): mantissa, multiplication
        # sign, 10 and the exponent in superscript digits, with no spaces between.
        digits = f"{abs(int(exponent)):02d}"
        sign = "-" if int(exponent) < 0 else ""
        text = f"{mantissa}\u00d710{(sign + digits).translate(_SUPERSCRIPTS)}"
    return text.rjust(6 if precision is None else precision)


def _integer_clause(verb: str, base: Callable[[int], str]) -> Callable[[Any, int | None], str]:
    def clause(v: Any, _precision: int | None) -> str:
        t = type(v)
        if t is bool and verb == "b":
            return "1" if v else "0"
        if t is int or t is UInt:
            return ("-" if v < 0 else "") + base(abs(int(v)))
        if verb in "xX" and t in (str, bytes):
            data: bytes = v.encode("utf-8") if t is str else v
            return data.hex().upper() if verb == "X" else data.hex()
        raise _fail(verb, v)

    return clause


_FORMATTERS: dict[str, Callable[[Any, int | None], str]] = {
    "s": _string_clause,
    "d": _decimal_clause,
    "f": _fixed_clause,
    "e": _scientific_clause,
    "b": _integer_clause("b", lambda n: format(n, "b")),
    "x": _integer_clause("x", lambda n: format(n, "x")),
    "X": _integer_clause("X", lambda n: format(n, "X")),
    "o": _integer_clause("o", lambda n: format(n, "o")),
}
_CLAUSE_ERRORS = {
    "s": "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, "
    "durations, and timestamps",
    "d": "decimal clause can only be used on integers",
    "f": "fixed-point clause can only be used on doubles",
    "e": "scientific clause can only be used on doubles",
    "b": "only integers and bools can be formatted as binary",
    "x": "only integers, byte buffers, and strings can be formatted as hex",
    "X": "only integers, byte buffers, and strings can be formatted as hex",
    "o": "octal clause can only be used on integers",
}
_STATIC_TYPES: dict[str, frozenset[Type]] = {
    "s": frozenset({STRING, BYTES, BOOL, NULL, INT, UINT, DOUBLE, TIMESTAMP, DURATION, TYPE}),
    "d": frozenset({INT, UINT}),
    "f": frozenset({DOUBLE, STRING}),
    "e": frozenset({DOUBLE, STRING}),
    "b": frozenset({INT, UINT, BOOL}),
    "x": frozenset({INT, UINT, STRING, BYTES}),
    "X": frozenset({INT, UINT, STRING, BYTES}),
    "o": frozenset({INT, UINT}),
}


def _static_ok(verb: str, t: Type) -> bool:
    """``%s`` also takes lists and maps of anything it takes."""
    if verb != "s" or not isinstance(t, tuple):
        return False
    if t[0] == "list":
        return t[1] == DYN or t[1] in _STATIC_TYPES["s"] or _static_ok("s", t[1])
    if t[0] == "map":
        return all(p == DYN or p in _STATIC_TYPES["s"] or _static_ok("s", p) for p in t[1:])
    return False


# --- lists and maps, spelled as CEL literals -------------------------------------------------


def _element(v: Any) -> str:
    """An element of a list or map under ``%s``: cel-go's per-type clause, quoted for CEL."""
    t = type(v)
    if t is int or t is UInt:
        return str(int(v))
    if t is float:
        if math.isfinite(v):
            return f"{v:.6f}"
        return go_quote("NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf"))
    if t is Duration:
        return f"duration({go_quote(format_duration(v))})"
    if t is Timestamp:
        return f"timestamp({go_quote(format_timestamp(v))})"
    text = _string_clause(v, None)
    if t is str:
        return go_quote(text)
    if t is bytes:
        return "b" + go_quote(text)
    return text


def _literal_list(items: Any) -> str:
    return "[" + ", ".join(_element(v) for v in items) + "]"


def _literal_map(mapping: dict[Any, Any]) -> str:
    pairs = []
    for key, value in mapping.items():
        if type(key) not in (str, bool, int, UInt):
            raise EvalError(f"no formatting function for map key of type {type_name(key)}")
        pairs.append((_element(key), _element(value)))
    pairs.sort(key=lambda pair: pair[0])
    return "{" + ", ".join(f"{k}:{v}" for k, v in pairs) + "}"


