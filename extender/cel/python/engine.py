"""The portable CEL engine: cel-python's parser plus a Kubernetes-faithful checker and evaluator.

cel-python 0.5.0's own evaluator differs from cel-go where selectors notice (heterogeneous
equality, overflow, error absorption, no type checking, no strings extension or ``cel.bind``),
so only its Lark grammar is used; checking and evaluation live in the ``engine_py_*`` helpers:
``_ast`` (parse), ``_compile`` (type check, constant folding, closures), ``_eval`` (closure
builders, cost budget), ``_lib`` (function table), ``_types``, ``_values``, ``_time``.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from extender.cel import (
    COST_EXCEEDED,
    COST_LIMIT,
    CelCompileError,
    CelRuntimeError,
    Checkpoint,
    EvaluationInterrupted,
)
from extender.cel.python.compiler import CompileFailure, compile_expression
from extender.cel.python.evaluator import CostLimitExceeded, Ctx, Fn
from extender.cel.python.syntax import ParseFailure, parse
from extender.cel.runtime.derived import result_type_problem, to_attribute
from extender.cel.runtime.types import BOOL, DEVICE, DYN, Type, display, unwrapped
from extender.cel.runtime.values import DeviceValue, DomainMap, EvalAbort, EvalError, type_name

if TYPE_CHECKING:
    from extender.cel.device import DeviceView
    from extender.model import AttributeValue

_CACHE_KEY = "python"


class PythonProgram:
    """A checked selector, evaluated by closures over a per-device activation."""

    __slots__ = ("_cost", "_expression", "_fn")

    def __init__(self, expression: str, fn: Fn, cost: int) -> None:
        self._expression = expression
        self._fn = fn
        self._cost = cost  # the static cost of the top level, charged up front

    def actual_cost(self, view: DeviceView) -> int:
        """What one evaluation on ``view`` costs (cel-go's ActualCost), whatever its outcome:
        for tests and benchmarks that compare the count with cel-go's."""
        ctx = Ctx({"device": activation(view)})
        ctx.cost = self._cost
        with contextlib.suppress(EvalError, CostLimitExceeded):  # a failure costs what it spent
            self._fn(ctx)
        return ctx.cost

    def evaluate(self, view: DeviceView, checkpoint: Checkpoint | None = None) -> bool:
        result = self._run(view, checkpoint)
        if type(result) is not bool:
            raise CelRuntimeError(
                f"CEL result of type {type_name(result)} could not be converted to bool", self._expression
            )
        return result

    def derive(self, view: DeviceView, checkpoint: Checkpoint | None = None) -> AttributeValue:
        """The expression's value on ``view`` as a derived attribute (``runtime.derived``)."""
        try:
            return to_attribute(self._run(view, checkpoint))
        except ValueError as e:
            raise CelRuntimeError(str(e), self._expression) from None

    def _run(self, view: DeviceView, checkpoint: Checkpoint | None) -> Any:
        """The expression's value on ``view``; raises CelRuntimeError."""
        if view.error is not None:
            raise CelRuntimeError(view.error, self._expression)
        device = view.engine_cache.get(_CACHE_KEY)
        if device is None:
            device = view.engine_cache[_CACHE_KEY] = activation(view)
        ctx = Ctx({"device": device}, checkpoint)
        ctx.cost = self._cost
        try:
            result = self._fn(ctx)
            if ctx.cost > COST_LIMIT:  # the last charges, after the last look at the limit
                raise CostLimitExceeded(COST_EXCEEDED)
        except EvaluationInterrupted:
            raise  # the caller's, not the selector's: no verdict
        except CostLimitExceeded:
            raise CelRuntimeError(COST_EXCEEDED, self._expression) from None
        except (EvalError, EvalAbort) as e:
            raise CelRuntimeError(str(e), self._expression) from None
        except RecursionError:
            raise CelRuntimeError(
                "expression nesting exceeds the evaluator's depth", self._expression
            ) from None
        except Exception as e:
            # A bug in this engine must fail the one selector loudly, never the scheduler.
            raise CelRuntimeError(f"internal error: {type(e).__name__}: {e}", self._expression) from e
        return result


def activation(view: DeviceView) -> DeviceValue:
    """The ``device`` variable for one device; built once and cached on the view."""
    return DeviceValue(
        driver=view.driver,
        attributes=DomainMap({domain: dict(ids) for domain, ids in view.attributes.items()}),
        capacity=DomainMap({domain: dict(ids) for domain, ids in view.capacity.items()}),
        allowMultipleAllocations=bool(view.allow_multiple_allocations),
    )


class PythonEngine:
    """Kubernetes' DRA CEL environment in pure Python (no compiled CEL runtime needed)."""

    name = "python"

    def compile(self, expression: str) -> PythonProgram:
        result_type, program = self._checked(expression)
        if unwrapped(result_type) not in (BOOL, DYN):
            raise CelCompileError(
                f"must evaluate to bool or the unknown type, not {display(result_type)}", expression
            )
        return program

    def compile_derived(self, expression: str) -> PythonProgram:
        """``expression`` as a derived attribute's: its result type checked as such
        (``runtime.derived``); run it with :meth:`PythonProgram.derive`."""
        result_type, program = self._checked(expression)
        problem = result_type_problem(display(result_type))
        if problem is not None:
            raise CelCompileError(problem, expression)
        return program

    def _checked(self, expression: str) -> tuple[Type, PythonProgram]:
        # The expression's type and length are checked by the environment, before any engine.
        try:
            tree = parse(expression)
            result_type, fn, cost = compile_expression(tree, {"device": DEVICE})
        except (ParseFailure, CompileFailure) as e:
            raise CelCompileError(str(e), expression) from None
        except RecursionError:
            raise CelCompileError("expression nesting is too deep", expression) from None
        except Exception as e:
            raise CelCompileError(f"internal error: {type(e).__name__}: {e}", expression) from e
        return result_type, PythonProgram(expression, fn, cost)


def make() -> PythonEngine:
    return PythonEngine()


__all__ = ["PythonEngine", "PythonProgram", "activation", "make"]
