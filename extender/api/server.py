"""Puts the app on sockets: the main listener (HTTP or HTTPS) and an optional plain probe port.

With a client CA every TLS connection must show a certificate, which kubelet's probes cannot.
The probe port serves the same app without TLS but answers only the probe paths, so nothing
that schedules or reveals the cluster is reachable there. Its callers (kubelet, Prometheus) are
outside the pod, so it listens on every interface even when the main listener keeps to the
loopback, as it does beside kube-scheduler in one pod (docs/deploy.md).

Both listeners read requests under deadlines and share one connection limit
(``extender.api.connections``), so idle or slow clients cannot pin the server.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import uvicorn

from extender.api.connections import (
    BACKLOG,
    ConnectionLimits,
    ConnectionPool,
    descriptor_budget,
    protocol_class,
)
from extender.api.tls import ReloadingTLS

log = logging.getLogger(__name__)

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


def probe_host(host: str) -> str:
    """Where the probe port listens: every interface, of the main listener's address family."""
    return "::" if ":" in host else "0.0.0.0"


def servers(
    app: ASGIApp,
    host: str,
    port: int,
    *,
    tls: ReloadingTLS | None = None,
    probe_port: int = 0,
    log_level: str = "info",
    limits: ConnectionLimits | None = None,
    parser: str = "auto",
) -> list[uvicorn.Server]:
    """The main server first (it runs the app's lifespan), then the probe server if asked for.

    ``limits`` hold for both listeners together: one pool, as they share the descriptor table.
    TLS goes to the connections, not to uvicorn, so that the handshake counts against their
    deadlines; uvicorn's start-up line therefore says http:// for the HTTPS port, and the line
    logged here says what is served. ``parser`` picks uvicorn's parser ("auto": httptools
    when installed, else h11); tests use it to cover both.
    """
    limits = limits or ConnectionLimits()
    pool = ConnectionPool(descriptor_budget(limits.max_connections, listeners=2 if probe_port else 1))

    def config(
        app_: ASGIApp, port_: int, tls_: ReloadingTLS | None, host: str = host, **kwargs: Any
    ) -> uvicorn.Config:
        context, clients = (tls_.context, tls_.clients) if tls_ is not None else (None, None)
        return uvicorn.Config(
            app_,
            host=host,
            port=port_,
            log_level=log_level,
            log_config=None,  # uvicorn's records go to the root handler (extender.logs), not its own
            access_log=False,
            http=protocol_class(pool, limits, context, parser, clients),
            # Nothing here reads the client's address or the scheme that X-Forwarded-* would
            # rewrite, and the middleware that rewrites them cost 2% of a pod's CPU.
            proxy_headers=False,
            ws="none",  # an upgraded connection would leave the pool's sight; nothing here uses one
            backlog=BACKLOG,
            # uvicorn's own idle timer, in whole seconds, backs up the connections' exact one.
            timeout_keep_alive=math.ceil(limits.keepalive_timeout),
            # h11 would refuse headers past 16 KiB with a 400; the connections' own limit, the
            # same for both parsers, answers 431 first.
            h11_max_incomplete_event_size=2 * limits.max_header_bytes,
            **kwargs,
        )

    out = [uvicorn.Server(config(app, port, tls))]
    if probe_port:
        out.append(
            uvicorn.Server(config(probes_only(app), probe_port, None, lifespan="off", host=probe_host(host)))
        )
    log.info(
        "serving %s on %s:%d%s; at most %d connections, header/body/keep-alive timeouts %g/%g/%g s",
        "HTTPS" if tls is not None else "HTTP", host, port,
        f" and the probes over HTTP on port {probe_port} of every interface" if probe_port else "",
        pool.limit, limits.header_timeout, limits.body_timeout, limits.keepalive_timeout,
    )
    return out


async def serve(servers_: list[uvicorn.Server]) -> None:
    """Run them together; when one stops (a signal, a failed bind of its port) the others follow."""
    tasks = [asyncio.create_task(server.serve()) for server in servers_]
    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for server in servers_:
        server.should_exit = True
    await asyncio.gather(*tasks)
