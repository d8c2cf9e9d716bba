"""Fixtures: a fresh test API server per test and a raw client pointed at it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest

from extender.kube.client import RawClient
from tests.apiserver.server import ApiServer


@pytest.fixture
def apiserver() -> Iterator[ApiServer]:
    with ApiServer(bookmark_interval=0.2) as server:
        yield server


@pytest.fixture
def client(apiserver: ApiServer) -> RawClient:
    return RawClient(apiserver.api_client(), request_timeout=5.0)


async def eventually(condition: Callable[[], object], timeout: float = 5.0, what: str = "condition") -> None:
    """Wait on the event loop until ``condition()`` is truthy; fail with ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
