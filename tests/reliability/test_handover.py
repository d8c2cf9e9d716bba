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

from tests.apiserver.server import ApiServer
from tests.reliability.figures import record
from tests.reliability.harness import audit, bind, extender, filter_nodes
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
