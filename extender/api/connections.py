"""Connections that cannot pin the server: read deadlines, and a connection limit that evicts.

uvicorn waits as long as a client likes for a request. A connection that sends nothing, or
trickles its headers or its body, keeps its socket forever. A few hundred of them use up the
process's file descriptors, and then kube-scheduler cannot connect at all. uvicorn's keep-alive
timer starts only after a first response, and ``limit_concurrency`` acts only once a request's
headers are in, so neither helps. The protocol here is uvicorn's own plus one deadline per
connection, re-armed as the request moves along (``Phase``):

- a new connection must deliver its first request's headers within ``header_timeout`` of the
  accept, the TLS handshake included;
- between requests, a kept-alive connection is closed after ``keepalive_timeout`` of silence,
  and a request that has started must complete its headers within ``header_timeout``;
- the body must be complete within ``body_timeout`` of the headers, or the answer is a 408;
- while the app handles a request there is no deadline: the app keeps its own.

At most ``max_connections`` connections are open across the listeners, which share one
descriptor table. A new connection beyond that closes the connection that has waited longest
for its client: the oldest one without a complete request since its accept or its last
response. Refusing the newcomer instead would let idle or slowloris connections lock
kube-scheduler out. A connection whose request the app is answering is never closed for room;
only when every one is does the newcomer get refused, and that ends as the answers go out. An
attacker can still win by opening ``max_connections`` connections in the time a real client
needs to send its request, but that is a flood, which no per-connection rule stops.

The limit must fit in the descriptor limit, or accepting fails first (asyncio then stops
accepting for a second, uvloop closes every queued connection): ``descriptor_budget``.

TLS is started here, not by uvicorn, so a connection counts against the limit and its
deadline runs from the accept. Otherwise a client that connects and never says hello would hold
a descriptor, uncounted, for the event loop's 60 s handshake timeout. A client whose certificate
names are not allowed (``AllowedClients``) gets its request answered 403 instead of by the app,
and the connection closed.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import ssl
from asyncio.sslproto import SSLProtocol
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import h11
import orjson
from uvicorn.protocols.http.auto import AutoHTTPProtocol
from uvicorn.protocols.http.h11_impl import H11Protocol

from extender.api.tls import AllowedClients
from extender.config import ConfigError

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is optional for uvicorn; then "auto" is h11, and so are we
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

try:
    import resource
except ImportError:  # not on Windows: no descriptor limit to fit into
    resource = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

# Connections the kernel completes and queues for each listener until they are accepted: the
# classic SOMAXCONN, ample for kube-scheduler and the kubelet probes. All of a queue may be
# accepted in one go, before the protocol sees any of it, so its length is part of what the
# descriptor budget must hold: a longer queue would leave less room for open connections.
BACKLOG = 128
# Descriptors kept for everything but clients: the listeners, the event loop, watches and
# writes to the Kubernetes API, certificate reloads, logs.
RESERVED_DESCRIPTORS = 64
# However low the descriptor limit, this many client connections are allowed.
MIN_CONNECTIONS = 8

_REASON = b"request body not received in time"
REQUEST_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(_REASON), _REASON)
)


_HEADERS_REASON = b'{"error":"request headers too large"}'
HEADERS_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(_HEADERS_REASON), _HEADERS_REASON)
)


def forbidden(reason: str) -> Any:
    """An ASGI app that answers every request 403 with ``reason`` and closes the connection."""
    body = orjson.dumps({"error": reason})
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)),
               (b"connection", b"close")]

    async def answer(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 403, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return answer


@dataclass(frozen=True)
class ConnectionLimits:
    """The defaults suit kube-scheduler: it keeps connections alive and sends each request at once."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keepalive_timeout: float = 60.0
    max_connections: int = 1000
    # What a request line and its headers may take, as Go's net/http (DefaultMaxHeaderBytes):
    # kube-scheduler's headers are a few hundred bytes, and httptools itself sets no limit, so
    # without one a single request could make the parser hold any amount of memory.
    max_header_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        # Named as the flags that set them: a bad flag is reported in its own words.
        for name in ("header_timeout", "body_timeout", "keepalive_timeout"):
            if not getattr(self, name) > 0:  # also refuses NaN
                raise ConfigError(f"--{name.replace('_', '-')} must be positive, not {getattr(self, name)}")
        if self.max_connections < 1:
            raise ConfigError(f"--max-connections must be at least 1, not {self.max_connections}")


def descriptor_budget(wanted: int, listeners: int) -> int:
    """How many client connections fit in the descriptor limit, raising the soft limit first.

    The soft limit is raised towards the hard one, as Go programs (kube-scheduler among them)
    do at start-up. Each listener's accept queue and the reserve come on top of the connections.
    Should the hard limit still not fit them, fewer connections are allowed: above the limit,
    accept fails and the event loop stops accepting for a while or drops queued clients.
    """
    if resource is None:
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    overhead = RESERVED_DESCRIPTORS + listeners * (BACKLOG + 1)
    needed = wanted + overhead
    if soft != resource.RLIM_INFINITY and soft < needed:
        raised = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError) as exc:
            log.debug("cannot raise the descriptor limit from %d to %d: %s", soft, raised, exc)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return wanted
    fits = max(MIN_CONNECTIONS, soft - overhead)
    log.warning(
        "the descriptor limit (%d) leaves room for %d client connections, not %d: raise it "
        "(ulimit -n) for the full connection limit", soft, fits, wanted,
    )
    return fits


class Phase(enum.Enum):
    NEW = "connected, no request yet"
    IDLE = "between requests"
    HEADERS = "reading request headers"
    BODY = "reading request body"
    BUSY = "request in the app's hands"


class ConnectionPool:
    """Every open connection of the listeners, and who gives way when a new one comes.

    ``waiting`` holds the connections whose client owes the next step, in the order they
    started waiting (accept, or the end of their last response), so the one to give way is
    always the first: admitting stays cheap however many connections a flood keeps open.
    """

    WARN_EVERY = 10.0  # seconds between warnings about refused connections

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: set[GuardedConnection] = set()
        self.waiting: dict[GuardedConnection, None] = {}  # insertion-ordered
        self.evicted = 0
        self.refused = 0
        self._warned_at = -math.inf

    def admit(self, conn: GuardedConnection, now: float) -> bool:
        """Room for ``conn``, made by evicting the longest waiter if need be; False: refuse it."""
        if len(self.open) >= self.limit:
            if not self.waiting:
                self.refused += 1
                if now - self._warned_at >= self.WARN_EVERY:
                    self._warned_at = now
                    log.warning(
                        "all %d connections have a request in progress: refusing new connections "
                        "(%d so far)", self.limit, self.refused,
                    )
                return False
            victim = next(iter(self.waiting))
            self.discard(victim)
            self.evicted += 1
            victim.evict()
        self.open.add(conn)
        self.waiting[conn] = None
        return True

    def wait(self, conn: GuardedConnection) -> None:
        """``conn`` waits for its client again, from now: to the back of the line."""
        if conn in self.open:
            self.waiting.pop(conn, None)
            self.waiting[conn] = None

    def busy(self, conn: GuardedConnection) -> None:
        """``conn``'s request is in the app's hands: it is not to be evicted."""
        self.waiting.pop(conn, None)

    def discard(self, conn: GuardedConnection) -> None:
        self.open.discard(conn)
        self.waiting.pop(conn, None)


class GuardedConnection(asyncio.Protocol):
    """The deadlines and the pool membership, mixed into uvicorn's protocol (see ``protocol_class``).

    uvicorn constructs protocols itself, from a class; the settings therefore ride on a
    subclass made per listener. The parser-specific subclasses report a request's progress
    through ``_request_started``, ``_headers_received`` and ``_request_received``.
    """

    pool: ClassVar[ConnectionPool]
    limits: ClassVar[ConnectionLimits]
    tls: ClassVar[ssl.SSLContext | None]
    clients: ClassVar[AllowedClients | None]

    # uvicorn's, used here
    app: Any
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    cycle: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.phase = Phase.NEW
        self._raw: asyncio.Transport | None = None  # the TCP connection, under TLS if any
        self._timer: asyncio.TimerHandle | None = None
        self._header_bytes = 0  # read since the current request began, until its headers end

    # -- the connection's life

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio's subclasses
        if self._raw is not None:  # the TLS session over it: the handshake is done
            super().connection_made(transport)
            refusal = None if self.clients is None else self.clients.refusal(
                transport.get_extra_info("ssl_object")
            )
            if refusal is not None:
                log.warning("answering the client at %s 403: %s", self._peer(), refusal)
                self.app = forbidden(refusal)  # uvicorn hands each request of this connection to it
            return
        self._raw = transport
        if not self.pool.admit(self, self.loop.time()):
            transport.abort()
            return
        self._arm(self.limits.header_timeout)
        if self.tls is None:
            super().connection_made(transport)
            return
        # asyncio's TLS protocol, the one create_server and start_tls use, put in by hand so
        # that it is in place before the first byte is read: start_tls would install it one
        # loop iteration later, and uvloop reads the client's hello in between. It calls
        # connection_made again, with the TLS transport, once the handshake is done.
        handshake = self.loop.create_future()
        handshake.add_done_callback(self._handshake_done)
        session = SSLProtocol(
            self.loop, self, self.tls, handshake, server_side=True,
            # Ours fires first; this one (whole seconds) only keeps asyncio's 60 s out of play.
            ssl_handshake_timeout=math.ceil(self.limits.header_timeout) + 1,
            # A close_notify the client never answers must not keep the socket for 30 s.
            ssl_shutdown_timeout=self.limits.header_timeout,
        )
        transport.set_protocol(session)
        session.connection_made(transport)

    def _handshake_done(self, handshake: asyncio.Future[None]) -> None:
        # Done, but without the TLS transport handed to us: the handshake failed, or the TCP
        # connection closed during it (which resolves it without an error). Either way no
        # connection_lost will come for us, so the connection leaves the pool here.
        if self.transport is None:
            exc = None if handshake.cancelled() else handshake.exception()
            log.debug("TLS handshake with %s did not complete: %r", self._peer(), exc)
            self._disarm()
            self.pool.discard(self)
            if self._raw is not None and not self._raw.is_closing():
                self._raw.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.pool.discard(self)
        if self.transport is not None:  # uvicorn's connection_made ran (over TLS: after the handshake)
            super().connection_lost(exc)

    def on_response_complete(self) -> None:
        # Before uvicorn's: it may start a pipelined request, whose progress must come after.
        if self.phase is Phase.BUSY and not getattr(self, "pipeline", None):
            self._idle()
        super().on_response_complete()  # type: ignore[misc]

    def data_received(self, data: bytes) -> None:
        # Counted before the parser sees the bytes: the chunk that ends the headers may carry
        # the start of the body too, which is at most one read more than the limit.
        if self.phase in (Phase.NEW, Phase.IDLE, Phase.HEADERS):
            self._header_bytes += len(data)
            if self._header_bytes > self.limits.max_header_bytes:
                log.warning("answering the client at %s 431: request headers over %d bytes",
                            self._peer(), self.limits.max_header_bytes)
                self._disarm()
                self.transport.write(HEADERS_TOO_LARGE)
                self.transport.close()
                return
        super().data_received(data)

    # -- a request's progress

    def _request_started(self) -> None:
        if self.phase is Phase.IDLE:
            self._arm(self.limits.header_timeout)
        if self.phase in (Phase.NEW, Phase.IDLE):  # a new connection's deadline runs on from accept
            self.phase = Phase.HEADERS

    def _headers_received(self) -> None:
        self._header_bytes = 0
        if self.phase in (Phase.NEW, Phase.IDLE, Phase.HEADERS):
            self.phase = Phase.BODY
            self._arm(self.limits.body_timeout)

    def _request_received(self) -> None:
        if self.phase is Phase.BUSY:
            return
        if self.cycle is not None and self.cycle.response_complete:
            self._idle()  # answered before the body was read (a 400 for a too large one)
        else:
            self.phase = Phase.BUSY
            self.pool.busy(self)
            self._disarm()

    def _idle(self) -> None:
        self._header_bytes = 0
        self.phase = Phase.IDLE
        self.pool.wait(self)
        self._arm(self.limits.keepalive_timeout)

    # -- deadlines

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._timer = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        limits, cycle = self.limits, self.cycle
        if self.phase is Phase.BODY:
            reason = f"request body incomplete after {limits.body_timeout:g} s"
            if cycle is not None and not cycle.response_started:
                cycle.disconnected = True  # the app's own answer, if it still sends one, is dropped
                cycle.message_event.set()  # and it stops waiting for the body
                self.transport.write(REQUEST_TIMEOUT)
        elif self.phase is Phase.IDLE:
            reason = f"idle for {limits.keepalive_timeout:g} s"
        else:
            reason = f"request headers incomplete after {limits.header_timeout:g} s"
        log.debug("closing the connection from %s: %s", self._peer(), reason)
        if self._raw is not None:
            # The TCP connection itself: a TLS close would wait for the client's close_notify.
            self._raw.close()

    def evict(self) -> None:
        log.debug("closing the connection from %s (%s) to make room", self._peer(), self.phase.value)
        self._disarm()
        if self._raw is not None:
            self._raw.abort()  # at once: the descriptor is needed now

    def _peer(self) -> str:
        peer = self._raw.get_extra_info("peername") if self._raw is not None else None
        return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "?"


class _H11(GuardedConnection, H11Protocol):
    """h11 reports a request only once its headers are complete: its state says how far it got."""

    conn: h11.Connection

    def handle_events(self) -> None:
        super().handle_events()
        state = self.conn.their_state
        if state is h11.IDLE:
            if self.conn.trailing_data[0]:
                self._request_started()
            elif self.phase is Phase.BODY:  # the rest of an already answered request's body
                self._request_received()
        elif state is h11.SEND_BODY:
            self._request_started()
            self._headers_received()
        elif state in (h11.DONE, h11.MUST_CLOSE):
            self._request_started()
            self._headers_received()
            self._request_received()


if HttpToolsProtocol is not None:

    class _HttpTools(GuardedConnection, HttpToolsProtocol):
        """httptools calls back at each step of a request."""

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._request_started()

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            self._headers_received()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._request_received()


def protocol_class(
    pool: ConnectionPool,
    limits: ConnectionLimits,
    tls: ssl.SSLContext | None,
    parser: str = "auto",
    clients: AllowedClients | None = None,
) -> type[asyncio.Protocol]:
    """For ``uvicorn.Config(http=...)``: the parser uvicorn's "auto" picks (or ``parser``), guarded."""
    if parser == "auto":
        parser = "httptools" if AutoHTTPProtocol is HttpToolsProtocol else "h11"
    base: type[GuardedConnection] = _HttpTools if parser == "httptools" else _H11
    settings = {"pool": pool, "limits": limits, "tls": tls, "clients": clients}
    return type(f"Guarded{base.__name__[1:]}", (base,), settings)
