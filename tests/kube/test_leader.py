"""Two electors on one Lease: exactly one leads, and leadership moves on release or partition."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from extender.kube.client import KubeApiError, RawClient
from extender.kube.leader import LeaderElector
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer
from tests.kube.conftest import eventually

pytestmark = pytest.mark.anyio

TIMING = {"lease_duration": 2.0, "renew_deadline": 1.5, "retry_period": 0.2}


class PartitionableClient(RawClient):
    """A client whose network can be cut, to play a leader that is alive but cannot reach the API."""

    partitioned = False

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        if self.partitioned:
            raise KubeApiError(0, f"{method} {path}: connection refused (partitioned)")
        return super().request(method, path, **kwargs)


@contextlib.asynccontextmanager
async def campaigning(*electors: LeaderElector) -> AsyncIterator[list[asyncio.Task[None]]]:
    tasks = [asyncio.create_task(e.run()) for e in electors]
    try:
        yield tasks
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def electors(server: ApiServer) -> tuple[LeaderElector, LeaderElector, PartitionableClient,
                                         PartitionableClient]:
    ca, cb = PartitionableClient(server.api_client()), PartitionableClient(server.api_client())
    a = LeaderElector(ca, name="dra-extender", namespace="dra-system", identity="a", **TIMING)
    b = LeaderElector(cb, name="dra-extender", namespace="dra-system", identity="b", **TIMING)
    return a, b, ca, cb


async def sample_leaders(a: LeaderElector, b: LeaderElector, seconds: float) -> set[str]:
    """Who led at some point during ``seconds``; fails at once if both lead simultaneously."""
    seen: set[str] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        leading = {e.identity for e in (a, b) if e.is_leader()}
        assert len(leading) <= 1, "two leaders at once"
        seen |= leading
        await asyncio.sleep(0.02)
    return seen


async def test_exactly_one_leader_which_holds_the_lease(apiserver: ApiServer) -> None:
    a, b, _, _ = electors(apiserver)
    async with campaigning(a, b):
        await eventually(lambda: a.is_leader() or b.is_leader(), what="a leader")
        leader = a if a.is_leader() else b
        assert await sample_leaders(a, b, 1.0) == {leader.identity}  # renewals keep it stable
        lease = apiserver.store.get(BY_KIND["Lease"], "dra-system", "dra-extender")
        assert lease["spec"]["holderIdentity"] == leader.identity
        assert lease["spec"]["leaseDurationSeconds"] == 2


async def test_release_on_shutdown_hands_over_without_waiting_for_expiry(apiserver: ApiServer) -> None:
    a, b, _, _ = electors(apiserver)
    async with campaigning(a) as (task_a,):
        await eventually(a.is_leader, what="a leads")
        async with campaigning(b):
            await asyncio.sleep(0.3)
            assert not b.is_leader()
            task_a.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task_a
            assert not a.is_leader()
            started = time.monotonic()
            await eventually(b.is_leader, what="b takes over")
            assert time.monotonic() - started < TIMING["lease_duration"]
            lease = apiserver.store.get(BY_KIND["Lease"], "dra-system", "dra-extender")
            assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1


async def test_partitioned_leader_steps_down_before_the_standby_takes_over(apiserver: ApiServer) -> None:
    a, b, client_a, _ = electors(apiserver)
    async with campaigning(a):
        await eventually(a.is_leader, what="a leads")
        async with campaigning(b):
            client_a.partitioned = True
            partitioned_at = time.monotonic()
            await eventually(lambda: not a.is_leader(), timeout=3, what="a steps down")
            assert time.monotonic() - partitioned_at <= TIMING["renew_deadline"] + 0.3
            assert await sample_leaders(a, b, 2.5) == {"b"}  # b waits out the lease, never overlapping a


async def test_conflicting_lease_update_loses_the_round(apiserver: ApiServer) -> None:
    a, _, _, _ = electors(apiserver)
    apiserver.faults.fail("create", "leases", 409, times=1)
    apiserver.faults.fail("update", "leases", 409, times=1)
    async with campaigning(a):
        await eventually(a.is_leader, what="a leads after the conflicts")
    assert sum(c.resource == "leases" and c.verb in ("create", "update") for c in apiserver.calls) >= 2


def test_timings_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="lease_duration > renew_deadline > retry_period"):
        LeaderElector(RawClient(None), name="x", namespace="y",  # type: ignore[arg-type]
                      lease_duration=10, renew_deadline=10, retry_period=2)
