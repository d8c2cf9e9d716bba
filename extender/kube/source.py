"""Feeds the cluster state from a real API server: list + watch per resource kind (a reflector).

Each kind runs in its own thread with the blocking client; every change is handed to the asyncio
loop in arrival order through one queue, and applied there, so the state is only ever touched
from the loop thread. The cache never learns where its objects come from.

Per kind: list (paged), ``replace`` the cache's view of that kind, mark it synced the first time,
then watch from the list's resourceVersion with bookmarks. A watch that ends is resumed from the
last seen resourceVersion; 410 Gone (history compacted) means relist and reconcile; any other
failure backs off exponentially with jitter and resumes.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from extender.kube.client import KubeApiError, RawClient, load_api_client
from extender.metrics import Metrics
from extender.model.kinds import KINDS, Kind

log = logging.getLogger(__name__)


class StateSink(Protocol):
    """What the source needs of the cluster state (see extender.state)."""

    def apply(self, kind: str, obj: dict[str, Any]) -> Any: ...
    def delete(self, kind: str, obj: dict[str, Any]) -> Any: ...
    def replace(self, kind: str, objs: list[dict[str, Any]]) -> Any: ...
    def mark_synced(self, kind: str) -> Any: ...


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter between ``initial`` and ``cap`` seconds (like client-go's)."""

    initial: float = 0.8
    cap: float = 30.0
    factor: float = 2.0

    def delay(self, failures: int) -> float:
        ceiling = min(self.cap, self.initial * self.factor ** max(0, failures - 1))
        return random.uniform(ceiling / 2, ceiling)


class _Gone(Exception):
    """The watch's resourceVersion is too old; only a relist can continue."""


@dataclass
class _Cursor:
    """Where a kind's reflector resumes; advanced per event so a broken stream keeps its progress."""

    resource_version: str | None = None


class KubeSource:
    def __init__(self, client: RawClient, state: StateSink, *, kinds: tuple[Kind[Any], ...] = KINDS,
                 page_size: int = 500, watch_timeout: int = 300, backoff: Backoff | None = None,
                 unserved_retry_s: float = 300.0, metrics: Metrics | None = None) -> None:
        self._client = client
        self._metrics = metrics
        self._state = state
        self._kinds = kinds
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._backoff = backoff or Backoff()
        self._unserved_retry_s = unserved_retry_s
        self._stop = threading.Event()
        self._streams: dict[str, Any] = {}
        self._streams_lock = threading.Lock()
        self._queue: asyncio.Queue[tuple[Callable[..., Any], tuple[Any, ...]]] | None = None

    async def run(self) -> None:
        """Run until cancelled."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[Callable[..., Any], tuple[Any, ...]]] = asyncio.Queue()
        self._queue = queue
        threads = [threading.Thread(target=self._reflect, args=(kind, loop), name=f"watch-{kind.name}",
                                    daemon=True) for kind in self._kinds]
        for thread in threads:
            thread.start()
        try:
            while True:
                method, args = await queue.get()
                try:
                    result = method(*args)
                    if inspect.isawaitable(result):
                        await result
                except ValueError as exc:
                    # A malformed object is the cluster's to fix, not a bug of ours: skipped and
                    # named (the state's message says which object and field), the feed goes on.
                    log.warning("state refused %s(%s): %s", method.__name__, args[0], exc)
                except Exception:
                    log.exception("state failed %s(%s)", method.__name__, args[0])
        finally:
            self.stop()

    def stop(self) -> None:
        self._stop.set()
        with self._streams_lock:
            for stream in self._streams.values():
                stream.close()

    # ----- per-kind reflector thread ---------------------------------------------------------

    def _reflect(self, kind: Kind[Any], loop: asyncio.AbstractEventLoop) -> None:
        def emit(method: Callable[..., Any], *args: Any) -> None:
            assert self._queue is not None
            loop.call_soon_threadsafe(self._queue.put_nowait, (method, args))

        cursor = _Cursor()
        synced = False
        failures = 0
        served = kind
        restart = None  # why the last watch ended, counted when the next one is opened
        if self._metrics is not None:
            self._metrics.reflector_started(kind.name)
        while not self._stop.is_set():
            try:
                if self._metrics is not None and restart is not None:
                    self._metrics.watch_restarts.labels(kind.name, restart).inc()
                restart = "error"
                if cursor.resource_version is None:
                    if self._metrics is not None and synced:
                        self._metrics.relists.labels(kind.name).inc()
                    served = self._served(kind, served)
                    items, cursor.resource_version = self._list(served)
                    emit(self._state.replace, kind.name, items)
                    if not synced:
                        emit(self._state.mark_synced, kind.name)
                        synced = True
                    log.info("listed %d %s at resourceVersion %s", len(items), kind.name,
                             cursor.resource_version)
                self._watch(served, cursor, emit)
                restart = "ended"
                failures = 0
            except _Gone:
                log.info("%s watch expired (410); relisting", kind.name)
                restart = "expired"
                cursor.resource_version = None
            except Exception as exc:
                if self._stop.is_set() or loop.is_closed():
                    return
                if kind.optional and isinstance(exc, KubeApiError) and exc.not_found:
                    log.info("%s is not served by this cluster (%s); treating it as empty",
                             kind.name, kind.path)
                    cursor.resource_version = None
                    restart = None  # no watch was open: the list is retried, nothing restarts
                    emit(self._state.replace, kind.name, [])
                    if not synced:
                        emit(self._state.mark_synced, kind.name)
                        synced = True
                    self._stop.wait(self._unserved_retry_s)
                    continue
                if isinstance(exc, KubeApiError) and exc.gone:
                    cursor.resource_version = None
                failures += 1
                delay = self._backoff.delay(failures)
                log.warning("%s list/watch failed (%s); retrying in %.1fs", kind.name, exc, delay,
                            extra={"kind": kind.name, "failures": failures})
                self._stop.wait(delay)

    def _served(self, kind: Kind[Any], previous: Kind[Any]) -> Kind[Any]:
        """The version of ``kind`` to read: the newest the API server serves. Raises a 404
        KubeApiError when it serves none (for an optional kind: none of these objects).

        With older versions, each (re)list first asks the API server's discovery which version
        it serves, and reads the newest of them."""
        if not kind.older_versions:
            return kind
        versions = kind.versions
        for candidate in versions:
            group, _, version = candidate.api_version.rpartition("/")
            if self._client.serves(group, version, candidate.plural):
                if candidate != previous:
                    log.info("%s: reading %s, the newest version this cluster serves", kind.name,
                             candidate.api_version)
                return candidate
        raise KubeApiError(404, f"the cluster serves {kind.name} at none of "
                                f"{', '.join(k.api_version for k in versions)}")

    def _list(self, kind: Kind[Any]) -> tuple[list[dict[str, Any]], str]:
        items: list[dict[str, Any]] = []
        query: dict[str, Any] = {"limit": str(self._page_size)}
        while True:
            page = self._client.request("GET", kind.path, query=query)
            for item in page.get("items") or []:
                items.append(self._typed(kind, item))
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                if not meta.get("resourceVersion"):
                    raise KubeApiError(0, f"list {kind.path} returned no resourceVersion")
                return items, str(meta["resourceVersion"])
            query = {"limit": str(self._page_size), "continue": meta["continue"]}

    def _watch(self, kind: Kind[Any], cursor: _Cursor, emit: Callable[..., None]) -> None:
        """Follow one watch until the server ends it, advancing ``cursor``."""
        timeout = int(self._watch_timeout * random.uniform(1.0, 2.0))
        query = {"resourceVersion": cursor.resource_version, "allowWatchBookmarks": "true",
                 "timeoutSeconds": str(timeout)}
        stream = self._client.watch(kind.path, query, read_timeout=timeout + 30)
        with self._streams_lock:
            self._streams[kind.name] = stream
        try:
            if self._stop.is_set():
                return
            for event in stream:
                event_type, obj = event["type"], event["object"]
                if event_type == "ERROR":
                    if obj.get("code") == 410:
                        raise _Gone()
                    raise KubeApiError(int(obj.get("code") or 0), str(obj.get("message", "")),
                                       str(obj.get("reason", "")))
                new_version = (obj.get("metadata") or {}).get("resourceVersion")
                if not new_version:
                    raise KubeApiError(0, f"{kind.name} {event_type} event without resourceVersion")
                if event_type in ("ADDED", "MODIFIED"):
                    emit(self._state.apply, kind.name, self._typed(kind, obj))
                elif event_type == "DELETED":
                    emit(self._state.delete, kind.name, self._typed(kind, obj))
                elif event_type != "BOOKMARK":
                    raise KubeApiError(0, f"{kind.name} watch sent unknown event type {event_type!r}")
                cursor.resource_version = new_version
        finally:
            with self._streams_lock:
                self._streams.pop(kind.name, None)
            stream.close()

    @staticmethod
    def _typed(kind: Kind[Any], obj: dict[str, Any]) -> dict[str, Any]:
        # List items come without kind/apiVersion, watch objects with; give the state one shape.
        obj.setdefault("kind", kind.name)
        obj.setdefault("apiVersion", kind.api_version)
        return obj


async def run_kube_source(state: StateSink, *, kubeconfig: str | None = None, client: RawClient | None = None,
                          kinds: tuple[Kind[Any], ...] = KINDS, metrics: Metrics | None = None) -> None:
    """The ``--kube`` source: list+watch into ``state`` until cancelled."""
    if client is None:
        client = RawClient(load_api_client(kubeconfig), metrics=metrics)
    await KubeSource(client, state, kinds=kinds, metrics=metrics).run()
