"""Telling kube-scheduler to retry a pod: one condition patched on the pod's status, beside
kube-scheduler's own, never on a pod that replaced it."""

from __future__ import annotations

from typing import Any

from extender.kube.client import RawClient
from extender.kube.retry import CONDITION, PodRetrier
from extender.metrics import Metrics
from extender.model.refs import PodRef
from extender.scheduling.retry import RetryBook
from extender.state import ClusterState
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer

POD = BY_KIND["Pod"]


def pending_pod(apiserver: ApiServer) -> dict[str, Any]:
    created = apiserver.store.create(POD, "ml", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer-0", "namespace": "ml"},
        "spec": {"containers": [{"name": "main", "image": "img"}], "schedulerName": "dra-extender-scheduler"},
    })
    created["status"] = {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                         "message": "0/1 nodes are available"}]}
    return apiserver.store.update(POD, "ml", "trainer-0", created, "status")


def conditions(apiserver: ApiServer) -> dict[str, dict[str, Any]]:
    current = apiserver.store.get(POD, "ml", "trainer-0")
    return {c["type"]: c for c in current["status"]["conditions"]}


def retrier(client: RawClient, metrics: Metrics) -> PodRetrier:
    return PodRetrier(client, RetryBook(ClusterState()), metrics)


def test_the_condition_is_written_beside_kube_schedulers_and_changes_every_time(
    apiserver: ApiServer, client: RawClient
) -> None:
    pod = pending_pod(apiserver)
    metrics = Metrics()
    ref = PodRef("ml", "trainer-0", pod["metadata"]["uid"])
    retrier(client, metrics).tell([ref])
    first = apiserver.store.get(POD, "ml", "trainer-0")
    found = conditions(apiserver)
    assert found["PodScheduled"]["reason"] == "Unschedulable"  # merged by type, not replaced
    assert found[CONDITION]["status"] == "True" and found[CONDITION]["reason"]
    retrier_again = retrier(client, metrics)
    retrier_again.tell([ref])
    retrier_again.tell([ref])
    # Each write is an update event for kube-scheduler: the object must change each time,
    # even within one second (the conditions' time resolution).
    assert apiserver.store.get(POD, "ml", "trainer-0")["metadata"]["resourceVersion"] != \
        first["metadata"]["resourceVersion"]
    assert metrics.retries.labels("written")._value.get() == 3


def test_a_pod_replaced_under_its_name_is_not_touched(apiserver: ApiServer, client: RawClient) -> None:
    pending_pod(apiserver)
    metrics = Metrics()
    retrier(client, metrics).tell([PodRef("ml", "trainer-0", "a-uid-of-a-pod-long-gone")])
    assert CONDITION not in conditions(apiserver)
    assert metrics.retries.labels("gone")._value.get() == 1


def test_writes_beyond_the_rate_are_dropped_not_queued(apiserver: ApiServer, client: RawClient) -> None:
    pod = pending_pod(apiserver)
    metrics = Metrics()
    limited = PodRetrier(client, RetryBook(ClusterState()), metrics, rate=0.001, burst=1)
    ref = PodRef("ml", "trainer-0", pod["metadata"]["uid"])
    limited.tell([ref, ref, ref])
    assert metrics.retries.labels("written")._value.get() == 1
    assert metrics.retries.labels("rate_limited")._value.get() == 2
