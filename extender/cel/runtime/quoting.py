"""Go's ``%q`` of a string, which Kubernetes' CEL libraries print in values and errors."""

from __future__ import annotations

from typing import Final

_GO_ESCAPES: Final = {
    "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
}


def go_quote(s: str) -> str:
    """Double quotes, C escapes, other control characters as ``\\x``, other non-printable runes as
    ``\\u``/``\\U`` (strconv.Quote)."""
    out = ['"']
    for ch in s:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)
