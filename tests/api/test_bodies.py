"""Bodies cost what their limits allow: bytes per route, JSON elements, one large body at a time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from extender.api import bodies
from extender.config import BODY_LIMITS, MAX_JSON_ELEMENTS
from tests.scheduling.cluster import Service, claim, filter_call, gpu_cluster, pod

MB = 1024 * 1024
# What the attack of issue 11 sent: nested arrays, 500 deep, repeated up to ~10 MB.
NESTED = b"[" * 500 + b"]" * 500 + b","
HOSTILE = b"[" + NESTED * (10 * MB // len(NESTED)) + b"[]]"


@pytest.fixture
def svc() -> Service:
    return Service([*gpu_cluster(nodes=2), claim("c"), pod("p", claims={"gpu": "c"})])


class Upload:
    """A chunked request body that records how much of it the server pulled."""

    def __init__(self, data: bytes, chunk: int = 64 * 1024, pause_s: float = 0.0) -> None:
        self.data, self.chunk, self.pause_s = data, chunk, pause_s
        self.sent = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while self.sent < len(self.data):
            piece = self.data[self.sent : self.sent + self.chunk]
            self.sent += len(piece)
            yield piece
            if self.pause_s:
                await asyncio.sleep(self.pause_s)


def test_a_body_of_too_many_elements_is_refused_before_it_is_read_in_full(svc: Service):
    upload = Upload(HOSTILE)
    response = svc.run(lambda c: c.post("/filter", content=upload))
    assert response.status_code == 400
    assert f"more than {MAX_JSON_ELEMENTS} JSON elements" in response.json()["error"]
    # Refused once the count passed the limit: about 2 bytes per element here.
    assert upload.sent < 3 * MAX_JSON_ELEMENTS < len(HOSTILE)


def _listing(names: int) -> bytes:
    """A filter body of ``names + 4`` JSON elements, padded to far more bytes than that."""
    listed = b", ".join([b'"n"'] * names)
    return b'{"padding": "' + b"x" * 500 + b'", "Pod": {}, "NodeNames": [' + listed + b"]}"


@pytest.mark.parametrize("chunk", [1, 7, 64, 4096])
def test_the_element_limit_is_exact_whatever_the_chunks(chunk: int):
    svc = Service(gpu_cluster(nodes=1), max_json_elements=50)
    at_limit = svc.run(lambda c: c.post("/filter", content=Upload(_listing(46), chunk=chunk)))
    assert at_limit.status_code == 400 and "JSON elements" not in at_limit.json()["error"]  # the pod's fault
    upload = Upload(_listing(47) + b" " * 10_000, chunk=chunk)
    over = svc.run(lambda c: c.post("/filter", content=upload))
    assert over.status_code == 400
    assert "more than 50 JSON elements" in over.json()["error"]
    assert upload.sent < len(upload.data)  # refused before the trailing spaces were read


def test_a_body_of_few_elements_passes_however_long(svc: Service):
    body = {"Pod": svc.pod("p"), "NodeNames": ["node-0"], "padding": "x" * (3 * MAX_JSON_ELEMENTS)}
    response = svc.run(lambda c: c.post("/filter", content=Upload(orjson.dumps(body))))
    assert response.status_code == 200 and response.json()["NodeNames"] == ["node-0"]


def test_a_declared_length_over_the_route_limit_is_refused_unread(svc: Service):
    upload = Upload(b" " * (BODY_LIMITS["bind"] + 1))
    headers = {"content-length": str(len(upload.data))}
    response = svc.run(lambda c: c.post("/bind", content=upload, headers=headers))
    assert response.status_code == 400
    assert f"exceeds the limit of {BODY_LIMITS['bind']} bytes" in response.json()["error"]
    assert upload.sent == 0


def test_a_bind_body_is_limited_far_below_a_filter_body(svc: Service):
    padding = {"Pod": svc.pod("p"), "NodeNames": ["node-0"], "padding": "x" * (BODY_LIMITS["bind"] + 10)}
    assert svc.run(lambda c: c.post("/filter", json=padding)).status_code == 200
    padded_bind = {"PodName": "p", "Node": "node-0", "x": padding["padding"]}
    bind = svc.run(lambda c: c.post("/bind", json=padded_bind))
    assert bind.status_code == 400 and "exceeds the limit" in bind.json()["error"]


def test_a_chunked_body_takes_the_large_body_slot_once_it_grows_large(
    svc: Service, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(bodies, "LARGE_BODY_WAIT_S", 0.3)
    large = b'{"Pod": {}, "NodeNames": [], "padding": "' + b"x" * (2 * MB) + b'"}'

    async def flow(client: httpx.AsyncClient) -> httpx.Response:
        slow = Upload(large, chunk=len(large) // 20, pause_s=0.05)
        first = asyncio.ensure_future(client.post("/filter", content=slow))
        while slow.sent <= 1.5 * MB:
            await asyncio.sleep(0.01)
        second = await client.post("/filter", content=Upload(large))
        await first
        return second

    assert svc.run(flow).status_code == 503


def test_large_bodies_wait_for_each_other_and_small_requests_pass_them(
    svc: Service, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(bodies, "LARGE_BODY_WAIT_S", 0.3)
    large = b'{"Pod": {}, "NodeNames": [], "padding": "' + b"x" * (2 * MB) + b'"}'

    async def flow(client: httpx.AsyncClient) -> tuple[httpx.Response, httpx.Response, dict[str, Any]]:
        # The first large body (its size declared) trickles in for ~1 s and holds the
        # large-body slot meanwhile.
        slow = Upload(large, chunk=len(large) // 20, pause_s=0.05)
        declared = {"content-length": str(len(large))}
        first = asyncio.ensure_future(client.post("/filter", content=slow, headers=declared))
        await asyncio.sleep(0.1)
        second = await client.post("/filter", content=Upload(large))
        normal = await filter_call(client, svc.pod("p"), ["node-0", "node-1"])
        return await first, second, normal

    first, second, normal = svc.run(flow)
    assert second.status_code == 503 and "retry" in second.json()["error"]
    assert normal["NodeNames"] == ["node-0", "node-1"]
    # The first was read in full and answered like any filter (its pod is malformed).
    assert first.status_code == 400 and "Pod" in first.json()["error"]
