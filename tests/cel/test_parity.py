"""Every Kubernetes parity case, once per engine, through the allocator's entry points."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from extender.cel import environment
from extender.cel.parity import Case, load_cases, run_case

CASES = load_cases(Path(__file__).with_name("cases.yaml"))


def _skip_reason(engine: str) -> str | None:
    if engine == "cpp":
        for module in ("cel_expr_python", "google.protobuf"):
            if importlib.util.find_spec(module) is None:
                return f"cpp engine not installed: {module} is missing"
    elif importlib.util.find_spec("extender.cel.engine_py") is None:
        return "python engine not written yet: extender.cel.engine_py does not exist"
    return None


def _params() -> Iterator[object]:
    for engine in ("cpp", "python"):
        reason = _skip_reason(engine)
        marks = [pytest.mark.skip(reason=reason)] if reason else []
        for case in CASES:
            yield pytest.param(engine, case, id=f"{engine}-{case.name}", marks=marks)


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> Iterator[str]:
    name = request.param
    environment.configure(name)
    yield name
    environment.configure("auto")


@pytest.mark.parametrize(("engine", "case"), list(_params()), indirect=["engine"])
def test_case(engine: str, case: Case) -> None:
    got = run_case(case)
    assert got.kind == case.expect, f"{case.expression!r}: {got.detail}"


def test_cases_file_is_the_shared_one() -> None:
    shared = Path(__file__).resolve().parents[2].parent / "shared" / "conformance" / "cel" / "cases.yaml"
    if not shared.exists():
        pytest.skip(f"shared conformance cases not present at {shared}")
    assert Path(__file__).with_name("cases.yaml").read_bytes() == shared.read_bytes()
