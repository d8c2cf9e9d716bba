"""Kubernetes-side metrics: API requests by verb/resource/code, watch restarts and relists by
kind, leader changes, all counted where they happen, against the test API server."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import kubernetes
import pytest
from prometheus_client.parser import text_string_to_metric_families

from extender.kube.client import KubeApiError, RawClient
from extender.kube.leader import LeaderElector
from extender.kube.source import Backoff, KubeSource
from extender.metrics import Metrics
from extender.state import ClusterState
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer
from tests.kube import objects
from tests.kube.conftest import eventually

pytestmark = pytest.mark.anyio


def scrape(metrics: Metrics, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """The samples called ``name``, by label set."""
    text = metrics.render().decode()
    return {
        frozenset(s.labels.items()): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def requests(metrics: Metrics, verb: str, resource: str, code: str) -> float:
    counts = scrape(metrics, "dra_extender_kube_api_requests_total")
    return counts.get(frozenset({"verb": verb, "resource": resource, "code": code}.items()), 0)


async def test_api_requests_are_counted_by_verb_resource_and_code(apiserver: ApiServer) -> None:
    metrics = Metrics()
    client = RawClient(apiserver.api_client(), request_timeout=5.0, metrics=metrics)
    apiserver.store.seed(BY_KIND["ResourceClaim"], objects.claim("c"))
    client.request("GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c")
    client.request("GET", "/apis/resource.k8s.io/v1/resourceclaims")
    with pytest.raises(KubeApiError):
        client.request("GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/nope")
    client.request("POST", "/api/v1/namespaces/default/pods", body=objects.pod("p"))
    claim = client.request("GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c")
    client.request("PUT", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c/status", body=claim)
    with pytest.raises(KubeApiError):
        client.request("GET", "/api/v1/namespaces/default")  # the test server serves no namespaces
    client.watch("/api/v1/nodes", {"timeoutSeconds": "1"}, read_timeout=5).close()

    assert requests(metrics, "get", "resourceclaims", "200") == 2
    assert requests(metrics, "get", "resourceclaims", "404") == 1
    assert requests(metrics, "list", "resourceclaims", "200") == 1
    assert requests(metrics, "create", "pods", "201") == 1
    assert requests(metrics, "update", "resourceclaims/status", "200") == 1
    assert requests(metrics, "get", "namespaces", "404") == 1
    assert requests(metrics, "watch", "nodes", "200") == 1
    latency = scrape(metrics, "dra_extender_kube_api_request_duration_seconds_count")
    assert latency[frozenset({"verb": "get", "resource": "resourceclaims"}.items())] == 3


def test_a_request_that_gets_no_answer_is_counted_as_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    configuration = kubernetes.client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    metrics = Metrics()
    client = RawClient(kubernetes.client.ApiClient(configuration), request_timeout=2.0, metrics=metrics)
    with pytest.raises(KubeApiError):
        client.request("GET", "/api/v1/pods")
    assert requests(metrics, "list", "pods", "error") == 1


async def test_watch_restarts_and_relists_are_counted_by_kind(apiserver: ApiServer) -> None:
    metrics = Metrics()
    client = RawClient(apiserver.api_client(), request_timeout=5.0, metrics=metrics)
    apiserver.store.seed(BY_KIND["DeviceClass"], objects.device_class())
    # Watches the server ends after 1-2 s: the resumption every reflector makes in normal life.
    source = KubeSource(client, ClusterState(), backoff=Backoff(initial=0.05, cap=0.2), watch_timeout=1,
                        metrics=metrics)
    task = asyncio.create_task(source.run())

    def restarts(kind: str, reason: str) -> float:
        return scrape(metrics, "dra_extender_watch_restarts_total")[
            frozenset({"kind": kind, "reason": reason}.items())]

    def relists(kind: str) -> float:
        return scrape(metrics, "dra_extender_relists_total")[frozenset({"kind": kind}.items())]

    try:
        await eventually(lambda: requests(metrics, "watch", "nodes", "200") >= 1, what="watches open")
        assert relists("Node") == 0 and restarts("Node", "error") == 0
        await eventually(lambda: restarts("Node", "ended") >= 1, what="a watch the server ended")
        apiserver.faults.fail("watch", "nodes", 503, times=1)
        # Mid-stream the watch breaks, and its reopen fails. The cut may fall between a watch the
        # server ended and the next one opening (they last 1-2 s here); the failed reopen is
        # certain, and counted as an error either way.
        apiserver.cut_watches("nodes")
        await eventually(lambda: restarts("Node", "error") >= 1, what="the failed reopen")
        assert restarts("Node", "error") <= 2
        assert relists("Node") == 0  # resumed from its resourceVersion each time
        apiserver.faults.force_gone("deviceclasses")
        apiserver.cut_watches("deviceclasses")
        await eventually(lambda: relists("DeviceClass") == 1, what="relist after 410")
        assert restarts("DeviceClass", "expired") == 1
        assert relists("Node") == 0 and restarts("ResourceClaim", "expired") == 0
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_leader_changes_are_counted(apiserver: ApiServer) -> None:
    metrics = Metrics()
    client = RawClient(apiserver.api_client(), request_timeout=5.0)
    # The first round takes the free lease at once; a renewal deadline far beyond any stall of a
    # loaded machine keeps the lead from being lost (and counted) while the test looks.
    elector = LeaderElector(client, name="lease", namespace="default", lease_duration=60.0,
                            renew_deadline=50.0, retry_period=0.2, metrics=metrics)
    task = asyncio.create_task(elector.run())

    def changes(change: str) -> float:
        return scrape(metrics, "dra_extender_leader_changes_total")[frozenset({"change": change}.items())]

    try:
        # Waited for by its count: the round that takes the lease ends in a thread, which makes
        # is_leader() true a moment before the event loop counts the change.
        await eventually(lambda: changes("acquired") == 1, timeout=50.0, what="the lead counted")
        assert elector.is_leader() and changes("lost") == 0
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
