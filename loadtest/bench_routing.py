"""What the verbs' shortcut past FastAPI's middleware and routing saves: ``python -m loadtest.bench_routing``.

Calls the app as uvicorn does (one ASGI call per request, no sockets) for the same requests
twice over, alternating rounds: through ``ExtenderApp.__call__`` (the shortcut) and through
FastAPI's own ``__call__`` (middleware and routing, then the same endpoint). Figures are the
median CPU time per request (``time.process_time``) over the rounds, and the spread of the
rounds; on a shared machine run it under ``nice`` and read the spread as the noise.

    python -m loadtest.bench_routing --requests 2000 --rounds 7
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import FastAPI

from extender.api import create_app
from extender.api.routes import ExtenderApp
from loadtest.bench_hotpath import service
from loadtest.workloads import WorkloadParams, generate

Call = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def _scope(path: str, body: bytes) -> dict[str, Any]:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
    }


async def answers(call: Call, requests: list[tuple[str, bytes]]) -> list[tuple[int, bytes]]:
    """Each request's status and body, called through ``call``."""
    out: list[tuple[int, bytes]] = []
    for path, body in requests:
        status, reply = 0, b""

        async def receive(body: bytes = body) -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status, reply
            if message["type"] == "http.response.start":
                status = message["status"]
            else:
                reply += message.get("body", b"")

        await call(_scope(path, body), receive, send)
        out.append((status, reply))
    return out


async def _round(call: Call, requests: list[tuple[str, bytes]], repeat: int) -> float:
    """CPU seconds per request for ``repeat`` passes over ``requests``."""
    statuses: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    started = time.process_time()
    for _ in range(repeat):
        for path, body in requests:
            async def receive(body: bytes = body) -> dict[str, Any]:
                return {"type": "http.request", "body": body, "more_body": False}

            await call(_scope(path, body), receive, send)
    spent = time.process_time() - started
    if any(status >= 500 for status in statuses):
        raise RuntimeError(f"a request failed: statuses {sorted(set(statuses))}")
    return spent / (repeat * len(requests))


def setup() -> tuple[dict[str, Call], list[tuple[str, bytes]]]:
    """The two ways into one app, and the requests: the two verbs called for every pod whose
    work is smallest, where routing weighs most (a prioritize of ten names and a bind of a pod
    the extender does not know, refused)."""
    workload = generate("template", WorkloadParams(nodes=20, pods=10, devices_per_node=8))
    app = create_app(service(workload), debug=False)
    assert isinstance(app, ExtenderApp)
    pod = orjson.loads(orjson.dumps(workload.pods[0]))
    names = workload.node_names[:10]
    requests = [
        ("/prioritize", orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})),
        ("/bind", orjson.dumps({"PodName": "nobody", "PodNamespace": "default", "Node": names[0]})),
    ]
    ways: dict[str, Call] = {
        "shortcut": app.__call__,
        "fastapi": lambda scope, receive, send: FastAPI.__call__(app, scope, receive, send),
    }
    return ways, requests


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_routing", description=__doc__)
    p.add_argument("--requests", type=int, default=2000, help="requests per round and way")
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    if args.requests < 2 or args.rounds < 1:
        p.error("--requests must be >= 2 and --rounds >= 1")
    ways, requests = setup()
    repeat = max(1, args.requests // len(requests))
    figures: dict[str, list[float]] = {way: [] for way in ways}

    async def run() -> None:
        for call in ways.values():  # warm both ways up (the middleware stack is built on first use)
            await _round(call, requests, 20)
        for _ in range(args.rounds):
            for way, call in ways.items():
                figures[way].append(await _round(call, requests, repeat))

    asyncio.run(run())
    for way, seconds in figures.items():
        us = [s * 1e6 for s in seconds]
        print(f"{way:9s} {statistics.median(us):7.1f} us/request  (rounds {min(us):.1f} .. {max(us):.1f})")
    saved = statistics.median(figures["fastapi"]) - statistics.median(figures["shortcut"])
    print(f"saved     {saved * 1e6:7.1f} us/request, {saved / statistics.median(figures['fastapi']):.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
