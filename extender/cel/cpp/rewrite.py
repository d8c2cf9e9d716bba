"""The text rewrites that make the C++ runtime run a selector as Kubernetes does (missing-domain
default, quantity equality by value, map transforms, mixed numeric comparisons, long sums)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

from extender.cel.cpp.library import GO_NUMBER_TEXT, GO_TIME_TEXT
from extender.cel.cpp.tokens import Token, closing, is_root, member_calls, offset, split_top, texts
from extender.cel.cpp.types import CALL_ALIASES, GLOBAL_ALIASES, STRING_ALIAS, STRING_OF_NET

DEVICE_FIELDS = ("driver", "attributes", "capacity", "allowMultipleAllocations")


def field_presence(source: str, toks: list[Token]) -> str:
    """Turn ``has(device.<field>)`` into ``true``: the device object always has its fields,
    while the checker would type a presence test on a qualified variable as the variable;
    ``has(device.attributes.<domain>)`` too (see below).
    Also give ``indexOf``/``lastIndexOf``/``format``/``getMilliseconds`` calls their alias (see
    CALL_ALIASES), and ``bool(...)`` its own (GLOBAL_ALIASES).
    The two-variable ``exists_one(k, v, p)`` becomes ``existsOne``, the one spelling of it the
    C++ library knows (cel-go has both).
    Every replacement keeps the length, so error positions still match the user's text."""
    for i, tok in enumerate(toks):
        alias = CALL_ALIASES.get(tok.text)
        if alias is not None and i > 0 and toks[i - 1].text == "." and texts(toks, i + 1, 1) == ("(",):
            source = source[: tok.start] + alias + source[tok.end :]
            continue
        alias = GLOBAL_ALIASES.get(tok.text)
        if alias is not None and is_root(toks, i) and texts(toks, i + 1, 1) == ("(",):
            source = source[: tok.start] + alias + source[tok.end :]
            continue
        if (
            tok.text == "exists_one"
            and i > 0
            and toks[i - 1].text == "."
            and _argument_count(toks, i + 1) == 3
        ):
            source = source[: tok.start] + "existsOne " + source[tok.end :]
            continue
        if tok.text != "has" or not is_root(toks, i) or texts(toks, i + 1, 3) != ("(", "device", "."):
            continue
        if texts(toks, i + 4, 2) in {(field, ")") for field in DEVICE_FIELDS}:
            end = toks[i + 5].end
            source = source[: tok.start] + "true".ljust(end - tok.start) + source[end:]
        elif (
            texts(toks, i + 4, 2) in _DOMAIN_MAPS_SELECTED
            and toks[i + 6].kind == "id"
            and texts(toks, i + 7, 1) == (")",)
        ):
            # A domain map's lookup always finds (the default, if nothing else), and presence
            # tests use that lookup: has(device.attributes.anything) is true upstream.
            end = toks[i + 7].end
            source = source[: tok.start] + "true".ljust(end - tok.start) + source[end:]
    return source


_DOMAIN_MAPS_SELECTED = frozenset({("attributes", "."), ("capacity", ".")})


def _argument_count(toks: list[Token], open_paren: int) -> int | None:
    """The number of arguments of the call whose ``(`` is at ``open_paren``; None if it is not one."""
    if texts(toks, open_paren, 1) != ("(",):
        return None
    close = closing(toks, open_paren)
    if close is None:
        return None
    return len(split_top(toks, open_paren + 1, close, ",")) if close > open_paren + 1 else 0


# An edit replaces source[start:end] by text. At one position, edits apply by descending
# ``order``, so a lower order ends up earlier in the text: outer constructs open with lower
# and close with higher orders than the ones they contain.
Edit = tuple[int, int, int, str]


def _domain_default_edits(toks: list[Token]) -> Iterator[Edit]:
    """``device.attributes[X]`` -> ``device.attributes[?X].orValue({})`` (and ``.X`` likewise),
    also through a name bound to the map: ``cel.bind(a, device.attributes, a[X])``."""
    for i, tok in enumerate(toks):
        if tok.text == "device" and is_root(toks, i) and texts(toks, i + 1, 2) in _DOMAIN_MAPS:
            yield from _default_edits_after(toks, i + 2)
    for name, lo, hi in _domain_map_bindings(toks):
        for j in range(lo, hi):
            if toks[j].text == name and is_root(toks, j):
                yield from _default_edits_after(toks, j)


_DOMAIN_MAPS = frozenset({(".", "attributes"), (".", "capacity")})


def _domain_map_bindings(toks: list[Token]) -> Iterator[tuple[str, int, int]]:
    """``cel.bind(name, device.attributes|capacity, body)``: the name and the body's token range."""
    for i, tok in enumerate(toks):
        if tok.text != "cel" or not is_root(toks, i) or texts(toks, i + 1, 3) != (".", "bind", "("):
            continue
        head = texts(toks, i + 4, 6)
        if (
            len(head) == 6
            and toks[i + 4].kind == "id"
            and head[1:3] == (",", "device")
            and head[3:5] in _DOMAIN_MAPS
            and head[5] == ","
        ):
            close = closing(toks, i + 3)
            if close is not None:
                yield head[0], i + 10, close


def _default_edits_after(toks: list[Token], i: int) -> Iterator[Edit]:
    """The default for the domain map ending at token ``i``, when it is indexed or selected.

    Upstream's lookup always finds (the default, if nothing else), so an optional lookup
    ``m[?X]`` or ``m.?X`` is present: it becomes ``optional.of(m[?X].orValue({}))``.
    """
    head = texts(toks, i + 1, 2)
    optional_select = head[:1] == (".?",) and len(head) == 2 and toks[i + 2].kind == "id"
    if head == ("[", "?") or optional_select:
        start = _map_start(toks, i)
        yield toks[start].start, toks[start].start, 2, "optional.of("
        if optional_select:
            yield toks[i + 1].start, toks[i + 2].end, 1, f'[?"{toks[i + 2].text}"].orValue({{}}))'
        else:
            close = closing(toks, i + 1)
            if close is not None:
                yield toks[close].end, toks[close].end, 1, ".orValue({}))"
    elif head[:1] == ("[",):
        close = closing(toks, i + 1)
        if close is not None:
            yield toks[i + 1].end, toks[i + 1].end, 1, "?"
            yield toks[close].end, toks[close].end, 1, ".orValue({})"
    elif (
        head[:1] == (".",)
        and len(head) == 2
        and toks[i + 2].kind == "id"
        and texts(toks, i + 3, 1) != ("(",)
        # has(<map>.X) tests the domain's presence: no default there.
        and not (_presence_test_start(toks, i) and texts(toks, i + 3, 1) == (")",))
    ):
        yield toks[i + 1].start, toks[i + 2].end, 1, f'[?"{toks[i + 2].text}"].orValue({{}})'


def _map_start(toks: list[Token], i: int) -> int:
    """The first token of the domain map ending at token ``i`` (``device`` or a bound name)."""
    return i - 2 if toks[i].text in ("attributes", "capacity") and toks[i - 2].text == "device" else i


def _presence_test_start(toks: list[Token], i: int) -> bool:
    """Whether the receiver ending at token ``i`` is the start of a ``has(`` argument."""
    return texts(toks, _map_start(toks, i) - 2, 2) == ("has", "(")


# Two-variable comprehensions building maps need a runtime helper (cel.@mapInsert) this C++
# build lacks; they are run as transformList, whose result a Python function turns into the map.
_MAP_TRANSFORMS = {"transformMap": "k8sdra_pairs", "transformMapEntry": "k8sdra_entries"}


def _map_transform_edits(source: str, toks: list[Token]) -> Iterator[Edit]:
    """``m.transformMap(k, v, [f,] e)`` -> ``m.transformList(k, v, [f,] [k, e]).k8sdra_pairs()``;
    ``m.transformMapEntry(k, v, [f,] e)`` -> ``m.transformList(k, v, [f,] e).k8sdra_entries()``."""
    for i, tok in enumerate(toks):
        helper = _MAP_TRANSFORMS.get(tok.text)
        if helper is None or i == 0 or toks[i - 1].text != "." or texts(toks, i + 1, 1) != ("(",):
            continue
        close = closing(toks, i + 1)
        args = split_top(toks, i + 2, close, ",") if close is not None else []
        if close is None or len(args) not in (3, 4):
            continue
        yield tok.start, tok.end, 0, "transformList"
        if tok.text == "transformMap":
            key = source[toks[args[0][0]].start : toks[args[0][1] - 1].end]
            first, last = args[-1]
            yield toks[first].start, toks[first].start, 0, f"[{key}, "
            yield toks[last - 1].end, toks[last - 1].end, 3, "]"
        yield toks[close].end, toks[close].end, 3, f".{helper}()"


def _right_operand_end(toks: list[Token], op: int) -> int:
    """Index just past the right operand of the relation at ``op``."""
    depth = 0
    for j in range(op + 1, len(toks)):
        text = toks[j].text
        if text in ("(", "[", "{"):
            depth += 1
        elif text in (")", "]", "}"):
            if depth == 0:
                return j
            depth -= 1
        elif depth == 0 and text in _OPERAND_STOPS:
            return j
    return len(toks)


def relation_operands(toks: list[Token], relations: frozenset[str]) -> Iterator[tuple[int, int, int]]:
    """For each of ``relations``: start of its left operand, its index, end of its right operand.
    Relations associate to the left, so ``a == b`` is the whole left operand in ``a == b == c``."""
    for op, tok in enumerate(toks):
        if tok.text in relations:
            yield _left_operand_start(toks, op, _LOGIC_STOPS), op, _right_operand_end(toks, op)


_VALUE_RELATIONS = {
    "==": ("[", "].k8sdra_equal()"),
    "!=": ("[", "].k8sdra_not_equal()"),
    "in": ("[", "].k8sdra_in()"),
}
VALUE_RELATIONS = frozenset(_VALUE_RELATIONS)


def _value_relation_edits(toks: list[Token], op: int, start: int, end: int) -> Iterator[Edit]:
    """``A == B`` -> ``[A, B].k8sdra_equal()``, ``A != B`` -> ``[A, B].k8sdra_not_equal()``,
    ``A in B`` -> ``[A, B].k8sdra_in()``: run by Python, which compares quantities by value."""
    opening, closing = _VALUE_RELATIONS[toks[op].text]
    yield toks[start].start, toks[start].start, 1, opening
    yield toks[op].start, toks[op].end, 2, ","
    yield toks[end - 1].end, toks[end - 1].end, 2, closing


def go_number_edits(toks: list[Token], static_type: Callable[[int, int], str | None]) -> Iterator[Edit]:
    """``int(x)``, ``uint(x)``, ``double(x)`` of a string (or of a dyn value) as cel-go converts
    it: the argument goes through a GO_NUMBER_TEXT check of Go's strconv syntax first."""
    for i, tok in enumerate(toks):
        wrapper = GO_NUMBER_TEXT.get(tok.text)
        if wrapper is None or not is_root(toks, i) or texts(toks, i + 1, 1) != ("(",):
            continue
        close = closing(toks, i + 1)
        if close is None or close == i + 2 or len(split_top(toks, i + 2, close, ",")) != 1:
            continue
        if static_type(i + 2, close) in ("string", "dyn", None):
            yield toks[i + 2].start, toks[i + 2].start, 1, f"{wrapper}("
            yield toks[close - 1].end, toks[close - 1].end, 2, ")"


def go_string_edits(toks: list[Token], static_type: Callable[[int, int], str | None]) -> Iterator[Edit]:
    """``string(x)`` formatted as cel-go does where the C++ runtime differs: a double through
    STRING_ALIAS, a timestamp or duration through GO_TIME_TEXT. ``static_type(a, b)`` is the
    static type of ``toks[a:b]`` standing alone (None when it cannot be checked alone)."""
    for i, tok in enumerate(toks):
        if tok.text != "string" or not is_root(toks, i) or texts(toks, i + 1, 1) != ("(",):
            continue
        close = closing(toks, i + 1)
        if close is None or close == i + 2 or len(split_top(toks, i + 2, close, ",")) != 1:
            continue
        kind = static_type(i + 2, close)
        if kind == "double":
            yield tok.start, tok.end, 2, STRING_ALIAS
        elif kind in ("timestamp", "duration"):
            yield tok.start, tok.start, 2, f"{GO_TIME_TEXT}("
            yield toks[close].end, toks[close].end, 1, ")"


def optional_index_edits(toks: list[Token], static_type: Callable[[int, int], str | None]) -> Iterator[Edit]:
    """``x[k]`` of an optional ``x`` -> ``x[?k]``. cel-go qualifies an optional value as an
    optional index does (an index out of range gives optional.none()); the C++ runtime gives a
    present optional there."""
    for i, tok in enumerate(toks):
        if tok.text != "[" or i == 0 or texts(toks, i + 1, 1) == ("?",):
            continue
        if not (toks[i - 1].kind in ("id", "str") or toks[i - 1].text in (")", "]")):
            continue  # a list literal, not an index
        start = _receiver_start(toks, i)
        if start is not None and (static_type(start, i) or "").startswith("optional_type("):
            yield tok.end, tok.end, 0, "?"


def _receiver_start(toks: list[Token], dot: int) -> int | None:
    """The first token of the receiver of the member call whose ``.`` is at ``dot``: a chain
    of names, literals, selections, calls and indexes; None if there is none."""
    j = dot - 1
    while j >= 0:
        if toks[j].text in (")", "]", "}"):
            depth = 0
            for k in range(j, -1, -1):
                if toks[k].text in (")", "]", "}"):
                    depth += 1
                elif toks[k].text in ("(", "[", "{"):
                    depth -= 1
                    if depth == 0:
                        break
            else:
                return None
            j = k
            prev = toks[j - 1] if j > 0 else None
            if toks[j].text != "{" and prev is not None and (prev.kind == "id" or prev.text in (")", "]")):
                j -= 1  # a call's name or an indexed operand
                continue
        elif toks[j].kind not in ("id", "str", "num"):
            return None
        if j > 0 and toks[j - 1].text in (".", ".?"):  # a selection, optional or not
            j -= 2
            continue
        return j
    return None


# Macros whose loop may stop early (see stale_slot_risk).
_EARLY_STOPPING_LOOPS = frozenset({"exists", "all"})


def stale_slot_risk(toks: list[Token]) -> bool:
    """Whether a ``cel.bind`` may read a stale slot: the C++ runtime initializes a bound name
    lazily, on first use, unless its slot already holds a value, and an ``exists`` or ``all``
    that stopped early leaves its loop variable in that slot, so a later bind reads the other
    loop's element (``["a", "b"].exists(k, k == "a") && cel.bind(x, 1, x == 1)`` is false
    there). Without such a loop in the expression, binds are safe; with one, the rewrites bind
    with one-element loops, which set their variable before use and never stop early."""
    return bool(member_calls(toks) & _EARLY_STOPPING_LOOPS)


def rewrite(
    source: str,
    toks: list[Token],
    value_relations: Iterable[tuple[int, int, int]] = (),
    extra: Iterable[Edit] = (),
) -> str:
    """What the checked expression needs to run as Kubernetes runs it (see the edit makers);
    ``value_relations`` are the relation_operands that may compare quantities, ``extra`` more
    edits (go_string_edits)."""
    edits = [
        *_domain_default_edits(toks),
        *_map_transform_edits(source, toks),
        *extra,
    ]
    for start, op, end in value_relations:
        edits += _value_relation_edits(toks, op, start, end)
    for start, end, _, text in sorted(edits, key=lambda e: (e[0], e[2]), reverse=True):
        source = source[:start] + text + source[end:]
    return source


_RELATIONS = frozenset({"<", "<=", ">", ">=", "==", "!=", "in"})
# Where a relation's left operand ends when scanning leftwards at bracket depth 0.
_LOGIC_STOPS = frozenset({"&&", "||", "?", ":", ","})
_OPERAND_STOPS = _RELATIONS | _LOGIC_STOPS
_ERROR_LINE = re.compile(r"^ERROR: <input>:(\d+):(\d+): (.*)$", re.M)
_MIXED_NUMERIC = re.compile(
    r"found no matching overload for '_(?:<|<=|>|>=)_' applied to '\((int|uint|double), (int|uint|double)\)'"
)


def _left_operand_start(toks: list[Token], op: int, stops: frozenset[str] | None = None) -> int:
    stops = _OPERAND_STOPS if stops is None else stops
    depth = 0
    for j in range(op - 1, -1, -1):
        text = toks[j].text
        if text in (")", "]", "}"):
            depth += 1
        elif text in ("(", "[", "{"):
            if depth == 0:
                return j + 1
            depth -= 1
        elif depth == 0 and text in stops:
            return j + 1
    return 0


def alias_net_strings(source: str, toks: list[Token], message: str) -> str | None:
    """Rename each ``string(...)`` call the checker rejected for an IP or CIDR argument to
    STRING_ALIAS; None if there is none."""
    renamed = False
    for m in STRING_OF_NET.finditer(message):
        at = offset(source, int(m.group(1)), int(m.group(2)))
        call = next((i for i, t in enumerate(toks) if t.start == at and t.text == "("), None)
        if call is None or call == 0 or toks[call - 1].text != "string":
            return None
        name = toks[call - 1]
        source = source[: name.start] + STRING_ALIAS + source[name.end :]
        renamed = True
    return source if renamed else None


def widen_numeric_comparisons(source: str, toks: list[Token], message: str) -> str | None:
    """Wrap the left operand of each mixed-type numeric comparison the checker rejected in
    ``dyn()``; None unless those are the only errors.

    cel-go declares ``_<_(int, double)`` and friends (CrossTypeNumericComparisons); the C++
    checker does not, and its declarations cannot be extended, while its runtime compares
    such dyn values correctly.
    """
    errors = _ERROR_LINE.findall(message)
    if not errors:
        return None
    inserts: list[tuple[int, int, str]] = []
    for line, col, text in errors:
        m = _MIXED_NUMERIC.fullmatch(text.strip())
        if m is None or m.group(1) == m.group(2):
            return None
        at = offset(source, int(line), int(col))
        op = next((i for i, t in enumerate(toks) if t.start == at and t.text in _RELATIONS), None)
        if op is None:
            return None
        inserts += [(toks[_left_operand_start(toks, op)].start, 1, "dyn("), (toks[op].start, 0, ")")]
    for pos, _, text in sorted(inserts, reverse=True):
        source = source[:pos] + text + source[pos:]
    return source


# Chains of this many ``+`` operands or more are regrouped when the parser's depth limit is hit,
# up to cel-go's own limit (a parse recursion depth of 250, some of it taken by the levels
# above a sum): longer chains stay a compile error.
MIN_BALANCED_OPERANDS = 4
# cel-go's parser stops at a rule nesting depth of 250 (parser/parser.go recursionListener);
# each bracket level nests one more expression below the outermost.
MAX_BRACKET_DEPTH = 250
MAX_BALANCED_OPERANDS = 240
# After these a ``-`` is a sign, not a subtraction.
_UNARY_MINUS_AFTER = _OPERAND_STOPS | {"+", "-", "*", "/", "%", "!", "(", "[", "{"}


def without_doubled_parentheses(source: str, toks: list[Token]) -> str | None:
    """``source`` with the inner pair of every ``((...))`` blanked out; None if there is none.

    Each pair of parentheses is a nesting level for the C++ parser (limit 32); a pair directly
    inside another changes nothing. Blanks keep error positions. Brackets nested as deep as
    cel-go's limit (MAX_BRACKET_DEPTH) stay, for that to be a compile error here too.
    """
    depth = deepest = 0
    for tok in toks:
        if tok.text in ("(", "[", "{"):
            depth += 1
            deepest = max(deepest, depth)
        elif tok.text in (")", "]", "}"):
            depth -= 1
    if deepest >= MAX_BRACKET_DEPTH:
        return None
    blanked = list(source)
    for i in range(1, len(toks)):
        if toks[i].text != "(" or toks[i - 1].text != "(":
            continue
        inner, outer = closing(toks, i), closing(toks, i - 1)
        if inner is not None and outer is not None and inner + 1 == outer:
            blanked[toks[i].start] = blanked[toks[inner].start] = " "
    result = "".join(blanked)
    return result if result != source else None


def balanced_sums(source: str, toks: list[Token]) -> str | None:
    """``source`` with every chain ``a + b + c + ...`` regrouped as ``((a + b) + (c + d))``;
    None if there is none.

    The C++ parser gives up at a nesting depth of 32, and a left-associated chain nests one
    level per operand, while cel-go takes about 250. Regrouping keeps the operands' order, so
    concatenating strings, bytes and lists gives the same result; additions of numbers could
    differ only where an intermediate sum overflows or rounds.
    """
    inserts: list[tuple[int, str]] = []
    for operands in _sum_chains(toks):
        if len(operands) > MAX_BALANCED_OPERANDS:
            return None
        _group(toks, operands, inserts, outermost=True)
    if not inserts:
        return None
    for pos, text in sorted(inserts, key=lambda insert: insert[0], reverse=True):
        source = source[:pos] + text + source[pos:]
    return source


def _sum_chains(toks: list[Token]) -> Iterator[list[tuple[int, int]]]:
    """Operand token ranges of each maximal ``+`` chain (no binary ``-`` among its operators)."""
    region_starts = [0] + [i + 1 for i, t in enumerate(toks) if t.text in ("(", "[", "{")]
    for lo in region_starts:
        operands: list[tuple[int, int]] = []
        start, depth, subtracts = lo, 0, False
        for j in range(lo, len(toks) + 1):
            text = toks[j].text if j < len(toks) else ")"
            if text in ("(", "[", "{"):
                depth += 1
                continue
            if text in (")", "]", "}") and depth > 0:
                depth -= 1
                continue
            if depth > 0:
                continue
            binary = j > start
            if text == "+" and binary:
                operands.append((start, j))
                start = j + 1
            elif text == "-" and binary and toks[j - 1].text not in _UNARY_MINUS_AFTER:
                subtracts = True
            elif text in _OPERAND_STOPS or text in (")", "]", "}"):
                operands.append((start, j))
                if len(operands) >= MIN_BALANCED_OPERANDS and not subtracts:
                    yield operands
                operands, start, subtracts = [], j + 1, False
                if text in (")", "]", "}"):
                    break


def _group(
    toks: list[Token], operands: list[tuple[int, int]], inserts: list[tuple[int, str]], outermost: bool
) -> None:
    """Parenthesize ``operands`` as a balanced tree, the left half the bigger one (as in
    ``((a + b) + c)``, a left-associated sum)."""
    if len(operands) == 1:
        return
    if not outermost:
        inserts.append((toks[operands[0][0]].start, "("))
        inserts.append((toks[operands[-1][1] - 1].end, ")"))
    mid = (len(operands) + 1) // 2
    _group(toks, operands[:mid], inserts, outermost=False)
    _group(toks, operands[mid:], inserts, outermost=False)
