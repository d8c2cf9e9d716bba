"""A claim write that lands after the bind gave up must not hand its device to anyone else.

One GPU, two pods: the claim write of ``a`` is kept waiting in the test API server past the
bind deadline (``Faults.hold``), so the extender cannot know whether it will land.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import httpx
import pytest

from extender.scheduling.context import SchedulingContext
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer
from tests.kube import objects
from tests.kube.conftest import eventually
from tests.reliability.harness import (
    CLAIM,
    audit,
    bind,
    cached_allocation,
    claim_reserved,
    extender,
    filter_nodes,
    pod_obj,
)

pytestmark = pytest.mark.anyio

BIND_TIMEOUT = 0.2
INFLIGHT_TTL = 0.6


def one_gpu_two_pods(server: ApiServer) -> None:
    store = server.store
    store.seed(BY_KIND["DeviceClass"], objects.device_class())
    store.seed(BY_KIND["Node"], objects.node("node-a"))
    store.seed(BY_KIND["ResourceSlice"], objects.resource_slice("node-a", devices=1))
    for name in ("a", "b"):
        store.seed(CLAIM, objects.claim(f"c{name}"))
        store.seed(BY_KIND["Pod"], objects.pod(name, claim_name=f"c{name}"))


async def fits(http: httpx.AsyncClient, server: ApiServer, name: str) -> list[str]:
    return list((await filter_nodes(http, server, name))["NodeNames"])


def without_deadline_pressure(ctx: SchedulingContext) -> None:
    """The fault is over: a loaded CI machine must not turn the normal binds after it into timeouts."""
    ctx.config = replace(ctx.config, bind_timeout_s=30.0, inflight_ttl_s=60.0)


async def test_a_late_landing_write_keeps_its_device_and_the_retry_adopts_it(apiserver: ApiServer) -> None:
    one_gpu_two_pods(apiserver)
    config = {"bind_timeout_s": BIND_TIMEOUT, "inflight_ttl_s": INFLIGHT_TTL}
    async with extender(apiserver, **config) as (http, state, ctx):
        assert await fits(http, apiserver, "a") == ["node-a"]
        release = apiserver.faults.hold("update", "resourceclaims", subresource="status")
        error = await bind(http, apiserver, "a", "node-a")
        assert "no answer" in error  # the write sits in the server past the deadline
        # The write may still land: its device is not offered to b in the meantime.
        assert await fits(http, apiserver, "b") == []
        release.set()
        await eventually(lambda: claim_reserved("ca", apiserver), what="the late write to land")
        held = apiserver.store.get(CLAIM, "default", "ca")["status"]
        assert [r["uid"] for r in held["reservedFor"]] == [pod_obj(apiserver, "a")["metadata"]["uid"]]
        await eventually(lambda: cached_allocation(state, "ca"), what="the watch echo")
        assert await fits(http, apiserver, "b") == []
        without_deadline_pressure(ctx)
        # The scheduler's retry of a adopts what landed: nothing left to allocate, one reservation.
        assert await fits(http, apiserver, "a") == ["node-a"]
        writes_before = len(apiserver.writes())
        assert await bind(http, apiserver, "a", "node-a") == ""
        written = [(c.verb, c.subresource) for c in apiserver.writes()[writes_before:]]
        assert written == [("create", "binding")]
        assert pod_obj(apiserver, "a")["spec"]["nodeName"] == "node-a"
        assert len(apiserver.store.get(CLAIM, "default", "ca")["status"]["reservedFor"]) == 1
        assert "allocation" not in (apiserver.store.get(CLAIM, "default", "cb").get("status") or {})
        # The timed-out commit's entry is redundant now (the claim holds the device) and ages out.
        await asyncio.sleep(INFLIGHT_TTL)
        state.expire_inflight()
        assert not state.inuse.inflight
        assert await fits(http, apiserver, "b") == []
        await audit(apiserver, state)


async def test_a_write_that_never_answers_keeps_its_device_until_the_claim_moves_on(
    apiserver: ApiServer,
) -> None:
    one_gpu_two_pods(apiserver)
    config = {"bind_timeout_s": BIND_TIMEOUT, "inflight_ttl_s": INFLIGHT_TTL}
    async with extender(apiserver, **config) as (http, state, ctx):
        # The request may land at any time while it sits in the server: no TTL frees its device.
        stuck = apiserver.faults.hold("update", "resourceclaims", subresource="status")
        assert "no answer" in await bind(http, apiserver, "a", "node-a")
        assert await fits(http, apiserver, "b") == []
        await asyncio.sleep(INFLIGHT_TTL * 1.5)
        state.expire_inflight()
        assert await fits(http, apiserver, "b") == []
        assert ctx.settler.unsettled == 1
        # Someone else updates the claim: the stuck request's resourceVersion is stale from now
        # on, so it can never land, and the device is free again.
        with apiserver.store.cond:
            changed = apiserver.store.get(CLAIM, "default", "ca")
            changed["metadata"].setdefault("labels", {})["touched"] = "yes"
            apiserver.store.update(CLAIM, "default", "ca", changed)
        await eventually(lambda: not state.inuse.inflight, what="the write to be proven impossible")
        assert ctx.settler.unsettled == 0
        without_deadline_pressure(ctx)
        assert await fits(http, apiserver, "b") == ["node-a"]
        assert await bind(http, apiserver, "b", "node-a") == ""
        stuck.set()  # the old request goes on now and is refused: its resourceVersion is stale
        await asyncio.sleep(0.2)
        assert "allocation" not in (apiserver.store.get(CLAIM, "default", "ca").get("status") or {})
        await audit(apiserver, state)
