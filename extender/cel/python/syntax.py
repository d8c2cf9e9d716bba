"""CEL source -> a small expression tree, using cel-python's Lark grammar for the parse.

cel-python's grammar lacks optional syntax (``a.?b``, ``a[?k]``, ``[?e]``, ``{?k: v}``) and
backtick-quoted field names (``a.`b-c```), so those are rewritten to reserved marker calls
before parsing and turned back into dedicated nodes here. Literals are decoded with CEL's
escape rules (cel-python's lexer accepts some invalid escapes).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import celpy
from celpy.celparser import CELParser
from lark import Lark, Token, Tree
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedEOF, UnexpectedToken

from extender.cel.runtime.values import INT_MAX, INT_MIN, UINT_MAX, UInt

# cel-go's parser stops at a rule nesting depth of 250 (parser/parser.go recursionListener);
# each bracket level nests one more expression below the outermost.
MAX_BRACKET_DEPTH = 250

_OPT_SELECT = "zzOptSelect__"
_OPT_INDEX = "zzOptIndex__"
_OPT_ELEMENT = "zzOptElement__"
# A backtick-quoted field name (cel-go's ESC_IDENTIFIER, on in Kubernetes' environment:
# cel-go's cel.feature.backtick_escape_syntax), selected with ``.`` or ``.?``.
_QUOTED_SELECT = "zzOptQuoted__"
_SELECTED_NAME = re.compile(r"\s*(?:([_a-zA-Z][_a-zA-Z0-9]*)|`([a-zA-Z0-9_./\- ]+)`)")

RESERVED = frozenset(
    {
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "in",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    }
)


class ParseFailure(Exception):
    """Syntax error; the message is shown to the user."""


@dataclass(frozen=True, slots=True)
class Lit:
    value: Any


@dataclass(frozen=True, slots=True)
class Ident:
    name: str


@dataclass(frozen=True, slots=True)
class Select:
    operand: Any
    field: str
    optional: bool = False


@dataclass(frozen=True, slots=True)
class Index:
    operand: Any
    index: Any
    optional: bool = False


@dataclass(frozen=True, slots=True)
class Call:
    function: str
    target: Any  # None for a global call
    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Struct:
    """A message literal ``pkg.Name{field: e, ...}``."""

    name: str
    fields: tuple[tuple[str, Any], ...]


@dataclass(frozen=True, slots=True)
class ListLit:
    elements: tuple[Any, ...]
    optional: frozenset[int] = frozenset()  # indexes of ``?e`` elements


@dataclass(frozen=True, slots=True)
class MapLit:
    entries: tuple[tuple[Any, Any], ...]
    optional: frozenset[int] = frozenset()  # indexes of ``?k: v`` entries


@dataclass(frozen=True, slots=True)
class Cond:
    condition: Any
    then: Any
    otherwise: Any


@dataclass(frozen=True, slots=True)
class And:
    left: Any
    right: Any


@dataclass(frozen=True, slots=True)
class Or:
    left: Any
    right: Any


_BINARY = {
    "relation_lt": "_<_",
    "relation_le": "_<=_",
    "relation_gt": "_>_",
    "relation_ge": "_>=_",
    "relation_eq": "_==_",
    "relation_ne": "_!=_",
    "relation_in": "@in",
    "addition_add": "_+_",
    "addition_sub": "_-_",
    "multiplication_mul": "_*_",
    "multiplication_div": "_/_",
    "multiplication_mod": "_%_",
}


# The alternative of cel-python's FLOAT_LIT that allows nothing after the dot.
_TRAILING_DOT_FLOAT = '/-?/ DIGIT+ "." DIGIT* EXPONENT? | '


# One entry (no argument): the parser of a fixed grammar, which parsing never changes; built
# on first use because it takes a while, then shared by every engine, like the code itself.
@cache
def _lark() -> Lark:
    """cel-python's grammar and identifier/literal callback, without position tracking
    (which roughly doubles cel-python's own parse time and is never used here)."""
    grammar = (Path(celpy.__file__).parent / "cel.lark").read_text()
    # cel-python also reads ``1.`` as a double, which makes ``1.includes(1)`` the double ``1.``,
    # the keyword ``in`` and the name ``cludes``; CEL's grammar needs a digit after the dot.
    if _TRAILING_DOT_FLOAT not in grammar:
        raise RuntimeError("cel-python's grammar changed: FLOAT_LIT is not the expected rule")
    grammar = grammar.replace(_TRAILING_DOT_FLOAT, "")
    return Lark(
        grammar,
        parser="lalr",
        start="expr",
        g_regex_flags=re.M,
        lexer_callbacks={"IDENT": CELParser.ambiguous_literals},
        propagate_positions=False,
        maybe_placeholders=False,
        priority="invert",
    )


def parse(source: str) -> Any:
    """Parse CEL ``source`` into the node classes above; raise :class:`ParseFailure`."""
    if "zzOpt" in source:
        raise ParseFailure("reserved identifier prefix 'zzOpt'")
    text = _rewrite_optional_syntax(source)
    try:
        tree = _lark().parse(text)
    except UnexpectedEOF:
        raise ParseFailure("Syntax error: mismatched input '<EOF>'") from None
    except UnexpectedToken as e:
        found = "<EOF>" if e.token.type == "$END" else str(e.token)
        raise ParseFailure(f"Syntax error: mismatched input '{found}' at column {e.column}") from None
    except UnexpectedCharacters as e:
        pos = e.pos_in_stream
        char = text[pos] if pos is not None and 0 <= pos < len(text) else "?"
        message = f"token recognition error at: '{char}' (column {e.column})"
        raise ParseFailure(f"Syntax error: {message}") from None
    except LarkError as e:
        raise ParseFailure(f"Syntax error: {e}") from None
    return _convert(tree)


_ENDS_WITH_IN = re.compile(r"(?<![\w.])in$")
_STRING_START = re.compile(r"""[rRbB]{0,2}('''|\"\"\"|'|")""")


@dataclass(slots=True)
class _Bracket:
    """An open bracket while rewriting: what closes it, whether it starts a list or map
    literal, and the state of the element being read."""

    closer: str
    literal: bool
    marked: bool = False  # the element began with ``?`` and its marker call is open
    ternaries: int = 0  # ``?`` of conditionals in the element still waiting for their ``:``


def _rewrite_optional_syntax(source: str) -> str:
    """Turn ``x.?f`` into ``x.zzOptSelect__("f")``, ``x[?k]`` into ``x.zzOptIndex__(k)`` and an
    optional element ``?e`` of a list (or key ``?k`` of a map) into ``zzOptElement__(e)``,
    leaving string literals and comments untouched."""
    return _OptionalRewrite(source).run()


class _OptionalRewrite:
    """One left-to-right scan of an expression for :func:`_rewrite_optional_syntax`: each step
    either copies a literal or comment whole, rewrites a selection, marks an optional element,
    or follows the brackets; ``last_sig`` is the last significant character written."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.out: list[str] = []
        self.open_brackets: list[_Bracket] = []
        self.i = 0
        self.last_sig = ""

    def run(self) -> str:
        source, n = self.source, len(self.source)
        while self.i < n:
            c = source[self.i]
            if self._copied_whole(c) or self._selection(c) or self._element(c) or self._bracket(c):
                continue
            self.out.append(c)
            if not c.isspace():
                self.last_sig = c
            self.i += 1
        return "".join(self.out)

    def _copied_whole(self, c: str) -> bool:
        """A string literal or a comment, copied unchanged."""
        source, i = self.source, self.i
        m = _STRING_START.match(source, i) if c in "rRbB'\"" else None
        if m and (c in "'\"" or not (i > 0 and (source[i - 1].isalnum() or source[i - 1] == "_"))):
            end = _string_end(source, m.end(), m.group(1), raw="r" in m.group(0).lower()[:-1])
            self.out.append(source[i:end])
            self.last_sig = '"'
            self.i = end
            return True
        if c == "/" and source.startswith("//", i):
            j = source.find("\n", i)
            j = len(source) if j < 0 else j
            self.out.append(source[i:j])
            self.i = j
            return True
        return False

    def _selection(self, c: str) -> bool:
        """``.?f`` (optional selection) and ``.`f` `` (a quoted field name)."""
        if c != ".":
            return False
        source, i = self.source, self.i
        optional = i + 1 < len(source) and source[i + 1] == "?"
        m = _SELECTED_NAME.match(source, i + 2 if optional else i + 1)
        if m and optional:
            self.out.append(f'.{_OPT_SELECT}("{m.group(1) or m.group(2)}")')
        elif m and m.group(2):
            self.out.append(f'.{_QUOTED_SELECT}("{m.group(2)}")')
        else:
            return False
        self.i = m.end()
        self.last_sig = ")"
        return True

    def _element(self, c: str) -> bool:
        """An optional element's ``?`` opens its marker; the ternaries and separators of the
        innermost bracket decide where the marker closes. True when ``c`` was consumed."""
        top = self.open_brackets[-1] if self.open_brackets else None
        if top is None:
            return False
        if c == "?":
            if top.literal and self.last_sig in ("[", "{", ","):
                self.out.append(f"{_OPT_ELEMENT}(")
                top.marked = True
                self.i += 1
                self.last_sig = "("
                return True
            top.ternaries += 1
        elif c == ":":
            if top.ternaries:
                top.ternaries -= 1
            elif top.marked and top.closer == "}":
                self.out.append(")")
                top.marked = False
        elif c == ",":
            if top.marked:
                self.out.append(")")
            top.marked, top.ternaries = False, 0
            if top.closer == "}" or (top.closer == "]" and top.literal):
                return self._trailing_comma_dropped(top.closer)
        return False

    def _trailing_comma_dropped(self, closer: str) -> bool:
        """A comma before the ``]`` or ``}`` closing a literal (``[1,]``, ``[,]``, ``{k: v,}``),
        which CEL's grammar allows and cel-python's does not, is left out."""
        j = self.i + 1
        while j < len(self.source) and self.source[j].isspace():
            j += 1
        if self.source[j : j + 1] != closer:
            return False
        self.i += 1
        return True

    def _bracket(self, c: str) -> bool:
        """Brackets opened and closed (``x[?k]`` rewritten); True when ``c`` was consumed."""
        if c == "[" and self._index_opened():
            return True
        if c in "({":
            last = self.last_sig
            literal = c == "{" and (
                not (last.isalnum() or last == "_") or self._after_in()
            )
            self.open_brackets.append(_Bracket(")" if c == "(" else "}", literal=literal))
        if len(self.open_brackets) >= MAX_BRACKET_DEPTH:
            raise ParseFailure(f"expression recursion limit exceeded: {MAX_BRACKET_DEPTH}")
        if c in ")]}" and self.open_brackets:
            closed = self.open_brackets.pop()
            if closed.marked:
                self.out.append(")")
            if c == "]":
                self.out.append(closed.closer)
                self.i += 1
                self.last_sig = "]"
                return True
        return False

    def _after_in(self) -> bool:
        """Whether the last word written is the ``in`` operator (not a name ending in it)."""
        return self.last_sig == "n" and bool(_ENDS_WITH_IN.search("".join(self.out).rstrip()))

    def _index_opened(self) -> bool:
        """A ``[``: an optional index ``[?k]`` is rewritten (True); else the bracket is pushed,
        an index or a list literal, and the ``[`` is left to be copied (False)."""
        source, n, last = self.source, len(self.source), self.last_sig
        j = self.i + 1
        while j < n and source[j].isspace():
            j += 1
        is_index = last != "" and (last.isalnum() or last in ')]}_"')
        if is_index and self._after_in():
            is_index = False  # ``x in [...]``: a list after the operator
        if j < n and source[j] == "?" and is_index:
            self.out.append(f".{_OPT_INDEX}(")
            self.open_brackets.append(_Bracket(")", literal=False))
            self.i = j + 1
            self.last_sig = "("
            return True
        self.open_brackets.append(_Bracket("]", literal=not is_index))
        return False


def _string_end(source: str, start: int, quote: str, raw: bool) -> int:
    i = start
    while i < len(source):
        if not raw and source[i] == "\\":
            i += 2
            continue
        if source.startswith(quote, i):
            return i + len(quote)
        i += 1
    return len(source)


# The grammar's precedence levels, which wrap a single child when their operator is absent.
_WRAPPERS = frozenset(
    {
        *("expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication"),
        *("unary", "member", "primary"),
    }
)


def _convert(t: Any) -> Any:
    """Map one Lark subtree to a node; unwraps the grammar's single-child precedence levels."""
    while True:
        data = t.data
        kids = t.children
        if data in _WRAPPERS and len(kids) == 1:
            t = kids[0]
            continue
        break
    if data == "expr":
        return Cond(_convert(kids[0]), _convert(kids[1]), _convert(kids[2]))
    if data in ("conditionalor", "conditionaland"):
        return _balanced(Or if data == "conditionalor" else And, _chain_operands(t))
    if data in ("relation", "addition", "multiplication"):
        op_tree, right = kids
        fn = _BINARY[op_tree.data]
        return Call(fn, None, (_convert(op_tree.children[0]), _convert(right)))
    if data == "unary":
        return _unary(t)
    if data == "member_dot":
        name = str(kids[1])
        # cel-go rejects reserved words only as root identifiers; `in` is its own token there.
        if name == "in":
            raise ParseFailure("Syntax error: mismatched input 'in' expecting IDENTIFIER")
        return Select(_convert(kids[0]), name)
    if data == "member_dot_arg":
        target = _convert(kids[0])
        name = str(kids[1])
        args = _convert_list(kids[2]) if len(kids) > 2 else ()
        if name == _OPT_SELECT:
            return Select(target, args[0].value, optional=True)
        if name == _QUOTED_SELECT:
            return Select(target, args[0].value)
        if name == _OPT_INDEX:
            if len(args) != 1:
                raise ParseFailure("Syntax error: optional index takes exactly one expression")
            return Index(target, args[0], optional=True)
        return Call(name, target, args)
    if data == "member_index":
        return Index(_convert(kids[0]), _convert(kids[1]))
    if data == "member_object":
        type_name = qualified_name(_convert(kids[0]))
        if type_name is None or not _names_type(kids[0]):
            raise ParseFailure("Syntax error: mismatched input '{'")
        inits = kids[1].children if len(kids) > 1 else []
        fields = tuple((str(f), _convert(v)) for f, v in zip(inits[0::2], inits[1::2], strict=True))
        return Struct(type_name, fields)
    if data in ("ident_arg", "dot_ident_arg"):
        name = str(kids[0])
        _check_ident(name)
        if name == _OPT_ELEMENT:
            raise ParseFailure("Syntax error: mismatched input '?'")
        return Call(name, None, _convert_list(kids[1]) if len(kids) > 1 else ())
    if data in ("ident", "dot_ident"):
        name = str(kids[0])
        _check_ident(name)
        return Ident(name)
    if data == "paren_expr":
        return _convert(kids[0])
    if data == "list_lit":
        elements = [_element(k) for k in kids[0].children] if kids else []
        return ListLit(tuple(e for e, _ in elements), _marked(elements))
    if data == "map_lit":
        if not kids:
            return MapLit(())
        items = kids[0].children
        keys = [_element(k) for k in items[0::2]]
        values = [_convert(v) for v in items[1::2]]
        return MapLit(tuple(zip((k for k, _ in keys), values, strict=True)), _marked(keys))
    if data == "literal":
        return Lit(_literal(kids[0]))
    raise ParseFailure(f"Syntax error: unsupported construct {data}")


def qualified_name(node: Any) -> str | None:
    """The dotted name ``node`` spells (``google.protobuf.Int32Value``), if it is one."""
    if type(node) is Ident:
        return node.name
    if type(node) is Select and not node.optional:
        prefix = qualified_name(node.operand)
        return None if prefix is None else f"{prefix}.{node.field}"
    return None


def _names_type(t: Any) -> bool:
    """Whether the parse tree ``t`` is a dotted name, which alone may start a message literal
    in CEL's grammar (cel-python's also admits any member, ``(a){}``)."""
    while t.data in ("member", "primary") and len(t.children) == 1:
        t = t.children[0]
    if t.data == "member_dot":
        return _names_type(t.children[0])
    return t.data in ("ident", "dot_ident")


def _element(t: Any) -> tuple[Any, bool]:
    """A list element or map key, and whether it was written ``?e`` (see _rewrite_optional_syntax)."""
    while t.data in _WRAPPERS and len(t.children) == 1:
        t = t.children[0]
    if t.data == "ident_arg" and str(t.children[0]) == _OPT_ELEMENT:
        args = _convert_list(t.children[1]) if len(t.children) > 1 else ()
        if len(args) != 1:
            raise ParseFailure("Syntax error: mismatched input '?'")
        return args[0], True
    return _convert(t), False


def _marked(elements: list[tuple[Any, bool]]) -> frozenset[int]:
    return frozenset(i for i, (_, optional) in enumerate(elements) if optional)


def _chain_operands(t: Tree[Any]) -> list[Any]:
    """The operands of a left-deep ``a || b || c`` chain, walked without recursion."""
    rights = []
    node = t
    while node.data == t.data and len(node.children) == 2:
        rights.append(node.children[1])
        node = node.children[0]
    return [_convert(n) for n in [node, *reversed(rights)]]


def _balanced(kind: type, operands: list[Any]) -> Any:
    """cel-go balances ``&&``/``||`` chains, so a long chain is shallow (and evaluates alike)."""
    if len(operands) == 1:
        return operands[0]
    mid = len(operands) // 2
    return kind(_balanced(kind, operands[:mid]), _balanced(kind, operands[mid:]))


def _unary(t: Tree[Any]) -> Any:
    """cel-go folds a run of ``!`` or ``-`` by parity (``!!x`` is ``x``)."""
    ops = []
    node = t
    while node.data == "unary" and len(node.children) == 2:
        ops.append(node.children[0].data)
        node = node.children[1]
    operand = _convert(node)
    i = len(ops)
    while i > 0:
        j = i
        while j > 0 and ops[j - 1] == ops[i - 1]:
            j -= 1
        if (i - j) % 2:
            operand = Call("!_" if ops[i - 1] == "unary_not" else "-_", None, (operand,))
        i = j
    return operand


def _convert_list(exprlist: Tree[Any]) -> tuple[Any, ...]:
    return tuple(_convert(k) for k in exprlist.children)


def _check_ident(name: str) -> None:
    if name in RESERVED:
        raise ParseFailure(f"Syntax error: reserved identifier: {name}")


def _literal(tok: Token) -> Any:
    kind, text = tok.type, str(tok)
    if kind == "INT_LIT":
        value = _parse_int(text)
        if value < INT_MIN or value > INT_MAX:
            raise ParseFailure(f"invalid int literal: {text}")
        return value
    if kind == "UINT_LIT":
        value = _parse_int(text[:-1])
        if value < 0 or value > UINT_MAX:
            raise ParseFailure(f"invalid uint literal: {text}")
        return UInt(value)
    if kind == "FLOAT_LIT":
        double = float(text)
        if math.isinf(double):  # Go's ParseFloat reports the overflow, cel-go rejects the literal
            raise ParseFailure(f"invalid double literal: {text}")
        return double
    if kind in ("STRING_LIT", "MLSTRING_LIT"):
        return decode_string(text)
    if kind == "BYTES_LIT":
        return decode_bytes(text[1:])
    if kind == "BOOL_LIT":
        return text == "true"
    if kind == "NULL_LIT":
        return None
    raise ParseFailure(f"Syntax error: unexpected literal {text}")


def _parse_int(text: str) -> int:
    negative = text.startswith("-")
    body = text[1:] if negative else text
    value = int(body, 16) if body[:2].lower() == "0x" else int(body, 10)
    return -value if negative else value


_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "`": "`",
    "?": "?",
}


def _split_quotes(text: str) -> tuple[str, bool]:
    raw = text[0] in "rR"
    if raw:
        text = text[1:]
    q = 3 if text[:3] in ('"""', "'''") else 1
    return text[q:-q], raw


def decode_string(text: str) -> str:
    body, raw = _split_quotes(text)
    if raw:
        return body
    return "".join(_unescape(body, as_bytes=False))  # type: ignore[arg-type]


def decode_bytes(text: str) -> bytes:
    body, raw = _split_quotes(text)
    if raw:
        return body.encode("utf-8")
    return b"".join(_unescape(body, as_bytes=True))  # type: ignore[arg-type]


def _unescape(body: str, as_bytes: bool) -> list[str | bytes]:
    out: list[str | bytes] = []
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c != "\\":
            out.append(c.encode("utf-8") if as_bytes else c)
            i += 1
            continue
        if i + 1 >= n:
            raise ParseFailure("Syntax error: invalid escape at end of string")
        e = body[i + 1]
        if e in _SIMPLE_ESCAPES:
            s = _SIMPLE_ESCAPES[e]
            out.append(s.encode() if as_bytes else s)
            i += 2
        elif e in "xX" and re.fullmatch(r"[0-9a-fA-F]{2}", body[i + 2 : i + 4]):
            v = int(body[i + 2 : i + 4], 16)
            out.append(bytes([v]) if as_bytes else chr(v))
            i += 4
        elif e in "uU" and as_bytes:
            raise ParseFailure("Syntax error: unicode escape sequences are not allowed in bytes literals")
        elif e in "uU":
            width = 4 if e == "u" else 8
            digits = body[i + 2 : i + 2 + width]
            if not re.fullmatch(f"[0-9a-fA-F]{{{width}}}", digits):
                raise ParseFailure(f"Syntax error: invalid \\{e} escape")
            cp = int(digits, 16)
            if 0xD800 <= cp <= 0xDFFF or cp > 0x10FFFF:
                raise ParseFailure(f"Syntax error: invalid unicode code point {digits}")
            out.append(chr(cp).encode("utf-8") if as_bytes else chr(cp))
            i += 2 + width
        elif e in "0123" and re.fullmatch(r"[0-7]{3}", body[i + 1 : i + 4]):
            v = int(body[i + 1 : i + 4], 8)
            out.append(bytes([v]) if as_bytes else chr(v))
            i += 4
        else:
            raise ParseFailure(f"Syntax error: invalid escape sequence \\{e}")
    return out
