"""Kubernetes Events on pods for bind failures, "no node fits" and the preemptions of
--preemption=evict, rate-limited.

kube-scheduler already reports every failed attempt as FailedScheduling; our events add the DRA
detail and must not flood the API when a pod is retried every few seconds. So an identical
(pod, reason, message) is sent at most once per ``repeat_after`` seconds, and a token bucket
caps the total rate (client-go's event spam filter works the same way). Writing an event never
blocks or fails the caller: it is fire-and-forget, and errors are only logged.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from extender.kube.client import KubeApiError, RawClient

log = logging.getLogger(__name__)

REASON_BIND_FAILED = "FailedBinding"
REASON_NO_NODE_FITS = "FailedDeviceAllocation"
# On a victim, as kube-scheduler's preemption words it (pkg/scheduler/framework/preemption).
REASON_PREEMPTED = "Preempted"
REASON_PREEMPTING = "Preempting"
REASON_PREEMPTION_FAILED = "FailedPreemption"
COMPONENT = "dra-extender"
MAX_MESSAGE = 1024  # core/v1 Event messages are truncated by kubectl and bloat etcd beyond this


class TokenBucket:
    """At most ``burst`` at once, refilled at ``rate`` per second."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate, self._burst, self._clock = rate, burst, clock
        self._tokens = float(burst)
        self._last = clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
        self._last = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False


class EventRecorder:
    def __init__(self, client: RawClient, *, instance: str, repeat_after: float = 60.0, rate: float = 1.0,
                 burst: int = 25, max_keys: int = 4096, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._instance = instance
        self._repeat_after = repeat_after
        self._bucket = TokenBucket(rate, burst, clock)
        self._clock = clock
        self._max_keys = max_keys
        self._last_sent: OrderedDict[tuple[str, str, str], float] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()

    def warn(self, pod: Any, reason: str, message: str) -> bool:
        """Queue a Warning event on ``pod`` (anything with namespace, name, uid); False when suppressed."""
        return self.record(pod, "Warning", reason, message)

    def record(self, pod: Any, event_type: str, reason: str, message: str, related: Any = None) -> bool:
        """Queue an event of ``event_type`` (Normal, Warning) on ``pod``, naming ``related``
        (another pod, e.g. the preemptor) if given; False when suppressed."""
        key = (pod.uid, reason, message)
        now = self._clock()
        last = self._last_sent.get(key)
        if last is not None and now - last < self._repeat_after:
            return False
        if not self._bucket.take():
            log.debug("event on pod %s/%s dropped by the rate limit: %s", pod.namespace, pod.name, message)
            return False
        self._last_sent[key] = now
        self._last_sent.move_to_end(key)
        while len(self._last_sent) > self._max_keys:
            self._last_sent.popitem(last=False)
        task = asyncio.get_running_loop().create_task(
            asyncio.to_thread(self._write, pod, reason, message, event_type, related)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    def bind_failed(self, pod: Any, message: str) -> bool:
        return self.warn(pod, REASON_BIND_FAILED, message)

    def no_node_fits(self, pod: Any, message: str) -> bool:
        return self.warn(pod, REASON_NO_NODE_FITS, message)

    def preempted(self, victim: Any, preemptor: Any, node: str) -> bool:
        """On a victim of --preemption=evict, worded as kube-scheduler's own."""
        return self.record(
            victim, "Normal", REASON_PREEMPTED, f"Preempted by pod {preemptor.uid} on node {node}", preemptor
        )

    async def flush(self) -> None:
        """Wait for queued writes (shutdown and tests)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _write(self, pod: Any, reason: str, message: str, event_type: str = "Warning",
               related: Any = None) -> None:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{pod.name}.{uuid.uuid4().hex[:16]}", "namespace": pod.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace,
                               "name": pod.name, "uid": pod.uid},
            "reason": reason, "message": message[:MAX_MESSAGE], "type": event_type, "count": 1,
            "firstTimestamp": now, "lastTimestamp": now,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT, "reportingInstance": self._instance,
        }
        if related is not None:
            body["related"] = {"apiVersion": "v1", "kind": "Pod", "namespace": related.namespace,
                               "name": related.name, "uid": related.uid}
        try:
            self._client.request("POST", f"/api/v1/namespaces/{pod.namespace}/events", body=body)
        except KubeApiError as exc:
            log.warning("could not record event %s on pod %s/%s: %s", reason, pod.namespace, pod.name, exc)
