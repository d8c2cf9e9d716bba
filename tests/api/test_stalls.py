"""One expensive request neither takes more than its one budget nor holds back the others.

The hostile claim has no solution and a search space far beyond any budget: two requests of
12 and 13 devices on nodes of 24. Every verb that allocates for it runs until its deadline.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from extender.allocator import budget
from extender.scheduling import turns
from tests.scheduling.cluster import (
    Service,
    allocated_devices,
    bind_call,
    claim,
    claim_spec,
    filter_call,
    gpu_cluster,
    pod,
    request,
)

BUDGET_S = 0.6
CANDIDATES = 6


def hostile_service(budget_s: float = BUDGET_S) -> Service:
    objs: list[dict[str, Any]] = [*gpu_cluster(nodes=CANDIDATES, per_node=24)]
    objs.append(claim("hostile", claim_spec(request("a", count=12), request("b", count=13))))
    objs.append(pod("attacker", claims={"gpu": "hostile"}))
    objs.append(claim("modest"))
    objs.append(pod("normal", claims={"gpu": "modest"}))
    return Service(objs, filter_timeout_s=budget_s)


def preempt_body(svc: Service) -> dict[str, Any]:
    victims = {"Pods": [{"UID": "nobody"}], "NumPDBViolations": 0}
    return {"Pod": svc.pod("attacker"), "NodeNameToMetaVictims": dict.fromkeys(svc.node_names(), victims)}


async def _while_running(request: asyncio.Task[httpx.Response], probe: Any) -> list[float]:
    """Latencies of ``probe()`` called back to back until ``request`` is done."""
    latencies = []
    while not request.done():
        started = time.perf_counter()
        await probe()
        latencies.append(time.perf_counter() - started)
        await asyncio.sleep(0.02)
    return latencies


def test_preempt_shares_one_budget_across_its_candidate_nodes():
    svc = hostile_service()

    async def flow(client: httpx.AsyncClient) -> tuple[float, dict[str, Any]]:
        started = time.perf_counter()
        response = await client.post("/preempt", json=preempt_body(svc))
        return time.perf_counter() - started, response.json()

    elapsed, result = svc.run(flow)
    # No node can help, and every candidate ran out of time: none is kept. Per-node budgets
    # would take CANDIDATES x BUDGET_S (3.6 s); one budget ends after one.
    assert result["NodeNameToMetaVictims"] == {}
    assert elapsed < BUDGET_S * CANDIDATES / 2, elapsed


def test_explain_shares_one_budget_across_nodes():
    svc = hostile_service()

    async def flow(client: httpx.AsyncClient) -> tuple[float, dict[str, Any]]:
        started = time.perf_counter()
        response = await client.get("/debug/explain", params={"pod": "default/attacker"})
        return time.perf_counter() - started, response.json()

    elapsed, result = svc.run(flow)
    assert {n["reason"] for n in result["nodes"].values()} == {"timed out trying to allocate devices"}
    assert elapsed < BUDGET_S * CANDIDATES / 2, elapsed


def test_health_probes_and_a_normal_filter_are_served_while_a_hostile_request_computes():
    svc = hostile_service()

    async def flow(client: httpx.AsyncClient) -> tuple[list[float], list[float], list[dict[str, Any]]]:
        hostile = asyncio.ensure_future(client.post("/preempt", json=preempt_body(svc)))
        await asyncio.sleep(0.05)  # the hostile request is computing

        async def healthz() -> None:
            assert (await client.get("/healthz")).status_code == 200

        filters: list[dict[str, Any]] = []

        async def normal_filter() -> None:
            filters.append(await filter_call(client, svc.pod("normal"), svc.node_names()))

        health, filtering = await asyncio.gather(
            _while_running(hostile, healthz), _while_running(hostile, normal_filter)
        )
        assert (await hostile).status_code == 200
        return health, filtering, filters

    health, filtering, filters = svc.run(flow)
    # Served many times during the hostile request, each within a few turns rather than
    # after it: a blocked loop would answer each once, after the whole budget.
    assert len(health) >= 5 and len(filtering) >= 3, (health, filtering)
    assert max(health) < BUDGET_S / 2 and max(filtering) < BUDGET_S / 2, (health, filtering)
    assert all(f["NodeNames"] == svc.node_names() for f in filters)


def test_binds_that_compute_in_turns_never_commit_a_device_twice(monkeypatch):
    # Every step of every computation yields: the two binds' searches interleave step by step
    # and both first settle on gpu-0. Only one may commit it.
    monkeypatch.setattr(turns, "TURN_S", 0.0)
    monkeypatch.setattr(budget, "PAUSE_EVERY_S", 0.0)
    objs: list[dict[str, Any]] = [*gpu_cluster(nodes=1, per_node=2)]
    objs += [claim("ca"), claim("cb"), pod("a", claims={"gpu": "ca"}), pod("b", claims={"gpu": "cb"})]
    svc = Service(objs)

    async def flow(client: httpx.AsyncClient) -> list[str]:
        return await asyncio.gather(*(bind_call(client, svc.pod(name), "node-0") for name in ("a", "b")))

    errors = svc.run(flow)
    held = allocated_devices(svc.claims().values())
    assert len(held) == len(set(held)), held
    assert len(held) == errors.count(""), (held, errors)
    assert all("changed while its allocation was computed" in e for e in errors if e), errors
