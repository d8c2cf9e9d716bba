"""compile_selector / Selector.matches: caches, memo, limits, engine selection, counters."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from extender.cel import CelCompileError, CelRuntimeError, environment
from extender.cel.engine import available_engines, make_engine, unavailable_reason
from extender.cel.environment import (
    MAX_EXPRESSION_BYTES,
    compile_selector,
    configure,
    current_engine_name,
    stats,
)
from extender.tools.cel_parity import CaseDevice

REASONS = {name: unavailable_reason(name) for name in ("cpp", "python")}
HAVE_CPP, HAVE_PY = REASONS["cpp"] is None, REASONS["python"] is None
ENGINES = [
    pytest.param(name, marks=pytest.mark.skipif(reason is not None, reason=str(reason)))
    for name, reason in REASONS.items()
]


def gpu(**attributes: dict[str, object]) -> CaseDevice:
    return CaseDevice(
        driver="gpu.example.com",
        attributes={"model": {"string": "a100"}, **attributes},
        capacity={"memory": {"value": "80Gi"}},
        allow_multiple_allocations=False,
    )


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Iterator[str]:
    configure(request.param)
    stats.reset()
    yield request.param
    configure("auto")


def test_compiled_once_per_expression(engine: str) -> None:
    first = compile_selector('device.driver == "gpu.example.com"')
    second = compile_selector('device.driver == "gpu.example.com"')
    assert first is second
    assert first.expression == 'device.driver == "gpu.example.com"'
    assert (stats.compilations, stats.cache_hits) == (1, 1)


def test_compile_errors_are_cached_and_raised_each_time(engine: str) -> None:
    messages = []
    for _ in range(2):
        with pytest.raises(CelCompileError) as info:
            compile_selector("noSuchVar")
        messages.append(info.value.message)
        assert info.value.expression == "noSuchVar"
    assert "undeclared reference to 'noSuchVar'" in messages[0]
    assert messages[0] == messages[1]
    assert (stats.compilations, stats.compile_errors, stats.cache_hits) == (1, 1, 1)


def test_expression_size_limit_counts_utf8_bytes(engine: str) -> None:
    at_limit = "true" + " " * (MAX_EXPRESSION_BYTES - 4)
    assert compile_selector(at_limit).matches(gpu())
    with pytest.raises(CelCompileError, match="10241 bytes long, more than the maximum of 10240"):
        compile_selector(at_limit + " ")
    # 'é' is two bytes: 5119 of them plus the quotes and the comparison exceed the limit.
    with pytest.raises(CelCompileError, match="bytes long"):
        compile_selector('"' + "é" * 5119 + '" != ""')


def test_non_string_expression_is_a_compile_error(engine: str) -> None:
    with pytest.raises(CelCompileError, match="must be a string, not int"):
        compile_selector(42)  # type: ignore[arg-type]


def test_result_is_memoized_per_device(engine: str) -> None:
    selector = compile_selector('device.attributes["gpu.example.com"].model == "a100"')
    device = gpu()
    assert selector.matches(device) is True
    assert selector.matches(device) is True
    assert (stats.evaluations, stats.memo_hits) == (1, 1)
    # A new version of the device is a new object: evaluated afresh.
    assert selector.matches(gpu(model={"string": "h100"})) is False
    assert stats.evaluations == 2


def test_runtime_error_is_memoized_and_raised_each_time(engine: str) -> None:
    selector = compile_selector('device.attributes["gpu.example.com"].missing == 1')
    device = gpu()
    for _ in range(2):
        with pytest.raises(CelRuntimeError, match="no such key: missing") as info:
            selector.matches(device)
        assert info.value.expression == selector.expression
    assert (stats.evaluations, stats.runtime_errors, stats.memo_hits) == (1, 1, 1)


def test_malformed_attribute_fails_every_selector(engine: str) -> None:
    device = gpu(broken={})
    with pytest.raises(CelRuntimeError, match="attribute broken"):
        compile_selector('device.driver == "gpu.example.com"').matches(device)


def test_memo_is_per_engine() -> None:
    if not (HAVE_CPP and HAVE_PY):
        pytest.skip("needs both engines")
    device = gpu()
    expression = 'device.driver == "gpu.example.com"'
    configure("cpp")
    stats.reset()
    assert compile_selector(expression).matches(device)
    configure("python")
    assert compile_selector(expression).matches(device)
    assert (stats.evaluations, stats.memo_hits) == (2, 0)
    configure("auto")


def test_configure_switches_engine_and_clears_cache() -> None:
    if not HAVE_CPP:
        pytest.skip("cpp engine not installed")
    assert configure("cpp") == "cpp"
    assert current_engine_name() == "cpp"
    before = compile_selector("true")
    configure("cpp")
    assert compile_selector("true") is not before
    configure("auto")


def test_configure_rejects_unknown_engine() -> None:
    with pytest.raises(ValueError, match="unknown CEL engine 'rust'"):
        configure("rust")


def test_auto_prefers_cpp() -> None:
    if not HAVE_CPP:
        pytest.skip("cpp engine not installed")
    assert configure("auto") == "cpp"


def test_stats_reset() -> None:
    stats.evaluations = 5
    stats.reset()
    assert stats.evaluations == 0


def test_module_engine_defaults_to_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment, "_engine", None)
    assert current_engine_name() in ("cpp", "python")


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


def test_warm_up_runs_outside_the_cache_and_counters(engine: str) -> None:
    assert environment.warm_up() >= 0
    assert stats == type(stats)()
    assert len(environment._cache) == 0
    # Its selector is a real one: through the allocator's path it matches a like device.
    device = CaseDevice(
        driver="warm-up.example.com",
        attributes={"model": {"string": "a100"}},
        capacity={"memory": {"value": "80Gi"}},
        allow_multiple_allocations=False,
    )
    assert compile_selector(environment.WARM_UP_SELECTOR).matches(device)


@pytest.mark.skipif(not HAVE_PY, reason=str(REASONS["python"]))
def test_warm_up_builds_the_python_grammar() -> None:
    from extender.cel.python import syntax as engine_py_ast
    configure("python")
    engine_py_ast._lark.cache_clear()
    try:
        environment.warm_up()
        assert engine_py_ast._lark.cache_info().currsize == 1
    finally:
        configure("auto")


def test_warm_up_refuses_an_engine_that_gets_it_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    class WrongProgram:
        def evaluate(self, view: object) -> bool:
            return False

    class WrongEngine:
        name = "wrong"

        def compile(self, expression: str) -> WrongProgram:
            return WrongProgram()

    monkeypatch.setattr(environment, "_engine", WrongEngine())
    with pytest.raises(RuntimeError, match="answered False"):
        environment.warm_up()


def test_warm_up_reports_an_engine_error(monkeypatch: pytest.MonkeyPatch) -> None:
    class BrokenEngine:
        name = "broken"

        def compile(self, expression: str) -> None:
            raise CelCompileError("undeclared reference to 'quantity'", expression)

    monkeypatch.setattr(environment, "_engine", BrokenEngine())
    with pytest.raises(RuntimeError, match="failed its warm-up selector: undeclared reference"):
        environment.warm_up()
