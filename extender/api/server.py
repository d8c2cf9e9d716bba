"""Puts the app on sockets: the main listener (HTTP or HTTPS) and an optional plain probe port.

With a client CA every TLS connection must show a certificate, which kubelet's probes cannot.
The probe port serves the same app without TLS but answers only the probe paths, so nothing
that schedules or reveals the cluster is reachable there.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn

from extender.api.tls import ReloadingTLS

PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})

ASGIApp = Any  # Starlette's ASGI callable; spelled loosely so both FastAPI and wrappers fit


def probes_only(app: ASGIApp) -> ASGIApp:
    """``app`` restricted to PROBE_PATHS; its lifespan belongs to the main listener."""

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] not in PROBE_PATHS:
            body = b'{"error":"only /healthz, /readyz and /metrics are served on the probe port"}'
            await send({"type": "http.response.start", "status": 404,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return guarded


def servers(
    app: ASGIApp,
    host: str,
    port: int,
    *,
    tls: ReloadingTLS | None = None,
    probe_port: int = 0,
    log_level: str = "info",
) -> list[uvicorn.Server]:
    """The main server first (it runs the app's lifespan), then the probe server if asked for."""
    main = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        ssl_context_factory=(lambda _config, _default: tls.context) if tls is not None else None,
    )
    out = [uvicorn.Server(main)]
    if probe_port:
        probe = uvicorn.Config(
            probes_only(app), host=host, port=probe_port, log_level=log_level, access_log=False,
            lifespan="off",
        )
        out.append(uvicorn.Server(probe))
    return out


async def serve(servers_: list[uvicorn.Server]) -> None:
    """Run them together; when one stops (a signal, a failed bind of its port) the others follow."""
    tasks = [asyncio.create_task(server.serve()) for server in servers_]
    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for server in servers_:
        server.should_exit = True
    await asyncio.gather(*tasks)
