"""Environment.compile_selector / Selector.matches: caches, memo, limits, engine choice, counters."""

from __future__ import annotations

import pytest

from extender.cel import CelCompileError, CelRuntimeError
from extender.cel.device import PlainDevice
from extender.cel.engine import available_engines, make_engine, unavailable_reason
from extender.cel.environment import MAX_EXPRESSION_BYTES, WARM_UP_SELECTOR, CelStats, Environment

REASONS = {name: unavailable_reason(name) for name in ("cpp", "python")}
HAVE_CPP, HAVE_PY = REASONS["cpp"] is None, REASONS["python"] is None
ENGINES = [
    pytest.param(name, marks=pytest.mark.skipif(reason is not None, reason=str(reason)))
    for name, reason in REASONS.items()
]


def gpu(**attributes: dict[str, object]) -> PlainDevice:
    return PlainDevice(
        driver="gpu.example.com",
        attributes={"model": {"string": "a100"}, **attributes},
        capacity={"memory": {"value": "80Gi"}},
        allow_multiple_allocations=False,
    )


@pytest.fixture(params=ENGINES)
def cel(request: pytest.FixtureRequest) -> Environment:
    return Environment.create(request.param)


def test_compiled_once_per_expression(cel: Environment) -> None:
    first = cel.compile_selector('device.driver == "gpu.example.com"')
    second = cel.compile_selector('device.driver == "gpu.example.com"')
    assert first is second
    assert first.expression == 'device.driver == "gpu.example.com"'
    assert (cel.stats.compilations, cel.stats.cache_hits) == (1, 1)


def test_compile_errors_are_cached_and_raised_each_time(cel: Environment) -> None:
    messages = []
    for _ in range(2):
        with pytest.raises(CelCompileError) as info:
            cel.compile_selector("noSuchVar")
        messages.append(info.value.message)
        assert info.value.expression == "noSuchVar"
    assert "undeclared reference to 'noSuchVar'" in messages[0]
    assert messages[0] == messages[1]
    assert (cel.stats.compilations, cel.stats.compile_errors, cel.stats.cache_hits) == (1, 1, 1)


def test_expression_size_limit_counts_utf8_bytes(cel: Environment) -> None:
    at_limit = "true" + " " * (MAX_EXPRESSION_BYTES - 4)
    assert cel.compile_selector(at_limit).matches(gpu())
    with pytest.raises(CelCompileError, match="10241 bytes long, more than the maximum of 10240"):
        cel.compile_selector(at_limit + " ")
    # 'é' is two bytes: 5119 of them plus the quotes and the comparison exceed the limit.
    with pytest.raises(CelCompileError, match="bytes long"):
        cel.compile_selector('"' + "é" * 5119 + '" != ""')


def test_non_string_expression_is_a_compile_error(cel: Environment) -> None:
    with pytest.raises(CelCompileError, match="must be a string, not int"):
        cel.compile_selector(42)  # type: ignore[arg-type]


def test_result_is_memoized_per_device(cel: Environment) -> None:
    selector = cel.compile_selector('device.attributes["gpu.example.com"].model == "a100"')
    device = gpu()
    assert selector.matches(device) is True
    assert selector.matches(device) is True
    assert (cel.stats.evaluations, cel.stats.memo_hits) == (1, 1)
    # A new version of the device is a new object: evaluated afresh.
    assert selector.matches(gpu(model={"string": "h100"})) is False
    assert cel.stats.evaluations == 2


def test_runtime_error_is_memoized_and_raised_each_time(cel: Environment) -> None:
    selector = cel.compile_selector('device.attributes["gpu.example.com"].missing == 1')
    device = gpu()
    for _ in range(2):
        with pytest.raises(CelRuntimeError, match="no such key: missing") as info:
            selector.matches(device)
        assert info.value.expression == selector.expression
    assert (cel.stats.evaluations, cel.stats.runtime_errors, cel.stats.memo_hits) == (1, 1, 1)


def test_malformed_attribute_fails_every_selector(cel: Environment) -> None:
    device = gpu(broken={})
    with pytest.raises(CelRuntimeError, match="attribute broken"):
        cel.compile_selector('device.driver == "gpu.example.com"').matches(device)


@pytest.mark.skipif(not (HAVE_CPP and HAVE_PY), reason="needs both engines")
def test_environments_of_two_engines_share_no_selectors_counters_or_verdicts() -> None:
    cpp, python = Environment.create("cpp"), Environment.create("python")
    device = gpu()
    expression = 'device.driver == "gpu.example.com"'
    on_cpp = cpp.compile_selector(expression)
    on_python = python.compile_selector(expression)
    assert on_cpp is not on_python
    assert on_cpp.matches(device) and on_python.matches(device)
    # Each compiled and evaluated once, in its own engine: no cache hit, no memo hit across.
    for env in (cpp, python):
        stats = env.stats
        assert (stats.compilations, stats.evaluations, stats.cache_hits, stats.memo_hits) == (1, 1, 0, 0)
    assert (cpp.engine_name, python.engine_name) == ("cpp", "python")
    with pytest.raises(CelCompileError):
        python.compile_selector("noSuchVar")
    assert (cpp.stats.compile_errors, python.stats.compile_errors) == (0, 1)


def test_each_environment_compiles_for_itself(cel: Environment) -> None:
    other = Environment.create(cel.engine_name)
    assert other.compile_selector("true") is not cel.compile_selector("true")
    assert (cel.stats.compilations, other.stats.compilations) == (1, 1)


def test_create_names_the_engine_in_use() -> None:
    for name in available_engines():
        assert Environment.create(name).engine_name == name
    assert Environment.create().engine_name in ("cpp", "python")


def test_create_rejects_unknown_engine() -> None:
    with pytest.raises(ValueError, match="unknown CEL engine 'rust'"):
        Environment.create("rust")


def test_auto_is_the_faster_python_engine() -> None:
    assert Environment.create("auto").engine_name == "python"


def test_stats_reset() -> None:
    stats = CelStats(evaluations=5)
    stats.reset()
    assert stats == CelStats()


def test_available_engines_lists_the_importable_ones() -> None:
    expected = [name for name, present in (("cpp", HAVE_CPP), ("python", HAVE_PY)) if present]
    assert available_engines() == expected


def test_make_engine_names_the_engine() -> None:
    if HAVE_CPP:
        assert make_engine("cpp").name == "cpp"
    if HAVE_PY:
        assert make_engine("python").name == "python"
    with pytest.raises(ValueError, match="choose one of auto, cpp, python"):
        make_engine("")


def test_unavailable_reason() -> None:
    for name in ("cpp", "python"):
        assert (unavailable_reason(name) is None) is (name in available_engines())
    with pytest.raises(ValueError, match="unknown CEL engine 'rust'"):
        unavailable_reason("rust")


def test_warm_up_runs_outside_the_cache_and_counters(cel: Environment) -> None:
    assert cel.warm_up() >= 0
    assert cel.stats == CelStats()
    # Its selector is a real one: through the allocator's path it matches a like device, and
    # it is compiled then (warm-up left nothing in the cache).
    device = PlainDevice(
        driver="warm-up.example.com",
        attributes={"model": {"string": "a100"}},
        capacity={"memory": {"value": "80Gi"}},
        allow_multiple_allocations=False,
    )
    assert cel.compile_selector(WARM_UP_SELECTOR).matches(device)
    assert (cel.stats.compilations, cel.stats.cache_hits) == (1, 0)


@pytest.mark.skipif(not HAVE_PY, reason=str(REASONS["python"]))
def test_warm_up_builds_the_python_grammar() -> None:
    from extender.cel.python import syntax

    cel = Environment.create("python")
    syntax._lark.cache_clear()
    cel.warm_up()
    assert syntax._lark.cache_info().currsize == 1


@pytest.mark.skipif(not (HAVE_PY and HAVE_CPP), reason="needs both engines")
def test_warm_up_of_the_cpp_engine_builds_the_python_grammar_its_long_loops_use() -> None:
    from extender.cel.python import syntax

    cel = Environment.create("cpp")
    syntax._lark.cache_clear()
    cel.warm_up()
    assert syntax._lark.cache_info().currsize == 1


class _WrongProgram:
    def evaluate(self, view: object) -> bool:
        return False


class _WrongEngine:
    name = "wrong"

    def compile(self, expression: str) -> _WrongProgram:
        return _WrongProgram()


class _BrokenEngine:
    name = "broken"

    def compile(self, expression: str) -> _WrongProgram:
        raise CelCompileError("undeclared reference to 'quantity'", expression)


def test_warm_up_refuses_an_engine_that_gets_it_wrong() -> None:
    with pytest.raises(RuntimeError, match="answered False"):
        Environment(_WrongEngine()).warm_up()


def test_warm_up_reports_an_engine_error() -> None:
    with pytest.raises(RuntimeError, match="failed its warm-up selector: undeclared reference"):
        Environment(_BrokenEngine()).warm_up()
