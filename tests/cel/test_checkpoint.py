"""A long evaluation calls its caller's checkpoint, which may interrupt it without a verdict."""

from __future__ import annotations

import time

import pytest

from extender.cel import CHECK_EVERY_COST, COST_LIMIT, CelCompileError, CelRuntimeError, EvaluationInterrupted
from extender.cel.device import PlainDevice, build_device_view
from extender.cel.engine import available_engines
from extender.cel.environment import Environment
from extender.cel.python.engine import PythonEngine

ENGINES = [pytest.param(e, id=e) for e in ("python", "cpp") if e in available_engines()]

# 40,000 iterations (more than the C++ runtime's own budget), false on every device.
LONG = "lists.range(200).exists(a, lists.range(200).exists(b, a + b < 0))"


def device() -> PlainDevice:
    return PlainDevice("gpu.example.com", {"model": {"string": "a100"}}, {}, False)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_long_evaluation_calls_the_checkpoint_as_its_cost_grows(engine):
    calls = []
    selector = Environment.create(engine).compile_selector(LONG)
    assert selector.matches(device(), lambda: calls.append(1)) is False
    # One call per CHECK_EVERY_COST units of cel-go's cost (the C++ engine hands such a loop to
    # the python one, which counts them).
    cost = PythonEngine().compile(LONG).actual_cost(build_device_view(device()))
    assert cost > 300_000
    # The next look-up comes CHECK_EVERY_COST after the last, which a charge may overshoot by
    # its size (here at most a lists.range(200): 211).
    assert cost // (CHECK_EVERY_COST + 211) <= len(calls) <= cost // CHECK_EVERY_COST, (len(calls), cost)


@pytest.mark.parametrize("engine", ENGINES)
def test_an_interrupted_evaluation_leaves_no_verdict_behind(engine):
    selector = Environment.create(engine).compile_selector(LONG)
    dev = device()

    def deadline_passed() -> None:
        raise EvaluationInterrupted("filter operation aborted: context deadline exceeded")

    with pytest.raises(EvaluationInterrupted, match="deadline exceeded"):
        selector.matches(dev, deadline_passed)
    # Not memoized as false or as an error: evaluated again, in full, when asked again.
    calls = []
    assert selector.matches(dev, lambda: calls.append(1)) is False
    assert calls


@pytest.mark.parametrize("engine", ENGINES)
def test_a_cheap_evaluation_never_calls_the_checkpoint(engine):
    selector = Environment.create(engine).compile_selector('device.driver == "gpu.example.com"')
    assert selector.matches(device(), lambda: pytest.fail("checkpoint called")) is True


@pytest.mark.parametrize("engine", ENGINES)
def test_the_cost_limit_still_applies_with_a_checkpoint(engine):
    over = "lists.range(1000).exists(a, lists.range(1000).exists(b, a + b < 0))"
    selector = Environment.create(engine).compile_selector(over)
    calls = []
    with pytest.raises(CelRuntimeError, match="actual cost limit exceeded"):
        selector.matches(device(), lambda: calls.append(1))
    assert len(calls) <= COST_LIMIT // CHECK_EVERY_COST


def long_selector(variant: int) -> str:
    numbers = "[" + ",".join(str(i) for i in range(350)) + "]"
    return f"{numbers}.exists(a, {numbers}.exists(b, a + b < -{variant}))"


@pytest.mark.parametrize("engine", ENGINES)
def test_a_compilation_runs_aside_while_the_caller_checks_in(engine):
    cel = Environment.create(engine)
    calls = []
    selector = cel.compile_selector(long_selector(1), lambda: calls.append(1))
    assert calls  # tens of milliseconds at least: the caller was called back meanwhile
    assert selector.matches(device()) is False
    again = []
    assert cel.compile_selector(long_selector(1), lambda: again.append(1)) is selector
    assert again == []  # cached: no compilation, no waiting


@pytest.mark.parametrize("engine", ENGINES)
def test_a_compilation_given_up_by_its_caller_still_lands_in_the_cache(engine):
    cel = Environment.create(engine)

    def deadline_passed() -> None:
        raise EvaluationInterrupted("filter operation aborted: context deadline exceeded")

    with pytest.raises(EvaluationInterrupted):
        cel.compile_selector(long_selector(2), deadline_passed)
    for _ in range(500):
        if cel.stats.compilations:
            break
        time.sleep(0.01)
    assert cel.stats.compilations == 1
    cel.compile_selector(long_selector(2))
    assert (cel.stats.compilations, cel.stats.cache_hits) == (1, 1)


def test_compilations_errors_come_back_from_aside_too():
    cel = Environment.create("python")
    with pytest.raises(CelCompileError, match="undeclared reference"):
        cel.compile_selector("nope == 1", lambda: None)
