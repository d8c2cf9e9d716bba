"""Every shipped conformance case is one test, judged like `python -m extender.conformance`."""

from __future__ import annotations

from pathlib import Path

import pytest

from extender.conformance import judge, load_case

CASES = sorted((Path(__file__).parent / "cases").glob("*.yaml"))


def test_cases_are_shipped() -> None:
    assert len(CASES) >= 352


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_case(path: Path) -> None:
    verdict = judge(load_case(path))
    assert verdict.passed, verdict.diff
