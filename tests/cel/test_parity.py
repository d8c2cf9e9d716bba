"""Every Kubernetes parity case (all case files), once per engine, through the allocator's entry points."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from extender.cel.engine import unavailable_reason
from extender.cel.environment import Environment
from extender.tools.cel_parity import Case, CaseFileError, load_cases, main, run_case

# The shared conformance cases, those carried over from Kubernetes' own CEL tests, those found
# disagreeing with the released environment by the oracle (tests/oracle), and
# cel-spec's conformance tests translated by celspec_translate.py.
CASE_FILES = ("cases.yaml", "upstream_cases.yaml", "celspec_cases.yaml", "release_cases.yaml")
CASES = {name: load_cases(Path(__file__).with_name(name)) for name in CASE_FILES}
# Translated cel-spec cases an engine still gets wrong, by engine, with the reason.
KNOWN_FAILURES: dict[str, dict[str, str]] = yaml.safe_load(
    Path(__file__).with_name("celspec_known_failures.yaml").read_text(encoding="utf-8")
)


def _params() -> Iterator[object]:
    for engine in ("cpp", "python"):
        reason = unavailable_reason(engine)
        marks = [pytest.mark.skip(reason=reason)] if reason else []
        for file_name, cases in CASES.items():
            stem = file_name.removesuffix(".yaml")
            for case in cases:
                known = KNOWN_FAILURES[engine].get(case.name) if stem == "celspec_cases" else None
                case_marks = marks + ([pytest.mark.xfail(reason=known, strict=True)] if known else [])
                yield pytest.param(engine, case, id=f"{engine}-{stem}-{case.name}", marks=case_marks)


@pytest.fixture(scope="module")
def cel(request: pytest.FixtureRequest) -> Environment:
    """One environment per engine for all the cases, as the command line has."""
    return Environment.create(request.param)


@pytest.mark.parametrize(("cel", "case"), list(_params()), indirect=["cel"])
def test_case(cel: Environment, case: Case) -> None:
    got = run_case(case, cel)
    assert got.kind == case.expect, f"{case.expression!r}: {got.detail}"


def test_known_failures_name_translated_cases() -> None:
    names = {case.name for case in CASES["celspec_cases.yaml"]}
    for engine, failures in KNOWN_FAILURES.items():
        assert set(failures) <= names, f"{engine}: {sorted(set(failures) - names)}"


def test_the_given_cases_are_in_the_repository_and_all_run() -> None:
    # The given cases live here (no copy outside the repository is read): every one is
    # parametrized above, on both engines, and the README's count is theirs.
    given = CASES["cases.yaml"]
    assert len(given) == 84 and len({case.name for case in given}) == len(given)
    ids = {case.name for engine, case in (p.values for p in _params()) if case in given}  # type: ignore[misc]
    assert ids == {case.name for case in given}


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cases.yaml"
    path.write_text(text, encoding="utf-8")
    return path


DEVICE = "  device: {driver: gpu.example.com, attributes: {model: {string: a100}}, capacity: {}}\n"


def test_main_reports_pass_and_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(
        tmp_path,
        "- name: ok\n  expression: device.driver == 'gpu.example.com'\n" + DEVICE + "  expect: true\n"
        "- name: wrong\n  expression: device.attributes['gpu.example.com'].nope\n"
        + DEVICE
        + "  expect: false\n",
    )
    assert main([str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "PASS ok" in lines
    assert "FAIL wrong (expected false, got error: no such key: nope)" in lines
    assert lines[-1] == "1 passed, 1 failed"


def test_main_exit_zero_when_all_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "- name: c\n  expression: '1'\n" + DEVICE + "  expect: compile-error\n")
    assert main([str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 passed, 0 failed"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{}", "expected a list of cases"),
        ("- name: x\n  expression: 'true'\n" + DEVICE + "  expect: maybe\n", "expect must be one of"),
        ("- name: x\n  expression: 1\n" + DEVICE + "  expect: true\n", "expression must be a string"),
        ("- name: x\n  expression: 'true'\n  device: []\n  expect: true\n", "device must be a mapping"),
        ("- expression: 'true'\n" + DEVICE + "  expect: true\n", "name must be a non-empty string"),
        (
            "- name: x\n  expression: 'true'\n" + DEVICE + "  expect: true\n"
            "- name: x\n  expression: 'true'\n" + DEVICE + "  expect: true\n",
            "duplicate case name 'x'",
        ),
        ("- [unclosed", "cannot read"),
    ],
)
def test_bad_case_files_are_rejected(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(CaseFileError, match=message):
        load_cases(_write(tmp_path, text))


def test_main_exit_two_on_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err
