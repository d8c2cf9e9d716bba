"""cel-go's HomogeneousAggregateLiterals for the C++ checker, which types ``[1, "a"]`` as
list(dyn): probe variants of the source whose checking fails exactly when a literal mixes types.
Literals inside a ``format`` call's arguments are exempt, as cel-go's validator exempts them."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from extender.cel.cpp.tokens import Token, closing, split_top, texts
from extender.cel.cpp.types import FORMAT_CALLS

_OPERAND_END_TEXTS = frozenset({")", "]", "}"})


def _opens_literal(toks: list[Token], i: int) -> bool:
    """Whether the ``[`` or ``{`` at ``i`` starts a list/map literal (not an index or a
    message construction)."""
    if i == 0:
        return True
    prev = toks[i - 1]
    if prev.kind in ("str", "num") or prev.text in _OPERAND_END_TEXTS:
        return False
    return not (prev.kind == "id" and prev.text != "in")


# A variant bigger than this (nested map literals double per level) is not checked.
MAX_PROBE_CHARS = 64 * 1024
# Compilations spent finding which literal a failing variant is about.
MAX_LOCATING_PROBES = 64


def _literal_probe(toks: list[Token], i: int, close: int, render: Callable[[int, int], str]) -> str:
    """The homogeneity probe of the literal ``toks[i..close]``, its entries spelled by ``render``;
    empty when the literal is not probed."""
    entries = split_top(toks, i + 1, close, ",")
    if len(entries) < 2:
        return ""
    if toks[i].text == "[":
        return "(" + " + ".join(f"[{render(a, b)}]" for a, b in entries) + ")"
    pairs = [split_top(toks, a, b, ":") for a, b in entries]
    if any(len(p) != 2 or toks[p[0][0]].text == "?" for p in pairs):
        return ""  # optional entries `?k: v` or a ternary in a key: not probed
    keys = " + ".join(f"[{render(*p[0])}]" for p in pairs)
    values = " + ".join(f"[{render(*p[1])}]" for p in pairs)
    literal = "{" + ", ".join(f"{render(*p[0])}: {render(*p[1])}" for p in pairs) + "}"
    return f"cel.bind(k8sdra_keys, {keys}, cel.bind(k8sdra_values, {values}, {literal}))"


def _format_arguments(toks: list[Token]) -> set[int]:
    """Indexes of the tokens inside the parentheses of a ``format`` call: cel-go's literal
    validator exempts every literal there, at any depth."""
    inside: set[int] = set()
    for i, tok in enumerate(toks):
        if tok.text in FORMAT_CALLS and i > 0 and toks[i - 1].text == "." and texts(toks, i + 1, 1) == ("(",):
            close = closing(toks, i + 1)
            inside.update(range(i + 2, len(toks) if close is None else close))
    return inside


def _literals(toks: list[Token]) -> Iterator[tuple[int, int]]:
    exempt = _format_arguments(toks)
    for i, tok in enumerate(toks):
        if tok.text in ("[", "{") and i not in exempt and _opens_literal(toks, i):
            close = closing(toks, i)
            if close is not None:
                yield i, close


def homogeneity_variant(source: str, toks: list[Token]) -> str | None:
    """``source`` with every list and map literal of two or more entries spelled so that
    checking fails exactly when some literal's entries differ in type; None if there is none.

    cel-go's HomogeneousAggregateLiterals rejects ``[1, "a"]``; the C++ checker types it
    list(dyn). ``[a] + [b]`` makes it unify the element types instead.
    """
    closes = dict(_literals(toks))

    def render(lo: int, hi: int) -> str:
        out: list[str] = []
        pos = toks[lo].start
        j = lo
        while j < hi:
            close = closes.get(j)
            if close is not None and close < hi and (probe := _literal_probe(toks, j, close, render)):
                out += [source[pos : toks[j].start], probe]
                pos = toks[close].end
                j = close + 1
            else:
                j += 1
        out.append(source[pos : toks[hi - 1].end])
        return "".join(out)

    if not toks or not closes:
        return None
    variant = source[: toks[0].start] + render(0, len(toks)) + source[toks[-1].end :]
    return variant if variant != source and len(variant) <= MAX_PROBE_CHARS else None


def homogeneity_probes(source: str, toks: list[Token]) -> Iterator[tuple[Token, str]]:
    """Per literal, ``source`` with only that literal spelled as in :func:`homogeneity_variant`:
    locates the literal a failing variant is about."""

    def text(a: int, b: int) -> str:
        return source[toks[a].start : toks[b - 1].end]

    for i, close in _literals(toks):
        probe = _literal_probe(toks, i, close, text)
        if probe:
            yield toks[i], source[: toks[i].start] + probe + source[toks[close].end :]
