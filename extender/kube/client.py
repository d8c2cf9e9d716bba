"""Raw-JSON access to the Kubernetes API through the official client's ApiClient.

The ``kubernetes`` package handles configuration, auth (tokens, exec plugins, in-cluster token
refresh) and TLS well, but turning every object into generated model classes costs more than the
request itself for large lists. We therefore use its ApiClient only to build and send requests and
read the raw bytes back, so callers get plain API JSON dicts (what the state cache parses once).
All calls block; async callers run them in threads.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

import kubernetes
import orjson
import urllib3

from extender.metrics import Metrics

log = logging.getLogger(__name__)

JSON = "application/json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"


class KubeApiError(Exception):
    """A non-2xx answer (``status`` is the HTTP code) or a transport failure (``status`` 0)."""

    def __init__(self, status: int, message: str, reason: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}" if reason else f"{status}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> kubernetes.client.ApiClient:
    """An ApiClient for ``kubeconfig``; without one, in-cluster config, then the default kubeconfig."""
    configuration = kubernetes.client.Configuration()
    if kubeconfig:
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context,
                                           client_configuration=configuration)
    else:
        try:
            kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration)
        except kubernetes.config.ConfigException:
            kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            context=context, client_configuration=configuration)
    return kubernetes.client.ApiClient(configuration)


class RawClient:
    """Requests by path; bodies in and out are plain dicts."""

    def __init__(self, api_client: kubernetes.client.ApiClient, request_timeout: float = 30.0,
                 metrics: Metrics | None = None) -> None:
        self.api_client = api_client
        self.request_timeout = request_timeout
        self._metrics = metrics
        # One request per call: urllib3's default re-sends a PUT whose reply timed out up to three
        # times, unseen by our retry loops, so an abandoned write could outlive its bind by minutes.
        # Every caller has its own retry policy (bounded by its deadline) instead.
        pool = getattr(getattr(api_client, "rest_client", None), "pool_manager", None)
        if pool is not None:
            pool.connection_pool_kw["retries"] = False
            pool.clear()

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None,
                body: dict[str, Any] | None = None, content_type: str = JSON,
                timeout: float | None = None) -> dict[str, Any]:
        # kubernetes.client sends the method upper-cased; the metrics and messages name it so too.
        method = method.upper()
        started = time.perf_counter()
        code = "error"
        try:
            response = self._send(method, path, query, body, content_type, timeout or self.request_timeout)
            try:
                data = response.read()
            except urllib3.exceptions.HTTPError as exc:
                raise KubeApiError(0, f"{method} {path}: reading the response failed: {exc}") from exc
            finally:
                response.release_conn()
            code = str(response.status)
        finally:
            self._count(method, path, code, started)
        if not 200 <= response.status < 300:
            raise _error(response.status, data, method, path)
        try:
            result = orjson.loads(data) if data else {}
        except orjson.JSONDecodeError as exc:
            raise KubeApiError(response.status, f"{method} {path}: response is not JSON: {exc}") from exc
        if not isinstance(result, dict):
            raise KubeApiError(response.status, f"{method} {path}: response is not a JSON object")
        return result

    def server_version(self, timeout: float | None = None) -> str:
        """The API server's version as ``/version`` reports it (gitVersion, e.g. "v1.35.2")."""
        info = self.request("GET", "/version", timeout=timeout)
        version = info.get("gitVersion")
        if isinstance(version, str) and version:
            return version
        major, minor = info.get("major"), info.get("minor")
        if isinstance(major, str) and isinstance(minor, str):
            return f"{major}.{minor}"
        raise KubeApiError(0, f"GET /version: no gitVersion or major/minor in {str(info)[:200]}")

    def serves(self, group: str, version: str, plural: str) -> bool:
        """Whether the API server serves ``plural`` at ``group/version`` (its discovery document)."""
        try:
            resources = self.request("GET", f"/apis/{group}/{version}").get("resources")
        except KubeApiError as exc:
            if exc.not_found:
                return False
            raise
        return isinstance(resources, list) and any(
            isinstance(r, dict) and r.get("name") == plural for r in resources
        )

    def watch(self, path: str, query: dict[str, Any], read_timeout: float) -> WatchStream:
        """Open a watch; the stream yields decoded events until the server ends it."""
        query = {**query, "watch": "true"}
        started = time.perf_counter()
        code = "error"
        try:
            response = self._send("GET", path, query, None, JSON, (10.0, read_timeout))
            code = str(response.status)
        finally:
            self._count("WATCH", path, code, started)
        if response.status != 200:
            data = response.read()
            response.release_conn()
            raise _error(response.status, data, "WATCH", path)
        return WatchStream(response, path)

    def _count(self, method: str, path: str, code: str, started: float) -> None:
        if self._metrics is not None:
            verb, resource = api_verb_and_resource(method, path)
            self._metrics.api_request(verb, resource, code, time.perf_counter() - started)

    def _send(self, method: str, path: str, query: dict[str, Any] | None, body: dict[str, Any] | None,
              content_type: str, timeout: float | tuple[float, float]) -> urllib3.HTTPResponse:
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        _, url, headers, serialized, _ = self.api_client.param_serialize(
            method, path, query_params=[(k, v) for k, v in (query or {}).items()],
            header_params=headers, body=body, auth_settings=["BearerToken"])
        try:
            rest_response = self.api_client.call_api(method, url, header_params=headers, body=serialized,
                                                     _request_timeout=timeout)
        except (urllib3.exceptions.HTTPError, kubernetes.client.ApiException, OSError) as exc:
            raise KubeApiError(0, f"{method} {path}: {exc}") from exc
        response: urllib3.HTTPResponse = rest_response.response  # not yet read
        return response


class WatchStream:
    """Iterates watch events of one open watch response; ``close`` unblocks a reader in another thread."""

    def __init__(self, response: urllib3.HTTPResponse, path: str) -> None:
        self._response = response
        self._path = path
        self._closed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        buffer = b""
        try:
            for chunk in self._response.stream(amt=65536, decode_content=True):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield self._decode(line)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeApiError(0, f"watch {self._path} broke: {exc}") from exc
        finally:
            self.close()
        if buffer.strip():
            yield self._decode(buffer)

    def _decode(self, line: bytes) -> dict[str, Any]:
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise KubeApiError(0, f"watch {self._path}: undecodable event: {exc}") from exc
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict) or "type" not in event:
            raise KubeApiError(0, f"watch {self._path}: malformed event {line[:200]!r}")
        return event

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # shutdown() wakes a reader blocked in another thread (urllib3 >= 2.3; older ones wait for the
        # read timeout). The connection is closed, not pooled: it may still hold unread events.
        with contextlib.suppress(AttributeError, OSError, RuntimeError, ValueError):
            self._response.shutdown()
        self._response.close()
        self._response.release_conn()


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete", "WATCH": "watch"}


def api_verb_and_resource(method: str, path: str) -> tuple[str, str]:
    """The API server's names for a request: ("get", "pods"), ("create", "pods/binding"), ...

    Paths are /api/v1/... or /apis/GROUP/VERSION/..., then optionally namespaces/NAMESPACE/,
    then RESOURCE[/NAME[/SUBRESOURCE]]; a GET without a NAME is a list.
    """
    parts = path.strip("/").split("/")
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if len(rest) > 2 and rest[0] == "namespaces":
        rest = rest[2:]
    resource = "/".join(rest[0:3:2])  # RESOURCE, and /SUBRESOURCE when there is one
    if method == "GET":
        return ("get" if len(rest) > 1 else "list"), resource
    return _VERBS.get(method, method.lower()), resource


def _error(status: int, data: bytes, method: str, path: str) -> KubeApiError:
    """Prefer the metav1.Status message the server sends over the bare HTTP reason."""
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError:
        payload = None
    if isinstance(payload, dict) and payload.get("kind") == "Status":
        return KubeApiError(status, str(payload.get("message", "")), str(payload.get("reason", "")))
    return KubeApiError(status, f"{method} {path}: {data[:200].decode(errors='replace')}")
