"""bind's own edges: a node it does not know, a bug inside a bind, rollbacks that fail.

The flows (tests/scheduling/test_flow.py) bind through the app over a local cluster; these tests
do the same, with the local binder wrapped where a write must fail.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from extender.scheduling import bind
from tests.scheduling.cluster import Service, bind_call, gpu_cluster, pod, template


def one_pod() -> Service:
    return Service([*gpu_cluster(nodes=1, per_node=1), template("one"), pod("p", templates={"gpu": "one"})])


def outcomes(svc: Service, outcome: str) -> float:
    return svc.ctx.metrics.bind_outcomes.labels(outcome)._value.get()


def test_a_bind_to_a_node_the_extender_does_not_know_is_rejected_with_its_name() -> None:
    svc = one_pod()
    error = svc.run(lambda c: bind_call(c, svc.pod("p"), "nowhere"))
    assert error == "node nowhere is not known to the extender"
    assert outcomes(svc, "rejected") == 1
    assert not svc.state.inuse.inflight


def test_a_bug_inside_a_bind_answers_500_counts_an_error_and_frees_the_pods_bind_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    svc = one_pod()

    async def broken(*_: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(bind.BindTransaction, "begin", broken)

    async def flow(client: Any) -> tuple[int, str]:
        meta = svc.pod("p")["metadata"]
        body = {"PodName": "p", "PodNamespace": "default", "PodUID": meta["uid"], "Node": "node-0"}
        status = (await client.post("/bind", json=body)).status_code
        monkeypatch.undo()
        return status, await bind_call(client, svc.pod("p"), "node-0")

    status, retried = svc.run(flow)
    assert status == 500 and outcomes(svc, "error") == 1
    assert retried == ""  # the failed bind let go of the pod: the retry is not "already in progress"


class FailingReleases:
    """Writes through the local binder; the Binding and every release fail."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def write_claim(self, claim: Any, allocation: Any, pod_ref: Any, deadline: Any = None) -> Any:
        return await self.inner.write_claim(claim, allocation, pod_ref)

    async def bind_pod(self, pod_ref: Any, node_name: str, deadline: Any = None) -> None:
        raise RuntimeError("the Binding was refused")

    async def release_claim(self, claim: Any, pod_ref: Any, deallocate: bool) -> Any:
        raise RuntimeError("the release was refused")


def test_a_rollback_whose_release_fails_says_so_and_the_claim_stays_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    svc = one_pod()
    svc.ctx.binder = FailingReleases(svc.ctx.binder)
    with caplog.at_level(logging.ERROR, logger="extender.scheduling.bind"):
        error = svc.run(lambda c: bind_call(c, svc.pod("p"), "node-0"))
    assert "the Binding was refused" in error
    [claim] = svc.claims()
    assert [r.getMessage() for r in caplog.records] == [
        f"rollback of claim default/{claim} failed: the release was refused"]
    # Still allocated in the store: its device stays in use, nobody else gets it.
    assert svc.state.inuse.devices and not svc.state.inuse.inflight
