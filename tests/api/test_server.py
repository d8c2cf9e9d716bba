"""What uvicorn hands the app: the request as the connection brought it."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from extender.api.server import servers
from tests.api.threaded import free_port, listening


async def _echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = orjson.dumps({"client": scope["client"][0], "scheme": scope["scheme"]})
    headers = [(b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def test_forwarded_headers_do_not_rewrite_the_client_or_the_scheme():
    # Nothing reads them, and uvicorn's rewriting (from a loopback peer, by default) cost a
    # share of every verb call: the app sees the connection's own peer and scheme.
    port = free_port()
    with listening(servers(_echo, "127.0.0.1", port, log_level="warning")):
        headers = {"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https"}
        seen = httpx.get(f"http://127.0.0.1:{port}/", headers=headers).json()
    assert seen == {"client": "127.0.0.1", "scheme": "http"}
