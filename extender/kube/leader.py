"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's timings and rules.

Only the leader commits binds; standbys keep their caches warm so that fail-over is instant.
The Lease is updated with resourceVersion preconditions, so two candidates can never both win
one round. A holder's lease is judged expired by *our* clock from the moment we last saw its
record change (client-go's observedTime), never by comparing timestamps written by another
machine's clock.

``is_leader()`` is cheap and also checks the renew deadline itself: a leader whose renewals stop
succeeding stops committing as soon as the deadline passes, even if the loop is stuck in a slow
API call.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from extender.kube.client import KubeApiError, RawClient
from extender.metrics import Metrics

log = logging.getLogger(__name__)


def _micro_time(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4()}"


class LeaderElector:
    def __init__(self, client: RawClient, *, name: str, namespace: str, identity: str | None = None,
                 lease_duration: float = 15.0, renew_deadline: float = 10.0, retry_period: float = 2.0,
                 clock: Callable[[], float] = time.monotonic, metrics: Metrics | None = None) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("leader election needs lease_duration > renew_deadline > retry_period > 0, got "
                             f"{lease_duration}, {renew_deadline}, {retry_period}")
        self._client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity or default_identity()
        self._lease_duration = lease_duration
        self._renew_deadline = renew_deadline
        self._retry_period = retry_period
        self._clock = clock
        self._metrics = metrics
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        # Monotonic time of our last successful acquire/renew; None while not leading.
        self._renewed_at: float | None = None
        self._observed_record: dict[str, Any] | None = None
        self._observed_at = 0.0
        # The acquire/renew round running in a thread; cancellation cannot stop it, so shutdown
        # waits for it before releasing (else a late renewal could re-take the released lease).
        self._round: asyncio.Future[bool] | None = None
        self.changed = asyncio.Event()

    def is_leader(self) -> bool:
        renewed = self._renewed_at
        return renewed is not None and self._clock() - renewed < self._renew_deadline

    def term(self) -> str | None:
        """Which holding of the Lease this replica has while it leads (None otherwise): a new one
        is a handover (``scheduling.settle.Handover``)."""
        if not self.is_leader():
            return None
        spec = self._observed_record or {}
        return f"{spec.get('holderIdentity')}#{spec.get('leaseTransitions') or 0}"

    async def run(self) -> None:
        """Campaign, lead, and campaign again after losing the lease, until cancelled (then release)."""
        try:
            while True:
                await self._acquire()
                await self._renew_until_lost()
        finally:
            if self._round is not None:
                await asyncio.wait([self._round])
            if self._renewed_at is not None:
                await asyncio.shield(asyncio.to_thread(self._release))

    async def _try_round(self) -> bool:
        self._round = asyncio.ensure_future(asyncio.to_thread(self._try_acquire_or_renew))
        return await asyncio.shield(self._round)

    async def _acquire(self) -> None:
        while not await self._try_round():
            await asyncio.sleep(self._retry_period * random.uniform(1.0, 2.0))  # client-go JitterFactor 1.2
        log.info("became leader of lease %s/%s as %s", self.namespace, self.name, self.identity)
        self._set_leading(True)

    async def _renew_until_lost(self) -> None:
        while True:
            await asyncio.sleep(self._retry_period)
            while not await self._try_round():
                if not self.is_leader():
                    log.warning("lost lease %s/%s: no successful renewal within %.1fs", self.namespace,
                                self.name, self._renew_deadline)
                    self._set_leading(False)
                    return
                await asyncio.sleep(self._retry_period / 4)

    def _set_leading(self, leading: bool) -> None:
        if not leading:
            self._renewed_at = None
        if self._metrics is not None:
            self._metrics.leader_changes.labels("acquired" if leading else "lost").inc()
        self.changed.set()
        self.changed = asyncio.Event()

    def _try_acquire_or_renew(self) -> bool:
        """One round of client-go's tryAcquireOrRenew; True when we hold the lease afterwards."""
        started = self._clock()
        now = datetime.datetime.now(datetime.UTC)
        try:
            lease = self._client.request("GET", self._path)
        except KubeApiError as exc:
            if not exc.not_found:
                log.warning("reading lease %s/%s: %s", self.namespace, self.name, exc)
                return False
            return self._create(started, now)
        spec = lease.get("spec") or {}
        if spec != self._observed_record:
            self._observed_record = spec
            self._observed_at = started
        holder = spec.get("holderIdentity") or ""
        held_by_other = holder not in ("", self.identity)
        duration = float(spec.get("leaseDurationSeconds") or self._lease_duration)
        if held_by_other and self._observed_at + duration > started:
            return False
        new_spec = dict(spec)
        new_spec.update(holderIdentity=self.identity, leaseDurationSeconds=round(self._lease_duration),
                        renewTime=_micro_time(now))
        if holder != self.identity:
            new_spec["acquireTime"] = _micro_time(now)
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        lease["spec"] = new_spec
        try:
            updated = self._client.request("PUT", self._path, body=lease)
        except KubeApiError as exc:
            log.info("updating lease %s/%s: %s", self.namespace, self.name, exc)
            return False
        self._observe(updated, started)
        return True

    def _create(self, started: float, now: datetime.datetime) -> bool:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": round(self._lease_duration),
                         "acquireTime": _micro_time(now), "renewTime": _micro_time(now),
                         "leaseTransitions": 0}}
        try:
            created = self._client.request("POST", f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}"
                                                   "/leases", body=body)
        except KubeApiError as exc:
            log.info("creating lease %s/%s: %s", self.namespace, self.name, exc)
            return False
        self._observe(created, started)
        return True

    def _observe(self, lease: dict[str, Any], started: float) -> None:
        self._observed_record = lease.get("spec") or {}
        self._observed_at = started
        # Count from before the round trip: the deadline must not outlive the lease others observe.
        self._renewed_at = started

    def _release(self) -> None:
        """Hand the lease over at once instead of making the next leader wait out the duration."""
        self._renewed_at = None
        try:
            lease = self._client.request("GET", self._path)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            now = _micro_time(datetime.datetime.now(datetime.UTC))
            lease["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": now,
                             "acquireTime": now}
            self._client.request("PUT", self._path, body=lease)
            log.info("released lease %s/%s", self.namespace, self.name)
        except KubeApiError as exc:
            log.warning("releasing lease %s/%s: %s", self.namespace, self.name, exc)
