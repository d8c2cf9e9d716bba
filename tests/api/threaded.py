"""Running the real listeners of ``dra-extender serve`` in a thread, for tests that use sockets."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from extender.api.server import serve


@contextmanager
def listening(
    listeners: list[uvicorn.Server], loop: asyncio.AbstractEventLoop | None = None
) -> Iterator[None]:
    """``serve(listeners)`` on ``loop`` (a new asyncio loop by default) in a daemon thread, from
    the moment every listener accepts until the block ends."""
    loop = loop or asyncio.new_event_loop()
    # uvicorn installs signal handlers only on the main thread; in a thread it skips them.
    thread = threading.Thread(target=loop.run_until_complete, args=(serve(listeners),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not all(server.started for server in listeners):
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield
    finally:
        for server in listeners:
            server.should_exit = True
        thread.join(10)
        loop.close()


def free_port() -> int:
    """A port nothing listens on now (the OS's pick), for a server started later."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
