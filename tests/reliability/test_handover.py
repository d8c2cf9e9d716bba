"""Handover: the replica that takes over scheduling never hands out a device that a claim write
of the replica before it, still on its way, could give to another claim (issue 28, item 4).

Two extenders against one API server, as the shipped layout runs them (each beside its own
kube-scheduler, ``--no-leader-elect``, following kube-scheduler's Lease). One GPU, pods a and b.
The old replica binds a; its claim write is held in the API server past its bind deadline. The
Lease moves to the new replica, whose cache knows nothing of that write, and its scheduler
schedules b, retrying as kube-scheduler does. The held write is let go ``outage`` seconds after
the Lease moved: whatever lands when, the GPU is in one claim.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from extender.kube.binder import KubeBinder
from extender.kube.client import RawClient
from extender.model.kinds import KIND_NAMES
from extender.scheduling.settle import Handover
from extender.state import ClusterState
from tests.apiserver.server import ApiServer
from tests.reliability.figures import record
from tests.reliability.harness import CLAIM, audit, bind, extender, filter_nodes
from tests.reliability.test_late_writes import held_twice, one_gpu_two_pods

pytestmark = pytest.mark.anyio

QUIET = 1.0  # the new replica's bind timeout: how long the old replica's binds may start writes


async def schedule_until_bound(http, server: ApiServer, name: str, until: float) -> str:
    """kube-scheduler's loop for one pod: filter, bind, back off, until bound or ``until``."""
    error = ""
    while time.monotonic() < until:
        result = await filter_nodes(http, server, name)
        if result["NodeNames"]:
            error = await bind(http, server, name, result["NodeNames"][0])
            if not error:
                return ""
        else:
            error = str(result)
        await asyncio.sleep(0.2)
    return error


@pytest.mark.parametrize("outage", [0.2, 2.0, 4.0])
async def test_a_write_of_the_previous_replica_landing_after_the_lease_moved_is_no_double_allocation(
    apiserver: ApiServer, outage: float
) -> None:
    one_gpu_two_pods(apiserver)
    term: list[str | None] = [None]
    old = extender(apiserver, bind_timeout_s=0.5)  # it does not fence by itself within the test
    new = extender(apiserver, lease_term=lambda: term[0], bind_timeout_s=QUIET, fence_after_s=5.0)
    async with old as (old_http, _, _), new as (new_http, new_state, new_ctx):
        assert (await filter_nodes(old_http, apiserver, "a"))["NodeNames"] == ["node-a"]
        held = apiserver.faults.hold("update", "resourceclaims", subresource="status")
        assert "no answer" in await bind(old_http, apiserver, "a", "node-a")
        term[0] = "new-scheduler_1#1"  # the Lease moves
        moved = time.monotonic()
        loop = asyncio.get_running_loop()
        loop.call_later(outage, held.set)  # the old write goes on, and lands if it still can
        error = await schedule_until_bound(new_http, apiserver, "b", moved + QUIET + 6.0)
        waited = time.monotonic() - moved
        await asyncio.sleep(max(0.0, moved + outage + 0.5 - time.monotonic()))
        assert held_twice(apiserver) == []
        record("handover outages tried", 1)
        if outage < QUIET:
            # Landed before the fence: the new replica counts it, b does not get the GPU.
            assert "ca" in {c.name for c in new_state.claims.values() if c.allocation is not None}
        else:
            # Fenced off: the old write is refused when it arrives, and b got the GPU.
            assert error == "", error
            assert new_ctx.handover.fenced >= 1
            print(f"handover: b bound {waited:.2f}s after the Lease moved (takeover "
                  f"{new_ctx.handover.last_takeover_s:.2f}s, {new_ctx.handover.fenced} claims fenced)")
        await audit(apiserver, new_state)


async def test_without_the_handover_wait_the_same_write_is_a_double_allocation(apiserver: ApiServer) -> None:
    """The hazard itself: a replica that allocates at once after the Lease moved (the code before
    issue 28) gives the GPU to b while the old write to a is held, and the write lands."""
    one_gpu_two_pods(apiserver)
    old = extender(apiserver, bind_timeout_s=0.5)
    new = extender(apiserver, bind_timeout_s=QUIET)  # no Lease followed: no takeover
    async with old as (old_http, _, _), new as (new_http, _, _):
        assert (await filter_nodes(old_http, apiserver, "a"))["NodeNames"] == ["node-a"]
        held = apiserver.faults.hold("update", "resourceclaims", subresource="status")
        assert "no answer" in await bind(old_http, apiserver, "a", "node-a")
        assert await schedule_until_bound(new_http, apiserver, "b", time.monotonic() + 5.0) == ""
        held.set()
        await asyncio.sleep(0.5)
        assert held_twice(apiserver) != []


async def handover_over(apiserver: ApiServer, give_up_s: float) -> tuple[Handover, KubeBinder]:
    """A Handover over the test API server's claims, with no wait before its fencing."""
    state = ClusterState()
    claims, _ = apiserver.store.list(CLAIM, None)
    for obj in claims:
        state.apply("ResourceClaim", obj)
    for kind in KIND_NAMES:
        state.mark_synced(kind)
    binder = KubeBinder(RawClient(apiserver.api_client(), request_timeout=2.0), retry_delay=0.001)
    return Handover(state, binder, term=lambda: "t", quiet_s=0.0, give_up_s=give_up_s, poll_s=0.05), binder


async def wait_done(handover: Handover, within: float) -> float:
    started = time.monotonic()
    assert handover.blocks_allocation() is not None  # the first bind of the term starts the takeover
    while handover.blocks_allocation() is not None:
        assert time.monotonic() - started < within, "the takeover never ended"
        await asyncio.sleep(0.02)
    return time.monotonic() - started


async def test_a_fence_refused_for_a_while_is_tried_again(apiserver: ApiServer) -> None:
    one_gpu_two_pods(apiserver)
    before = {c["metadata"]["name"]: int(c["metadata"]["resourceVersion"])
              for c in apiserver.store.list(CLAIM, None)[0]}
    apiserver.faults.fail("update", "resourceclaims", 500, times=2)
    handover, binder = await handover_over(apiserver, give_up_s=30.0)
    try:
        await wait_done(handover, within=10.0)
    finally:
        binder.close()
    assert handover.fenced == 2
    after = {c["metadata"]["name"]: int(c["metadata"]["resourceVersion"])
             for c in apiserver.store.list(CLAIM, None)[0]}
    assert all(after[name] > version for name, version in before.items())


async def test_a_claim_that_cannot_be_fenced_is_waited_out_for_the_request_timeout(
    apiserver: ApiServer,
) -> None:
    one_gpu_two_pods(apiserver)
    apiserver.faults.fail("update", "resourceclaims", 500, times=10_000)
    handover, binder = await handover_over(apiserver, give_up_s=1.0)
    try:
        took = await wait_done(handover, within=10.0)
    finally:
        binder.close()
    # Not before the request timeout: until then a write sent before the fence may still land.
    assert handover.fenced == 0 and took >= 1.0
