"""Tells kube-scheduler to try a pod again, by writing a condition on it.

A pod that only an extender rejected is retried by kube-scheduler on any event it watches,
and an update of the pod itself is one (pkg/scheduler/backend/queue/scheduling_queue.go,
``Update``: a pod in the unschedulable pool whose rejector is the fake ``Extender`` plugin is
moved to the backoff or active queue). The extender cannot create the events kube-scheduler
would need (it watches no DRA objects with DynamicResources disabled), so for each pod that
``RetryBook.due`` hands out it patches one condition of the pod's status:

    type: dra-extender.io/DevicesChanged   status: "True"
    reason: ClaimsOrDevicesChanged         lastTransitionTime: now

— the RBAC it needs (``pods/status`` patch) is already the extender's for extended-resource
claims. The write is a strategic merge by condition type, so kube-scheduler's own
``PodScheduled`` condition is left as it is. Writes are rate-limited; a failed one is only
logged (the pod still gets kube-scheduler's periodic retry).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable

from extender.kube.client import STRATEGIC_MERGE_PATCH, KubeApiError, RawClient
from extender.kube.events import TokenBucket
from extender.metrics import Metrics
from extender.model.refs import PodRef
from extender.scheduling.retry import RetryBook

log = logging.getLogger(__name__)

CONDITION = "dra-extender.io/DevicesChanged"
REASON = "ClaimsOrDevicesChanged"


class PodRetrier:
    """Every ``interval`` seconds: the book's due pods, each told to retry (the leader's job
    alone: ``is_leader``; with kube-scheduler's lease deciding, only the replica it calls has
    turned pods away)."""

    def __init__(
        self,
        client: RawClient,
        book: RetryBook,
        metrics: Metrics,
        *,
        interval: float = 0.5,
        rate: float = 50.0,
        burst: int = 200,
        is_leader: Callable[[], bool] | None = None,
    ) -> None:
        self._client, self._book, self._metrics = client, book, metrics
        self._interval = interval
        self._bucket = TokenBucket(rate, burst)
        self._is_leader = is_leader
        # Part of the message: two retries within one second (the conditions' time resolution)
        # must still differ, or the second patch changes nothing and is no event.
        self._written = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            if self._is_leader is not None and not self._is_leader():
                continue
            due = self._book.due()
            if due:
                await asyncio.to_thread(self.tell, due)

    def tell(self, pods: list[PodRef]) -> None:
        """Write the condition on each pod (blocking: run in a thread)."""
        for pod in pods:
            if not self._bucket.take():
                self._metrics.retries.labels("rate_limited").inc()
                continue
            outcome = self._write(pod)
            self._metrics.retries.labels(outcome).inc()

    def _write(self, pod: PodRef) -> str:
        self._written += 1
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {"uid": pod.uid},  # a precondition: never touch a replacement pod
            "status": {"conditions": [{
                "type": CONDITION, "status": "True", "reason": REASON, "lastTransitionTime": now,
                "lastProbeTime": now,
                "message": "a claim of this pod or the devices available changed since dra-extender "
                           f"turned it away; kube-scheduler retries it (retry {self._written})",
            }]},
        }
        try:
            self._client.request(
                "PATCH", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status",
                body=body, content_type=STRATEGIC_MERGE_PATCH,
            )
        except KubeApiError as exc:
            if exc.status in (404, 409, 422):
                return "gone"  # deleted, or replaced by a pod with another UID
            log.warning("could not ask kube-scheduler to retry pod %s/%s: %s", pod.namespace, pod.name, exc)
            return "error"
        log.info("asked kube-scheduler to retry pod %s/%s", pod.namespace, pod.name)
        return "written"
