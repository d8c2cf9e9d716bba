"""A long evaluation calls its caller's checkpoint, which may interrupt it without a verdict."""

from __future__ import annotations

import pytest

from extender.cel import CHECK_EVERY_COST, COST_LIMIT, CelRuntimeError, EvaluationInterrupted
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
    # (a charge that is not a loop step does not look up: a few calls fewer)
    assert cost // CHECK_EVERY_COST - 5 <= len(calls) <= cost // CHECK_EVERY_COST, (len(calls), cost)


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
