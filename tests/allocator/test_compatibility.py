"""The compatibility-group intersection, after upstream compatibility_groups_test.go
(kubernetes/kubernetes 4426859839df)."""

from __future__ import annotations

import pytest

from extender.allocator.compatibility import Intersection

EMPTY: frozenset[str] = frozenset()
MIG, VGPU, BOTH = frozenset({"mig"}), frozenset({"vgpu"}), frozenset({"mig", "vgpu"})


@pytest.mark.parametrize(
    ("placed", "candidate", "admitted"),
    [
        ([], MIG, True),
        ([], EMPTY, True),
        ([EMPTY], EMPTY, True),
        ([EMPTY], MIG, False),
        ([MIG], EMPTY, False),
        ([MIG], VGPU, False),
        ([BOTH], VGPU, True),
        ([BOTH, MIG], VGPU, False),  # the relation is not transitive: both narrowed it to mig
        ([EMPTY, EMPTY], EMPTY, True),
    ],
)
def test_admission_follows_the_running_intersection(
    placed: list[frozenset[str]], candidate: frozenset[str], admitted: bool
) -> None:
    state = Intersection()
    for groups in placed:
        assert state.admits(groups)
        state = state.add(groups)
    assert state.admits(candidate) is admitted
