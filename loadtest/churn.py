"""Steady-state churn: pods created through /local/apply and deleted through /local/delete.

Every churn pod that gets bound lets the oldest live pod go, so the cluster stays at the fill
level the warm-up reached while the extender keeps allocating and releasing devices.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque

import httpx
import orjson

from loadtest.driver import PendingPod, SchedulerDriver
from loadtest.wire import Obj

SETTLE_POLL_SECONDS = 0.05  # also catches churn pods the driver gives up on (no callback for those)


class Churn:
    def __init__(self, driver: SchedulerDriver, window: int = 32, batch: int = 8) -> None:
        if window < 1 or batch < 1:
            raise ValueError("churn window and batch must be >= 1")
        self.driver = driver
        self.client: httpx.AsyncClient = driver.client
        self.window = window
        self.batch = batch
        self.live: deque[tuple[str, str]] = deque(driver.bound)
        self.churn_keys: set[tuple[str, str]] = set()
        self.churn_bound = 0
        self.deleted: set[tuple[str, str]] = set()
        self.errors: list[str] = []
        self.deletions: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self.settled = asyncio.Event()
        driver.on_bound = self._on_bound

    def _on_bound(self, pending: PendingPod, node: str) -> None:
        self.live.append(pending.key)
        if pending.key in self.churn_keys:
            self.churn_bound += 1
            self.deletions.put_nowait(self.live.popleft())
            self.settled.set()

    def _in_flight(self) -> int:
        given_up = sum(1 for k in self.driver.unschedulable if k in self.churn_keys)
        return len(self.churn_keys) - self.churn_bound - given_up

    async def _post(self, verb: str, path: str, body: object) -> bool:
        started = time.perf_counter()
        ok = False
        try:
            response = await self.client.post(
                path, content=orjson.dumps(body), headers={"Content-Type": "application/json"}
            )
            ok = response.status_code == 200
            if not ok:
                self.errors.append(f"{path}: HTTP {response.status_code}: {response.text[:200]}")
        except httpx.HTTPError as e:
            self.errors.append(f"{path}: {type(e).__name__}: {e}")
        finally:
            self.driver.log.record(verb, started - self.driver.t0, time.perf_counter() - started, ok)
        return ok

    async def run(self, pods: list[Obj]) -> None:
        """Create `pods` while the driver schedules them, then wait for every deletion."""
        self.driver.open_source()
        deleter = asyncio.create_task(self._delete_loop())
        try:
            await asyncio.gather(self.driver.run(), self._produce(pods))
            await self.deletions.join()
        finally:
            deleter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await deleter

    async def _produce(self, pods: list[Obj]) -> None:
        try:
            for i in range(0, len(pods), self.batch):
                while self._in_flight() >= self.window:
                    self.settled.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.settled.wait(), SETTLE_POLL_SECONDS)
                batch = pods[i : i + self.batch]
                if not await self._post("apply", "/local/apply", batch):
                    continue
                for pod in batch:
                    self.churn_keys.add((pod["metadata"]["namespace"], pod["metadata"]["name"]))
                    self.driver.submit(pod)
        finally:
            self.driver.close_source()

    async def _delete_loop(self) -> None:
        while True:
            namespace, name = await self.deletions.get()
            try:
                body = {"kind": "Pod", "namespace": namespace, "name": name}
                if await self._post("delete", "/local/delete", body):
                    self.deleted.add((namespace, name))
            finally:
                self.deletions.task_done()
