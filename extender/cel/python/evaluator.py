"""Closure builders for the pure-Python CEL evaluator (one per kind of expression node).

A closure takes the per-evaluation :class:`Ctx` and returns a value or raises
:class:`EvalError`.

Costs are counted as cel-go counts them (``extender.cel.runtime.costs``): each node has a
static cost, known at compile time, that whoever evaluates it charges (the program its
top-level part, a loop its body's on every iteration with the loop's own bookkeeping); what
is known only at run time is charged where it happens: a branch of ``&&``, ``||`` and
``?:`` when it is taken, a call whose cost depends on its arguments' sizes after it returns,
a ``cel.bind`` initializer when first used. Over Kubernetes' limit the evaluation stops with
:class:`CostLimitExceeded`, which no ``||`` or ``exists`` absorbs (cel-go panics there). Every
``CHECK_EVERY_COST`` units the charge also calls the caller's checkpoint, which may switch to
other work or interrupt the evaluation (``extender.cel``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from extender.cel import CHECK_EVERY_COST, COST_EXCEEDED, COST_LIMIT, Checkpoint
from extender.cel.python.library import Overload
from extender.cel.python.wrappers import Wrapper
from extender.cel.runtime.costs import cost_function
from extender.cel.runtime.types import value_fits
from extender.cel.runtime.values import (
    EMPTY_DOMAIN,
    BuiltMap,
    CelOptional,
    DomainMap,
    EvalError,
    UInt,
    check_qualifier,
    map_contains,
    map_delete,
    map_find,
    map_insert,
    type_name,
)

_UNSET = object()


class CostLimitExceeded(Exception):
    """The evaluation went over the cost limit: it ends, whatever ``||`` or a loop would absorb."""


class Ctx:
    """Variables in scope and the cost spent by one evaluation.

    ``check_at`` is the cost at which :func:`_charge` next looks up from the loop: the cost
    limit, or sooner when the caller gave a ``checkpoint``; one comparison per charge.
    """

    __slots__ = ("check_at", "checkpoint", "cost", "vars")

    def __init__(self, variables: dict[str, Any], checkpoint: Checkpoint | None = None) -> None:
        self.vars = variables
        self.cost = 0
        self.checkpoint = checkpoint
        self.check_at = COST_LIMIT if checkpoint is None else min(COST_LIMIT, CHECK_EVERY_COST)

    def nested(self, variables: dict[str, Any]) -> Ctx:
        """A context for other variables that goes on with this one's cost and checkpoint
        (hand the cost back with :meth:`take_cost`)."""
        inner = Ctx(variables, self.checkpoint)
        inner.cost, inner.check_at = self.cost, self.check_at
        return inner

    def take_cost(self, inner: Ctx) -> None:
        self.cost, self.check_at = inner.cost, inner.check_at


Fn = Callable[[Ctx], Any]


# --- selection and indexing ------------------------------------------------------------------


def select_value(v: Any, field: str) -> Any:
    t = type(v)
    if t is DomainMap:
        return dict.get(v, field, EMPTY_DOMAIN)
    if isinstance(v, dict):
        found, value = map_find(v, field)
        if not found:
            raise EvalError(f"no such key: {field}")
        return value
    if t is CelOptional:
        # cel-go qualifies an optional value as ``.?`` does: a missing field is optional.none().
        return select_optional(v.value, field) if v.present else v
    raise EvalError(f"type '{type_name(v)}' does not support field selection")


def select_optional(v: Any, field: str) -> CelOptional:
    """``v.?field``. cel-go qualifies with a presence test (interpreter/attributes.go,
    refQualify): a list rejects a field name, and a value that is neither map nor list (null,
    a number, a string) has no field, so the result is optional.none()."""
    t = type(v)
    if t is DomainMap:  # its lookup always finds, the default if nothing else
        return CelOptional(dict.get(v, field, EMPTY_DOMAIN))
    if t is CelOptional:
        return select_optional(v.value, field) if v.present else v
    if isinstance(v, dict):
        found, value = map_find(v, field)
        return CelOptional(value) if found else CelOptional.NONE
    if t is list or t is tuple:
        raise EvalError("unsupported index type 'string' in list")
    return CelOptional.NONE


def _unobserved_if_none(ctx: Ctx, found: CelOptional) -> CelOptional:
    """cel-go applies an optional qualifier, and any qualifier after one, "if present", and
    charges it only when it finds something (interpreter/interpretable.go,
    evalWatchConstQual.QualifyIfPresent); once one finds nothing the attribute's later
    qualifiers are not applied. Each qualifier's 1 is charged statically (compiler._qualified):
    one that finds nothing, here, gives it back."""
    if not found.present:
        ctx.cost -= 1
    return found


def make_select(operand: Fn, field: str, optional: bool, on_device: bool) -> Fn:
    if optional:
        return lambda ctx: _unobserved_if_none(ctx, select_optional(operand(ctx), field))
    if on_device:
        return lambda ctx: operand(ctx)[field]

    def select(ctx: Ctx) -> Any:
        v = operand(ctx)
        if type(v) is CelOptional:
            return _unobserved_if_none(ctx, select_value(v, field))
        return select_value(v, field)

    return select


def make_has(operand: Fn, field: str) -> Fn:
    def has_field(v: Any) -> bool:
        if type(v) is DomainMap:
            # Upstream's lookup of a missing domain finds the default, and presence tests
            # use that lookup (unlike ``in``): has(device.attributes.anything) is true.
            return True
        if isinstance(v, dict):
            return map_contains(v, field)
        if type(v) is CelOptional:
            return v.present and has_field(v.value)
        if type(v) is list or type(v) is tuple:
            raise EvalError("unsupported index type 'string' in list")
        return False  # a presence test on null, a number or a string (see select_optional)

    def has(ctx: Ctx) -> bool:
        return has_field(operand(ctx))

    return has


def _list_position(items: Any, k: Any) -> int:
    tk = type(k)
    if tk is float and k.is_integer():
        k = int(k)
    elif tk is not int and tk is not UInt:
        raise EvalError(f"unsupported index type '{type_name(k)}' in list")
    return int(k)


def index_value(v: Any, k: Any) -> Any:
    t = type(v)
    if t is DomainMap:
        if type(k) is str:
            return dict.get(v, k, EMPTY_DOMAIN)
        raise EvalError(f"no such key: {k}")
    if isinstance(v, dict):
        check_qualifier(k)
        found, value = map_find(v, k)
        if not found:
            raise EvalError(f"no such key: {_key_text(k)}")
        return value
    if t is list or t is tuple:
        i = _list_position(v, k)
        if i < 0 or i >= len(v):
            raise EvalError(f"index out of bounds: {i}")
        return v[i]
    if t is CelOptional:
        return index_optional(v.value, k) if v.present else v
    raise EvalError(f"no such overload: {type_name(v)}[{type_name(k)}]")


def index_optional(v: Any, k: Any) -> CelOptional:
    t = type(v)
    if t is DomainMap and type(k) is str:
        return CelOptional(dict.get(v, k, EMPTY_DOMAIN))
    if t is CelOptional:
        return index_optional(v.value, k) if v.present else v
    if isinstance(v, dict):
        check_qualifier(k)
        found, value = map_find(v, k)
        return CelOptional(value) if found else CelOptional.NONE
    if t is list or t is tuple:
        i = _list_position(v, k)
        return CelOptional(v[i]) if 0 <= i < len(v) else CelOptional.NONE
    return CelOptional.NONE  # neither map nor list: nothing to find (see select_optional)


def _key_text(k: Any) -> str:
    if type(k) is bool:
        return "true" if k else "false"
    return str(int(k)) if type(k) is UInt else str(k)


def make_index(operand: Fn, index: Fn, optional: bool) -> Fn:
    if optional:
        return lambda ctx: _unobserved_if_none(ctx, index_optional(operand(ctx), index(ctx)))

    def index_(ctx: Ctx) -> Any:
        v = operand(ctx)
        if type(v) is CelOptional:
            return _unobserved_if_none(ctx, index_value(v, index(ctx)))
        return index_value(v, index(ctx))

    return index_


# --- logic -----------------------------------------------------------------------------------


def _no_logic_overload(op: str, a: Any, b: Any) -> EvalError:
    return EvalError(f"no such overload: {type_name(a)} {op} {type_name(b)}")


def make_and(left: Fn, right: Fn, right_cost: int) -> Fn:
    """``&&`` where false wins over an error on either side (CEL's commutative absorption);
    the right side's static cost is charged when it is evaluated."""

    def and_(ctx: Ctx) -> bool:
        try:
            a = left(ctx)
        except EvalError as err:
            ctx.cost += right_cost
            try:
                b = right(ctx)
            except EvalError:
                raise err from None
            if b is False:
                return False
            raise
        if a is False:
            return False
        ctx.cost += right_cost
        b = right(ctx)
        if b is False:
            return False
        if a is True and b is True:
            return True
        raise _no_logic_overload("&&", a, b)

    return and_


def make_or(left: Fn, right: Fn, right_cost: int) -> Fn:
    """``||`` where true wins over an error on either side; the right side's static cost is
    charged when it is evaluated."""

    def or_(ctx: Ctx) -> bool:
        try:
            a = left(ctx)
        except EvalError as err:
            ctx.cost += right_cost
            try:
                b = right(ctx)
            except EvalError:
                raise err from None
            if b is True:
                return True
            raise
        if a is True:
            return True
        ctx.cost += right_cost
        b = right(ctx)
        if b is True:
            return True
        if a is False and b is False:
            return False
        raise _no_logic_overload("||", a, b)

    return or_


def make_cond(cond: Fn, then: Fn, other: Fn, then_cost: int, other_cost: int) -> Fn:
    """``c ? a : b``; the static cost of the branch taken is charged when it is evaluated."""

    def conditional(ctx: Ctx) -> Any:
        c = cond(ctx)
        if c is True:
            ctx.cost += then_cost
            return then(ctx)
        if c is False:
            ctx.cost += other_cost
            return other(ctx)
        raise EvalError(f"no such overload: {type_name(c)} ? _ : _")

    return conditional


# --- literals --------------------------------------------------------------------------------


def make_wrapper(wrapper: Wrapper, values: list[Fn]) -> Fn:
    """A wrapper literal's value: the last ``value`` given (as cel-go sets fields in order),
    else the primitive's zero value."""

    def build(ctx: Ctx) -> Any:
        result = wrapper.zero
        for value in values:
            v = value(ctx)
            if not value_fits(wrapper.primitive, v):
                raise EvalError(f"type conversion error from '{type_name(v)}' to '{wrapper.primitive}'")
            result = wrapper.convert(v)
        return result

    return build


def make_list(items: list[Fn], optional: frozenset[int] = frozenset()) -> Fn:
    """A list literal; the elements at ``optional`` (``?e``) are added only when present."""
    if not optional:
        return lambda ctx: [f(ctx) for f in items]

    def build(ctx: Ctx) -> list[Any]:
        out = []
        for n, f in enumerate(items):
            v = f(ctx)
            if n not in optional:
                out.append(v)
            elif _present(v):
                out.append(v.value)
        return out

    return build


def _present(v: Any) -> bool:
    if type(v) is not CelOptional:
        raise EvalError(f"no such overload: optional element of type {type_name(v)}")
    return v.present


def make_map(keys: list[Fn], values: list[Fn], optional: frozenset[int] = frozenset()) -> Fn:
    """A map literal, built as cel-go's evalMap does, into a Go map (see BuiltMap): a repeated
    key keeps the last value, and an entry at ``optional`` (``?k: v``) whose ``v`` is absent
    removes its key."""
    entries = [(kf, vf, n in optional) for n, (kf, vf) in enumerate(zip(keys, values, strict=True))]

    def build(ctx: Ctx) -> BuiltMap:
        out = BuiltMap()
        for kf, vf, is_optional in entries:
            k = kf(ctx)
            v = vf(ctx)
            if is_optional:
                if not _present(v):
                    out = map_delete(out, k)
                    continue
                v = v.value
            out = map_insert(out, k, v)
        return out

    return build


# --- function calls --------------------------------------------------------------------------


def build_call(
    name: str, overloads: list[Overload], args: list[Fn], dispatch: bool, sized: bool = False
) -> Fn:
    """A call; with ``dispatch`` the overload is picked from the argument values at run time.

    ``sized``: the call's cost depends on its arguments (``extender.cel.runtime.costs``); it is charged
    after the call returns, and the call's static cost leaves it out."""
    if dispatch:

        def invoke(values: list[Any]) -> Any:
            for ov in overloads:
                if all(value_fits(p, v) for p, v in zip(ov.params, values, strict=True)):
                    return ov.impl(*values)
            shown = ", ".join(type_name(v) for v in values)
            raise EvalError(f"no such overload: {name}({shown})")

    else:
        impl = overloads[0].impl

        def invoke(values: list[Any]) -> Any:
            return impl(*values)

    if sized:
        cost = cost_function(name)
        if len(args) == 2 and not dispatch:
            a, b = args

            def sized_pair(ctx: Ctx) -> Any:
                x, y = a(ctx), b(ctx)
                result = impl(x, y)
                ctx.cost += cost((x, y), result)
                if ctx.cost > ctx.check_at:
                    _look_up(ctx)
                return result

            return sized_pair

        def sized_call(ctx: Ctx) -> Any:
            values = [f(ctx) for f in args]
            result = invoke(values)
            _charge(ctx, cost(values, result))
            return result

        return sized_call
    if dispatch:
        return lambda ctx: invoke([f(ctx) for f in args])
    if len(args) == 0:
        return lambda ctx: impl()
    if len(args) == 1:
        (a,) = args
        return lambda ctx: impl(a(ctx))
    if len(args) == 2:
        a, b = args
        return lambda ctx: impl(a(ctx), b(ctx))
    return lambda ctx: impl(*[f(ctx) for f in args])


# --- cel.bind --------------------------------------------------------------------------------


class LazyValue:
    """A cel.bind variable: cel-go evaluates the initializer on first use, in the scope the
    bind was written in (so an unused failing initializer is no error)."""

    __slots__ = ("cost", "error", "fn", "scope", "state", "value")

    def __init__(self, fn: Fn, cost: int, scope: dict[str, Any]) -> None:
        self.fn = fn
        self.cost = cost  # the initializer's static cost, charged when it is evaluated
        self.scope = scope
        self.state = 0  # 0 pending, 1 value, 2 error
        self.value: Any = None
        self.error: EvalError | None = None

    def get(self, ctx: Ctx) -> Any:
        if self.state == 0:
            outer = ctx.nested(self.scope)
            outer.cost += self.cost
            try:
                self.value = self.fn(outer)
                self.state = 1
            except EvalError as e:
                self.error = e
                self.state = 2
            finally:
                ctx.take_cost(outer)
        if self.state == 2:
            raise self.error  # type: ignore[misc]
        return self.value


def make_bind(var: str, init: Fn, init_cost: int, body: Fn) -> Fn:
    def bind(ctx: Ctx) -> Any:
        saved = ctx.vars.get(var, _UNSET)
        ctx.vars[var] = LazyValue(init, init_cost, dict(ctx.vars))
        try:
            return body(ctx)
        finally:
            if saved is _UNSET:
                del ctx.vars[var]
            else:
                ctx.vars[var] = saved

    return bind


def make_bind_ref(var: str) -> Fn:
    return lambda ctx: ctx.vars[var].get(ctx)


# --- optional macros -------------------------------------------------------------------------


def make_opt_map(flat: bool, target: Fn, var: str, body: Fn) -> Fn:
    """``o.optMap(x, e)`` and ``o.optFlatMap(x, e)``: cel-go expands them to a comprehension
    binding ``x`` to the value (eagerly); an empty optional stays empty and ``e`` is not run."""

    def opt_map(ctx: Ctx) -> Any:
        opt = target(ctx)
        if type(opt) is not CelOptional:
            raise EvalError(f"no such overload: hasValue({type_name(opt)})")
        if not opt.present:
            return CelOptional.NONE
        saved = ctx.vars.get(var, _UNSET)
        ctx.vars[var] = opt.value
        try:
            result = body(ctx)
        finally:
            if saved is _UNSET:
                del ctx.vars[var]
            else:
                ctx.vars[var] = saved
        if not flat:
            return CelOptional(result)
        if type(result) is not CelOptional:
            raise EvalError(f"no such overload: optFlatMap result of type {type_name(result)}")
        return result

    return opt_map


# --- comprehensions --------------------------------------------------------------------------


def _range(v: Any, pairs: bool) -> list[Any]:
    t = type(v)
    if t is list or t is tuple:
        return list(enumerate(v)) if pairs else list(v)
    if isinstance(v, dict):
        return list(v.items()) if pairs else list(v)
    raise EvalError(f"expression of type '{type_name(v)}' cannot be the range of a comprehension")


def _charge(ctx: Ctx, cost: int) -> None:
    ctx.cost += cost
    if ctx.cost > ctx.check_at:
        _look_up(ctx)


def _look_up(ctx: Ctx) -> None:
    """Over the cost limit: the evaluation ends; else the caller's checkpoint runs."""
    if ctx.cost > COST_LIMIT:
        raise CostLimitExceeded(COST_EXCEEDED)
    if ctx.checkpoint is not None:
        ctx.checkpoint()  # may switch to other work, or raise EvaluationInterrupted
    ctx.check_at = min(COST_LIMIT, ctx.cost + CHECK_EVERY_COST)


def _bool(v: Any, what: str) -> bool:
    if type(v) is not bool:
        raise EvalError(f"no such overload: {what} predicate of type {type_name(v)}")
    return v


class LoopCosts:
    """What a comprehension charges, as cel-go's expansion of the macro costs
    (parser/macro.go, ext/comprehensions.go): ``step`` every iteration (loop condition, step
    and the body's static cost), ``kept`` more for an item the step adds to the result (its
    other branch of ``p ? @result + [t] : @result``), ``stop`` for the loop condition that
    ends ``all``/``exists`` early."""

    __slots__ = ("kept", "step", "stop")

    def __init__(self, step: int, kept: int = 0, stop: int = 0) -> None:
        self.step, self.kept, self.stop = step, kept, stop


def build_comprehension(kind: str, rng: Fn, names: list[str], bodies: list[Fn], costs: LoopCosts) -> Fn:
    """``all``/``exists``/``exists_one``/``map``/``filter`` and the two-variable forms."""
    pairs = len(names) == 2
    loop = _LOOPS[kind]

    def comprehension(ctx: Ctx) -> Any:
        items = _range(rng(ctx), pairs)
        saved = {n: ctx.vars.get(n, _UNSET) for n in names}
        try:
            return loop(ctx, items, names, bodies, costs)
        finally:
            for n, old in saved.items():
                if old is _UNSET:
                    ctx.vars.pop(n, None)
                else:
                    ctx.vars[n] = old

    return comprehension


def _bind(ctx: Ctx, names: list[str], item: Any) -> None:
    if len(names) == 1:
        ctx.vars[names[0]] = item
    else:
        ctx.vars[names[0]], ctx.vars[names[1]] = item


def _loop_exists(ctx: Ctx, items: list[Any], names: list[str], bodies: list[Fn], costs: LoopCosts) -> bool:
    pred, step = bodies[0], costs.step
    error: EvalError | None = None
    for n, item in enumerate(items):
        _charge(ctx, step)
        _bind(ctx, names, item)
        try:
            if _bool(pred(ctx), "exists"):
                if n + 1 < len(items):
                    ctx.cost += costs.stop
                return True
        except EvalError as e:
            error = error or e
    if error is not None:
        raise error
    return False


def _loop_all(ctx: Ctx, items: list[Any], names: list[str], bodies: list[Fn], costs: LoopCosts) -> bool:
    pred, step = bodies[0], costs.step
    error: EvalError | None = None
    for n, item in enumerate(items):
        _charge(ctx, step)
        _bind(ctx, names, item)
        try:
            if not _bool(pred(ctx), "all"):
                if n + 1 < len(items):
                    ctx.cost += costs.stop
                return False
        except EvalError as e:
            error = error or e
    if error is not None:
        raise error
    return True


def _loop_exists_one(
    ctx: Ctx, items: list[Any], names: list[str], bodies: list[Fn], costs: LoopCosts
) -> bool:
    pred, step = bodies[0], costs.step
    count = 0
    for item in items:
        _charge(ctx, step)
        _bind(ctx, names, item)
        if _bool(pred(ctx), "exists_one"):
            ctx.cost += costs.kept
            count += 1
    return count == 1


def _kept(
    ctx: Ctx, items: list[Any], names: list[str], preds: list[Fn], costs: LoopCosts, macro: str
) -> Iterator[Any]:
    """Each item bound to the loop variables, skipping those the optional filter predicate rejects.

    The transforming macros (map, transformList, transformMap, transformMapEntry) differ only in
    what they build from the items this yields; the caller evaluates its transform before the
    next item is bound.
    """
    step = costs.step
    for item in items:
        _charge(ctx, step)
        _bind(ctx, names, item)
        if preds:
            if not _bool(preds[0](ctx), macro):
                continue
            ctx.cost += costs.kept
        yield item


def _loop_map(ctx: Ctx, items: list[Any], names: list[str], bodies: list[Fn], costs: LoopCosts) -> list[Any]:
    *preds, transform = bodies
    return [transform(ctx) for _ in _kept(ctx, items, names, preds, costs, "map")]


def _loop_filter(
    ctx: Ctx, items: list[Any], names: list[str], bodies: list[Fn], costs: LoopCosts
) -> list[Any]:
    pred, step = bodies[0], costs.step
    out = []
    for item in items:
        _charge(ctx, step)
        _bind(ctx, names, item)
        if _bool(pred(ctx), "filter"):
            ctx.cost += costs.kept
            out.append(item)
    return out


def _loop_transform_map(
    ctx: Ctx, items: list[Any], names: list[str], bodies: list[Fn], costs: LoopCosts
) -> dict[Any, Any]:
    *preds, transform = bodies
    out = BuiltMap()
    for item in _kept(ctx, items, names, preds, costs, "transformMap"):
        out = map_insert(out, item[0], transform(ctx))
    return out


def _loop_transform_map_entry(
    ctx: Ctx, items: list[Any], names: list[str], bodies: list[Fn], costs: LoopCosts
) -> dict[Any, Any]:
    *preds, transform = bodies
    out = BuiltMap()
    for _ in _kept(ctx, items, names, preds, costs, "transformMapEntry"):
        entries = transform(ctx)
        if not isinstance(entries, dict):
            raise EvalError("no such overload: cel.@mapInsert")
        for key, value in entries.items():
            if map_contains(out, key):
                raise EvalError(f"insert failed: key {_key_text(key)} already exists")
            out = map_insert(out, key, value)
    return out


_LOOPS: dict[str, Callable[..., Any]] = {
    "exists": _loop_exists,
    "all": _loop_all,
    "exists_one": _loop_exists_one,
    "existsOne": _loop_exists_one,
    "map": _loop_map,
    "transformList": _loop_map,
    "filter": _loop_filter,
    "transformMap": _loop_transform_map,
    "transformMapEntry": _loop_transform_map_entry,
}
