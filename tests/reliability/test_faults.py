"""The fault matrix against the test API server: each row's expected outcome, shown end to end.

Every test ends with the same audit (``tests/reliability/harness.py``): no device allocated to
two claims, no claim allocated without a consumer, every bound pod holding its claims on its
node, and the extender's cache agreeing with the server. docs/reliability.md lists the rows.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace

import pytest

from extender.kube.binder import KubeBinder
from extender.kube.client import RawClient
from extender.model import parse_resource_claim
from extender.model.refs import PodRef
from tests.apiserver.server import ApiServer
from tests.kube import objects
from tests.kube.conftest import eventually
from tests.kube.test_service import NODES, seed
from tests.reliability.harness import (
    CLAIM,
    POD,
    audit,
    bind,
    cached_allocation,
    claim_reserved,
    extender,
    filter_nodes,
    pod_obj,
    schedule,
)

pytestmark = pytest.mark.anyio


# ----- the API server unavailable -------------------------------------------------------------


async def test_api_unavailable_at_start_means_not_ready_then_a_normal_start(apiserver: ApiServer) -> None:
    seed(apiserver, pods=1)
    apiserver.faults.fail("list", None, 503, times=12)
    async with extender(apiserver, wait_ready=False) as (http, state, _ctx):
        assert (await http.get("/readyz")).status_code == 503
        result = await filter_nodes(http, apiserver, "pod-0")
        assert "not synced" in result["Error"]  # kube-scheduler retries the pod; nothing is guessed
        await eventually(lambda: state.synced, what="sync after the API came back")
        assert (await http.get("/readyz")).status_code == 200
        node, error = await schedule(http, apiserver, "pod-0")
        assert node in NODES, error
        await audit(apiserver, state)


async def test_api_unavailable_mid_run_fails_binds_cleanly_and_recovers(apiserver: ApiServer) -> None:
    seed(apiserver, pods=2)
    async with extender(apiserver) as (http, state, _ctx):
        assert (await schedule(http, apiserver, "pod-0"))[0] in NODES
        apiserver.faults.fail(None, None, 503, times=40)  # every call, reads and writes alike
        apiserver.cut_watches()
        node, error = await schedule(http, apiserver, "pod-1")
        assert node is None and "503" in error
        assert "nodeName" not in pod_obj(apiserver, "pod-1")["spec"]
        await eventually(lambda: apiserver.faults.take_failure("get", "pods", None) == 0, what="recovery")
        node, error = await schedule(http, apiserver, "pod-1")
        assert node in NODES, error
        await audit(apiserver, state)


# ----- watch streams --------------------------------------------------------------------------


async def test_cut_and_expired_watches_during_binds_never_free_a_held_device(apiserver: ApiServer) -> None:
    seed(apiserver, pods=3)
    async with extender(apiserver) as (http, state, _ctx):
        first = await schedule(http, apiserver, "pod-0")
        apiserver.cut_watches()
        apiserver.faults.force_gone("resourceclaims", times=2)
        apiserver.store.compact()
        second = await schedule(http, apiserver, "pod-1")
        apiserver.cut_watches("resourceclaims")
        third = await schedule(http, apiserver, "pod-2")
        assert {first[0], second[0]} == set(NODES) and third[0] is None  # one device per node
        await audit(apiserver, state)


# ----- slow answers ---------------------------------------------------------------------------


async def test_a_claim_write_answered_after_the_bind_deadline_is_adopted_by_the_retry(
    apiserver: ApiServer,
) -> None:
    seed(apiserver, pods=2)
    # Held, not delayed, past the deadline: on a loaded machine a delay of fixed length could end
    # before the bind's deadline, or the in-flight TTL before the filter of pod-1 (a flake seen).
    async with extender(apiserver, bind_timeout_s=1.0, inflight_ttl_s=1.5) as (http, state, ctx):
        node = (await filter_nodes(http, apiserver, "pod-0"))["NodeNames"][0]
        release = apiserver.faults.hold("update", "resourceclaims", subresource="status")
        try:
            error = await bind(http, apiserver, "pod-0", node)
            assert "no answer within 1s" in error
            await asyncio.sleep(1.5)  # past the in-flight TTL too
            # The write is still sitting in the server: its device is not offered to pod-1 meanwhile.
            other = await filter_nodes(http, apiserver, "pod-1")
            assert other["NodeNames"] == [n for n in NODES if n != node]
        finally:
            release.set()
        await eventually(lambda: claim_reserved("claim-0", apiserver), what="the late write to land")
        assert "nodeName" not in pod_obj(apiserver, "pod-0")["spec"]
        # (until the watch delivers it, pod-0 is told its claim "is in the process of being allocated")
        await eventually(lambda: cached_allocation(state, "claim-0"), what="the watch echo")
        # The fault is over: a loaded CI machine must not turn the normal binds below into timeouts.
        ctx.config = replace(ctx.config, bind_timeout_s=30.0, inflight_ttl_s=60.0)
        # kube-scheduler retries pod-0: it adopts what landed, with no second claim write.
        writes_before = len(apiserver.writes())
        retried = await schedule(http, apiserver, "pod-0")
        assert retried == (node, ""), retried[1]
        assert [(c.verb, c.subresource) for c in apiserver.writes()[writes_before:]] == [
            ("create", "binding")
        ]
        placed, why = await schedule(http, apiserver, "pod-1")
        assert placed not in (None, node), why
        await audit(apiserver, state)


async def test_a_binding_answered_after_the_deadline_keeps_the_claims_for_the_pod(
    apiserver: ApiServer,
) -> None:
    seed(apiserver, pods=1)
    # The deadline is generous because the claim write before the Binding must beat it even on
    # a loaded CI machine; the Binding itself is held until the extender has given up on it.
    async with extender(apiserver, bind_timeout_s=2.0, inflight_ttl_s=4.0) as (http, state, ctx):
        node = (await filter_nodes(http, apiserver, "pod-0"))["NodeNames"][0]
        release = apiserver.faults.hold("create", "pods", subresource="binding")
        try:
            error = await bind(http, apiserver, "pod-0", node)
        finally:
            release.set()
        assert "claims stay reserved for the retry" in error
        await eventually(
            lambda: pod_obj(apiserver, "pod-0")["spec"].get("nodeName") == node,
            what="the late Binding to land",
        )
        assert claim_reserved("claim-0", apiserver)  # not rolled back under a bound pod
        ctx.config = replace(ctx.config, bind_timeout_s=30.0, inflight_ttl_s=60.0)
        # the scheduler's informer shows the pod bound, so it is not retried; a retry would be a no-op
        assert await bind(http, apiserver, "pod-0", node) == ""
        await audit(apiserver, state)


# ----- conflicts and deletions ----------------------------------------------------------------


@pytest.mark.parametrize("conflicts", [4, 12])
async def test_a_409_storm_on_claim_status_converges_or_fails_cleanly(
    apiserver: ApiServer, conflicts: int
) -> None:
    seed(apiserver, pods=3)
    async with extender(apiserver) as (http, state, _ctx):
        apiserver.faults.fail("update", "resourceclaims", 409, times=conflicts, subresource="status")
        results = await asyncio.gather(*(schedule(http, apiserver, f"pod-{i}") for i in range(3)))
        bound = [n for n, _ in results if n]
        assert len(bound) == len(set(bound)) <= len(NODES)
        for _ in range(3):  # kube-scheduler's retries, after the storm
            for i in range(3):
                if "nodeName" not in pod_obj(apiserver, f"pod-{i}")["spec"]:
                    await schedule(http, apiserver, f"pod-{i}")
        bound_now = sorted(pod_obj(apiserver, f"pod-{i}")["spec"].get("nodeName", "") for i in range(3))
        assert bound_now == ["", *NODES]  # two devices, two pods placed, one left pending
        await audit(apiserver, state)


async def test_a_binding_rejected_because_the_pod_was_deleted_rolls_the_claim_back(
    apiserver: ApiServer,
) -> None:
    seed(apiserver, pods=1)
    async with extender(apiserver) as (http, state, _ctx):
        node = (await filter_nodes(http, apiserver, "pod-0"))["NodeNames"][0]
        apiserver.faults.delay(0.4, "update", "resourceclaims", subresource="status")
        binding = asyncio.create_task(bind(http, apiserver, "pod-0", node))
        await asyncio.sleep(0.1)
        await asyncio.to_thread(apiserver.store.delete, POD, "default", "pod-0")
        error = await binding
        assert "no longer exists" in error or "not known" in error
        status = apiserver.store.get(CLAIM, "default", "claim-0").get("status") or {}
        assert not status.get("allocation") and not status.get("reservedFor")
        await audit(apiserver, state)


# ----- a crash between the claim write and the Binding -----------------------------------------


async def test_a_restart_after_a_crash_between_claim_write_and_binding_adopts_the_claim(
    apiserver: ApiServer,
) -> None:
    seed(apiserver, pods=2)
    # What the first extender did before it died: allocate and reserve claim-0 for pod-0 on node-a.
    uid = pod_obj(apiserver, "pod-0")["metadata"]["uid"]
    raw = apiserver.store.get(CLAIM, "default", "claim-0")
    crashed = KubeBinder(RawClient(apiserver.api_client()), retry_delay=0.001)
    await crashed.write_claim(
        parse_resource_claim(raw), objects.allocation("node-a"), PodRef("default", "pod-0", uid)
    )
    crashed.close()
    async with extender(apiserver) as (http, state, _ctx):
        assert state.inuse.devices == {(objects.DRIVER, "node-a", "gpu-0")}
        # pod-1 cannot take the device the dead extender wrote for pod-0 ...
        assert (await filter_nodes(http, apiserver, "pod-1"))["NodeNames"] == ["node-b"]
        # ... and pod-0's retry lands where its claim already is, with only the Binding left to write.
        writes_before = len(apiserver.writes())
        assert await schedule(http, apiserver, "pod-0") == ("node-a", "")
        assert [(c.verb, c.subresource) for c in apiserver.writes()[writes_before:]] == [
            ("create", "binding")
        ]
        await audit(apiserver, state)


async def test_a_restart_after_a_crash_releases_when_the_pod_is_gone(apiserver: ApiServer) -> None:
    """The pod was deleted while no extender ran: its reservation is dropped, the device is free again."""
    seed(apiserver, pods=2)
    uid = pod_obj(apiserver, "pod-0")["metadata"]["uid"]
    raw = apiserver.store.get(CLAIM, "default", "claim-0")
    crashed = KubeBinder(RawClient(apiserver.api_client()), retry_delay=0.001)
    claim_obj = parse_resource_claim(raw)
    await crashed.write_claim(claim_obj, objects.allocation("node-a"), PodRef("default", "pod-0", uid))
    apiserver.store.delete(POD, "default", "pod-0")
    # The resourceclaim controller's part (it is not in the test server): drop the dead consumer, and
    # with it the allocation, through the same rollback the extender uses.
    await crashed.release_claim(
        parse_resource_claim(apiserver.store.get(CLAIM, "default", "claim-0")),
        PodRef("default", "pod-0", uid),
        deallocate=True,
    )
    crashed.close()
    async with extender(apiserver) as (http, state, _ctx):
        assert state.inuse.devices == set()
        assert set((await filter_nodes(http, apiserver, "pod-1"))["NodeNames"]) == set(NODES)
        await audit(apiserver, state)


async def test_a_rollback_returns_the_claim_as_left_so_bind_can_cache_it(apiserver: ApiServer) -> None:
    seed(apiserver, pods=1)
    uid = pod_obj(apiserver, "pod-0")["metadata"]["uid"]
    binder = KubeBinder(RawClient(apiserver.api_client()), retry_delay=0.001)
    ref = PodRef("default", "pod-0", uid)
    raw = apiserver.store.get(CLAIM, "default", "claim-0")
    await binder.write_claim(parse_resource_claim(raw), objects.allocation("node-a"), ref)
    written = parse_resource_claim(apiserver.store.get(CLAIM, "default", "claim-0"))
    left = await binder.release_claim(written, ref, deallocate=True)
    assert left == apiserver.store.get(CLAIM, "default", "claim-0")
    assert left is not None and "allocation" not in (left.get("status") or {})
    ghost = parse_resource_claim(
        {**objects.claim("ghost"), "metadata": {"name": "ghost", "namespace": "default", "uid": "0000-ghost"}}
    )
    assert await binder.release_claim(ghost, ref, deallocate=True) is None  # gone: nothing to cache
    binder.close()


async def test_a_binding_whose_reply_was_lost_and_whose_retry_is_refused_keeps_the_claims(
    apiserver: ApiServer,
) -> None:
    seed(apiserver, pods=1)
    async with extender(apiserver) as (http, state, _ctx):
        node = (await filter_nodes(http, apiserver, "pod-0"))["NodeNames"][0]
        drop = threading.Event()
        apiserver.faults.lose_reply("create", "pods", subresource="binding", after=drop)
        binding = asyncio.create_task(bind(http, apiserver, "pod-0", node))
        await eventually(lambda: pod_obj(apiserver, "pod-0")["spec"].get("nodeName") == node,
                         what="the Binding to land")
        apiserver.faults.fail("create", "pods", 403, subresource="binding")  # the retry is refused
        drop.set()  # ... once the connection of the first one broke
        assert await binding == ""  # the pod is bound: the re-read says so
        await audit(apiserver, state)  # the bound pod must still hold its claim


async def test_a_retry_after_a_rollback_the_watch_has_not_shown_writes_the_claim_again(
    apiserver: ApiServer,
) -> None:
    """The rollback's reply is the cache's until the watch echoes it: a retry of the pod that came
    before the echo would otherwise find its old reservation, write nothing and bind the pod
    without its devices."""
    seed(apiserver, pods=1)
    async with extender(apiserver) as (http, state, _ctx):
        node = (await filter_nodes(http, apiserver, "pod-0"))["NodeNames"][0]
        apiserver.lag_watches("resourceclaims")  # nothing of the claim reaches the cache by watch
        apiserver.faults.fail("create", "pods", 403, subresource="binding")
        assert "403" in await bind(http, apiserver, "pod-0", node)
        assert not claim_reserved("claim-0", apiserver)
        retried = await schedule(http, apiserver, "pod-0")
        assert retried == (node, ""), retried[1]
        assert claim_reserved("claim-0", apiserver), "pod-0 bound, its claim not written"
        apiserver.release_watch_events()
        await audit(apiserver, state)

