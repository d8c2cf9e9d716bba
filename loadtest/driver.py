"""One kube-scheduler instance, played over HTTP (extender-protocol.md §4.1).

Pods are filtered and prioritized one at a time, as the scheduling cycle does; binds run on a
pool of workers so that they overlap with each other and with the next pods' filter calls, as
the binding cycle's goroutines do. Failed attempts go to a backoff queue and are retried a
bounded number of times.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import importlib.util
import itertools
import random
import sys
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import orjson

from loadtest import wire
from loadtest.http import HttpxPoster, Poster
from loadtest.stats import LatencyLog
from loadtest.wire import Obj, ProtocolError

# httpcore imports sniffio on every request. Without sniffio installed, each failed import
# rescans sys.path: about 2.5 ms of load-generator CPU per scheduled pod, as much as the
# server's own work. A None entry in sys.modules makes that import fail at once.
if importlib.util.find_spec("sniffio") is None:
    sys.modules.setdefault("sniffio", None)

MIN_FEASIBLE_NODES = 100  # upstream minFeasibleNodesToFind
MIN_FEASIBLE_PERCENTAGE = 5
BASE_PERCENTAGE = 50
EXTENDER_MAX_PRIORITY = 10


def nodes_to_find(total: int, percentage: int = 0) -> int:
    """How many feasible nodes the scheduler looks for (percentageOfNodesToScore; 0 = adaptive)."""
    if total < MIN_FEASIBLE_NODES or percentage >= 100:
        return total
    if percentage <= 0:
        percentage = max(MIN_FEASIBLE_PERCENTAGE, BASE_PERCENTAGE - total // 125)
    return min(total, max(MIN_FEASIBLE_NODES, total * percentage // 100))


class CandidateSampler:
    """Consecutive windows of the node list, each starting where the previous one ended.

    The in-tree filters pass every node in these workloads, so the scheduler stops after exactly
    `count` nodes and the next pod starts at the following node.
    """

    def __init__(self, node_names: list[str], count: int) -> None:
        if not node_names:
            raise ValueError("no nodes to schedule on")
        if count < 1:
            raise ValueError(f"candidate count must be >= 1, got {count}")
        self.names = node_names
        self.count = min(count, len(node_names))
        self.start = 0

    def next(self) -> list[str]:
        n = len(self.names)
        end = self.start + self.count
        window = self.names[self.start : end]
        if end > n:
            window += self.names[: end - n]
        self.start = end % n
        return window


@dataclass(frozen=True)
class DriverConfig:
    candidates: int | None = None  # None: the percentageOfNodesToScore rule
    percentage: int = 0
    bind_concurrency: int = 16
    max_attempts: int = 20  # each try sees one window of nodes, which may miss the one that fits
    backoff_initial: float = 0.05  # kube-scheduler uses 1s..10s; shorter keeps runs short
    backoff_max: float = 1.0
    prioritize_weight: int = 1
    seed: int = 1


@dataclass
class PendingPod:
    pod: Obj
    pod_json: bytes
    attempts: int = 0
    last_reason: str = ""

    @property
    def key(self) -> tuple[str, str]:
        meta = self.pod["metadata"]
        return meta["namespace"], meta["name"]


BoundCallback = Callable[[PendingPod, str], None]


@dataclass
class SchedulerDriver:
    client: httpx.AsyncClient
    node_names: list[str]
    config: DriverConfig
    log: LatencyLog = field(default_factory=LatencyLog)
    on_bound: BoundCallback | None = None
    # The scheduling verbs go through this; None: through `client` (churn's calls always do).
    poster: Poster | None = None

    def __post_init__(self) -> None:
        self.verbs: Poster = self.poster or HttpxPoster(self.client)
        count = self.config.candidates or nodes_to_find(len(self.node_names), self.config.percentage)
        self.sampler = CandidateSampler(self.node_names, count)
        self.rng = random.Random(self.config.seed)
        self.t0 = time.perf_counter()
        self.active: deque[PendingPod] = deque()
        self.backoff: list[tuple[float, int, PendingPod]] = []
        self.seq = itertools.count()
        self.binds: asyncio.Queue[tuple[PendingPod, str]] = asyncio.Queue()
        self.binds_pending = 0
        self.wakeup = asyncio.Event()
        self.open_sources = 0
        self.bound: dict[tuple[str, str], str] = {}
        self.bound_at: list[float] = []
        self.unschedulable: dict[tuple[str, str], str] = {}
        # Every failed attempt by kind, retried or not: a bound pod may hide several of them.
        self.failures: dict[str, list[str]] = defaultdict(list)

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def submit(self, pod: Obj) -> None:
        self.active.append(PendingPod(pod, orjson.dumps(wire.informer_pod(pod))))
        self.wakeup.set()

    def open_source(self) -> None:
        """Keep run() going while a producer may still submit pods."""
        self.open_sources += 1

    def close_source(self) -> None:
        self.open_sources -= 1
        self.wakeup.set()

    async def run(self) -> None:
        workers = [asyncio.create_task(self._bind_worker()) for _ in range(self.config.bind_concurrency)]
        try:
            await self._schedule_loop()
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def _schedule_loop(self) -> None:
        while True:
            now = self.now()
            while self.backoff and self.backoff[0][0] <= now:
                self.active.append(heapq.heappop(self.backoff)[2])
            if self.active:
                await self._schedule_one(self.active.popleft())
                continue
            if not self.backoff and not self.binds_pending and not self.open_sources:
                return
            timeout = self.backoff[0][0] - now if self.backoff else None
            self.wakeup.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wakeup.wait(), timeout)

    async def _call(self, verb: str, body: bytes) -> object:
        started = time.perf_counter()
        ok = False
        try:
            try:
                status, content = await self.verbs.post(f"/{verb}", body)
            except ProtocolError as e:
                raise ProtocolError(f"{verb}: {e}") from None
            reply = wire.decode(status, content)
            ok = True
            return reply
        finally:
            self.log.record(verb, started - self.t0, time.perf_counter() - started, ok)

    async def _schedule_one(self, pending: PendingPod) -> None:
        candidates = self.sampler.next()
        try:
            reply = await self._call("filter", wire.extender_args(pending.pod_json, candidates))
            feasible, reasons = wire.filter_result(reply, candidates)
        except ProtocolError as e:
            self.failures["filter error"].append(str(e))
            self._retry(pending, f"scheduler error: {e}")
            return
        if not feasible:
            sample = next(iter(reasons.values()), "no reason given")
            self.failures["no feasible node"].append(sample)
            self._retry(pending, f"0/{len(candidates)} nodes available: {sample}")
            return
        node = feasible[0] if len(feasible) == 1 else await self._pick(pending, feasible)
        self.binds_pending += 1
        self.binds.put_nowait((pending, node))

    async def _pick(self, pending: PendingPod, feasible: list[str]) -> str:
        """Highest weighted extender score; a failed prioritize counts as no scores (§4.2)."""
        try:
            reply = await self._call("prioritize", wire.extender_args(pending.pod_json, feasible))
            scores = wire.prioritize_result(reply, feasible)
        except ProtocolError:
            scores = {}
        totals = {n: scores.get(n, 0) * self.config.prioritize_weight * 10 for n in feasible}
        best = max(totals.values())
        return self.rng.choice([n for n in feasible if totals[n] == best])

    async def _bind_worker(self) -> None:
        while True:
            pending, node = await self.binds.get()
            try:
                reply = await self._call("bind", wire.binding_args(pending.pod, node))
                wire.bind_result(reply)
            except ProtocolError as e:
                self.failures["bind failed"].append(str(e))
                self._retry(pending, f"bind on {node} failed: {e}")
            else:
                self.bound[pending.key] = node
                self.bound_at.append(self.now())
                if self.on_bound is not None:
                    self.on_bound(pending, node)
            finally:
                self.binds_pending -= 1
                self.wakeup.set()

    def _retry(self, pending: PendingPod, reason: str) -> None:
        pending.attempts += 1
        pending.last_reason = reason
        if pending.attempts >= self.config.max_attempts:
            self.unschedulable[pending.key] = reason
            return
        delay = min(self.config.backoff_initial * 2 ** (pending.attempts - 1), self.config.backoff_max)
        heapq.heappush(self.backoff, (self.now() + delay, next(self.seq), pending))
        self.wakeup.set()
