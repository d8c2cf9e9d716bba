"""Type-check a parsed CEL expression and turn it into nested Python closures.

cel-python does not type-check, but Kubernetes rejects ill-typed selectors before any device
is seen, so this pass reproduces cel-go's checker for the DRA environment (declared
``device`` variable, library signatures, homogeneous aggregate literals) and the program
builder's constant folding of type conversions. Each node becomes ``fn(ctx) -> value``;
errors are :class:`EvalError` exceptions, absorbed where CEL's commutative ``&&``/``||`` and
the ``exists``/``all`` macros say so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from extender.cel.python.evaluator import (
    CostLimitExceeded,
    Ctx,
    Fn,
    LoopCosts,
    build_call,
    build_comprehension,
    make_and,
    make_bind,
    make_bind_ref,
    make_cond,
    make_has,
    make_index,
    make_list,
    make_map,
    make_opt_map,
    make_or,
    make_select,
    make_wrapper,
)
from extender.cel.python.library import (
    CONVERSIONS,
    ENUM_CONSTANTS,
    FUNCTIONS,
    NOT_SUPPORTED,
    QUALIFIED_TYPE_IDENTS,
    REGEX_ARG,
    TYPE_IDENTS,
    Overload,
    unsupported_message,
)
from extender.cel.python.strings import compile_regex
from extender.cel.python.syntax import (
    And,
    Call,
    Cond,
    Ident,
    Index,
    ListLit,
    Lit,
    MapLit,
    Or,
    Select,
    Struct,
    qualified_name,
)
from extender.cel.python.wrappers import FIELD, JSON_MESSAGES, WRAPPERS, JsonMessage
from extender.cel.runtime.costs import (
    CALL_COST,
    LIST_CREATE_COST,
    MAP_CREATE_COST,
    SIZED_BY_NAME,
    SIZED_BY_OVERLOAD,
    STRUCT_CREATE_COST,
)
from extender.cel.runtime.formatting import check_format
from extender.cel.runtime.semver import Semver
from extender.cel.runtime.types import (
    BOOL,
    BYTES,
    DEVICE,
    DEVICE_FIELDS,
    DOUBLE,
    DYN,
    INT,
    NULL,
    STRING,
    TYPE,
    UINT,
    Type,
    display,
    join,
    list_of,
    map_of,
    optional_of,
    substitute,
    unify,
    unwrapped,
    wrapper_of,
)
from extender.cel.runtime.values import (
    CelType,
    EvalAbort,
    EvalError,
    UInt,
    check_qualifier,
    go_type_name,
    member_of,
)

_NOCONST = object()
# Scope key flagging a cel.bind variable, whose initializer cel-go evaluates lazily; only its
# presence counts (it maps to the variable's type, as every scope entry maps to a type).
_LAZY = "\0lazy "
_QUANTIFIERS = frozenset({"all", "exists", "exists_one", "existsOne"})
# existsOne is a macro of the two-variable comprehensions only (cel-go ext/comprehensions.go);
# with one variable it is an undeclared function, as cel-go answers.
_ONE_VARIABLE_MACROS = frozenset({"all", "exists", "exists_one", "filter"})


class CompileFailure(Exception):
    """The expression is not valid in the DRA environment; the message is cel-go's wording."""


@dataclass(slots=True)
class Compiled:
    type: Type
    fn: Fn
    const: Any = _NOCONST
    # The static part of the node's cost as cel-go counts it (extender.cel.runtime.costs):
    # charged by whoever evaluates the node; what depends on run time the node charges itself.
    cost: int = 0
    # A constant as cel-go's planner sees one: a literal, or a list, map or conversion of such
    # constants, which it evaluates up front (a conversion failing there is a compile error).
    planned: bool = False
    # The type's dyn stands for a type parameter cel-go leaves unbound (an empty literal,
    # optional.none(), an entry or field of those), which a literal's other entries bind.
    free: bool = False
    # An attribute for cel-go (a name and its selections and indexes): the cost it has as a
    # branch of ``?:``, where cel-go resolves it without charging the name itself (its
    # qualifiers and the expressions it is rooted in or indexed by still cost); None for
    # other nodes.
    branch_cost: int | None = None

    @property
    def is_const(self) -> bool:
        return self.const is not _NOCONST


def _literal_type(v: Any) -> Type:
    t = type(v)
    if t is bool:
        return BOOL
    if t is int:
        return INT
    if t is UInt:
        return UINT
    if t is float:
        return DOUBLE
    if t is str:
        return STRING
    if t is bytes:
        return BYTES
    if v is None:
        return NULL
    if t is CelType:
        return TYPE
    return DYN


def _check_qualifier(value: Any) -> None:
    """cel-go's planner turns a constant index into a qualifier (interpreter/attributes.go,
    NewQualifier); a constant of another kind fails the program's planning."""
    try:
        check_qualifier(value)
    except EvalError as e:
        raise CompileFailure(f"program instantiation failed: {e}") from None


def _const(value: Any, type_: Type, cost: int = 0, planned: bool = False) -> Compiled:
    return Compiled(type_, lambda ctx: value, value, cost, planned)


def _fold(compiled: Compiled, planned: bool) -> Compiled:
    """``compiled`` evaluated now. A constant cel-go's planner also computes up front costs
    nothing; any other still costs, on every evaluation, what cel-go charges to compute it.
    Raises EvalError (and CostLimitExceeded) as the evaluation does."""
    ctx = Ctx({})
    value = compiled.fn(ctx)
    return _const(value, compiled.type, 0 if planned else compiled.cost + ctx.cost, planned)


def _try_fold(compiled: Compiled, parts: list[Compiled], literal: bool = False) -> Compiled:
    """Evaluate a node whose inputs are all constants now; a failure stays a runtime error.
    ``literal``: the node is a list or map literal, planned constant when its parts are."""
    if not all(p.is_const for p in parts):
        return compiled
    planned = literal and all(p.planned for p in parts)
    try:
        return _fold(compiled, planned)
    except EvalAbort as e:
        if planned:  # Go panicked building the constant (a bytes map key): no program
            raise CompileFailure(f"cel-go panicked planning the program: {e}") from None
        return compiled
    except (EvalError, CostLimitExceeded):
        return compiled


class Compiler:
    """One expression's compilation; ``scope`` maps variable names to static types."""

    def __init__(self) -> None:
        # Depth of ``format`` calls around the node being compiled: their list literals are
        # exempt from the literal validator (cel-go's strings extension exempts them).
        self._format_depth = 0

    def compile(self, node: Any, scope: dict[str, Type]) -> Compiled:
        kind = type(node)
        if kind is Lit:
            return _const(node.value, _literal_type(node.value), planned=True)
        if kind is Ident:
            return self._ident(node.name, scope)
        if kind is Select:
            return self._select(node, scope)
        if kind is Index:
            return self._index(node, scope)
        if kind is Call:
            return self._call(node, scope)
        if kind is And or kind is Or:
            return self._logic(node, scope)
        if kind is Cond:
            return self._cond(node, scope)
        if kind is ListLit:
            return self._list(node, scope)
        if kind is MapLit:
            return self._map(node, scope)
        if kind is Struct:
            return self._struct(node, scope)
        raise CompileFailure(f"unsupported expression {node!r}")

    # --- names and selection ------------------------------------------------------------

    def _ident(self, name: str, scope: dict[str, Type]) -> Compiled:
        if name in scope:
            if _LAZY + name in scope:
                return Compiled(scope[name], make_bind_ref(name), cost=1, branch_cost=0)
            return Compiled(scope[name], lambda ctx: ctx.vars[name], cost=1, branch_cost=0)
        if name in TYPE_IDENTS:
            return _const(CelType(name), TYPE, cost=1)
        raise CompileFailure(f"undeclared reference to '{name}' (in container '')")

    def _field_type(self, t: Type, field: str) -> Type:
        if t == DEVICE:
            if field not in DEVICE_FIELDS:
                raise CompileFailure(f"undefined field '{field}'")
            return DEVICE_FIELDS[field]
        if t == DYN:
            return DYN
        if isinstance(t, tuple) and t[0] == "map":
            return t[2]
        if isinstance(t, tuple) and t[0] == "optional_type":
            return optional_of(_strip_optional(self._field_type(t[1], field)))
        raise CompileFailure(f"type '{display(t)}' does not support field selection")

    def _select(self, node: Select, scope: dict[str, Type]) -> Compiled:
        qualified = qualified_name(node)
        if qualified in QUALIFIED_TYPE_IDENTS and qualified.split(".", 1)[0] not in scope:
            return _const(CelType(qualified), TYPE, cost=1)
        if qualified is not None and qualified in ENUM_CONSTANTS and qualified.split(".", 1)[0] not in scope:
            return _const(ENUM_CONSTANTS[qualified], INT, planned=True)
        operand = self.compile(node.operand, scope)
        result = self._field_type(operand.type, node.field)
        if node.optional:
            result = optional_of(_strip_optional(result))
        fn = make_select(operand.fn, node.field, node.optional, operand.type == DEVICE)
        cost, branch_cost = _qualified(operand, 0)
        compiled = _try_fold(Compiled(result, fn, cost=cost, branch_cost=branch_cost), [operand])
        compiled.free = operand.free
        return compiled

    def _index(self, node: Index, scope: dict[str, Type]) -> Compiled:
        operand = self.compile(node.operand, scope)
        index = self.compile(node.index, scope)
        if index.planned or type(index.const) is CelType:
            _check_qualifier(index.const)
        result = self._element_type(operand.type, index.type)
        if node.optional:
            result = optional_of(_strip_optional(result))
        fn = make_index(operand.fn, index.fn, node.optional)
        cost, branch_cost = _qualified(operand, index.cost)
        compiled = _try_fold(Compiled(result, fn, cost=cost, branch_cost=branch_cost), [operand, index])
        compiled.free = operand.free
        return compiled

    def _element_type(self, t: Type, it: Type) -> Type:
        if t == DYN:
            return DYN
        if isinstance(t, tuple):
            if t[0] == "list" and unify(INT, it, {}):
                return t[1]
            if t[0] == "map" and unify(t[1], it, {}):
                return t[2]
            if t[0] == "optional_type":
                return optional_of(_strip_optional(self._element_type(t[1], it)))
        raise _no_overload("_[_]", f"({display(t)}, {display(it)})")

    # --- operators with special evaluation ------------------------------------------------

    def _logic(self, node: And | Or, scope: dict[str, Type]) -> Compiled:
        left = self.compile(node.left, scope)
        right = self.compile(node.right, scope)
        op = "_&&_" if type(node) is And else "_||_"
        if not (unify(BOOL, left.type, {}) and unify(BOOL, right.type, {})):
            raise _no_overload(op, f"({display(left.type)}, {display(right.type)})")
        fn = (make_and if op == "_&&_" else make_or)(left.fn, right.fn, right.cost)
        return _try_fold(Compiled(BOOL, fn, cost=left.cost), [left, right])

    def _cond(self, node: Cond, scope: dict[str, Type]) -> Compiled:
        cond = self.compile(node.condition, scope)
        then = self.compile(node.then, scope)
        other = self.compile(node.otherwise, scope)
        bindings: dict[str, Type] = {}
        branches_agree = unify("A", then.type, bindings) and unify("A", other.type, bindings)
        if not (unify(BOOL, cond.type, {}) and branches_agree):
            shown = ", ".join(display(t) for t in (cond.type, then.type, other.type))
            raise _no_overload("_?_:_", f"({shown})")
        result = join([then.type, other.type])
        fn = make_cond(cond.fn, then.fn, other.fn, _as_branch(then), _as_branch(other))
        return _try_fold(Compiled(result, fn, cost=cond.cost), [cond, then, other])

    def _list(self, node: ListLit, scope: dict[str, Type]) -> Compiled:
        items = [self.compile(e, scope) for e in node.elements]
        types = [
            _optional_element_type(i.type, not self._format_depth) if n in node.optional else i.type
            for n, i in enumerate(items)
        ]
        elem = self._homogeneous(types)
        self._equivalent(types, [i.free for i in items])
        fn = make_list([i.fn for i in items], node.optional)
        compiled = _try_fold(
            Compiled(list_of(elem), fn, cost=sum(i.cost for i in items) + LIST_CREATE_COST),
            items,
            literal=True,
        )
        compiled.free = not items
        return compiled

    def _map(self, node: MapLit, scope: dict[str, Type]) -> Compiled:
        keys = [self.compile(k, scope) for k, _ in node.entries]
        values = [self.compile(v, scope) for _, v in node.entries]
        key_types = [k.type for k in keys]
        value_types = [
            _optional_element_type(v.type, not self._format_depth) if n in node.optional else v.type
            for n, v in enumerate(values)
        ]
        key_type = self._homogeneous(key_types)
        value_type = self._homogeneous(value_types)
        self._equivalent(key_types, [k.free for k in keys])
        self._equivalent(value_types, [v.free for v in values])
        fn = make_map([k.fn for k in keys], [v.fn for v in values], node.optional)
        cost = sum(p.cost for p in keys + values) + MAP_CREATE_COST
        compiled = _try_fold(
            Compiled(map_of(key_type, value_type), fn, cost=cost), keys + values, literal=True
        )
        compiled.free = not keys
        return compiled

    def _struct(self, node: Struct, scope: dict[str, Type]) -> Compiled:
        json = JSON_MESSAGES.get(node.name)
        if json is not None:
            return self._json_message(json, node, scope)
        wrapper = WRAPPERS.get(node.name)
        if wrapper is None:
            raise CompileFailure(f"undeclared reference to '{node.name}' (in container '')")
        values = []
        for field, value_node in node.fields:
            if field != FIELD:
                raise CompileFailure(f"undefined field '{field}'")
            value = self.compile(value_node, scope)
            if not unify(wrapper.primitive, value.type, {}):
                raise CompileFailure(
                    f"expected type of field '{field}' is '{display(wrapper.primitive)}' "
                    f"but provided type is '{display(value.type)}'"
                )
            values.append(value)
        fn = make_wrapper(wrapper, [v.fn for v in values])
        compiled = Compiled(
            wrapper_of(wrapper.primitive), fn, cost=sum(v.cost for v in values) + STRUCT_CREATE_COST
        )
        return _try_fold(compiled, values)

    def _json_message(self, message: JsonMessage, node: Struct, scope: dict[str, Type]) -> Compiled:
        names, values = [], []
        for field, value_node in node.fields:
            expected = message.fields.get(field)
            if expected is None:
                raise CompileFailure(f"undefined field '{field}'")
            value = self.compile(value_node, scope)
            if not unify(expected, value.type, {}):
                raise CompileFailure(
                    f"expected type of field '{field}' is '{display(expected)}' "
                    f"but provided type is '{display(value.type)}'"
                )
            names.append(field)
            values.append(value)
        fns = [v.fn for v in values]
        build = message.build

        def fn(ctx: Ctx) -> Any:
            return build([(name, f(ctx)) for name, f in zip(names, fns, strict=True)])

        compiled = Compiled(message.result, fn, cost=sum(v.cost for v in values) + STRUCT_CREATE_COST)
        return _try_fold(compiled, values)

    def _homogeneous(self, types: list[Type]) -> Type:
        """The element type cel-go's checker gives a literal: the common type, else dyn (it
        leaves mixed entries to the literal validator, see _equivalent)."""
        if not types:
            return DYN
        bindings: dict[str, Type] = {}
        if not all(unify("A", t, bindings) for t in types):
            return DYN
        return join(types)

    def _equivalent(self, types: list[Type], free: list[bool]) -> None:
        """Kubernetes' ValidateHomogeneousAggregateLiterals (base environment since 1.29):
        the entries of a literal must have the same type, ``dyn`` being a type of its own, so
        ``[attr, 1]`` is rejected where the checker alone would type it list(dyn). An entry of a
        ``free`` type takes its type from the others in cel-go where the two unify, and it
        stays a list, map or optional beside a dyn entry (``[[1], []]`` is fine,
        ``[dyn(1), []]`` is not)."""
        if self._format_depth:
            return
        bound = [t for t, unbound in zip(types, free, strict=True) if not unbound]
        if not bound:  # only free entries: of one constructor (``[[], {}]`` is mixed)
            shaped = [shape for shape in types if isinstance(shape, tuple)]
            for shape in shaped[1:]:
                if shape[0] != shaped[0][0]:
                    raise CompileFailure(f"expected type '{display(shaped[0])}' but found '{display(shape)}'")
        for t in bound[1:]:
            if _equivalence_class(t) != _equivalence_class(bound[0]):
                raise CompileFailure(f"expected type '{display(bound[0])}' but found '{display(t)}'")
        for t in [t for t, unbound in zip(types, free, strict=True) if unbound and bound]:
            if not unify(t, bound[0], {}) or (bound[0] == DYN and t != DYN):
                raise CompileFailure(f"expected type '{display(t)}' but found '{display(bound[0])}'")

    # --- calls and macros ---------------------------------------------------------------

    def _call(self, node: Call, scope: dict[str, Type]) -> Compiled:
        if node.function != "format":
            return self._call_of(node, scope)
        self._format_depth += 1
        try:
            return self._call_of(node, scope)
        finally:
            self._format_depth -= 1

    def _call_of(self, node: Call, scope: dict[str, Type]) -> Compiled:
        name, target, args = node.function, node.target, node.args
        if target is None and name == "has" and len(args) == 1:
            return self._has(args[0], scope)
        if target is not None:
            macro = self._macro(node, scope)
            if macro is not None:
                return macro
            qualified = qualified_name(target)
            if qualified is not None and qualified.split(".")[0] not in scope:
                full = f"{qualified}.{name}"
                if (full, False) in FUNCTIONS:
                    compiled = self._function(full, None, args, scope)
                    compiled.free = full == "optional.none"
                    return compiled
                if name in NOT_SUPPORTED or full in NOT_SUPPORTED or qualified in NOT_SUPPORTED:
                    raise CompileFailure(unsupported_message(full))
        return self._function(name, target, args, scope)

    def _has(self, arg: Any, scope: dict[str, Type]) -> Compiled:
        if type(arg) is not Select or arg.optional:
            raise CompileFailure("invalid argument to has() macro")
        operand = self.compile(arg.operand, scope)
        self._field_type(operand.type, arg.field)
        # Kubernetes turns off the cost of the presence test itself (PresenceTestHasCost).
        return Compiled(BOOL, make_has(operand.fn, arg.field), cost=operand.cost)

    def _function(
        self, name: str, target: Any, arg_nodes: tuple[Any, ...], scope: dict[str, Type]
    ) -> Compiled:
        member = target is not None
        overloads = FUNCTIONS.get((name, member))
        parts = [self.compile(a, scope) for a in ((target, *arg_nodes) if member else arg_nodes)]
        if overloads is None:
            if (name, not member) in FUNCTIONS:  # declared, but only in the other call style
                raise _no_overload(name, _applied([p.type for p in parts], member))
            if name in NOT_SUPPORTED:
                raise CompileFailure(unsupported_message(name))
            raise CompileFailure(f"undeclared reference to '{name}' (in container '')")
        regex_at = REGEX_ARG.get(name)
        if regex_at is not None and regex_at < len(parts) and parts[regex_at].is_const:
            pattern = parts[regex_at].const
            if type(pattern) is str:
                try:
                    compile_regex(pattern)
                except EvalError as e:
                    raise CompileFailure(str(e)) from None
        matched: list[tuple[Overload, Type]] = []
        for ov in overloads:
            if len(ov.params) != len(parts):
                continue
            bindings: dict[str, Type] = {}
            if all(unify(p, c.type, bindings) for p, c in zip(ov.params, parts, strict=True)):
                _keep_dyn(ov.params, parts, bindings)
                matched.append((ov, substitute(ov.result, bindings)))
        if not matched:
            raise _no_overload(name, _applied([p.type for p in parts], member))
        if name == "format" and member:
            self._check_format(parts, arg_nodes)
        result = join([r for _, r in matched])
        # A null argument admitted for a timestamp or duration (see unify) is checked at run time.
        dispatch_needed = len(matched) > 1 or any(p.type in (DYN, NULL) for p in parts)
        # cel-go's size-based costs are by overload: a call it can only dispatch at run time (an
        # argument of type dyn that several overloads would take) costs 1; Kubernetes' own
        # functions are costed by name. ``x in [constant list]`` is a set lookup: free.
        if name == "@in" and _constant_set(parts[1]):
            sized, call_cost = False, 0
        else:
            sized = name in SIZED_BY_NAME or (
                name in SIZED_BY_OVERLOAD
                and len(matched) == 1
                and (name not in _SIZED_IF_SIZED_OPERANDS or any(_may_have_size(p.type) for p in parts))
            )
            call_cost = 0 if sized else CALL_COST
        fn = build_call(name, [ov for ov, _ in matched], [p.fn for p in parts], dispatch_needed, sized)
        cost = sum(p.cost for p in parts) + call_cost
        if name == "@in" and _constant_set(parts[1]):
            fn = _set_membership(parts[0].fn, parts[1].const)
            if not parts[1].const:
                cost = 0  # planned as the constant false: the item is never evaluated
        compiled = Compiled(result, fn, cost=cost)
        if all(p.is_const for p in parts):
            planned = name in CONVERSIONS and all(p.planned for p in parts)
            try:
                return _fold(compiled, planned)
            except (EvalError, EvalAbort) as e:
                if planned:
                    raise CompileFailure(str(e)) from None
                return compiled
            except CostLimitExceeded:
                return compiled
        return compiled

    def _check_format(self, parts: list[Compiled], arg_nodes: tuple[Any, ...]) -> None:
        """cel-go checks a literal format string against a list literal of arguments."""
        template, args = parts[0], arg_nodes[0]
        if not template.is_const or type(template.const) is not str:
            return
        if type(args) is not ListLit or args.optional:
            return
        arg_type = parts[1].type[1] if isinstance(parts[1].type, tuple) else DYN
        problem = check_format(template.const, arg_type, len(args.elements))
        if problem is not None:
            raise CompileFailure(problem)

    def _macro(self, node: Call, scope: dict[str, Type]) -> Compiled | None:
        name, target, args = node.function, node.target, node.args
        if name == "bind" and type(target) is Ident and target.name == "cel" and "cel" not in scope:
            if len(args) != 3:
                return None
            var = _var_name(args[0])
            init = self.compile(args[1], scope)
            body = self.compile(args[2], {**scope, var: init.type, _LAZY + var: init.type})
            # cel-go binds lazily: the initializer costs when first used (make_bind).
            return Compiled(body.type, make_bind(var, init.fn, init.cost, body.fn), cost=body.cost)
        if name in ("optMap", "optFlatMap") and len(args) == 2:
            return self._opt_map(name == "optFlatMap", target, args, scope)
        if name == "map" and len(args) in (2, 3):
            return self._comprehension("map", target, args[:1], args[1:], scope)
        if name in ("transformList", "transformMap", "transformMapEntry") and len(args) in (3, 4):
            return self._comprehension(name, target, args[:2], args[2:], scope)
        if name in _ONE_VARIABLE_MACROS and len(args) == 2:
            return self._comprehension(name, target, args[:1], args[1:], scope)
        if name in _QUANTIFIERS and len(args) == 3:
            return self._comprehension(name, target, args[:2], args[2:], scope)
        if name == "sortBy" and len(args) == 2:
            return self._sort_by(target, args, scope)
        return None

    def _sort_by(self, target: Any, args: tuple[Any, ...], scope: dict[str, Type]) -> Compiled:
        """cel-go's lists extension expands ``l.sortBy(e, key)`` to the list, bound once, sorted
        by ``l.map(e, key)`` through ``@sortByAssociatedKeys``."""
        if type(target) not in (ListLit, Select, Ident, Call):
            raise CompileFailure(
                "sortBy can only be applied to a list, identifier, comprehension, call or select expression"
            )
        hidden = "@__sortBy_input__"
        items = self.compile(target, scope)
        inner = {**scope, hidden: items.type, _LAZY + hidden: items.type}
        keys = self._comprehension("map", Ident(hidden), args[:1], args[1:], inner)
        matched = [
            ov
            for ov in FUNCTIONS[("@sortByAssociatedKeys", True)]
            if all(unify(p, t, {}) for p, t in zip(ov.params, (items.type, keys.type), strict=True))
        ]
        if not matched:
            raise _no_overload("@sortByAssociatedKeys", _applied([items.type, keys.type], True))
        sort = build_call(
            "@sortByAssociatedKeys", matched, [make_bind_ref(hidden), keys.fn], dispatch=True, sized=True
        )
        # The bound list's identifier (1) and the keys' comprehension; the sort charges itself.
        return Compiled(items.type, make_bind(hidden, items.fn, items.cost, sort), cost=1 + keys.cost)

    def _opt_map(self, flat: bool, target: Any, args: tuple[Any, ...], scope: dict[str, Type]) -> Compiled:
        var = _var_name(args[0])
        opt = self.compile(target, scope)
        bindings: dict[str, Type] = {}
        if not unify(optional_of("A"), opt.type, bindings):
            raise _no_overload("hasValue", f"{display(opt.type)}.()")
        inner = {**scope, var: substitute("A", bindings)}
        inner.pop(_LAZY + var, None)
        body = self.compile(args[1], inner)
        if flat:
            result = body.type
            if not unify(optional_of("B"), result, {}):
                raise _no_overload("_?_:_", f"(bool, {display(result)}, optional_type(dyn))")
        else:
            result = optional_of(body.type)
        fn = make_opt_map(flat, opt.fn, var, body.fn)
        return Compiled(result, fn, cost=opt.cost + body.cost + 2)

    def _comprehension(
        self,
        kind: str,
        target: Any,
        var_nodes: tuple[Any, ...],
        body_nodes: tuple[Any, ...],
        scope: dict[str, Type],
    ) -> Compiled:
        names = [_var_name(v) for v in var_nodes]
        if len(names) == 2 and names[0] == names[1]:
            # cel-go's two-variable macros (ext/comprehensions.go) refuse one name for both.
            raise CompileFailure(f"duplicate variable name: {names[1]}")
        rng = self.compile(target, scope)
        var_types = _range_var_types(rng.type, len(names))
        inner = {**scope, **dict(zip(names, var_types, strict=True))}
        for n in names:
            inner.pop(_LAZY + n, None)
        bodies = [self.compile(b, inner) for b in body_nodes]
        predicate_count = {
            "map": len(bodies) - 1,
            "transformList": len(bodies) - 1,
            "transformMap": len(bodies) - 1,
            "transformMapEntry": len(bodies) - 1,
        }.get(kind, len(bodies))
        for pred in bodies[:predicate_count]:
            if not unify(BOOL, pred.type, {}):
                raise _no_overload(kind, f"predicate of type {display(pred.type)}")
        if kind in ("all", "exists", "exists_one", "existsOne"):
            result: Type = BOOL
        elif kind == "filter":
            result = list_of(var_types[0])
        elif kind == "transformMap":
            key_type = rng.type[1] if isinstance(rng.type, tuple) and rng.type[0] == "map" else DYN
            result = map_of(key_type, bodies[-1].type)
        elif kind == "transformMapEntry":
            # Each step inserts the entries of a map; cel-go types that as @mapInsert(map, map).
            result = bodies[-1].type
            if not unify(map_of("K", "V"), result, {}):
                raise _no_overload("cel.@mapInsert", f"(map(dyn, dyn), {display(result)})")
        else:
            result = list_of(bodies[-1].type)
        costs, result_cost = _loop_costs(kind, [b.cost for b in bodies])
        fn = build_comprehension(kind, rng.fn, names, [b.fn for b in bodies], costs)
        return Compiled(result, fn, cost=rng.cost + result_cost)


# cel-go's expansion of each macro (parser/macro.go; ext/comprehensions.go for the transforms):
# the loop condition's cost, the step's own cost besides its body, the step's when it adds an
# item to the result, and the cost of reading the result. A condition ``true`` costs nothing,
# ``@not_strictly_false(@result)`` 2 and ``@not_strictly_false(!@result)`` 3; each ``@result``
# read costs 1, ``@result + [t]`` 12 (a call, a read, a list), ``cel.@mapInsert(@result, k, t)``
# 3 and ``cel.@mapInsert(@result, t)`` 2.
# A step ``p ? <add> : @result`` costs the predicate, then the add or nothing (``@result`` as a
# branch of ``?:`` is free, see Compiled.branch_cost).
_MACRO_COSTS = {
    # kind: (condition, step without its body or add, adding an item, result)
    "all": (2, 1, 0, 1),  # step @result && p
    "exists": (3, 1, 0, 1),  # step @result || p
    "exists_one": (0, 0, 2, 2),  # step p ? @result + 1 : @result; result @result == 1
    "existsOne": (0, 0, 2, 2),
    "map": (0, 0, 12, 1),
    "transformList": (0, 0, 12, 1),
    "filter": (0, 0, 13, 1),  # @result + [x]: the element is one more read
    "transformMap": (0, 0, 3, 1),
    "transformMapEntry": (0, 0, 2, 1),
}


def _loop_costs(kind: str, body_costs: list[int]) -> tuple[LoopCosts, int]:
    """The loop's charges and the static cost of its result, given its bodies' static costs
    (the filter predicate first where there is one, the transform last)."""
    condition, step, add, result = _MACRO_COSTS[kind]
    if kind in ("all", "exists", "exists_one", "existsOne", "filter"):
        return LoopCosts(condition + step + body_costs[0], add, condition), result
    transform = body_costs[-1]
    if len(body_costs) == 1:  # no filter: every item is added
        return LoopCosts(condition + step + add + transform), result
    return LoopCosts(condition + step + body_costs[0], add + transform), result


# Operators whose cost depends on sizes only for strings, bytes, lists and maps: on numbers,
# booleans, timestamps and library values they cost 1, known when the operands' types are.
_SIZED_IF_SIZED_OPERANDS = frozenset({"_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "_+_"})


def _may_have_size(t: Type) -> bool:
    u = unwrapped(t)
    return u in (STRING, BYTES, DYN) or isinstance(u, tuple)


def _qualified(operand: Compiled, index_cost: int) -> tuple[int, int]:
    """Cost and branch cost of a selection or index of ``operand`` (index expression cost
    ``index_cost``). Each qualifier costs 1; a chain that does not start at a name is a
    relative attribute for cel-go, which costs 1 more (except as a branch)."""
    if operand.branch_cost is not None:
        return operand.cost + index_cost + 1, operand.branch_cost + index_cost + 1
    return operand.cost + index_cost + 2, operand.cost + index_cost + 1


def _as_branch(branch: Compiled) -> int:
    return branch.cost if branch.branch_cost is None else branch.branch_cost


_SET_ELEMENTS = (bool, int, UInt, float, str)


def _is_list_type(t: Type) -> bool:
    return isinstance(t, tuple) and t[0] == "list"


def _constant_set(items: Compiled) -> bool:
    """cel-go's planner turns ``x in l`` into a set lookup when ``l`` is a constant list of
    primitives (interpreter/decorators.go, maybeOptimizeSetMembership) that the checker typed
    as a list (``x in dyn([])`` is dispatched at run time, as a list or a map)."""
    value = items.const
    return (
        items.planned
        and _is_list_type(items.type)
        and type(value) is list
        and all(type(v) in _SET_ELEMENTS for v in value)
    )


def _set_membership(item_fn: Fn, items: list[Any]) -> Fn:
    """``x in [constant scalars]`` as cel-go plans it (interpreter/decorators.go,
    maybeOptimizeSetMembership): an empty list is false without evaluating ``x``; otherwise a
    hash lookup, where a version or bytes cannot be hashed (Go panics: the whole evaluation
    fails, see EvalAbort) and any other value of a kind the list does not hold is absent."""
    if not items:
        return lambda ctx: False

    def member(ctx: Ctx) -> bool:
        item = item_fn(ctx)
        if type(item) is Semver or type(item) is bytes:
            raise EvalAbort(f"internal error: runtime error: hash of unhashable type {go_type_name(item)}")
        return member_of(item, items)

    return member


def _keep_dyn(params: tuple[Type, ...], parts: list[Compiled], bindings: dict[str, Type]) -> None:
    """A type parameter an argument of type dyn binds stays dyn (cel-go's most general type),
    though unify narrows it to a later argument's type: that narrowing is for arguments whose
    dyn stands for an unbound parameter (``free``: ``[]``, ``optional.none()``). So
    ``optional(dyn).orValue("a")`` is dyn, ``optional.none().orValue("a")`` a string."""
    for param, part in zip(params, parts, strict=True):
        if part.free or not _has_dyn_type(part.type):
            continue
        own: dict[str, Type] = {}
        if unify(param, part.type, own):
            for name, bound in own.items():
                if bound == DYN:
                    bindings[name] = DYN


def _has_dyn_type(t: Type) -> bool:
    return t == DYN or (isinstance(t, tuple) and any(_has_dyn_type(p) for p in t[1:]))


def _applied(types: list[Type], member: bool) -> str:
    """cel-go's spelling of the argument types of a call: ``(int, string)`` or ``string.(int)``."""
    shown = [display(t) for t in types]
    return f"{shown[0]}.({', '.join(shown[1:])})" if member else f"({', '.join(shown)})"


def _no_overload(function: str, applied: str) -> CompileFailure:
    return CompileFailure(f"found no matching overload for '{function}' applied to '{applied}'")


def _range_var_types(t: Type, count: int) -> list[Type]:
    if t == DYN:
        return [DYN] * count
    if isinstance(t, tuple) and t[0] == "list":
        return [t[1]] if count == 1 else [INT, t[1]]
    if isinstance(t, tuple) and t[0] == "map":
        return [t[1]] if count == 1 else [t[1], t[2]]
    raise CompileFailure(
        f"expression of type '{display(t)}' cannot be the range of a comprehension "
        "(must be list, map, or dynamic)"
    )


def _var_name(node: Any) -> str:
    if type(node) is not Ident:
        raise CompileFailure("argument must be a simple name")
    return str(node.name)


def _equivalence_class(t: Type) -> Type:
    """``t`` as cel-go's IsEquivalentType compares it: a wrapper type is its primitive."""
    t = unwrapped(t)
    return t if isinstance(t, str) else (t[0], *(_equivalence_class(p) for p in t[1:]))


def _optional_element_type(t: Type, validated: bool = True) -> Type:
    """The element type an optional list element ``?e`` (or map value of ``?k: v``) adds. One
    of type dyn makes Kubernetes' homogeneous-literal validator panic (cel-go cel/validator.go
    reads the type's parameter), so the selector does not compile, unless the literal is
    exempt from the validator (not ``validated``: inside ``format``'s arguments)."""
    if t == DYN and validated:
        raise CompileFailure("cel-go panicked validating the literal: an optional entry of type dyn")
    bindings: dict[str, Type] = {}
    if not unify(optional_of("A"), t, bindings):
        raise CompileFailure(f"expected type 'optional_type' but found '{display(t)}'")
    return substitute("A", bindings)


def _strip_optional(t: Type) -> Type:
    return t[1] if isinstance(t, tuple) and t[0] == "optional_type" else t


def compile_expression(tree: Any, variables: dict[str, Type]) -> tuple[Type, Callable[[Ctx], Any], int]:
    """The expression's type, its closure and the static cost of its top level (which the
    program charges before it runs the closure)."""
    compiled = Compiler().compile(tree, variables)
    return compiled.type, compiled.fn, compiled.cost
