"""The pure-Python CEL engine against Kubernetes' answers (cel-go semantics, DRA environment)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.cel import CelCompileError, CelRuntimeError
from extender.cel.device import DeviceView, build_device_view
from extender.cel.engine import make_engine
from extender.cel.python import compiler
from extender.cel.python import library as lib
from extender.cel.python.engine import PythonEngine
from extender.cel.runtime.types import STRING

ENGINE = PythonEngine()
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

GPU = {
    "driver": "gpu.example.com",
    "attributes": {
        "model": {"string": "a100"},
        "driverVersion": {"version": "1.2.3"},
        "cores": {"int": 8},
        "selected": {"bool": True},
        "names": {"strings": ["fish", "bird"]},
        "ids": {"ints": [1, 2, 3]},
        "other.example.com/name": {"bool": True},
    },
    "capacity": {"memory": {"value": "80Gi"}, "cores": {"value": "8"}},
}


def make_view(spec: dict[str, Any] = GPU) -> DeviceView:
    device = SimpleNamespace(
        driver=spec["driver"],
        attributes=spec.get("attributes", {}),
        capacity=spec.get("capacity", {}),
        allow_multiple_allocations=spec.get("allowMultipleAllocations", False),
        cel_memo={},
    )
    return build_device_view(device)


def outcome(expression: str, view: DeviceView | None = None) -> bool | str:
    try:
        program = ENGINE.compile(expression)
    except CelCompileError:
        return "compile-error"
    try:
        return program.evaluate(view or make_view())
    except CelRuntimeError:
        return "error"


A = 'device.attributes["gpu.example.com"]'
C = 'device.capacity["gpu.example.com"]'

CASES: list[tuple[str, bool | str]] = [
    # the device variable and the missing-domain default
    (f'{A}.model == "a100" && {A}["model"] == "a100"', True),
    ('device.attributes["other.example.com"].name', True),
    ('"absent.example.com" in device.attributes', False),
    ('has(device.attributes["absent.example.com"].x)', False),
    ('device.attributes["absent.example.com"].x == 1', "error"),
    (f"{A}.missing == 1", "error"),
    (f'{A}.?missing.orValue(7) == 7 && {A}[?"model"].value() == "a100"', True),
    ('device.attributes.exists_one(d, d == "other.example.com")', True),
    ("device.allowMultipleAllocations == false && has(device.driver)", True),
    ("device.nosuchfield", "compile-error"),
    (f"{A}.names", "error"),  # dyn result that is not a bool
    ("device.driver", "compile-error"),  # statically a string
    ("noSuchVar", "compile-error"),
    # heterogeneous equality and cross-type numeric comparison
    (f'{A}.cores == 8.0 && {A}.cores != "8" && {A}.cores > 2.5 && {A}.cores < 9u', True),
    ("dyn(1) == dyn(1u) && dyn(1) in [1.0] && {1: 'a'}[dyn(1.0)] == 'a'", True),
    ("dyn(true) == dyn(1)", False),
    ("{1: 'a'}[dyn(true)] == 'a'", "error"),
    ("1 == 1.0", "compile-error"),
    ("1 < 1.5 && 2u > 1 && 1.5 >= 1u", True),
    ('dyn("a") < dyn(1)', "error"),
    ("dyn([1, 2]) == [1.0, 2.0] && dyn({'a': 1}) == {'a': 1.0}", True),
    # arithmetic limits
    ("9223372036854775807 + 1 > 0", "error"),
    ("-9223372036854775808 % -1 == 0", "error"),
    ("-7 / 2 == -3 && -7 % 2 == -1 && 7 % -2 == 1", True),
    ("18446744073709551615u * 2u > 0u", "error"),
    ("1.0 / 0.0 > 0.0 && -1.0 / 0.0 < 0.0", True),
    ("9223372036854775808 > 0", "compile-error"),
    ('int("9223372036854775808") > 0', "compile-error"),
    ("uint(-1) > 0u", "compile-error"),
    ('double("x") > 0.0', "compile-error"),
    ("int(1e19) > 0", "compile-error"),
    ('int(dyn("12")) == 12 && uint(2.7) == 2u && int(-2.7) == -2', True),
    ('string(1e6) == "1e+06" && string(100.0) == "100" && string(0.5) == "0.5"', True),
    # error absorption
    ("false && 1 / 0 == 1", False),
    ("1 / 0 == 1 && false", False),
    ("1 / 0 == 1 || true", True),
    ("1 / 0 == 1 || false", "error"),
    ("[0, 1].exists(x, 1 / x == 1)", True),
    ("[0, 1].all(x, 1 / x == 5)", False),
    ("[0, 1].all(x, 1 / x == 1)", "error"),
    ("[0, 1].exists_one(x, 1 / x == 1)", "error"),
    ("(1 / 0 == 1) ? true : true", "error"),
    # static typing
    ('"a" + 1 == "a1"', "compile-error"),
    ('dyn("a") + dyn(1) == "a1"', "error"),
    ('[1, "a"].size() == 2', "compile-error"),
    # Kubernetes' literal validator: dyn is a type of its own there.
    ('[1, dyn("a")].size() == 2', "compile-error"),
    ('[dyn(1), dyn("a")].size() == 2', True),
    ('true ? 1 : "a"', "compile-error"),
    ("1", "compile-error"),
    (f"{C}.memory == 5", "compile-error"),
    ("[1, 2][0.0] == 1", "compile-error"),
    ("[1, 2][dyn(1u)] == 2", True),
    ("device.driver ==", "compile-error"),
    ("?!", "compile-error"),
    # strings: size in code points and the strings extension
    ('size("héllo") == 5 && "héllo".charAt(1) == "é" && "héllo".indexOf("l") == 2', True),
    ('"abc".charAt(3) == "" && "abcabc".lastIndexOf("bc") == 4 && "abcabc".indexOf("c", 3) == 5', True),
    ('"abc".charAt(4) == ""', "error"),
    ('"ÀbC".lowerAscii() == "Àbc" && "aBc".upperAscii() == "ABC"', True),
    ('"a,b,c".split(",", 2) == ["a", "b,c"] && "ab".split("") == ["a", "b"]', True),
    ('"aaa".replace("a", "b", 2) == "bba" && " \\tx\\n".trim() == "x"', True),
    ('"hello".substring(1, 3) == "el" && "hello".substring(3) == "lo"', True),
    ('"hello".substring(3, 1) == ""', "error"),
    ('["a", "b"].join("-") == "a-b" && ["a", "b"].join() == "ab"', True),
    ('strings.quote("a\\"b\\n") == "\\"a\\\\\\"b\\\\n\\""', True),
    ('"\\u00e9" == "é" && "\\x41" == "A" && "\\101" == "A" && r"\\n".size() == 2', True),
    ('b"\\xff\\x00".size() == 2 && b"ab" + b"c" == b"abc"', True),
    ('string(b"\\xff") == ""', "compile-error"),
    ('"\\q" == "q"', "compile-error"),
    # regex
    (f'{A}.model.matches("^a[0-9]+$") && "abc123".find("[0-9]+") == "123"', True),
    ('"a1b2c3".findAll("[0-9]") == ["1", "2", "3"] && "a1b2c3".findAll("[0-9]", 2) == ["1", "2"]', True),
    ('device.driver.matches("[")', "compile-error"),
    # lists library, sets extension, includes
    ("[1, 2, 3].isSorted() && ![2, 1].isSorted() && [1, 2, 3].sum() == 6 && [1.5, 2.5].sum() == 4.0", True),
    ("[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3 && [1, 2, 1].lastIndexOf(1) == 2", True),
    ("[1, 2].indexOf(3) == -1 && 'abc'.indexOf('c') == 2", True),
    ("[].min() == 1", "error"),
    ("sets.contains([1, 2, 3], [3, 1]) && sets.equivalent([1, 2], [2, 1, 1])", True),
    ("sets.intersects([1], [2, 1]) && !sets.intersects([1], [2]) && !sets.contains([1], [2])", True),
    (f'{A}.names.includes("fish") && !{A}.names.includes("cat") && {A}.model.includes("a100")', True),
    # quantity
    (f'{C}.memory == quantity("81920Mi") && {C}.memory.compareTo(quantity("40Gi")) == 1', True),
    (f'{C}.memory.add(quantity("1Gi")).isGreaterThan(quantity("80Gi")) && {C}.cores.asInteger() == 8', True),
    ('quantity("1").add(1) == quantity("2") && quantity("3").sub(1).isLessThan(quantity("2.5"))', True),
    ('isQuantity("1Ki") && !isQuantity("x") && sign(quantity("-1")) == -1', True),
    ('quantity("-1").sign() == -1', "compile-error"),
    ('quantity("1.5").isInteger() == false && quantity("1.5").asApproximateFloat() == 1.5', True),
    ('quantity("1.5").asInteger() == 1', "error"),
    ('quantity("x") == quantity("1")', "error"),
    # semver
    (f'{A}.driverVersion.isGreaterThan(semver("1.0.0")) && {A}.driverVersion.major() == 1', True),
    ('semver("v1.2", true) == semver("1.2.0") && isSemver("v1", true) && !isSemver("v1")', True),
    ('semver("1.0.0+a") == semver("1.0.0+b") && semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))', True),
    ('semver("1.2.3").compareTo(semver("1.2.4")) == -1 && semver("1.2.3").minor() == 2', True),
    ('semver("bad") == semver("1.0.0")', "error"),
    (f'{A}.cores.isGreaterThan(quantity("1"))', "error"),  # dyn receiver without a matching overload
    # macros, bindings, optionals, two-variable comprehensions
    ("cel.bind(x, 2, x * x == 4) && [1, 2, 3].map(x, x * 2) == [2, 4, 6]", True),
    ("[1, 2, 3].filter(x, x > 1) == [2, 3] && [1, 2, 3].map(x, x > 1, x * 10) == [20, 30]", True),
    ("[10, 20].all(i, v, v > i) && {'a': 1}.exists(k, v, k == 'a' && v == 1)", True),
    ("[1, 2].transformList(i, v, i + v) == [1, 3] && {'a': 1}.transformMap(k, v, v + 1) == {'a': 2}", True),
    ("optional.of(1).value() == 1 && optional.none().orValue(2) == 2 && !optional.none().hasValue()", True),
    ("optional.none().value() == 1", "error"),
    ("[1, 2][?5].orValue(0) == 0 && {'a': 1}.?a.value() == 1", True),
    (f"{A}.cores.exists(x, x > 0)", "error"),
    ("1.exists(x, x > 0)", "compile-error"),
    ("[1].exists(x.y, true)", "compile-error"),
    ("type(1) == int && type('a') == string && type(1u) != int", True),
    ("cel.bind(x, 1 / 0, true) && cel.bind(x, 1 / 0, x == 1 || true)", True),  # lazy initializer
    ("cel.bind(x, 1 / 0, x == 1)", "error"),
    ("cel.bind(y, 5, cel.bind(x, y, [1].exists(y, x == 5)))", True),  # initializer sees its own scope
    ('"baaab".findAll("a*") == ["", "aaa", ""]', True),  # Go skips an empty match after a match
    ('int("+12") == 12 && double("-1.5e3") == -1500.0 && double("Inf") > 0.0', True),
    ('int(" 1") == 1', "compile-error"),
    ('uint("+1") == 1u', "compile-error"),
    ('b"\\u00e9".size() == 2', "compile-error"),
    ("!!true && !!!false && --1 == 1", True),
    ("{1: 2}.a == 2", "error"),
    ("{'a': 1, 'a': 2}.size() == 1 && {'a': 1, 'a': 2}.a == 2", True),  # cel-go's evalMap: the last wins
    # timestamps and durations (Go parsing and printing, UTC getters)
    ('duration("1h30m") == duration("90m") && duration("1.5h") > duration("89m")', True),
    ('string(duration("1.5s")) == "1.5s" && string(duration("1h")) == "3600s"', True),
    ('timestamp("2020-01-01T00:00:00Z") + duration("24h") == timestamp("2020-01-02T00:00:00Z")', True),
    ('string(timestamp("2020-01-01T01:02:03.500+01:00")) == "2020-01-01T00:02:03.5Z"', True),
    ('cel.bind(t, timestamp("2020-03-01T00:00:00Z"), t.getDayOfWeek() == 0 && t.getMonth() == 2)', True),
    ('timestamp("2020-03-01T00:00:00Z").getHours("America/New_York") == 19', True),
    ('timestamp("2020-03-01T00:00:00Z").getHours("No/Such_Zone") == 19', "error"),
    ('timestamp("9999-12-31T23:59:59Z") + duration("1s") > timestamp("2020-01-01T00:00:00Z")', "error"),
    ('duration("2562048h") > duration("1h")', "compile-error"),  # beyond Go's int64 nanoseconds
    ('timestamp("2020-13-01T00:00:00Z") < timestamp("2021-01-01T00:00:00Z")', "compile-error"),
    # Kubernetes' URL and IP libraries (more in test_engine_gaps.py)
    ('url("https://x").getHost() == "x"', True),
    ('isIP("1.2.3.4")', True),
    # the strings extension's format (more in test_engine_gaps.py)
    ('"%d".format([1]) == "1"', True),
]


@pytest.mark.parametrize(("expression", "expected"), CASES, ids=[c[0][:60] for c in CASES])
def test_kubernetes_answers(expression: str, expected: bool | str) -> None:
    assert outcome(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("noSuchVar", "undeclared reference to 'noSuchVar'"),
        ('"a" + 1 == "a1"', "found no matching overload for '_+_' applied to '(string, int)'"),
        ('"a".contains(1)', "found no matching overload for 'contains' applied to 'string.(int)'"),
        ("device.nosuchfield == 1", "undefined field 'nosuchfield'"),
        ("1", "must evaluate to bool or the unknown type, not int"),
        ('"a".validate("b") == ""', "found no matching overload for 'validate' applied to 'string.(string)'"),
        ("format.nope().hasValue()", "undeclared reference to 'format'"),
        ("9223372036854775808 > 0", "invalid int literal"),
    ],
)
def test_compile_error_messages(expression: str, message: str) -> None:
    with pytest.raises(CelCompileError) as info:
        ENGINE.compile(expression)
    assert message in info.value.message
    assert info.value.expression == expression


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (f"{A}.missing == 1", "no such key: missing"),
        ('device.attributes["absent"].x == 1', "no such key: x"),
        ("1 / 0 == 0", "division by zero"),
        ("1 % 0 == 0", "modulus by zero"),
        ("9223372036854775807 + 1 > 0", "integer overflow"),
        (f"{A}.names", "could not be converted to bool"),
    ],
)
def test_runtime_error_messages(expression: str, message: str) -> None:
    program = ENGINE.compile(expression)
    with pytest.raises(CelRuntimeError) as info:
        program.evaluate(make_view())
    assert message in info.value.message
    assert info.value.expression == expression


def test_device_with_unconvertible_attribute_fails_every_selector() -> None:
    view = make_view({"driver": "d", "attributes": {"v": {"version": "not-a-version"}}})
    assert view.error is not None
    with pytest.raises(CelRuntimeError) as info:
        ENGINE.compile("true").evaluate(view)
    assert info.value.message == view.error


def test_activation_is_built_once_per_device() -> None:
    view = make_view()
    program = ENGINE.compile(f'{A}.model == "a100"')
    assert program.evaluate(view) is True
    activation = view.engine_cache["python"]
    assert ENGINE.compile(f"{A}.cores == 8").evaluate(view) is True
    assert view.engine_cache["python"] is activation


def test_device_on_unqualified_driver_domain() -> None:
    view = make_view({"driver": "dra.example.com", "attributes": {"name": {"bool": True}}})
    assert ENGINE.compile('device.attributes["dra.example.com"].name').evaluate(view) is True
    assert ENGINE.compile('device.driver == "dra.example.com"').evaluate(view) is True


def test_runaway_expression_hits_the_cost_limit() -> None:
    ten = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"
    expression = "a + f >= 0"
    for var in "fedcba":
        expression = f"{ten}.all({var}, {expression})"
    program = ENGINE.compile(expression)
    with pytest.raises(CelRuntimeError, match="cost limit"):
        program.evaluate(make_view())


def test_string_doubling_is_bounded() -> None:
    depth = 30  # 8 * 2**30 characters if nothing stopped it
    body = f"s{depth}.size() > 0"
    for level in range(depth, 0, -1):
        body = f"cel.bind(s{level}, s{level - 1} + s{level - 1}, {body})"
    program = ENGINE.compile(f'cel.bind(s0, "xxxxxxxx", {body})')
    with pytest.raises(CelRuntimeError, match="cost limit"):
        program.evaluate(make_view())


def test_quadratic_set_operation_over_budget_fails_fast() -> None:
    big = "[" + ",".join(str(i) for i in range(1001)) + "]"
    program = ENGINE.compile(f"cel.bind(l, {big}, sets.contains(l, l))")
    with pytest.raises(CelRuntimeError, match="cost limit"):
        program.evaluate(make_view())


def test_long_logical_chains_are_balanced_not_too_deep() -> None:
    terms = [f'device.driver == "d{i}"' for i in range(350)]
    assert ENGINE.compile(" || ".join(terms)).evaluate(make_view()) is False
    assert ENGINE.compile(" && ".join(["true"] * 1200)).evaluate(make_view()) is True


def test_deeply_nested_expression_is_a_compile_error_not_a_crash() -> None:
    with pytest.raises(CelCompileError):
        ENGINE.compile("(" * 3000 + "true" + ")" * 3000)


def test_a_bug_in_a_library_function_is_a_runtime_error_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_: str) -> str:
        raise TypeError("boom")

    # The table is read-only: the compiler is handed one with the broken overload instead.
    table = {**lib.FUNCTIONS, ("trim", True): (lib.Overload((STRING,), STRING, broken),)}
    monkeypatch.setattr(compiler, "FUNCTIONS", table)
    program = ENGINE.compile(f'{A}.model.trim() == "a100"')
    with pytest.raises(CelRuntimeError, match="internal error: TypeError: boom"):
        program.evaluate(make_view())


def test_make_engine_selects_this_engine() -> None:
    engine = make_engine("python")
    assert isinstance(engine, PythonEngine)
    assert engine.name == "python"


int64 = st.integers(INT64_MIN, INT64_MAX)


def _int_outcome(expression: str, expected: int | None) -> None:
    """``expected`` None means int64 overflow; else the expression must equal it exactly."""
    if expected is None or not INT64_MIN <= expected <= INT64_MAX:
        with pytest.raises(CelRuntimeError, match="overflow"):
            ENGINE.compile(f"{expression} == 0").evaluate(make_view())
        return
    assert ENGINE.compile(f"{expression} == {expected}").evaluate(make_view()) is True


@settings(max_examples=150, deadline=None)
@given(a=int64, b=int64)
def test_int64_arithmetic_matches_go(a: int, b: int) -> None:
    x, y = f"dyn({a})", f"dyn({b})"  # dyn keeps the operands from being folded at compile time
    _int_outcome(f"{x} + {y}", a + b)
    _int_outcome(f"{x} - {y}", a - b)
    _int_outcome(f"{x} * {y}", a * b)
    if b != 0:
        quotient = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        _int_outcome(f"{x} / {y}", quotient)
        if a == INT64_MIN and b == -1:
            _int_outcome(f"{x} % {y}", None)
        else:
            _int_outcome(f"{x} % {y}", a - quotient * b)


@settings(max_examples=100, deadline=None)
@given(a=int64, b=st.floats(allow_nan=False, allow_infinity=False))
def test_cross_type_comparison_and_equality_are_exact(a: int, b: float) -> None:
    view = make_view()
    assert ENGINE.compile(f"dyn({a}) < dyn({b!r})").evaluate(view) is (a < b)
    assert ENGINE.compile(f"dyn({a}) == dyn({b!r})").evaluate(view) is (a == b)
    assert ENGINE.compile(f'dyn({a}) == dyn("{a}")').evaluate(view) is False


def test_the_function_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        lib.FUNCTIONS[("trim", True)] = ()  # type: ignore[index]
    assert all(isinstance(overloads, tuple) for overloads in lib.FUNCTIONS.values())
