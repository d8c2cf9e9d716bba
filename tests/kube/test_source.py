"""The Kubernetes source fills a real ClusterState from the test API server and keeps it current."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from extender.kube.client import RawClient, load_api_client
from extender.kube.source import Backoff, KubeSource
from extender.model.kinds import KINDS, Kind
from extender.state import ClusterState
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer
from tests.kube import objects
from tests.kube.conftest import eventually

# anyio's pytest plugin (anyio ships with the web stack) runs these coroutines on asyncio.
pytestmark = pytest.mark.anyio


class CountingState(ClusterState):
    """ClusterState that also counts relists per kind (to tell a resumed watch from a relist)."""

    def __init__(self) -> None:
        super().__init__()
        self.replaced: Counter[str] = Counter()

    def replace(self, kind: str, objs: list[dict]) -> None:
        self.replaced[kind] += 1
        super().replace(kind, objs)


@contextlib.asynccontextmanager
async def running(client: RawClient, state: ClusterState,
                  kinds: tuple[Kind[Any], ...] = KINDS) -> AsyncIterator[KubeSource]:
    source = KubeSource(client, state, kinds=kinds, backoff=Backoff(initial=0.05, cap=0.2), watch_timeout=30)
    task = asyncio.create_task(source.run())
    try:
        yield source
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def seed_cluster(server: ApiServer) -> dict:
    store = server.store
    store.seed(BY_KIND["Node"], objects.node("node-a"))
    store.seed(BY_KIND["DeviceClass"], objects.device_class())
    store.seed(BY_KIND["ResourceSlice"], objects.resource_slice("node-a"))
    store.seed(BY_KIND["ResourceClaimTemplate"], objects.claim_template("one-gpu"))
    store.seed(BY_KIND["Pod"], objects.pod("user", claim_name="shared"))
    store.seed(BY_KIND["PodGroup"], {
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "group", "namespace": "default"},
        "spec": {"schedulingPolicy": {"basic": {}},
                 "resourceClaims": [{"name": "gpu", "resourceClaimName": "shared"}]},
    })
    allocated = objects.claim("shared")
    allocated["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    allocated["status"] = {"allocation": objects.allocation("node-a", "gpu-1")}
    return store.seed(BY_KIND["ResourceClaim"], allocated)


async def test_initial_lists_fill_the_state_and_only_then_mark_it_synced(apiserver: ApiServer,
                                                                         client: RawClient) -> None:
    claim = seed_cluster(apiserver)
    apiserver.faults.fail("list", "pods", 503, times=2)  # one kind lags: not ready until it lands
    state = ClusterState()
    async with running(client, state):
        await eventually(lambda: state.counts()["ResourceClaim"] == 1, what="claims listed")
        assert not state.synced
        await eventually(lambda: state.synced, what="all kinds synced")
        assert state.counts() == {"Node": 1, "DeviceClass": 1, "ResourceSlice": 1, "DeviceTaintRule": 0,
                                  "ResourceClaim": 1, "ResourceClaimTemplate": 1, "PodGroup": 1, "Pod": 1,
                                  "PodDisruptionBudget": 0}
        group = state.pod_group("default", "group")
        assert group is not None and [c.claim_name for c in group.claims] == ["shared"]
        cached = state.claim("default", "shared")
        assert cached is not None and cached.uid == claim["metadata"]["uid"]
        assert cached.allocation is not None
        assert len(state.inuse.devices) == 1  # the allocated device counts as in use


async def test_watch_delivers_adds_updates_and_deletes(apiserver: ApiServer, client: RawClient) -> None:
    seed_cluster(apiserver)
    state = ClusterState()
    async with running(client, state):
        await eventually(lambda: state.synced, what="sync")
        apiserver.store.create(BY_KIND["Node"], "", objects.node("node-b"))
        apiserver.store.delete(BY_KIND["Node"], "", "node-a")
        labelled = apiserver.store.get(BY_KIND["Node"], "", "node-b")
        labelled["metadata"]["labels"] = {"zone": "z1"}
        apiserver.store.update(BY_KIND["Node"], "", "node-b", labelled)
        await eventually(lambda: set(state.nodes) == {"node-b"}
                         and state.nodes["node-b"].labels == {"zone": "z1"}, what="node changes")


async def test_cut_watch_resumes_from_last_version_without_losing_events(apiserver: ApiServer,
                                                                         client: RawClient) -> None:
    seed_cluster(apiserver)
    state = CountingState()
    async with running(client, state):
        await eventually(lambda: state.synced, what="sync")
        apiserver.faults.fail("watch", "nodes", 503, times=2)  # reconnects fail for a while
        apiserver.cut_watches("nodes")
        for i in range(5):
            apiserver.store.create(BY_KIND["Node"], "", objects.node(f"late-{i}"))
        await eventually(lambda: len(state.nodes) == 6, what="events from the gap")
    assert state.replaced["Node"] == 1  # resumed from its resourceVersion, no relist
    resumed = [c for c in apiserver.calls if c.verb == "watch" and c.resource == "nodes"][1:]
    assert resumed and all(c.query["resourceVersion"] != "0" for c in resumed)
    assert all(c.query["allowWatchBookmarks"] == "true" for c in resumed)


async def test_410_gone_relists_and_reconciles_deletions(apiserver: ApiServer, client: RawClient) -> None:
    seed_cluster(apiserver)
    state = CountingState()
    async with running(client, state):
        await eventually(lambda: state.synced, what="sync")
        apiserver.faults.fail("watch", "resourceclaims", 503, times=3)
        apiserver.cut_watches("resourceclaims")
        apiserver.store.delete(BY_KIND["ResourceClaim"], "default", "shared")  # finalizer: only marked
        claim = apiserver.store.get(BY_KIND["ResourceClaim"], "default", "shared")
        claim["metadata"]["finalizers"] = []
        apiserver.store.update(BY_KIND["ResourceClaim"], "default", "shared", claim)  # now really gone
        apiserver.store.create(BY_KIND["ResourceClaim"], "default", objects.claim("fresh"))
        apiserver.store.compact()  # the deletion event is no longer in the history
        await eventually(lambda: set(state.claims) == {("default", "fresh")}, what="relist after 410")
        assert state.replaced["ResourceClaim"] == 2
        # the watch after the relist keeps delivering
        apiserver.store.create(BY_KIND["ResourceClaim"], "default", objects.claim("after"))
        await eventually(lambda: ("default", "after") in state.claims, what="watch after relist")


async def test_forced_410_error_event_relists(apiserver: ApiServer, client: RawClient) -> None:
    seed_cluster(apiserver)
    state = CountingState()
    async with running(client, state):
        await eventually(lambda: state.synced, what="sync")
        apiserver.faults.force_gone("deviceclasses")
        apiserver.cut_watches("deviceclasses")
        await eventually(lambda: state.replaced["DeviceClass"] == 2, what="relist")
        apiserver.store.create(BY_KIND["DeviceClass"], "", objects.device_class("other"))
        await eventually(lambda: "other" in state.classes, what="watch after forced 410")


async def test_bookmarks_advance_the_resume_point(apiserver: ApiServer, client: RawClient) -> None:
    seed_cluster(apiserver)
    state = CountingState()
    async with running(client, state):
        await eventually(lambda: state.synced, what="sync")
        for i in range(3):  # other kinds move the global resourceVersion on
            apiserver.store.create(BY_KIND["Node"], "", objects.node(f"n-{i}"))
        target = apiserver.store.resource_version
        await asyncio.sleep(0.5)  # > bookmark interval
        apiserver.cut_watches("deviceclasses")
        await eventually(lambda: any(c.resource == "deviceclasses" and c.verb == "watch"
                                     and int(c.query["resourceVersion"]) >= target for c in apiserver.calls),
                         what="resume from a bookmark's resourceVersion")


async def test_restarted_source_rebuilds_state_with_allocations(apiserver: ApiServer,
                                                                client: RawClient) -> None:
    claim = seed_cluster(apiserver)
    first = ClusterState()
    async with running(client, first):
        await eventually(lambda: first.synced, what="first sync")
    second = ClusterState()
    async with running(client, second):
        await eventually(lambda: second.synced, what="second sync")
    assert second.counts() == first.counts()
    rebuilt = second.claim("default", "shared")
    assert rebuilt is not None and rebuilt.allocation is not None
    assert rebuilt.uid == claim["metadata"]["uid"]
    assert len(second.inuse.devices) == 1 and second.inuse.devices == first.inuse.devices


async def test_paged_lists_collect_every_page(apiserver: ApiServer, client: RawClient) -> None:
    for i in range(7):
        apiserver.store.create(BY_KIND["Node"], "", objects.node(f"node-{i}"))
    state = ClusterState()
    source = KubeSource(client, state, page_size=3)
    task = asyncio.create_task(source.run())
    try:
        await eventually(lambda: len(state.nodes) == 7, what="all pages")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    pages = [c for c in apiserver.calls if c.verb == "list" and c.resource == "nodes"]
    assert len(pages) == 3 and pages[-1].query.get("continue")


async def test_kubeconfig_file_is_honoured(apiserver: ApiServer, tmp_path) -> None:
    path = tmp_path / "kubeconfig"
    apiserver.write_kubeconfig(str(path))
    apiserver.store.create(BY_KIND["Node"], "", objects.node("node-a"))
    client = RawClient(load_api_client(str(path)))
    listed = await asyncio.to_thread(client.request, "GET", "/api/v1/nodes")
    assert [n["metadata"]["name"] for n in listed["items"]] == ["node-a"]


async def test_a_malformed_object_in_a_list_is_logged_without_a_traceback_and_the_rest_arrive(
        apiserver: ApiServer, client: RawClient, caplog: pytest.LogCaptureFixture) -> None:
    seed_cluster(apiserver)
    bad = objects.resource_slice("aaa")  # listed first
    bad["spec"]["pool"]["resourceSliceCount"] = 0  # schema-valid, refused by the model
    apiserver.store.seed(BY_KIND["ResourceSlice"], bad)
    apiserver.store.seed(BY_KIND["ResourceSlice"], objects.resource_slice("node-b"))
    state = ClusterState()
    async with running(client, state):
        await eventually(lambda: state.synced, what="sync")
    assert sorted(state.slices.by_name) == ["node-a-gpu.example.com", "node-b-gpu.example.com"]
    [record] = [r for r in caplog.records if "aaa-gpu.example.com" in r.getMessage()]
    assert "spec.pool.resourceSliceCount: must be a positive integer" in record.getMessage()
    assert record.levelname == "WARNING" and record.exc_info is None


async def test_an_object_the_state_rejects_is_logged_and_the_feed_goes_on(
        apiserver: ApiServer, client: RawClient, caplog: pytest.LogCaptureFixture) -> None:
    seed_cluster(apiserver)
    state = ClusterState()
    async with running(client, state):
        await eventually(lambda: state.synced, what="sync")
        bad = objects.resource_slice("node-z")
        bad["spec"]["pool"]["resourceSliceCount"] = 0  # schema-valid, rejected by the model
        apiserver.store.create(BY_KIND["ResourceSlice"], "", bad)
        apiserver.store.create(BY_KIND["ResourceSlice"], "", objects.resource_slice("node-b"))
        await eventually(lambda: "node-b-gpu.example.com" in state.slices.by_name, what="later slice")
    assert "node-z-gpu.example.com" not in state.slices.by_name
    assert "ResourceSlice node-z-gpu.example.com: spec.pool.resourceSliceCount" in caplog.text
