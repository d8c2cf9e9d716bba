"""A filter reads the verdicts of a claim spec's shared table; one that went stale while the
filter computed (other requests ran in its pauses) is decided again, and nothing else is."""

from __future__ import annotations

from typing import Any

import pytest

from extender.model import parse_allocation
from extender.scheduling import plan as plan_module
from extender.scheduling.claims import pod_for_request
from extender.scheduling.filter import filter_nodes
from extender.state import InFlight
from tests.scheduling.cluster import DRIVER, claim, gpu_cluster, local_context, pod, template


def _cluster() -> list[dict[str, Any]]:
    objects = gpu_cluster(nodes=3, per_node=1)
    objects += [template("gpu"), claim("other")]
    objects += [pod(f"p{i}", templates={"gpu": "gpu"}) for i in range(2)]
    return objects


def test_a_verdict_that_went_stale_during_a_filter_is_decided_again(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx, _ = local_context(_cluster())
    first = ctx.state.pod("default", "p0")
    assert first is not None
    # p0's filter fills the spec's table for node-0 and node-1.
    assert filter_nodes(ctx, pod_for_request(ctx.state, dict(first.raw)), ["node-0", "node-1"]).passed == [
        "node-0",
        "node-1",
    ]
    evaluated: list[str] = []

    def another_bind_meanwhile() -> None:
        # While p1's filter decides node-2, another pod's allocation of node-1's GPU lands.
        if not evaluated:
            held = ctx.state.claim("default", "other")
            assert held is not None
            result = {"request": "gpu", "driver": DRIVER, "pool": "node-1", "device": "gpu-0"}
            allocation = parse_allocation({"devices": {"results": [result]}})
            ctx.state.add_inflight(InFlight(held.uid, "another-pod", allocation, expires_at=float("inf")))
        evaluated.append("pause")

    monkeypatch.setattr(plan_module, "pause", another_bind_meanwhile)
    second = ctx.state.pod("default", "p1")
    assert second is not None
    result = filter_nodes(ctx, pod_for_request(ctx.state, dict(second.raw)), ["node-2", "node-1", "node-0"])
    assert result.passed == ["node-2", "node-0"]
    assert "node-1" in result.failed  # decided again, not read from the table
    assert len(evaluated) == 2  # node-2, then node-1 once more; node-0's verdict still stood


def test_a_filter_where_nothing_moved_decides_each_node_once(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx, _ = local_context(_cluster())
    evaluated: list[str] = []
    monkeypatch.setattr(plan_module, "pause", lambda: evaluated.append("pause"))
    for name in ("p0", "p1"):
        info = ctx.state.pod("default", name)
        assert info is not None
        result = filter_nodes(ctx, pod_for_request(ctx.state, dict(info.raw)), ["node-0", "node-1", "node-2"])
        assert result.passed == ["node-0", "node-1", "node-2"]
    assert len(evaluated) == 3  # p0 decided each node once; p1 read all three from the table
