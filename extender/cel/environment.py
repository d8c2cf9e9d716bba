"""The CEL entry points the allocator uses: compiled-selector cache, per-device memo, counters.

A selector is compiled once per process (errors included, so a bad class selector costs one
compilation however many pods name it) and its verdict on a device is memoized in the
device's ``cel_memo``: devices are immutable and replaced when their slice changes, so the
memo never needs invalidating.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, fields

from cachetools import LRUCache

from extender.cel import CelCompileError, CelRuntimeError, DeviceInput
from extender.cel.device import view_for
from extender.cel.engine import Engine, Program, make_engine

MAX_EXPRESSION_BYTES = 10 * 1024
SELECTOR_CACHE_SIZE = 8192


@dataclass
class CelStats:
    """Process-wide counters, read by the metrics endpoint."""

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


stats = CelStats()


class Selector:
    """A compiled selector bound to the engine that compiled it."""

    __slots__ = ("_memo_key", "_program", "expression")

    def __init__(self, expression: str, program: Program, engine_name: str) -> None:
        self.expression = expression
        self._program = program
        # The engine is part of the key so switching engines never reuses another's verdicts.
        self._memo_key = ("cel", engine_name, expression)

    def matches(self, device: DeviceInput) -> bool:
        """Whether ``device`` satisfies the selector; raises :class:`CelRuntimeError`."""
        memo = device.cel_memo
        outcome = memo.get(self._memo_key)
        if outcome is not None:
            stats.memo_hits += 1
        else:
            stats.evaluations += 1
            try:
                outcome = self._program.evaluate(view_for(device))
            except CelRuntimeError as exc:
                stats.runtime_errors += 1
                outcome = exc
            memo[self._memo_key] = outcome
        if isinstance(outcome, CelRuntimeError):
            raise CelRuntimeError(outcome.message, self.expression)
        return outcome

    def __repr__(self) -> str:
        return f"Selector({self.expression!r})"


_lock = threading.Lock()
_engine: Engine | None = None
_cache: LRUCache[str, Selector | CelCompileError] = LRUCache(maxsize=SELECTOR_CACHE_SIZE)


def configure(engine: str = "auto") -> str:
    """Select the process-wide engine (``--cel-engine``); returns the name actually used.

    Raises ValueError for an unknown name and ImportError when that engine is not installed.
    """
    global _engine
    chosen = make_engine(engine)
    with _lock:
        _engine = chosen
        _cache.clear()
    return chosen.name


def current_engine_name() -> str:
    return _current_engine().name


def _current_engine() -> Engine:
    global _engine
    with _lock:
        if _engine is None:
            _engine = make_engine("auto")
        return _engine


def compile_selector(expression: str) -> Selector:
    """The compiled selector for ``expression``; raises :class:`CelCompileError`."""
    if not isinstance(expression, str):
        raise CelCompileError(
            f"expression must be a string, not {type(expression).__name__}", str(expression)
        )
    with _lock:
        cached = _cache.get(expression)
    if cached is None:
        cached = _compile(expression)
        with _lock:
            _cache[expression] = cached
    else:
        stats.cache_hits += 1
    if isinstance(cached, CelCompileError):
        raise CelCompileError(cached.message, expression)
    return cached


def _compile(expression: str) -> Selector | CelCompileError:
    size = len(expression.encode("utf-8", "surrogatepass"))
    if size > MAX_EXPRESSION_BYTES:
        stats.compile_errors += 1
        return CelCompileError(
            f"expression is {size} bytes long, more than the maximum of {MAX_EXPRESSION_BYTES}", expression
        )
    engine = _current_engine()
    started = time.perf_counter()
    try:
        program = engine.compile(expression)
    except CelCompileError as exc:
        stats.compile_errors += 1
        return exc
    finally:
        stats.compilations += 1
        stats.compile_seconds += time.perf_counter() - started
    return Selector(expression, program, engine.name)


# A typical selector and a device it matches: compiled and run by warm_up().
WARM_UP_SELECTOR = (
    'device.driver == "warm-up.example.com" && device.attributes["warm-up.example.com"].model == "a100"'
    ' && device.capacity["warm-up.example.com"].memory.compareTo(quantity("40Gi")) >= 0'
)


def warm_up() -> float:
    """Compile and run a typical selector once, outside the cache and the counters, so that the
    one-off costs (the pure-Python engine's grammar build, the C++ environment's first
    compilation, library caches) are paid at start-up instead of by the first request.

    Doubles as a self-check: an engine that gets this selector wrong must not serve. Returns
    the seconds spent; raises RuntimeError if the verdict is not the expected True.
    """
    # parity imports this module; its plain device class is needed only here.
    from extender.tools.cel_parity import CaseDevice

    started = time.perf_counter()
    engine = _current_engine()
    device = CaseDevice(
        driver="warm-up.example.com",
        attributes={"model": {"string": "a100"}},
        capacity={"memory": {"value": "80Gi"}},
        allow_multiple_allocations=False,
    )
    try:
        verdict = engine.compile(WARM_UP_SELECTOR).evaluate(view_for(device))
    except (CelCompileError, CelRuntimeError) as exc:
        raise RuntimeError(f"CEL engine {engine.name} failed its warm-up selector: {exc.message}") from exc
    if verdict is not True:
        raise RuntimeError(f"CEL engine {engine.name} answered {verdict!r} to its warm-up selector, not True")
    return time.perf_counter() - started
