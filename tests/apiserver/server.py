"""An in-process HTTP API server that behaves like kube-apiserver for the resources the extender uses.

Real HTTP on 127.0.0.1 (a ThreadingHTTPServer in a daemon thread), so the real ``kubernetes``
client talks to it unchanged. Semantics live in :mod:`tests.apiserver.store`; this module maps
URLs and verbs onto them, streams watches (chunked JSON lines, bookmarks, 410 ERROR events)
and applies the fault knobs of :mod:`tests.apiserver.faults`.
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kubernetes
import yaml

from tests.apiserver.faults import Faults
from tests.apiserver.resources import BY_PLURAL, RESOURCE_TYPES, ResourceType
from tests.apiserver.store import ApiError, Store, WatchEvent

# A held request goes on by itself after this long, so a test that forgets to release it
# fails on its own assertions instead of hanging the suite.
HOLD_LIMIT_S = 30.0


@dataclass(frozen=True)
class Call:
    """One request as the server saw it, for tests that check which API calls were made."""

    method: str
    verb: str
    resource: str
    subresource: str | None
    namespace: str | None
    name: str | None
    query: dict[str, str]
    body: Any


@dataclass(frozen=True)
class _Route:
    rtype: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    api_version: str  # as requested: a resource served at another version shows that one


# kube-apiserver's release by default: the newest the extender's gate table knows.
DEFAULT_VERSION = "v1.37.0"


class ApiServer:
    def __init__(self, history_size: int = 1000, bookmark_interval: float = 1.0,
                 version: str = DEFAULT_VERSION, served: dict[str, tuple[str, ...]] | None = None,
                 port: int = 0) -> None:
        """``version`` is what ``/version`` reports (its gitVersion); ``served`` maps a resource's
        plural to the API versions it is served at instead of its own (an API that a release
        serves at an older version, or not at all: an empty tuple). ``port`` 0: any free one; a
        test that points a client at the server before it exists picks one (and a kubeconfig
        for it: ``write_kubeconfig``)."""
        self.version = version
        self.served = dict(served or {})
        self.store = Store(history_size)
        self.faults = Faults()
        self.bookmark_interval = bookmark_interval
        self.calls: list[Call] = []
        self._calls_lock = threading.Lock()
        self._stopped = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.api = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="test-apiserver", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def stopping(self) -> bool:
        return self._stopped.is_set()

    def pause(self, seconds: float | threading.Event) -> None:
        """Wait ``seconds`` (or for the event, at most HOLD_LIMIT_S); cut short when the server stops."""
        if isinstance(seconds, threading.Event):
            seconds.wait(HOLD_LIMIT_S)
        elif seconds:
            self._stopped.wait(seconds)

    def start(self) -> ApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving. Requests still kept waiting by a fault are dropped, not carried out."""
        self._stopped.set()
        self.faults.release_holds()
        with self.store.cond:
            self.store.cond.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def api_client(self, retries: int | None = None) -> kubernetes.client.ApiClient:
        """A client of this server. ``retries`` is urllib3's: by default it sends a GET, PUT or
        DELETE again, unnoticed by the caller, when the connection breaks or the reply times out."""
        configuration = kubernetes.client.Configuration(host=self.url)
        configuration.retries = retries
        return kubernetes.client.ApiClient(configuration)

    def write_kubeconfig(self, path: str) -> None:
        write_kubeconfig(path, self.url)

    def cut_watches(self, resource: str | None = None) -> None:
        """End open watch streams (of one resource plural, or all) abruptly, before any later event."""
        with self.store.cond:
            self.faults.cut_watches(resource)
            self.store.cond.notify_all()

    def lag_watches(self, *resources: str, max_lag: float | None = None) -> None:
        """From now on, hold back watch events of ``resources`` (plurals) until the test releases
        them (``release_watch_events``) or, with ``max_lag``, until they are that many seconds old.

        Events go out in order, so one held back also holds back every later one of its stream;
        streams of other resources are not affected. A list is never held back.
        """
        with self.store.cond:
            self.faults.lag_watches(resources, self.store.resource_version, max_lag)

    def release_watch_events(self, count: int | None = None) -> None:
        """Let the next ``count`` held-back watch events (all of them if None) go out."""
        with self.store.cond:
            lagging = self.faults.lagging()
            if lagging is None:
                return
            if count is None:
                rv = self.store.resource_version
            else:
                held = self.store.events_of(*lagging)[:count]
                rv = held[-1].rv if held else lagging[1]
            self.faults.release_watches(rv)
            self.store.cond.notify_all()

    def record(self, call: Call) -> None:
        with self._calls_lock:
            self.calls.append(call)

    def writes(self) -> list[Call]:
        """The mutating calls so far, in order."""
        with self._calls_lock:
            return [c for c in self.calls if c.verb in ("create", "update", "patch", "delete")]


def write_kubeconfig(path: str, url: str) -> None:
    """A kubeconfig for the API server at ``url`` (which need not be listening yet)."""
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": url}}],
        "users": [{"name": "test", "user": {"token": "test-token"}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
    }
    with open(path, "w") as f:
        yaml.safe_dump(config, f)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body leave in separate writes; with Nagle's algorithm on, the second one waits
    # for the client's delayed ACK (~40 ms on Linux) and every call took that long.
    disable_nagle_algorithm = True
    server: ThreadingHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet; the call log is the record."""

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    @property
    def api(self) -> ApiServer:
        return self.server.api  # type: ignore[attr-defined,no-any-return]

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            body = self._read_body()
            if method == "GET" and (info := _non_resource(url.path, self.api)) is not None:
                self._send_json(200, info)
                return
            route = _route(url.path, self.api.served)
            verb = _verb(method, route, query)
            self.api.record(Call(method, verb, route.rtype.plural, route.subresource, route.namespace,
                                 route.name, query, body))
            plan = self.api.faults.plan(verb, route.rtype.plural, route.subresource, body)
            self.api.pause(plan.wait)
            if self.api.stopping:
                self._drop()
                return
            if plan.land_after is not None and not plan.code:
                self._time_out(plan.land_after, method, verb, route, query, body)
                return
            code = plan.code or self.api.faults.take_failure(verb, route.rtype.plural, route.subresource)
            if code:
                raise ApiError(code, f"injected fault: {verb} {route.rtype.plural} -> {code}")
            if verb == "watch":
                self._watch(route, query)
                return
            status, result = self._execute(method, verb, route, query, body)
        except ApiError as exc:
            self._send_json(exc.code, exc.status())
            return
        self.api.pause(plan.reply_after)
        if plan.drop or self.api.stopping:
            self._drop()
            return
        self._send_json(status, result)

    def _time_out(self, land_after: float | threading.Event, method: str, verb: str, route: _Route,
                  query: dict[str, str], body: Any) -> None:
        """Answer 504 now, then carry the request out all the same (a refusal then goes unseen)."""
        data = json.dumps(ApiError(504, f"injected fault: {verb} {route.rtype.plural} timed out").status())
        with contextlib.suppress(OSError):
            self.send_response(504)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            # The client's next request must not queue behind this one on the same connection.
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data.encode())
            self.wfile.flush()
        self.close_connection = True
        self.api.pause(land_after)
        if not self.api.stopping:
            with contextlib.suppress(ApiError):
                self._execute(method, verb, route, query, body)

    def _drop(self) -> None:
        """Close the connection without an answer."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if not length:
            return None
        try:
            return json.loads(self.rfile.read(length))
        except ValueError as exc:
            raise ApiError(400, f"invalid JSON body: {exc}") from exc

    def _execute(self, method: str, verb: str, route: _Route, query: dict[str, str],
                 body: Any) -> tuple[int, Any]:
        store, rtype, ns = self.api.store, route.rtype, route.namespace or ""
        if verb in ("create", "update", "patch") and not isinstance(body, dict):
            raise ApiError(400, f"{verb} needs a JSON object body")
        if verb == "get":
            return 200, _as_version(store.get(rtype, ns, route.name or ""), route)
        if verb == "list":
            return 200, self._list(route, query)
        if verb == "create" and route.subresource == "eviction":
            if rtype.kind != "Pod":
                raise ApiError(404, f"{rtype.plural} has no eviction subresource")
            store.evict(rtype, ns, route.name or "", body)
            return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                         "code": 201}
        if verb == "create" and route.subresource == "binding":
            if rtype.kind != "Pod":
                raise ApiError(404, f"{rtype.plural} has no binding subresource")
            store.bind(rtype, ns, route.name or "", body)
            return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                         "code": 201}
        if verb == "create":
            return 201, store.create(rtype, ns, body)
        if verb == "update":
            return 200, store.update(rtype, ns, route.name or "", body, route.subresource)
        if verb == "patch":
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            return 200, store.patch(rtype, ns, route.name or "", body, content_type, route.subresource)
        if verb == "delete":
            options = body if isinstance(body, dict) else {}
            # As kube-apiserver decodes the body: a kind or apiVersion it names must be DeleteOptions'.
            if options.get("kind", "DeleteOptions") != "DeleteOptions" or options.get(
                "apiVersion", "v1"
            ) not in ("v1", "meta.k8s.io/v1"):
                raise ApiError(400, f"the body of a DELETE is no DeleteOptions: {options.get('kind')} "
                                    f"{options.get('apiVersion')}")
            return 200, store.delete(rtype, ns, route.name or "", options.get("preconditions"))
        raise ApiError(405, f"{method} is not supported here", "MethodNotAllowed")

    def _list(self, route: _Route, query: dict[str, str]) -> dict[str, Any]:
        rtype = route.rtype
        token = query.get("continue")
        offset, token_rv = 0, None
        if token:
            offset_text, _, rv_text = token.partition(":")
            offset, token_rv = int(offset_text), int(rv_text)
        limit = int(query.get("limit") or 0)
        items, rv, total = self.api.store.page(rtype, route.namespace, offset, limit)
        rv = rv if token_rv is None else token_rv
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if limit and offset + limit < total:
            meta["continue"] = f"{offset + limit}:{rv}"
            meta["remainingItemCount"] = total - offset - limit
        for item in items:
            item.pop("kind", None)
            item.pop("apiVersion", None)
        return {"kind": f"{rtype.kind}List", "apiVersion": route.api_version, "metadata": meta,
                "items": items}

    def _watch(self, route: _Route, query: dict[str, str]) -> None:
        rtype, store, api = route.rtype, self.api.store, self.api
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        deadline = time.monotonic() + int(query.get("timeoutSeconds") or 1800)
        epoch = api.faults.cut_epoch(rtype.plural)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        requested = query.get("resourceVersion") or "0"
        try:
            if api.faults.take_gone(rtype.plural):
                raise ApiError(410, f"too old resource version: {requested} (injected)", "Expired")
            with store.cond:
                if requested == "0":
                    items, last_rv = store.list(rtype, route.namespace)
                    pending = [WatchEvent(last_rv, rtype, "ADDED", o) for o in items]
                else:
                    last_rv = int(requested)
                    pending, _ = self._released(store.events_after(rtype, last_rv, route.namespace))
            next_bookmark = time.monotonic() + api.bookmark_interval
            while True:
                for event in pending:
                    self._chunk({"type": event.type, "object": _as_version(event.obj, route)})
                    last_rv = max(last_rv, event.rv)
                now = time.monotonic()
                if api.stopping or now >= deadline:
                    break
                bookmark_rv = None
                # The cut check shares the critical section with event collection, so no event written
                # after cut_watches() returns can still leave through this stream.
                with store.cond:
                    cut = api.faults.cut_epoch(rtype.plural) != epoch
                    if not cut:
                        pending, due = self._released(store.events_after(rtype, last_rv, route.namespace))
                        if not pending:
                            store.cond.wait(0.1 if due is None else min(0.1, due))
                            cut = api.faults.cut_epoch(rtype.plural) != epoch
                            pending, due = ([], None) if cut else self._released(
                                store.events_after(rtype, last_rv, route.namespace))
                        # A bookmark would move the client past the events held back.
                        if not pending and due is None and bookmarks and now >= next_bookmark:
                            bookmark_rv = store.resource_version
                if cut:
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if bookmark_rv is not None:
                    last_rv = bookmark_rv
                    next_bookmark = now + api.bookmark_interval
                    self._chunk({"type": "BOOKMARK", "object": {
                        "kind": rtype.kind, "apiVersion": route.api_version,
                        "metadata": {"resourceVersion": str(bookmark_rv)}}})
            self._end_chunks()
        except ApiError as exc:
            with contextlib.suppress(OSError):
                self._chunk({"type": "ERROR", "object": exc.status()})
                self._end_chunks()
        except OSError:
            self.close_connection = True  # the client went away

    def _released(self, events: list[WatchEvent]) -> tuple[list[WatchEvent], float | None]:
        """The events a lagging watch lets out now (a prefix of ``events``), and the seconds until
        the first one held back may go out by itself (inf: when released; None: none held back)."""
        lag = self.api.faults.watch_lag(events[0].rtype.plural) if events else None
        if lag is None:
            return events, None
        released_rv, max_lag = lag
        now = time.monotonic()
        for i, event in enumerate(events):
            if event.rv > released_rv and (max_lag is None or now - event.at < max_lag):
                return events[:i], math.inf if max_lag is None else max(0.001, event.at + max_lag - now)
        return events, None

    def _end_chunks(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, event: dict[str, Any]) -> None:
        data = json.dumps(event).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _send_json(self, code: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True


def _as_version(obj: dict[str, Any], route: _Route) -> dict[str, Any]:
    """The object as the requested API version shows it (the store keeps one version)."""
    if "apiVersion" not in obj or obj["apiVersion"] == route.api_version:
        return obj
    return {**obj, "apiVersion": route.api_version}


def _versions(rtype: ResourceType, served: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    return served.get(rtype.plural, (rtype.version,))


def _non_resource(path: str, api: ApiServer) -> dict[str, Any] | None:
    """``/version`` and the discovery document of one group version (which resources it serves);
    None for any other path."""
    parts = [p for p in path.split("/") if p]
    if parts == ["version"]:
        major, minor = api.version.removeprefix("v").split(".")[:2]
        return {"major": major, "minor": minor, "gitVersion": api.version, "gitCommit": "0" * 40,
                "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.25",
                "compiler": "gc", "platform": "linux/amd64"}
    if (len(parts) == 3 and parts[0] == "apis") or parts == ["api", "v1"]:
        group, version = ("", "v1") if parts[0] == "api" else (parts[1], parts[2])
        verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
        resources = [{"name": t.plural, "singularName": t.kind.lower(), "namespaced": t.namespaced,
                      "kind": t.kind, "verbs": verbs}
                     for t in RESOURCE_TYPES if t.group == group and version in _versions(t, api.served)]
        if not resources:
            raise ApiError(404, f"the server could not find the requested resource {path}")
        group_version = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
                "resources": resources}
    return None


def _route(path: str, served: dict[str, tuple[str, ...]]) -> _Route:
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise ApiError(404, f"the server could not find the requested resource {path}")
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    rtype = BY_PLURAL.get((group, rest[0])) if rest else None
    if rtype is not None and version not in _versions(rtype, served):
        rtype = None
    if rtype is None or len(rest) > 3 or (namespace is not None and not rtype.namespaced):
        raise ApiError(404, f"the server could not find the requested resource {path}")
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    if rtype.namespaced and name is not None and namespace is None:
        raise ApiError(404, f"namespaced resource {rtype.plural} needs a namespace in {path}")
    return _Route(rtype, namespace, name, subresource, f"{group}/{version}" if group else version)


def _verb(method: str, route: _Route, query: dict[str, str]) -> str:
    if method == "GET":
        if route.name is not None:
            return "get"
        return "watch" if query.get("watch") in ("true", "1") else "list"
    verbs = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
    if method not in verbs:
        raise ApiError(405, f"{method} is not supported", "MethodNotAllowed")
    if method == "POST" and route.name is not None and route.subresource not in ("binding", "eviction"):
        raise ApiError(405, f"POST {route.rtype.plural}/{route.name} is not allowed", "MethodNotAllowed")
    return verbs[method]
