"""A claim write that lands after the bind gave up must not hand its device to anyone else."""

from __future__ import annotations

import asyncio
import random

from extender.scheduling.bind import bind_pod
from extender.scheduling.filter import filter_nodes
from tests.reliability.fake_api import FakeApi, Faults
from tests.reliability.figures import record
from tests.scheduling.cluster import Service, claim, gpu_cluster, pod

BIND_TIMEOUT = 0.05


def one_gpu_two_pods() -> tuple[Service, FakeApi]:
    svc = Service(
        [
            *gpu_cluster(nodes=1, per_node=1),
            claim("ca"),
            claim("cb"),
            pod("a", claims={"gpu": "ca"}),
            pod("b", claims={"gpu": "cb"}),
        ],
        bind_timeout_s=BIND_TIMEOUT,
        inflight_ttl_s=BIND_TIMEOUT * 4,
    )
    api = FakeApi(svc.state, Faults(random.Random(0), late=1.0, slow_seconds=BIND_TIMEOUT * 2))
    api.seed()
    svc.ctx.binder = api
    return svc, api


def test_a_late_landing_write_keeps_its_device_and_the_retry_adopts_it() -> None:
    svc, api = one_gpu_two_pods()
    ctx = svc.ctx

    def fits(name: str) -> list[str]:
        info = svc.state.pod("default", name)
        assert info is not None
        return filter_nodes(ctx, info, ["node-0"]).passed

    async def scenario() -> None:
        a = svc.state.pod("default", "a")
        assert a is not None and fits("a") == ["node-0"]
        error = await bind_pod(ctx, "default", "a", a.uid, "node-0")
        assert "no answer" in error  # the write sits in the server past the deadline
        api.faults.late = 0.0
        # The write may still land: its device is not offered to b in the meantime.
        assert fits("b") == []
        await asyncio.sleep(BIND_TIMEOUT * 2.5)  # it lands (and the watch delivers it)
        held = api.claims[("default", "ca")]["status"]
        assert held["reservedFor"][0]["uid"] == a.uid
        assert fits("b") == []
        # The scheduler's retry of a adopts what landed: nothing left to allocate, one reservation.
        assert fits("a") == ["node-0"]
        assert await bind_pod(ctx, "default", "a", a.uid, "node-0") == ""
        api.deliver()
        assert api.pods[("default", "a")]["spec"]["nodeName"] == "node-0"
        assert len(api.claims[("default", "ca")]["status"]["reservedFor"]) == 1
        assert "allocation" not in (api.claims[("default", "cb")].get("status") or {})
        # The timed-out commit's entry is redundant now (the claim holds the device) and ages out.
        await asyncio.sleep(BIND_TIMEOUT * 2)
        svc.state.expire_inflight()
        assert not svc.state.inuse.inflight
        assert fits("b") == []

    asyncio.run(scenario())
    record("faults injected", api.faults.injected)


def test_a_write_that_never_lands_frees_its_device_after_the_ttl() -> None:
    svc, api = one_gpu_two_pods()
    api.faults.slow_seconds = 3600.0  # stuck in the server for good (it never lands in this test)
    ctx = svc.ctx

    async def scenario() -> None:
        a = svc.state.pod("default", "a")
        b = svc.state.pod("default", "b")
        assert a is not None and b is not None
        assert "no answer" in await bind_pod(ctx, "default", "a", a.uid, "node-0")
        api.faults.late = 0.0
        assert filter_nodes(ctx, b, ["node-0"]).passed == []
        await asyncio.sleep(BIND_TIMEOUT * 4.2)  # past the in-flight TTL
        assert filter_nodes(ctx, b, ["node-0"]).passed == ["node-0"]
        assert not svc.state.inuse.inflight  # expired, not leaked
        assert await bind_pod(ctx, "default", "b", b.uid, "node-0") == ""

    asyncio.run(scenario())
    record("faults injected", api.faults.injected)
