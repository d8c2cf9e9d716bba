"""Kubernetes' homogeneous-literal validator over the C++ checker's result.

Kubernetes' base environment (k8s.io/apiserver/pkg/cel/environment/base.go, since 1.29) adds
``cel.ValidateHomogeneousAggregateLiterals()``: after checking, the entries of every list and
map literal must have *equivalent* types (cel-go cel/validator.go), so ``dyn`` is a type of its
own and ``[attr, 1]`` is rejected although the checker types it list(dyn). Literals inside a
``format`` call are exempt (the strings extension's validator configures that).

The C++ library exposes the checked expression only serialized (``cel.expr.CheckedExpr`` in an
``Any``), and no Python classes for it, so this reads the few fields it needs off the protobuf
wire format.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

# Field numbers of cel/expr/checked.proto and syntax.proto.
_ANY_VALUE = 2
_CHECKED_TYPE_MAP, _CHECKED_EXPR, _CHECKED_SOURCE_INFO = 3, 4, 5
_SOURCE_POSITIONS = 4
_EXPR_ID, _EXPR_SELECT, _EXPR_CALL, _EXPR_LIST, _EXPR_STRUCT, _EXPR_COMPREHENSION = 2, 5, 6, 7, 8, 9
_CALL_TARGET, _CALL_FUNCTION, _CALL_ARGS = 1, 2, 3
_LIST_ELEMENTS, _LIST_OPTIONAL_INDICES = 1, 2
_STRUCT_MESSAGE_NAME, _STRUCT_ENTRIES = 1, 2
_ENTRY_MAP_KEY, _ENTRY_VALUE, _ENTRY_OPTIONAL = 3, 4, 5
_COMPREHENSION_PARTS = (2, 4, 5, 6, 7)
_PRIMITIVES = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}
_WELL_KNOWN = {1: "any", 2: "google.protobuf.Timestamp", 3: "google.protobuf.Duration"}

Fields = dict[int, list[int | bytes]]


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> Fields:
    """A message's fields by number: varints as ints, everything else as bytes."""
    out: Fields = {}
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, pos = data[pos : pos + size], pos + size
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out.setdefault(number, []).append(value)
    return out


def _message(fields: Fields, number: int) -> bytes | None:
    values = fields.get(number)
    return values[-1] if values and isinstance(values[-1], bytes) else None


def _messages(fields: Fields, number: int) -> list[bytes]:
    return [v for v in fields.get(number, []) if isinstance(v, bytes)]


def _int(fields: Fields, number: int) -> int:
    values = fields.get(number)
    return values[-1] if values and isinstance(values[-1], int) else 0


def _text(fields: Fields, number: int) -> str:
    raw = _message(fields, number)
    return "" if raw is None else raw.decode("utf-8", "replace")


def _packed(fields: Fields, number: int) -> list[int]:
    out: list[int] = []
    for value in fields.get(number, []):
        if isinstance(value, int):
            out.append(value)
            continue
        pos = 0
        while pos < len(value):
            item, pos = _varint(value, pos)
            out.append(item)
    return out


def type_name(raw: bytes) -> str:
    """cel-go's spelling of a ``cel.expr.Type`` (type parameters all spelled alike, as cel-go's
    equivalence ignores their names)."""
    f = _fields(raw)
    if 1 in f:
        return "dyn"
    if 2 in f:
        return "null_type"
    if 3 in f:
        return _PRIMITIVES.get(_int(f, 3), "unknown")
    if 4 in f:
        return f"wrapper({_PRIMITIVES.get(_int(f, 4), 'unknown')})"
    if 5 in f:
        return _WELL_KNOWN.get(_int(f, 5), "unknown")
    if (inner := _message(f, 6)) is not None:
        return f"list({type_name(_message(_fields(inner), 1) or b'')})"
    if (inner := _message(f, 7)) is not None:
        m = _fields(inner)
        return f"map({type_name(_message(m, 1) or b'')}, {type_name(_message(m, 2) or b'')})"
    if 9 in f:
        return _text(f, 9)
    if 10 in f:
        return "_"
    if (inner := _message(f, 11)) is not None:
        return f"type({type_name(inner)})"
    if (inner := _message(f, 14)) is not None:
        a = _fields(inner)
        params = [type_name(p) for p in _messages(a, 2)]
        return f"{_text(a, 1)}({', '.join(params)})" if params else _text(a, 1)
    return "dyn" if not raw else "unknown"


def _optional_parameter(name: str) -> str:
    return name[len("optional_type(") : -1] if name.startswith("optional_type(") else name


@dataclass(frozen=True)
class Mismatch:
    offset: int  # code points into the checked source
    expected: str
    found: str


@dataclass
class _Walk:
    types: dict[int, bytes]
    positions: dict[int, int]
    exempt: frozenset[str]
    found: list[Mismatch] = field(default_factory=list)

    def type_of(self, expr: Fields, optional: bool) -> str | None:
        raw = self.types.get(_int(expr, _EXPR_ID))
        if raw is None:
            return None
        name = type_name(raw)
        return _optional_parameter(name) if optional else name

    def compare(self, entries: list[tuple[Fields, bool]]) -> None:
        first: str | None = None
        for expr, optional in entries:
            t = self.type_of(expr, optional)
            if t is None or _unconstrained(expr):
                continue
            if first is None:
                first = t
            elif t != first:
                self._mismatch(expr, first, t)
                return
        if first not in (None, "dyn"):
            return
        # An unconstrained entry keeps its constructor (cel-go binds its parameter to dyn)
        # beside dyn entries (``[dyn(1), []]`` mixes dyn and list(dyn)) and beside other
        # unconstrained ones (``[[], {}]``); an absent optional element's is dyn itself.
        for expr, optional in entries:
            free = _free_type(expr)
            if free is None or (free := _optional_parameter(free) if optional else free) == "dyn":
                continue
            if first is None:
                first = free
            elif free != first:
                self._mismatch(expr, first, free)
                return

    def _mismatch(self, expr: Fields, first: str, found: str) -> None:
        where = self.positions.get(_int(expr, _EXPR_ID), 0)
        self.found.append(Mismatch(where, first, found))

    def visit(self, raw: bytes, exempt: bool) -> None:
        expr = _fields(raw)
        if (select := _message(expr, _EXPR_SELECT)) is not None:
            self._visit_all([_message(_fields(select), 1)], exempt)
        elif (call := _message(expr, _EXPR_CALL)) is not None:
            c = _fields(call)
            exempt = exempt or _text(c, _CALL_FUNCTION) in self.exempt
            self._visit_all([_message(c, _CALL_TARGET), *_messages(c, _CALL_ARGS)], exempt)
        elif (lst := _message(expr, _EXPR_LIST)) is not None:
            items = _fields(lst)
            elements = _messages(items, _LIST_ELEMENTS)
            optional = set(_packed(items, _LIST_OPTIONAL_INDICES))
            if not exempt:
                self.compare([(_fields(e), i in optional) for i, e in enumerate(elements)])
            self._visit_all(elements, exempt)
        elif (struct := _message(expr, _EXPR_STRUCT)) is not None:
            self._visit_struct(_fields(struct), exempt)
        elif (comprehension := _message(expr, _EXPR_COMPREHENSION)) is not None:
            c = _fields(comprehension)
            self._visit_all([_message(c, n) for n in _COMPREHENSION_PARTS], exempt)

    def _visit_struct(self, struct: Fields, exempt: bool) -> None:
        entries = [_fields(e) for e in _messages(struct, _STRUCT_ENTRIES)]
        keys = [(_fields(k), False) for e in entries if (k := _message(e, _ENTRY_MAP_KEY)) is not None]
        values = [
            (_fields(v), bool(_int(e, _ENTRY_OPTIONAL)))
            for e in entries
            if (v := _message(e, _ENTRY_VALUE)) is not None
        ]
        if not exempt and keys:  # a map literal (a message construction has field keys)
            self.compare(keys)
            self.compare(values)
        for e in entries:
            self._visit_all([_message(e, _ENTRY_MAP_KEY), _message(e, _ENTRY_VALUE)], exempt)

    def _visit_all(self, exprs: Sequence[bytes | None], exempt: bool) -> None:
        for e in exprs:
            if e is not None:
                self.visit(e, exempt)


def _unconstrained(expr: Fields) -> bool:
    """An empty literal or ``optional.none()``: cel-go binds its type parameter to the other
    entries' type, which the C++ checker may leave as dyn."""
    return _free_type(expr) is not None


def _free_type(expr: Fields) -> str | None:
    """The type cel-go gives an unconstrained entry (see _unconstrained) beside dyn entries:
    its constructor over dyn; None for any other entry."""
    if (lst := _message(expr, _EXPR_LIST)) is not None:
        return None if _messages(_fields(lst), _LIST_ELEMENTS) else "list(dyn)"
    if (struct := _message(expr, _EXPR_STRUCT)) is not None:
        s = _fields(struct)
        return None if _messages(s, _STRUCT_ENTRIES) or _text(s, _STRUCT_MESSAGE_NAME) else "map(dyn, dyn)"
    if (call := _message(expr, _EXPR_CALL)) is not None:
        c = _fields(call)
        if _text(c, _CALL_FUNCTION) == "optional.none" and not _messages(c, _CALL_ARGS):
            return "optional_type(dyn)"
    return None


def _map_entries(fields: Fields, number: int) -> Iterator[tuple[int, bytes | int]]:
    for raw in _messages(fields, number):
        entry = _fields(raw)
        values = entry.get(2, [b""])
        yield _int(entry, 1), values[-1]


def literal_mismatches(serialized: bytes, exempt_functions: frozenset[str]) -> list[Mismatch]:
    """The literals of a serialized checked expression whose entries' types differ, each
    reported at its first entry of another type, as cel-go reports them."""
    wrapper = _fields(serialized)
    checked = _fields(_message(wrapper, _ANY_VALUE) or b"")
    root = _message(checked, _CHECKED_EXPR)
    if root is None:
        return []
    types = {k: v for k, v in _map_entries(checked, _CHECKED_TYPE_MAP) if isinstance(v, bytes)}
    source_info = _fields(_message(checked, _CHECKED_SOURCE_INFO) or b"")
    positions = {k: v for k, v in _map_entries(source_info, _SOURCE_POSITIONS) if isinstance(v, int)}
    walk = _Walk(types, positions, exempt_functions)
    walk.visit(root, False)
    return walk.found
