"""The upstream oracle (tests/oracle, the released k8s.io/dynamic-resource-allocation) against
our allocator and CEL engines: a few shipped cases and a small seeded differential batch."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from extender.cel.environment import Environment
from extender.model import Features
from extender.tools import random_cases
from extender.tools.differential import allocation_mismatch, cel_mismatch
from extender.tools.oracle import Oracle, OracleUnavailable, check_files, engine_environments, oracle_path

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    shutil.which("go") is None and not os.environ.get("DRA_ORACLE"),
    reason="go is not on PATH (and DRA_ORACLE names no oracle binary): the oracle cannot be built",
)


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    with Oracle(oracle_path()) as running:
        yield running


def test_shipped_cases_agree_with_the_release(oracle: Oracle) -> None:
    upstream = REPO / "tests" / "conformance" / "upstream"
    paths = [
        str(upstream / "optional-node-operations-disabled.yaml"),
        str(upstream / "optional-node-operations-disabled-experimental.yaml"),
        str(upstream / "compatibility-groups-disabled-skips-grouped-devices.yaml"),
        str(REPO / "tests" / "conformance" / "cases" / "lexicographical-sorting-slices.yaml"),
    ]
    findings = list(check_files(paths, oracle, Environment.create(), []))
    assert len(findings) == 4
    assert [f.name for f in findings if not f.agrees] == []
    assert {f.variant for f in findings} == {"stable", "experimental"}


def test_seeded_allocation_batch(oracle: Oracle) -> None:
    """Every allocator variant (the stable one included: its pool order, its CEL view without
    allowMultipleAllocations, distinctAttribute unknown to it)."""
    cel = Environment.create()
    cases = [random_cases.allocation_case(7, i) for i in range(60)]
    variants = {Features.from_gate_names(c["features"]).variant for c in cases}
    assert variants == {"stable", "incubating", "experimental"}
    verdicts = [allocation_mismatch(case, oracle, cel)[0] for case in cases]
    assert verdicts.count("fail") == 0, verdicts


def test_the_given_cases_hold_answers_of_before_1_37(oracle: Oracle) -> None:
    """hard-example-0004 (tests/conformance/cases) was recorded from an allocator that kept a
    rejected pick's counters, as 1.34 to 1.36 do: 1.37.2 allocates it, and so do we when we
    allocate as 1.37 does (docs/upstream.md)."""
    path = REPO / "tests" / "conformance" / "cases" / "hard-example-0004.yaml"
    [finding] = check_files([str(path)], oracle, Environment.create(), [])
    assert finding.recorded and not finding.ours


def test_seeded_cel_batch_on_every_engine(oracle: Oracle) -> None:
    engines = engine_environments(None)
    verdicts = [cel_mismatch(random_cases.cel_case(7, i), oracle, engines)[0] for i in range(60)]
    assert verdicts.count("fail") == 0, verdicts


def test_an_oracle_is_built_only_for_known_releases() -> None:
    with pytest.raises(OracleUnavailable, match=r"no oracle for Kubernetes 1\.35"):
        oracle_path(release="1.35")


@pytest.mark.skipif(shutil.which("go") is None, reason="go is not on PATH: the 1.34 oracle cannot be built")
def test_the_1_34_oracle_still_builds() -> None:
    """The files both releases' oracles share (tests/oracle, scripts/oracle/build.sh 1.34,
    -tags k8s134) must not use a field only 1.37 has, which once broke the 1.34 build unseen.
    The build is cached by its inputs, so this costs a build only when the oracle changed."""
    path = Path(oracle_path(release="1.34"))
    assert path.is_file() and os.access(path, os.X_OK)


def test_generator_is_reproducible() -> None:
    assert random_cases.allocation_case(3, 5) == random_cases.allocation_case(3, 5)
    assert random_cases.cel_case(3, 5) == random_cases.cel_case(3, 5)
    assert random_cases.allocation_case(3, 5) != random_cases.allocation_case(3, 6)
