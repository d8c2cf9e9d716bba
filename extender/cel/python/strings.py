"""String functions: ``size``, regex (``matches``, ``find``, ``findAll``) and the strings extension v2.

Positions and sizes count code points; regexes are RE2 (as in Go); results follow cel-go's
``ext/strings.go`` including its range errors.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2

from extender.cel.runtime.k8s_functions import RE2_OPTIONS
from extender.cel.runtime.values import (
    MAX_STRING_SIZE,
    EvalError,
    check_size,
    type_name,
)


def size(v: Any) -> int:
    t = type(v)
    if t is str or t is bytes or t is list or t is tuple or isinstance(v, dict):
        return len(v)
    raise EvalError(f"no such overload: size({type_name(v)})")


def compile_regex(pattern: str) -> Any:
    try:
        return re2.compile(pattern, RE2_OPTIONS)  # errors go to the selector, not to stderr
    except re2.error as e:
        msg = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
        raise EvalError(f"invalid regex {pattern!r}: {msg}") from None


# A pure function of the pattern (a compiled RE2 is immutable; errors are not kept), bounded
# by least-recent eviction: shared by every engine, like the code itself.
@lru_cache(maxsize=1024)
def cached_regex(pattern: str) -> Any:
    """``compile_regex`` memoized: a pattern always compiles alike (errors are not kept)."""
    return compile_regex(pattern)


def matches(s: str, pattern: str) -> bool:
    return cached_regex(pattern).search(s) is not None


def find(s: str, pattern: str) -> str:
    m = cached_regex(pattern).search(s)
    return m.group(0) if m else ""


def find_all(s: str, pattern: str, limit: int = -1) -> list[str]:
    """Go's ``FindAllString``: an empty match right after the previous match is skipped."""
    regex = cached_regex(pattern)
    out: list[str] = []
    pos, previous_end = 0, -1
    while pos <= len(s) and len(out) != limit:
        m = regex.search(s, pos)
        if m is None:
            break
        start, end = m.span()
        accept = True
        if end == start:
            accept = start != previous_end
            pos = end + 1
        else:
            pos = end
        previous_end = end
        if accept:
            out.append(m.group(0))
    return out


def _range_error(i: int) -> EvalError:
    return EvalError(f"index out of range: {i}")


def char_at(s: str, i: int) -> str:
    if i < 0 or i > len(s):
        raise _range_error(i)
    return s[i : i + 1]


def index_of(s: str, sub_: str, offset: int = 0) -> int:
    if sub_ == "":
        return offset
    if offset < 0:
        raise _range_error(offset)
    # cel-go (ext/strings.go, released versions) finds nothing past the end.
    return -1 if offset >= len(s) else s.find(sub_, offset)


def last_index_of(s: str, sub_: str, offset: int | None = None) -> int:
    if sub_ == "":
        return len(s) if offset is None else offset
    if offset is None:
        return s.rfind(sub_)
    if offset < 0:
        raise _range_error(offset)
    return -1 if offset >= len(s) else s.rfind(sub_, 0, offset + len(sub_))


def ascii_case(s: str, upper: bool) -> str:
    table = _UPPER if upper else _LOWER
    return s.translate(table)


_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}
_UPPER = {c: c - 32 for c in range(ord("a"), ord("z") + 1)}


def replace(s: str, old: str, new: str, n: int = -1) -> str:
    count = s.count(old) if old else len(s) + 1
    if n >= 0:
        count = min(count, n)
    if len(s) + count * (len(new) - len(old)) > MAX_STRING_SIZE:
        raise EvalError("operation cancelled: actual cost limit exceeded")
    return s.replace(old, new, n if n >= 0 else -1)


def split(s: str, sep: str, n: int = -1) -> list[str]:
    if n == 0:
        return []
    if sep == "":
        chars = list(s)
        if 0 < n < len(chars):
            return [*chars[: n - 1], "".join(chars[n - 1 :])]
        return chars
    return s.split(sep, n - 1 if n > 0 else -1)


def substring(s: str, start: int, end: int | None = None) -> str:
    if end is None:
        end = len(s)
    elif start > end:
        raise EvalError(f"invalid substring range. start: {start}, end: {end}")
    if start < 0 or start > len(s):
        raise _range_error(start)
    if end < 0 or end > len(s):
        raise _range_error(end)
    return s[start:end]


# Go's unicode.IsSpace; Python's str.isspace also counts the separators U+001C..U+001F.
_NOT_GO_SPACE = frozenset("\x1c\x1d\x1e\x1f")


def trim(s: str) -> str:
    start, end = 0, len(s)
    while start < end and s[start].isspace() and s[start] not in _NOT_GO_SPACE:
        start += 1
    while end > start and s[end - 1].isspace() and s[end - 1] not in _NOT_GO_SPACE:
        end -= 1
    return s[start:end]


def join(items: Any, sep: str = "") -> str:
    for x in items:
        if type(x) is not str:
            raise EvalError(f"join: list element is {type_name(x)}, not string")
    return check_size(sep.join(items))


_QUOTE_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def quote(s: str) -> str:
    return '"' + "".join(_QUOTE_ESCAPES.get(c, c) for c in s) + '"'
