"""cel-go's wording for the C++ runtime's compile and runtime errors."""

from __future__ import annotations

import re

from extender.cel import CelCompileError
from extender.cel.cpp.library import LIST_FUNCTION_PROBES
from extender.cel.cpp.tokens import Token, is_root, position, texts
from extender.cel.cpp.types import (
    CALL_ALIASES,
    GLOBAL_ALIASES,
    KEY_FIELD,
    STRING_ALIAS,
    TYPE_PACKAGES,
    status_text,
)
from extender.cel.runtime import k8s_functions as lib

# Library types that Kubernetes registers with cel.Types, which makes their names type values.
TYPE_VALUES = frozenset({("net", ".", "IP"), ("net", ".", "CIDR")})

MIXED_LISTS = re.compile(r"found no matching overload for '_\+_' applied to '\(list\((.*)\), list\((.*)\)\)'")
_UNDECLARED = re.compile(r"ERROR: <input>:(\d+):(\d+): undeclared reference to '([^']+)'")


# cel-go's wording where the C++ runtime's differs.
_RUNTIME_WORDING = {"divide by zero": "division by zero"}


def runtime_text(raw: str) -> str:
    text = _unalias(status_text(raw))
    if text.startswith("Key not found in map : "):
        key = text.removeprefix("Key not found in map : ")
        if len(key) >= 2 and key[0] == key[-1] == '"':
            key = key[1:-1]
        return f"no such key: {key}"
    if text.startswith("No matching overloads found : "):
        return "no such overload: " + text.removeprefix("No matching overloads found : ")
    if "Iteration budget exceeded" in text:
        return "operation cancelled: actual cost limit exceeded"
    return _RUNTIME_WORDING.get(text, text)


def _unalias(text: str) -> str:
    for name, alias in CALL_ALIASES.items():
        text = text.replace(alias, name)
    for name, alias in GLOBAL_ALIASES.items():
        text = text.replace(f"'{alias}'", f"'{name}'").replace(f"{alias}(", f"{name}(")
    text = text.replace(f"'{STRING_ALIAS}'", "'string'").replace(f"{STRING_ALIAS}(", "string(")
    for name, probe in LIST_FUNCTION_PROBES.items():
        text = text.replace(f".{probe}(", f".{name}(")
        # cel-go spells a member call's argument types as receiver.(args).
        text = re.sub(rf"'{probe}' applied to '\((.*?)\)'", rf"'{name}' applied to '\1.()'", text)
    return text


def compile_text(raw: str, toks: list[Token] | None) -> str:
    text = _unalias(status_text(raw))
    for m in _UNDECLARED.finditer(text):
        name = m.group(3)
        if name.startswith("device."):
            return f"ERROR: <input>:{m.group(1)}:{m.group(2)}: undefined field '{name.split('.', 1)[1]}'"
        if name in lib.GLOBAL_ONLY and toks is not None and _called_as_member(toks, name):
            # The C++ checker calls it undeclared; cel-go finds no overload for that call style.
            return (
                f"ERROR: <input>:{m.group(1)}:{m.group(2)}: found no matching overload for '{name}'"
                f" called as a member function (it is global: {name}(...))"
            )
        if name in lib.ALL and toks is not None and _called(toks, name):
            return lib.unsupported_message(name)
    return text


def _called_as_member(toks: list[Token], name: str) -> bool:
    return any(
        t.text == name and i > 0 and toks[i - 1].text == "." and texts(toks, i + 1, 1) == ("(",)
        for i, t in enumerate(toks)
    )


def _called(toks: list[Token], name: str) -> bool:
    return any(t.text == name and texts(toks, i + 1, 1) == ("(",) for i, t in enumerate(toks))


def lint(source: str, toks: list[Token]) -> None:
    """Reject what the message encoding would otherwise expose to expressions, and the name
    ``dyn`` standing alone, which the C++ checker takes for the type and cel-go declares only
    as the function ``dyn(x)``."""
    # ``dyn`` followed by a comma may name a loop or bind variable: then it is declared.
    dyn_declared = any(t.text == "dyn" and texts(toks, i + 1, 1) == (",",) for i, t in enumerate(toks))
    for i, tok in enumerate(toks):
        if tok.text == "dyn" and not dyn_declared and is_root(toks, i) and texts(toks, i + 1, 1) != ("(",):
            line, col = position(source, tok.start)
            raise CelCompileError(
                f"ERROR: <input>:{line}:{col}: undeclared reference to 'dyn' (in container '')", source
            )
        if tok.text == KEY_FIELD:
            line, col = position(source, tok.start)
            raise CelCompileError(f"ERROR: <input>:{line}:{col}: undefined field '{tok.text}'", source)
        if tok.text in TYPE_PACKAGES and is_root(toks, i) and texts(toks, i + 1, 1) == (".",):
            if texts(toks, i, 3) in TYPE_VALUES and texts(toks, i + 3, 1) != ("{",):
                continue  # the type's name as a value: type(ip("::1")) == net.IP
            line, col = position(source, tok.start)
            raise CelCompileError(
                f"ERROR: <input>:{line}:{col}: undeclared reference to '{tok.text}'", source
            )
