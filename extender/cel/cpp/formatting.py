"""The strings extension's ``format`` for the C++ engine, run by the pure-Python engine's
formatter (cel-go's, which Kubernetes uses; the C++ library's own spells lists, maps and
``%f`` differently and checks nothing at compile time).

Values arrive from the C++ runtime as Python objects (ints, floats, bytearrays, timedeltas,
datetimes, type objects, lists, dicts) and are turned into the pure-Python engine's values.
A uint arrives as an int, which formats the same.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from typing import Any

from extender.cel.cpp.tokens import Token, closing, split_top
from extender.cel.runtime.formatting import check_format, format_string
from extender.cel.runtime.types import DURATION, DYN, NULL, TIMESTAMP, TYPE, Type
from extender.cel.runtime.values import CelType, Duration, EvalError, Timestamp

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MICROSECOND = datetime.timedelta(microseconds=1)
FORMAT_NAMES = frozenset({"format", "_ormat"})


def format_values(template: str, args: list[Any]) -> str:
    """``template.format(args)`` as cel-go computes it; a ValueError becomes the runtime error."""
    try:
        return format_string(template, [_value(v) for v in args])
    except EvalError as exc:
        raise ValueError(str(exc)) from None


def _value(v: Any) -> Any:
    if isinstance(v, bytearray):
        return bytes(v)
    if isinstance(v, list):
        return [_value(x) for x in v]
    if isinstance(v, dict):
        return {_value(k): _value(x) for k, x in v.items()}
    if isinstance(v, datetime.timedelta):
        return Duration(v // _MICROSECOND * 1000)
    if isinstance(v, datetime.datetime):
        return Timestamp((v - _EPOCH) // _MICROSECOND * 1000)
    if type(v).__name__ == "Type":  # the runtime's type values: INT, STRING, ...
        return CelType(str(_type_from_name(str(v.name()).lower())))
    return v


def literal_format_problems(
    toks: list[Token], static_type: Callable[[str], str | None], constant: Callable[[str], Any]
) -> Iterator[tuple[Token, str]]:
    """cel-go's compile-time check of ``"literal".format([list literal])``: each failing call's
    token and the problem. ``static_type(text)`` is the static type name (as ``list(int)``) of
    an expression standing alone, None when it cannot be checked alone (it uses a bound name);
    ``constant(text)`` is the value of a literal."""
    for i, tok in enumerate(toks):
        if tok.text not in FORMAT_NAMES or i < 2 or toks[i - 1].text != "." or toks[i - 2].kind != "str":
            continue
        if i + 2 >= len(toks) or toks[i + 1].text != "(" or toks[i + 2].text != "[":
            continue
        close = closing(toks, i + 2)
        if close is None or close + 1 >= len(toks) or toks[close + 1].text != ")":
            continue
        elements = split_top(toks, i + 3, close, ",")
        if any(toks[a].text == "?" for a, _ in elements):
            continue  # optional elements: the count is not known
        list_text = "[" + ", ".join(_text(toks, a, b) for a, b in elements) + "]"
        type_name = static_type(list_text) if elements else "list(dyn)"
        arg_type = _type_from_name(type_name[5:-1]) if type_name and type_name.startswith("list(") else DYN
        problem = check_format(constant(toks[i - 2].text), arg_type, len(elements))
        if problem is not None:
            yield tok, problem


def _text(toks: list[Token], a: int, b: int) -> str:
    return " ".join(t.text for t in toks[a:b])


_SCALARS = {"null": NULL, "duration": DURATION, "timestamp": TIMESTAMP}


def _type_from_name(name: str) -> Type:
    """The pure-Python engine's type for the C++ engine's spelling of one (library types,
    such as kubernetes.Quantity, keep their names)."""
    if name in _SCALARS:
        return _SCALARS[name]
    if name.startswith("type("):
        return TYPE
    for kind in ("list", "map"):
        if name.startswith(kind + "(") and name.endswith(")"):
            return (kind, *(_type_from_name(p) for p in _split_params(name[len(kind) + 1 : -1])))
    return name


def _split_params(text: str) -> list[str]:
    params, depth, start = [], 0, 0
    for j, c in enumerate(text):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "," and depth == 0:
            params.append(text[start:j].strip())
            start = j + 1
    params.append(text[start:].strip())
    return params
