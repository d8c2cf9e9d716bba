"""Every shipped conformance case is one test, judged like `python -m extender.tools.conformance`.

``cases/`` is the project's given set; ``upstream/`` holds further scenarios carried over from
the upstream allocator's own test table, with the answers upstream expects.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from extender.cel.environment import Environment
from extender.tools.conformance import judge, load_case

HERE = Path(__file__).parent
GIVEN = sorted((HERE / "cases").glob("*.yaml"))
UPSTREAM = sorted((HERE / "upstream").glob("*.yaml"))
CASES = GIVEN + UPSTREAM


def test_cases_are_shipped() -> None:
    assert len(GIVEN) >= 352


@pytest.fixture(scope="module")
def cel() -> Environment:
    """One CEL environment for every case, as the command line uses."""
    return Environment.create()


@pytest.mark.parametrize("path", CASES, ids=[f"{p.parent.name}/{p.stem}" for p in CASES])
def test_case(path: Path, cel: Environment) -> None:
    verdict = judge(load_case(path), cel)
    assert verdict.passed, verdict.diff
