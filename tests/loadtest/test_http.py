"""The load generator's keep-alive client against a scripted HTTP/1.1 server on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from loadtest.http import KeepAlivePool
from loadtest.wire import ProtocolError

Reply = Callable[[bytes], bytes | None]  # request body -> raw reply bytes (None: close silently)


async def _serve(
    reply: Reply, test: Callable[[str, list[int]], Awaitable[None]], close_after_reply: bool = False
) -> list[bytes]:
    """Run `test(url, connections)` against a server answering every request with `reply`."""
    requests: list[bytes] = []
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                body = await reader.readexactly(length)
                requests.append(head + body)
                raw = reply(body)
                if raw is None:
                    break
                writer.write(raw)
                await writer.drain()
                if close_after_reply:
                    break
        except asyncio.IncompleteReadError:
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        await test(f"http://127.0.0.1:{port}", connections)
    return requests


def _ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def test_requests_reuse_one_connection_and_carry_the_body() -> None:
    async def test(url: str, connections: list[int]) -> None:
        pool = KeepAlivePool(url, timeout=30)
        for i in range(3):
            assert await pool.post("/filter", b'{"n":%d}' % i) == (200, b'{"n":%d}' % i)
        pool.close()
        assert len(connections) == 1

    requests = asyncio.run(_serve(lambda body: _ok(body), test))
    assert requests[0].startswith(b"POST /filter HTTP/1.1\r\n")
    assert b"Content-Type: application/json\r\n" in requests[0]
    assert requests[2].endswith(b'{"n":2}')


def test_chunked_replies_and_error_statuses_are_read() -> None:
    def reply(body: bytes) -> bytes:
        head = b"HTTP/1.1 500 Internal Server Error\r\ntransfer-encoding: chunked\r\n\r\n"
        return head + b"3\r\nboo\r\n1\r\nm\r\n0\r\n\r\n"

    async def test(url: str, connections: list[int]) -> None:
        pool = KeepAlivePool(url, timeout=30)
        assert await pool.post("/bind", b"{}") == (500, b"boom")
        assert await pool.post("/bind", b"{}") == (500, b"boom")
        assert len(connections) == 1

    asyncio.run(_serve(reply, test))


def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    calls = iter(range(100))

    def reply(body: bytes) -> bytes | None:
        # The second request finds its connection dropped, as after a server's keep-alive timeout.
        return None if next(calls) == 1 else _ok(b"{}")

    async def test(url: str, connections: list[int]) -> None:
        pool = KeepAlivePool(url, timeout=30)
        assert await pool.post("/filter", b"{}") == (200, b"{}")
        assert await pool.post("/filter", b"{}") == (200, b"{}")
        assert len(connections) == 2

    asyncio.run(_serve(reply, test))


def test_connection_close_is_honoured() -> None:
    async def test(url: str, connections: list[int]) -> None:
        pool = KeepAlivePool(url, timeout=30)
        await pool.post("/filter", b"{}")
        await pool.post("/filter", b"{}")
        assert len(connections) == 2 and not pool.idle

    asyncio.run(_serve(lambda body: _ok(b"{}", b"connection: close\r\n"), test))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"garbage\r\n\r\n", "bad status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "bad header line"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n", "bad Content-Length"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort", "IncompleteReadError"),
    ],
)
def test_broken_replies_are_protocol_errors(raw: bytes, message: str) -> None:
    async def test(url: str, connections: list[int]) -> None:
        pool = KeepAlivePool(url, timeout=30)
        with pytest.raises(ProtocolError, match=message):
            await pool.post("/filter", b"{}")
        assert not pool.idle

    # The short body only ends when the server closes: reply, then drop the connection.
    asyncio.run(_serve(lambda body: raw, test, close_after_reply=True))


def test_a_silent_server_times_out() -> None:
    async def test(url: str, connections: list[int]) -> None:
        pool = KeepAlivePool(url, timeout=0.2)
        with pytest.raises(ProtocolError, match="no reply within"):
            await pool.post("/filter", b"{}")

    async def run() -> None:
        async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()
            writer.close()

        server = await asyncio.start_server(hang, "127.0.0.1", 0)
        async with server:
            await test(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", [])

    asyncio.run(run())


def test_unreachable_server_and_bad_urls() -> None:
    with pytest.raises(ValueError, match="http://host:port"):
        KeepAlivePool("https://example.invalid", timeout=1)

    async def test() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with pytest.raises(ProtocolError, match=r"ConnectionRefusedError|OSError"):
            await KeepAlivePool(f"http://127.0.0.1:{port}", timeout=5).post("/filter", b"{}")

    asyncio.run(test())
