"""The load generator's HTTP/1.1 client for the scheduling verbs: keep-alive, one write per request.

httpx costs the load generator about 1 ms of CPU per call (its transport, h11 and anyio
layers), which on a 2-core machine is CPU taken from the server under test. kube-scheduler's Go
client does little more than this: reuse an idle connection, write the request, read the status,
the headers and a ``Content-Length`` (or chunked) body.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Protocol
from urllib.parse import urlsplit

import httpx

from loadtest.wire import ProtocolError

MAX_HEADER_BYTES = 64 * 1024
JSON_HEADERS = {"Content-Type": "application/json"}


class Poster(Protocol):
    """POST a JSON body; the status and body of the reply, or ProtocolError for a failed exchange."""

    def post(self, path: str, body: bytes) -> Awaitable[tuple[int, bytes]]: ...


class HttpxPoster:
    """Through an httpx client: lets tests put an in-process transport in place of the network."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        try:
            response = await self.client.post(path, content=body, headers=JSON_HEADERS)
        except httpx.HTTPError as e:
            raise ProtocolError(f"{type(e).__name__}: {e}") from None
        return response.status_code, response.content


class _StaleConnection(Exception):
    """A reused connection closed before any byte of the reply: the server dropped it while idle."""


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def exchange(self, request: bytes, reused: bool) -> tuple[int, bytes, bool]:
        """Status, body, and whether the connection may be used again."""
        self.writer.write(request)
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as e:
            if reused and not e.partial:
                raise _StaleConnection from None
            raise
        except asyncio.LimitOverrunError:
            raise ProtocolError("reply headers too large") from None
        status, headers = _parse_head(head)
        keep = headers.get("connection", "").lower() != "close"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = await self._chunked()
        elif "content-length" in headers:
            length = headers["content-length"]
            if not length.isdigit():
                raise ProtocolError(f"bad Content-Length {length!r}")
            body = await self.reader.readexactly(int(length))
        else:
            body, keep = await self.reader.read(), False
        return status, body, keep

    async def _chunked(self) -> bytes:
        parts = []
        while True:
            line = await self.reader.readuntil(b"\r\n")
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise ProtocolError(f"bad chunk size line {line[:40]!r}") from None
            if size == 0:
                await self.reader.readuntil(b"\r\n")  # no trailers from the extender
                return b"".join(parts)
            parts.append(await self.reader.readexactly(size))
            await self.reader.readexactly(2)

    def close(self) -> None:
        self.writer.close()


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise ProtocolError(f"bad status line {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        if line:
            name, sep, value = line.partition(":")
            if not sep:
                raise ProtocolError(f"bad header line {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
    return int(code), headers


class KeepAlivePool:
    """Idle connections to one ``http://host:port``, most recently used first (as Go's pool does)."""

    def __init__(self, url: str, timeout: float) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"expected an http://host:port URL, got {url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.timeout = timeout
        self.prefix = parts.path.rstrip("/")
        self.host_header = parts.netloc
        self.idle: list[_Connection] = []

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        request = (
            f"POST {self.prefix}{path} HTTP/1.1\r\nHost: {self.host_header}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode("latin-1") + body
        try:
            async with asyncio.timeout(self.timeout):
                while self.idle:
                    conn = self.idle.pop()
                    try:
                        return await self._exchange(conn, request, reused=True)
                    except _StaleConnection:
                        continue
                streams = await asyncio.open_connection(self.host, self.port, limit=MAX_HEADER_BYTES)
                conn = _Connection(*streams)
                return await self._exchange(conn, request, reused=False)
        except TimeoutError:
            raise ProtocolError(f"ReadTimeout: no reply within {self.timeout} s") from None
        except (OSError, asyncio.IncompleteReadError) as e:
            raise ProtocolError(f"{type(e).__name__}: {e}") from None

    async def _exchange(self, conn: _Connection, request: bytes, reused: bool) -> tuple[int, bytes]:
        try:
            status, body, keep = await conn.exchange(request, reused)
        except BaseException:
            conn.close()
            raise
        if keep:
            self.idle.append(conn)
        else:
            conn.close()
        return status, body

    def close(self) -> None:
        while self.idle:
            self.idle.pop().close()
