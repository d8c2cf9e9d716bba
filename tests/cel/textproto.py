"""A small reader for protobuf text format, enough for cel-spec's conformance test files.

Messages become dicts mapping a field name to the list of its values (every field may repeat
in text format); scalars stay as the token text, strings as ``bytes`` (text format escapes
bytes, and ``string_value`` and ``bytes_value`` differ only in how the bytes are read).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Message = dict[str, list[object]]

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<name>\[[A-Za-z][^\]]*\]|[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<number>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|inf|nan)[fF]?)
  | (?P<punct>[{}<>:;,\[\]])
    """,
    re.VERBOSE,
)

_SIMPLE_ESCAPES = {
    "n": b"\n",
    "r": b"\r",
    "t": b"\t",
    "\\": b"\\",
    "'": b"'",
    '"': b'"',
    "a": b"\a",
    "b": b"\b",
    "f": b"\f",
    "v": b"\v",
    "?": b"?",
}


class TextprotoError(ValueError):
    """The text is not protobuf text format this reader understands."""


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    at: int


def _unescape(body: str) -> bytes:
    out = bytearray()
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out += ch.encode("utf-8")
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _SIMPLE_ESCAPES:
            out += _SIMPLE_ESCAPES[nxt]
            i += 2
        elif nxt in "xX":
            digits = re.match(r"[0-9a-fA-F]{1,2}", body[i + 2 :])
            if digits is None:
                raise TextprotoError(f"bad \\x escape in {body!r}")
            out.append(int(digits.group(), 16))
            i += 2 + len(digits.group())
        elif nxt in "uU":
            width = 4 if nxt == "u" else 8
            out += chr(int(body[i + 2 : i + 2 + width], 16)).encode("utf-8", "surrogatepass")
            i += 2 + width
        elif nxt in "01234567":
            digits = re.match(r"[0-7]{1,3}", body[i + 1 :])
            assert digits is not None
            out.append(int(digits.group(), 8) & 0xFF)
            i += 1 + len(digits.group())
        else:
            raise TextprotoError(f"unknown escape \\{nxt} in {body!r}")
    return bytes(out)


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise TextprotoError(f"unexpected character {text[pos]!r} at offset {pos}")
        kind = match.lastgroup or ""
        if kind != "space":
            tokens.append(_Token(kind, match.group(), pos))
        pos = match.end()
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.pos = 0

    def _peek(self) -> _Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _next(self) -> _Token:
        token = self._peek()
        if token is None:
            raise TextprotoError("unexpected end of input")
        self.pos += 1
        return token

    def message(self, close: str | None) -> Message:
        fields: Message = {}
        while True:
            token = self._peek()
            if token is None:
                if close is not None:
                    raise TextprotoError(f"missing {close!r}")
                return fields
            if close is not None and token.text == close:
                self.pos += 1
                return fields
            if token.text in ",;":
                self.pos += 1
                continue
            name = self._next()
            if name.kind != "name":
                raise TextprotoError(f"expected a field name at offset {name.at}, got {name.text!r}")
            if self._peek() is not None and self._peek().text == ":":  # type: ignore[union-attr]
                self.pos += 1
            fields.setdefault(name.text, []).extend(self._values())

    def _values(self) -> list[object]:
        token = self._peek()
        if token is not None and token.text == "[":
            self.pos += 1
            values: list[object] = []
            while self._peek() is not None and self._peek().text != "]":  # type: ignore[union-attr]
                values.append(self._value())
                if self._peek() is not None and self._peek().text == ",":  # type: ignore[union-attr]
                    self.pos += 1
            self._next()
            return values
        return [self._value()]

    def _value(self) -> object:
        token = self._next()
        if token.text in "{<":
            return self.message("}" if token.text == "{" else ">")
        if token.kind == "string":
            data = _unescape(token.text[1:-1])
            # Adjacent string literals concatenate, as in C.
            while (following := self._peek()) is not None and following.kind == "string":
                self.pos += 1
                data += _unescape(following.text[1:-1])
            return data
        if token.kind in ("number", "name"):
            return token.text
        raise TextprotoError(f"unexpected {token.text!r} at offset {token.at}")


def parse(text: str) -> Message:
    """Parse one text-format message (a whole file)."""
    return _Parser(text).message(None)
