"""Tokens of selector source, and the queries the C++ engine's checks and rewrites make on them."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import NamedTuple

CONVERSIONS = frozenset({"int", "uint", "double", "string", "bytes", "bool", "duration", "timestamp"})
LITERAL_WORDS = frozenset({"true", "false", "null"})


_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+|//[^\n]*)
  | (?P<str>(?:[rR][bB]?|[bB][rR])(?:'''.*?'''|\"\"\".*?\"\"\"|'[^'\n]*'|"[^"\n]*")
          | [bB]?
            (?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<num>0[xX][0-9a-fA-F]+[uU]?|\d*\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+[uU]?)
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\|\||&&|==|!=|<=|>=|\.\?|[-+*/%!<>?:.,()\[\]{}])
    """,
    re.X | re.S,
)


class Token(NamedTuple):
    kind: str
    text: str
    start: int
    end: int


def tokens(source: str) -> list[Token] | None:
    """Lex ``source``; None when it holds something the lexer does not know (the C++ parser
    has already accepted it, so it is then compiled without rewriting)."""
    out, stop = _lex(source)
    return out if stop is None else None


def unknown_character(source: str) -> int | None:
    """The offset of the first character outside every token (string literals and comments
    included), if there is one."""
    return _lex(source)[1]


def _lex(source: str) -> tuple[list[Token], int | None]:
    out: list[Token] = []
    pos = 0
    while pos < len(source):
        m = _TOKEN_RE.match(source, pos)
        if m is None:
            return out, pos
        kind = m.lastgroup or ""
        if kind != "ws":
            out.append(Token(kind, m.group(), m.start(), m.end()))
        pos = m.end()
    return out, None


def texts(toks: list[Token], i: int, n: int) -> tuple[str, ...]:
    return tuple(t.text for t in toks[i : i + n])


def is_root(toks: list[Token], i: int) -> bool:
    return i == 0 or toks[i - 1].text not in (".", ".?")


def closing(toks: list[Token], i: int) -> int | None:
    """Index of the bracket closing the one at ``i``."""
    depth = 0
    for j in range(i, len(toks)):
        if toks[j].text in ("(", "[", "{"):
            depth += 1
        elif toks[j].text in (")", "]", "}"):
            depth -= 1
            if depth == 0:
                return j
    return None


def split_top(toks: list[Token], lo: int, hi: int, sep: str) -> list[tuple[int, int]]:
    """Token ranges of ``toks[lo:hi]`` separated by ``sep`` at bracket depth 0."""
    parts: list[tuple[int, int]] = []
    depth, start = 0, lo
    for j in range(lo, hi):
        text = toks[j].text
        if text in ("(", "[", "{"):
            depth += 1
        elif text in (")", "]", "}"):
            depth -= 1
        elif depth == 0 and text == sep:
            parts.append((start, j))
            start = j + 1
    parts.append((start, hi))
    return [(a, b) for a, b in parts if a < b]


def literal_conversions(
    toks: list[Token], rename: Mapping[str, str] | None = None
) -> Iterator[tuple[Token, str, Token]]:
    """Conversions that cel-go evaluates when it plans the program, so that their failure is a
    compile error: a conversion function called on a constant, that is a literal, a negated
    number or another such conversion (``uint(-1)``, ``bool(dyn(1))``). Yields the function's
    token, the call's source (conversion names renamed by ``rename``) and the literal's token
    when only ``dyn`` lies between them (the function's token otherwise)."""
    names = rename or {}
    for i, tok in enumerate(toks):
        if tok.kind != "id" or tok.text not in CONVERSIONS or not is_root(toks, i):
            continue
        found = _constant_call(toks, i)
        if found is not None:
            close, literal = found
            call = "".join(
                names.get(t.text, t.text) if t.kind == "id" else t.text for t in toks[i : close + 1]
            )
            yield tok, call, literal or tok


def _constant_call(toks: list[Token], i: int) -> tuple[int, Token | None] | None:
    """For the conversion named at ``toks[i]``: the index of its ``)`` and its literal (None past
    a conversion other than ``dyn``, or for a list or map), if its argument is constant; else None."""
    if texts(toks, i + 1, 1) != ("(",):
        return None
    found = _constant(toks, i + 2)
    if found is None or texts(toks, found[0], 1) != (")",):
        return None
    end, literal = found
    return end, literal


def _constant(toks: list[Token], a: int) -> tuple[int, Token | None] | None:
    """The end of the planner constant starting at ``toks[a]`` and its literal, or None: a literal,
    a negated number, a list or map of constants, or a conversion of a constant."""
    if a >= len(toks):
        return None
    tok = toks[a]
    if tok.kind in ("str", "num") or tok.text in LITERAL_WORDS:
        return a + 1, tok
    if tok.text == "-" and a + 1 < len(toks) and toks[a + 1].kind == "num":
        return a + 2, toks[a + 1]
    if tok.kind == "id" and tok.text in _FOLDED_CONVERSIONS:
        inner = _constant_call(toks, a)
        if inner is None:
            return None
        return inner[0] + 1, inner[1] if tok.text == "dyn" else None
    if tok.text in ("[", "{"):
        close = closing(toks, a)
        if close is None:
            return None
        j = a + 1
        while j < close:
            element = _constant(toks, j)
            if element is None or texts(toks, element[0], 1)[0] not in (",", ":", "]", "}"):
                return None
            j = element[0] + 1
        return close + 1, None
    return None


_FOLDED_CONVERSIONS = CONVERSIONS | {"dyn"}


_REGEX_FUNCTIONS = frozenset({"matches", "find", "findAll"})


def literal_patterns(toks: list[Token]) -> Iterator[Token]:
    """String literals used as the pattern of matches/find/findAll (member or global form)."""
    for i, tok in enumerate(toks):
        if tok.text not in _REGEX_FUNCTIONS or texts(toks, i + 1, 1) != ("(",):
            continue
        if i > 0 and toks[i - 1].text == ".":
            arg = i + 2
        elif tok.text == "matches" and is_root(toks, i):
            close = closing(toks, i + 1)
            args = split_top(toks, i + 2, close, ",") if close is not None else []
            if len(args) != 2:
                continue
            arg = args[1][0]
        else:
            continue
        if arg < len(toks) and toks[arg].kind == "str" and texts(toks, arg + 1, 1) in ((")",), (",",)):
            yield toks[arg]


def offset(source: str, line: int, col: int) -> int:
    start = 0
    for _ in range(line - 1):
        start = source.index("\n", start) + 1
    return start + col - 1


def position(source: str, offset: int) -> tuple[int, int]:
    line = source.count("\n", 0, offset) + 1
    return line, offset - (source.rfind("\n", 0, offset) + 1) + 1


def may_hold_optionals(toks: list[Token]) -> bool:
    """Whether the expression can make optional values: ``optional.*``, ``x.?f``, ``x[?k]``,
    optional list/map elements, ``optMap``/``optFlatMap``."""
    for i, tok in enumerate(toks):
        if tok.text in ("optional", "optMap", "optFlatMap", ".?"):
            return True
        if tok.text == "?" and i > 0 and toks[i - 1].text in ("[", "{", ","):
            return True
    return False


def later_optional_map_entry(toks: list[Token]) -> bool:
    """Whether a map literal has an optional entry ``?k: v`` after another entry: when ``v`` is
    absent, cel-go removes an earlier entry of the same key, which the C++ runtime keeps."""
    open_brackets: list[str] = []
    for i, tok in enumerate(toks):
        if tok.text in ("(", "[", "{"):
            open_brackets.append(tok.text)
        elif tok.text in (")", "]", "}") and open_brackets:
            open_brackets.pop()
        elif tok.text == "?" and open_brackets[-1:] == ["{"] and toks[i - 1].text == ",":
            return True
    return False


def uses_format_library(toks: list[Token]) -> bool:
    """Whether the expression calls Kubernetes' format library (``format.<name>(...)``)."""
    return any(
        tok.text == "format" and is_root(toks, i) and texts(toks, i + 1, 1) == (".",)
        for i, tok in enumerate(toks)
    )


def member_calls(toks: list[Token]) -> set[str]:
    """Names called as ``x.name(...)``."""
    return {
        tok.text
        for i, tok in enumerate(toks)
        if i > 0 and toks[i - 1].text == "." and texts(toks, i + 1, 1) == ("(",)
    }


def odd_map_key(toks: list[Token]) -> bool:
    """Whether a map literal has a key other than one string, integer or bool literal: the C++
    runtime's maps take string, int, uint and bool keys, where cel-go's take any value Go can
    hash (doubles, null, lists, maps, durations, quantities, ...), tell ``1``, ``1u`` and
    ``true`` apart, and fail on a bytes key (extender/cel/runtime/values.py, GoKey)."""
    for i, tok in enumerate(toks):
        if tok.text != "{" or (i > 0 and toks[i - 1].kind == "id" and toks[i - 1].text != "in"):
            continue  # not a map literal: a message literal ``Name{field: v}``
        close = closing(toks, i)
        if close is None:
            return True
        for a, b in split_top(toks, i + 1, close, ","):
            a += toks[a].text == "?"
            key = split_top(toks, a, b, ":")[0] if a < b else (a, a)
            if not _plain_key(toks[key[0] : key[1]]):
                return True
    return False


def _plain_key(key: list[Token]) -> bool:
    if len(key) == 2 and key[0].text == "-":
        key = key[1:]
    if len(key) != 1:
        return False
    tok = key[0]
    if tok.kind == "str":
        return not is_bytes_literal(tok)
    if tok.kind == "num":
        return not any(c in tok.text.lower() for c in ".e") or tok.text.lower().startswith("0x")
    return tok.text in ("true", "false")


_STRING_PREFIX = re.compile(r"[rRbB]*")


def is_bytes_literal(tok: Token) -> bool:
    """Whether a string token is a bytes literal: a ``b`` among the prefix letters."""
    return tok.kind == "str" and "b" in _STRING_PREFIX.match(tok.text).group().lower()  # type: ignore[union-attr]


def in_literal_planned_by_go(toks: list[Token]) -> bool:
    """Whether ``in`` meets an empty list literal or a map literal. cel-go plans ``x in []`` as
    the constant false without evaluating ``x`` (interpreter/decorators.go,
    maybeOptimizeSetMembership), where the C++ runtime evaluates ``x`` and fails if ``x`` does;
    and it looks ``x`` up in a map literal's Go map, finding nothing of another kind where the
    C++ runtime has no overload, and panicking on a bytes or version ``x``."""
    for i, tok in enumerate(toks):
        if tok.text != "in" or tok.kind != "id":
            continue
        j = i + 1
        while texts(toks, j, 1) == ("(",):
            j += 1
        if texts(toks, j, 1) == ("{",) or texts(toks, j, 2) == ("[", "]"):
            return True
        if texts(toks, j, 3) == ("[", ",", "]"):
            return True
    return False
