"""kube-scheduler's Lease, as the extender beside it sees it (``--no-leader-elect``, the shipped
layout): whether this pod's kube-scheduler holds it (what ``dra_extender_leader`` reports), and
which holding is current (``term``: a new one is a handover, see ``scheduling.settle.Handover``).

kube-scheduler's holderIdentity is ``<hostname>_<uuid>``; the hostname of a pod is its name, so
this replica's scheduler holds the Lease when the part before the last ``_`` is this pod's name
(``$POD_NAME``, else the hostname). The Lease is read with GET every ``period`` seconds (1 s: a
handover is noticed within it, docs/reliability.md "Handover"); an answer
older than ``stale_after`` seconds (the API server unreachable) counts as not holding it, so a
replica cut off from the cluster never reports a leader.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable

from extender.kube.client import KubeApiError, RawClient

log = logging.getLogger(__name__)


def pod_name() -> str:
    return os.environ.get("POD_NAME") or socket.gethostname()


def holder_host(holder_identity: str) -> str:
    """The hostname part of a client-go holderIdentity (``<hostname>_<uuid>``)."""
    return holder_identity.rpartition("_")[0] if "_" in holder_identity else holder_identity


class SchedulerLease:
    def __init__(self, client: RawClient, *, namespace: str, name: str, hostname: str | None = None,
                 period: float = 1.0, stale_after: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self.namespace, self.name = namespace, name
        self.hostname = hostname or pod_name()
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self._period, self._stale_after, self._clock = period, stale_after, clock
        self._holds = False
        # The holding last read (holderIdentity and leaseTransitions), "" when there was no Lease.
        self._term = ""
        self._read_at: float | None = None  # monotonic time of the last answer (None: none yet)

    def holds(self) -> bool:
        """True while the last answer, fresh enough, named this pod's kube-scheduler."""
        return self._holds and self._fresh()

    def term(self) -> str | None:
        """Which holding of the Lease is current, whoever holds it: a new one is a handover
        (``scheduling.settle.Handover``). The holderIdentity names one kube-scheduler process,
        leaseTransitions tells its holdings apart; "" when there is no Lease (a kube-scheduler
        that does not elect itself); None without a fresh answer.

        Unlike ``holds`` it does not rely on the holder's hostname being this pod's name: the
        extender learns that its own scheduler leads from the binds it is sent."""
        return self._term if self._fresh() else None

    def _fresh(self) -> bool:
        read_at = self._read_at
        return read_at is not None and self._clock() - read_at < self._stale_after

    def read_once(self) -> None:
        try:
            lease = self._client.request("GET", self._path)
        except KubeApiError as exc:
            if not exc.not_found:
                log.warning("reading kube-scheduler's lease %s/%s: %s", self.namespace, self.name, exc)
                return
            lease = {}
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        holds = bool(holder) and holder_host(holder) == self.hostname
        self._term = f"{holder}#{spec.get('leaseTransitions') or 0}" if lease else ""
        if holds != self._holds:
            log.info("this pod's kube-scheduler %s lease %s/%s (holder %r)",
                     "holds" if holds else "does not hold", self.namespace, self.name, holder)
        self._holds, self._read_at = holds, self._clock()

    async def run(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.read_once)
            except Exception:  # the next round tries again; the answer goes stale meanwhile
                log.exception("reading kube-scheduler's lease %s/%s", self.namespace, self.name)
            await asyncio.sleep(self._period)
