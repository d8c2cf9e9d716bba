"""Derived attribute expressions (DRADerivedAttributes) on both engines: which result types
compile, the value constraints compare, the runtime errors, memo, cost limit and checkpoint.

The expected texts and values are those of k8s.io/dynamic-resource-allocation v0.37.2
cel/compile.go (validateOutputType with a derived attribute, valToDeviceAttribute), checked
against the released code through tests/oracle for the cases of
tests/conformance/upstream/derived-*.yaml.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.cel import COST_EXCEEDED, CelCompileError, CelRuntimeError, EvaluationInterrupted
from extender.cel.device import PlainDevice
from extender.cel.environment import Environment
from extender.model import AttributeValue
from tests.cel.test_environment import ENGINES

D = 'device.attributes["gpu.example.com"]'


@pytest.fixture(params=ENGINES)
def cel(request: pytest.FixtureRequest) -> Environment:
    return Environment.create(request.param)


def gpu(**attributes: dict[str, Any]) -> PlainDevice:
    return PlainDevice(
        driver="gpu.example.com",
        attributes={"numa": {"int": 1}, "topology": {"string": "socket-0/numa-3"}, **attributes},
        capacity={"memory": {"value": "80Gi"}},
        allow_multiple_allocations=False,
    )


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (f"{D}.numa", AttributeValue("int", (1,), False)),
        (f'int({D}.topology.split("numa-")[1])', AttributeValue("int", (3,), False)),
        (f"{D}.numa == 1", AttributeValue("bool", (True,), False)),
        (f"string({D}.numa)", AttributeValue("string", ("1",), False)),
        # Build metadata stays: blang's String() of the version (the C++ engine hands this one
        # to the python engine, its messages drop it).
        ('semver("1.2.3-rc.1+build.5")', AttributeValue("version", ("1.2.3-rc.1+build.5",), False)),
        ('semver("v1.2", true)', AttributeValue("version", ("1.2.0",), False)),
        (f"[{D}.numa, 7]", None),  # mixed literal (dyn and int): a compile error, as in cel-go
        ("[1, 7]", AttributeValue("int", (1, 7), True)),
        ('["a", "b"]', AttributeValue("string", ("a", "b"), True)),
        ("[true]", AttributeValue("bool", (True,), True)),
        (f"{D}.ids", AttributeValue("int", (4, 5), True)),
        ('[semver("1.0.0"), semver("2.0.0+x")]', AttributeValue("version", ("1.0.0", "2.0.0+x"), True)),
        # An empty list is upstream's empty string list: no value a constraint can use.
        ("[]", AttributeValue(None, (), False)),
    ],
)
def test_value_of_an_expression(cel: Environment, expression: str, expected: AttributeValue | None) -> None:
    device = gpu(ids={"ints": [4, 5]})
    if expected is None:
        with pytest.raises(CelCompileError, match="expected type"):
            cel.compile_derived(expression)
        return
    assert cel.compile_derived(expression).value(device) == expected


@pytest.mark.parametrize(
    ("expression", "type_name"),
    [
        ("1.5", "double"),
        ("1u", "uint"),
        ('{"a": 1}', "map(string, int)"),
        ("[[1]]", "list(list(int))"),
        ('quantity("1Gi")', "kubernetes.Quantity"),
        ('device.capacity["gpu.example.com"].memory', "kubernetes.Quantity"),
        ("null", "null"),  # cel-go: null_type, the C++ checker: null
        (f"{D}.?numa", "optional_type(dyn)"),
    ],
)
def test_a_result_type_that_is_no_attribute_does_not_compile(
    cel: Environment, expression: str, type_name: str
) -> None:
    with pytest.raises(CelCompileError) as raised:
        cel.compile_derived(expression)
    assert raised.value.message.startswith(
        "must evaluate to a primitive scalar (string, integer, boolean, semver) or a list of these "
        f"scalars, not {type_name}"
    )


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (f"{D}.missing", "no such key: missing"),
        ("dyn(1u)", "unsupported CEL return type: uint"),
        ("dyn(1.5)", "unsupported CEL return type: double"),
        ('dyn({"a": 1})', "unsupported CEL return type: map"),
        ("dyn([[1]])", "unsupported list element type: list"),
        ('[dyn(1), dyn("a")]', "expected list element at index 1 to be int, got string"),
        ("[dyn(1u)]", "unsupported list element type: uint"),
    ],
)
def test_a_value_that_is_no_attribute_is_a_runtime_error(
    cel: Environment, expression: str, message: str
) -> None:
    with pytest.raises(CelRuntimeError) as raised:
        cel.compile_derived(expression).value(gpu())
    assert raised.value.message == message
    assert raised.value.expression == expression


def test_a_selector_and_a_derived_attribute_of_one_text_are_compiled_apart(cel: Environment) -> None:
    expression = f"{D}.numa == 1"
    assert cel.compile_selector(expression).matches(gpu()) is True
    assert cel.compile_derived(expression).value(gpu()) == AttributeValue("bool", (True,), False)
    with pytest.raises(CelCompileError, match="must evaluate to bool"):
        cel.compile_selector(f"{D}.topology + 'x'")
    assert cel.compile_derived(f'{D}.topology + "x"').value(gpu()).values == ("socket-0/numa-3x",)


def test_the_value_is_memoized_per_device_errors_included(cel: Environment) -> None:
    device = gpu()
    good, bad = cel.compile_derived(f"{D}.numa"), cel.compile_derived(f"{D}.nope")
    for _ in range(3):
        assert good.value(device).values == (1,)
        with pytest.raises(CelRuntimeError):
            bad.value(device)
    assert cel.stats.evaluations == 2
    assert cel.stats.memo_hits == 4
    assert cel.stats.runtime_errors == 1
    assert good.value(gpu()).values == (1,)  # another device (version) is evaluated anew
    assert cel.stats.evaluations == 3


def test_the_cost_limit_applies(cel: Environment) -> None:
    expensive = "lists.range(2000).map(i, lists.range(2000).filter(j, j < i).size()).size()"
    with pytest.raises(CelRuntimeError, match=COST_EXCEEDED):
        cel.compile_derived(expensive).value(gpu())


def test_a_long_evaluation_calls_the_checkpoint_which_may_interrupt_it(cel: Environment) -> None:
    calls = []

    def checkpoint() -> None:
        calls.append(1)
        if len(calls) > 2:
            raise EvaluationInterrupted("deadline passed")

    program = cel.compile_derived("lists.range(5000).filter(i, i % 2 == 0).size()")
    device = gpu()
    with pytest.raises(EvaluationInterrupted):
        program.value(device, checkpoint)
    assert program.value(device).values == (2500,)  # nothing was memoized when interrupted
