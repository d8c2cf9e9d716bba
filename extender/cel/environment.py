"""The CEL entry point the allocator uses: an :class:`Environment` owning one engine, its
compiled-selector cache and its counters.

An environment is built explicitly (``Environment.create("auto")``) and handed to whoever
compiles selectors; nothing here is process-wide, so two environments (say one per engine in
a test, or one per app instance) never share compiled selectors or counters.

A selector is compiled once per environment (errors included, so a bad class selector costs
one compilation however many pods name it) and its verdict on a device is memoized in the
device's ``cel_memo``: devices are immutable and replaced when their slice changes, so the
memo never needs invalidating.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Generic, TypeVar

from cachetools import LRUCache

from extender.cel import CelCompileError, CelRuntimeError, Checkpoint, DeviceInput
from extender.cel.device import PlainDevice, view_for
from extender.cel.engine import DerivedProgram, Engine, Program, make_engine
from extender.model import AttributeValue

# The longest selector accepted, in UTF-8 bytes; checked here, before any engine sees it.
MAX_EXPRESSION_BYTES = 10 * 1024
SELECTOR_CACHE_SIZE = 8192
# How often a caller waiting for a compilation on a worker thread calls its checkpoint.
COMPILE_POLL_S = 0.002

T = TypeVar("T")

# A typical selector and a device it matches: compiled and run by Environment.warm_up().
WARM_UP_SELECTOR = (
    'device.driver == "warm-up.example.com" && device.attributes["warm-up.example.com"].model == "a100"'
    ' && device.capacity["warm-up.example.com"].memory.compareTo(quantity("40Gi")) >= 0'
)
# A loop longer than the C++ runtime's iteration budget: that engine hands it to the python
# one, whose first compilation (its grammar) would otherwise block the first such request.
WARM_UP_LONG_LOOP = "lists.range(10001).all(i, i >= 0)"


@dataclass
class CelStats:
    """One environment's counters, read by the metrics endpoint."""

    compilations: int = 0
    compile_errors: int = 0
    compile_seconds: float = 0.0
    cache_hits: int = 0
    evaluations: int = 0
    runtime_errors: int = 0
    memo_hits: int = 0

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, f.default)


class _Memoized(Generic[T]):
    """An expression's outcome on a device, memoized in the device's ``cel_memo`` (devices are
    immutable, so the memo never needs invalidating): evaluated once per device version, errors
    included. The outcome methods of the subclasses *are* :meth:`_outcome`, not wrappers of it:
    a selector's memo hit is the filter's innermost step, where one more call costs."""

    __slots__ = ("_memo_key", "_run", "_stats", "expression")

    def __init__(
        self,
        expression: str,
        run: Callable[[Any, Checkpoint | None], T],
        memo_key: tuple[str, ...],
        stats: CelStats,
    ) -> None:
        self.expression = expression
        self._run = run
        self._stats = stats
        self._memo_key = memo_key

    def _outcome(self, device: DeviceInput, checkpoint: Checkpoint | None = None) -> T:
        """The outcome on ``device``; raises :class:`CelRuntimeError`. ``checkpoint`` is called
        during a long evaluation (``extender.cel``); an evaluation it interrupts leaves nothing
        behind."""
        stats = self._stats
        memo = device.cel_memo
        outcome: T | CelRuntimeError | None = memo.get(self._memo_key)
        if outcome is not None:
            stats.memo_hits += 1
        else:
            stats.evaluations += 1
            try:
                outcome = self._run(view_for(device), checkpoint)
            except CelRuntimeError as exc:
                stats.runtime_errors += 1
                outcome = exc
            memo[self._memo_key] = outcome
        if isinstance(outcome, CelRuntimeError):
            raise CelRuntimeError(outcome.message, self.expression)
        return outcome

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.expression!r})"


class Selector(_Memoized[bool]):
    """A compiled selector bound to the engine that compiled it and its environment's counters.
    ``matches(device, checkpoint=None)``: whether ``device`` satisfies it."""

    __slots__ = ()

    def __init__(self, expression: str, program: Program, engine_name: str, stats: CelStats) -> None:
        # The engine is part of the key so another engine never reuses these verdicts; a verdict
        # depends only on the engine, the expression and the device, so environments with the
        # same engine may share it (the one finding it counts a memo hit, not an evaluation).
        super().__init__(expression, program.evaluate, ("cel", engine_name, expression), stats)

    matches = _Memoized._outcome


class DerivedExpression(_Memoized[AttributeValue]):
    """A compiled derived attribute expression (DRADerivedAttributes), bound to its engine and
    its environment's counters. ``value(device, checkpoint=None)``: the attribute it derives
    for ``device``, memoized as a selector's verdict is."""

    __slots__ = ()

    def __init__(self, expression: str, program: DerivedProgram, engine_name: str, stats: CelStats) -> None:
        super().__init__(expression, program.derive, ("derived", engine_name, expression), stats)

    value = _Memoized._outcome


Compiled = Selector | DerivedExpression | CelCompileError


class Environment:
    """One CEL engine with its compiled-selector cache and counters (``--cel-engine``)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.stats = CelStats()
        self._lock = threading.Lock()
        # (derived?, expression) -> compiled selector or derived expression, or its compile
        # error. Never invalidated: the engine is fixed for the environment's lifetime; bounded
        # by least-recent eviction.
        self._cache: LRUCache[tuple[bool, str], Compiled] = LRUCache(maxsize=SELECTOR_CACHE_SIZE)

    @classmethod
    def create(cls, engine: str = "auto") -> Environment:
        """An environment on engine ``engine`` (``auto`` prefers the C++ runtime).

        Raises ValueError for an unknown name and ImportError when that engine is not installed.
        """
        return cls(make_engine(engine))

    @property
    def engine_name(self) -> str:
        """The engine actually in use (what ``auto`` resolved to)."""
        return self._engine.name

    def compile_selector(self, expression: str, checkpoint: Checkpoint | None = None) -> Selector:
        """The compiled selector for ``expression``; raises :class:`CelCompileError`.

        With ``checkpoint``, a compilation (up to a few hundred milliseconds for a long
        selector) runs on a worker thread while this one waits in short sleeps, calling the
        checkpoint between them: the caller can let its event loop run meanwhile, or give up
        (the compilation then still completes, and is cached, for the next caller)."""
        compiled = self._get(False, expression, checkpoint)
        assert isinstance(compiled, Selector)
        return compiled

    def compile_derived(self, expression: str, checkpoint: Checkpoint | None = None) -> DerivedExpression:
        """As :meth:`compile_selector`, for a derived attribute's expression (its result must
        be a scalar or a list of scalars: ``extender.cel.runtime.derived``)."""
        compiled = self._get(True, expression, checkpoint)
        assert isinstance(compiled, DerivedExpression)
        return compiled

    def _get(self, derived: bool, expression: str, checkpoint: Checkpoint | None) -> Compiled:
        if not isinstance(expression, str):
            raise CelCompileError(
                f"expression must be a string, not {type(expression).__name__}", str(expression)
            )
        key = (derived, expression)
        with self._lock:
            cached = self._cache.get(key)
        if cached is None:
            cached = self._compiled(key) if checkpoint is None else self._compiled_aside(key, checkpoint)
        else:
            self.stats.cache_hits += 1
        if isinstance(cached, CelCompileError):
            raise CelCompileError(cached.message, expression)
        return cached

    def _compiled(self, key: tuple[bool, str]) -> Compiled:
        compiled = self._compile(*key)
        with self._lock:
            self._cache[key] = compiled
        return compiled

    def _compiled_aside(self, key: tuple[bool, str], checkpoint: Checkpoint) -> Compiled:
        done = threading.Event()
        outcome: list[Compiled] = []

        def work() -> None:
            try:
                outcome.append(self._compiled(key))
            finally:
                done.set()

        threading.Thread(target=work, name="cel-compile", daemon=True).start()
        while not done.wait(COMPILE_POLL_S):
            checkpoint()
        if not outcome:  # the compiler itself failed (a bug): fail this selector, loudly
            return CelCompileError("internal error: the compilation did not complete", key[1])
        return outcome[0]

    def _compile(self, derived: bool, expression: str) -> Compiled:
        stats = self.stats
        size = len(expression.encode("utf-8", "surrogatepass"))
        if size > MAX_EXPRESSION_BYTES:
            stats.compile_errors += 1
            return CelCompileError(
                f"expression is {size} bytes long, more than the maximum of {MAX_EXPRESSION_BYTES}",
                expression,
            )
        started = time.perf_counter()
        engine = self._engine
        try:
            if derived:
                return DerivedExpression(expression, engine.compile_derived(expression), engine.name, stats)
            return Selector(expression, engine.compile(expression), engine.name, stats)
        except CelCompileError as exc:
            stats.compile_errors += 1
            return exc
        finally:
            stats.compilations += 1
            stats.compile_seconds += time.perf_counter() - started

    def warm_up(self) -> float:
        """Compile and run a typical selector and a long loop once, outside the cache and the
        counters, so that the one-off costs (the pure-Python engine's grammar build, also where
        the C++ engine hands a long loop to it, the C++ environment's first compilation,
        library caches) are paid at start-up instead of by the first request.

        Doubles as a self-check: an engine that gets these selectors wrong must not serve.
        Returns the seconds spent; raises RuntimeError if a verdict is not the expected True.
        """
        started = time.perf_counter()
        engine = self._engine
        device = PlainDevice(
            driver="warm-up.example.com",
            attributes={"model": {"string": "a100"}},
            capacity={"memory": {"value": "80Gi"}},
            allow_multiple_allocations=False,
        )
        for selector in (WARM_UP_SELECTOR, WARM_UP_LONG_LOOP):
            try:
                verdict = engine.compile(selector).evaluate(view_for(device))
            except (CelCompileError, CelRuntimeError) as exc:
                raise RuntimeError(
                    f"CEL engine {engine.name} failed its warm-up selector: {exc.message} ({selector})"
                ) from exc
            if verdict is not True:
                raise RuntimeError(
                    f"CEL engine {engine.name} answered {verdict!r} to its warm-up selector,"
                    f" not True ({selector})"
                )
        return time.perf_counter() - started
