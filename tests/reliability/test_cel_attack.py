"""One claim's expensive selector neither freezes the service nor outlives the request budget.

The attack (issue 28): a selector under Kubernetes' cost limit that matches nothing, on a node
with many devices. Each evaluation is a long comprehension; before CEL evaluation took turns,
one filter held the event loop for (devices x one evaluation): ``/healthz`` waited, and the
4 s budget, checked only between nodes, was overrun many times over.

Here the budget is shortened and the selector made cheaper so the test is quick, keeping the
proportions: all evaluations together take many budgets.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import httpx
import pytest

from extender.api import create_app
from extender.cel.engine import available_engines
from extender.cel.environment import Environment
from extender.config import Config
from extender.local.binder import LocalBinder
from extender.local.cluster import LocalCluster
from extender.metrics import Metrics
from extender.model.kinds import KIND_NAMES
from extender.scheduling.context import SchedulingContext
from extender.scheduling.verdicts import TIMEOUT
from extender.state import ClusterState
from tests.scheduling.cluster import (
    claim,
    claim_spec,
    device_class,
    filter_call,
    gpu,
    node,
    node_slice,
    pod,
    request,
)

BUDGET_S = 1.0
# The slowest a health probe may be answered while the attack computes: a few turns of each
# request in flight, stretched by a loaded machine (at load 10 on 2 cores, up to 0.26 s was
# seen). Before, one node of the 50 alone held the loop 0.56 s, unloaded.
PROBE_BOUND_S = 0.4


def numbers(n: int) -> str:
    return "[" + ",".join(str(i) for i in range(n)) + "]"


# Within the API server's estimate (about 180,000 of 1,000,000) and false on every device:
# every device is evaluated in full. Tens of milliseconds per device in every engine.
EXPENSIVE = f"{numbers(150)}.exists(a, {numbers(150)}.exists(b, a + b < 0))"


def numbered(device: dict[str, Any], serial: int) -> dict[str, Any]:
    device["attributes"]["serial"] = {"int": serial}
    return device


def attack_objects(nodes: int, devices: int) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [device_class()]
    for i in range(nodes):
        # Every device different, as real ones are (a serial number): no verdict of one
        # device stands for another's.
        objs.append(node(f"node-{i}"))
        gpus = [numbered(gpu(f"gpu-{d}"), i * devices + d) for d in range(devices)]
        objs.append(node_slice(f"node-{i}", gpus))
    objs.append(claim("hostile", claim_spec(request(selectors=[{"cel": {"expression": EXPENSIVE}}]))))
    objs.append(pod("attacker", claims={"gpu": "hostile"}))
    objs.append(claim("modest"))
    objs.append(pod("normal", claims={"gpu": "modest"}))
    return objs


class AttackService:
    """The app over a local cluster on one CEL engine."""

    def __init__(self, engine: str, nodes: int, devices: int) -> None:
        cfg = replace(Config(), filter_timeout_s=BUDGET_S, cel_engine=engine)
        self.state = ClusterState(cfg.feature_gates)
        cluster = LocalCluster(self.state)
        cluster.load((f"object {i}", obj) for i, obj in enumerate(attack_objects(nodes, devices)))
        for kind in KIND_NAMES:
            self.state.mark_synced(kind)
        cel = Environment.create(engine)
        cel.warm_up()  # as serve does at start-up
        ctx = SchedulingContext(cfg, self.state, LocalBinder(cluster), Metrics(), cel)
        self.app = create_app(ctx, cluster=cluster)

    def pod(self, name: str) -> dict[str, Any]:
        info = self.state.pod("default", name)
        assert info is not None
        return dict(info.raw)

    def node_names(self) -> list[str]:
        return sorted(self.state.nodes)

    def run(self, flow: Any) -> Any:
        async def main() -> Any:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://extender") as client:
                return await flow(client)

        return asyncio.run(main())


PROBE_GAP_S = 0.01


async def probe_while(tasks: list[asyncio.Task[Any]], probe: Any) -> list[float]:
    """Delays of ``probe()`` called every ``PROBE_GAP_S`` until every task is done: from when
    it was due to when it was answered, so a loop blocked between probes counts too."""
    delays = []
    due = time.perf_counter()
    while not all(t.done() for t in tasks):
        await probe()
        delays.append(time.perf_counter() - due)
        due = time.perf_counter() + PROBE_GAP_S
        await asyncio.sleep(PROBE_GAP_S)
    return delays


Latencies = list[float]


def attack(engine: str, nodes: int, devices: int, attackers: int) -> tuple[Latencies, Latencies, list[Any]]:
    """Health probes and normal filters served while ``attackers`` hostile filters compute."""
    svc = AttackService(engine, nodes, devices)

    async def flow(client: httpx.AsyncClient) -> tuple[list[float], list[float], list[Any]]:
        async def hostile() -> tuple[float, dict[str, Any]]:
            started = time.perf_counter()
            answer = await filter_call(client, svc.pod("attacker"), svc.node_names())
            return time.perf_counter() - started, answer

        tasks = [asyncio.ensure_future(hostile()) for _ in range(attackers)]
        await asyncio.sleep(0.05)  # the attack is computing

        async def healthz() -> None:
            assert (await client.get("/healthz")).status_code == 200

        async def normal() -> None:
            answer = await filter_call(client, svc.pod("normal"), svc.node_names())
            assert answer["NodeNames"] == svc.node_names(), answer

        health, filters = await asyncio.gather(probe_while(tasks, healthz), probe_while(tasks, normal))
        return health, filters, [await t for t in tasks]

    result: tuple[list[float], list[float], list[Any]] = svc.run(flow)
    return result


ENGINES = [pytest.param(e, id=e) for e in ("python", "cpp") if e in available_engines()]


@pytest.mark.parametrize("engine", ENGINES)
def test_one_node_of_128_devices_neither_freezes_the_service_nor_overruns_the_budget(engine):
    health, filters, answers = attack(engine, nodes=1, devices=128, attackers=1)
    [(elapsed, answer)] = answers
    # Reported as not evaluated in time, never as a fit.
    assert answer["NodeNames"] == [], answer
    assert answer["FailedNodes"] == {"node-0": TIMEOUT} or answer["FailedAndUnresolvableNodes"] == {
        "node-0": TIMEOUT
    }, answer
    assert elapsed < 2 * BUDGET_S, elapsed
    assert len(health) >= 3 and max(health) < PROBE_BOUND_S, health
    assert len(filters) >= 3 and max(filters) < PROBE_BOUND_S, filters


@pytest.mark.parametrize("engine", ENGINES)
def test_three_attacks_on_fifty_nodes_at_once_leave_probes_answered(engine):
    health, filters, answers = attack(engine, nodes=50, devices=16, attackers=3)
    for elapsed, answer in answers:
        assert answer["NodeNames"] == [], answer
        reasons = {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}
        # Nodes evaluated within the budget say why they do not fit; the others timed out.
        assert set(reasons) == {f"node-{i}" for i in range(50)}, reasons
        assert TIMEOUT in reasons.values(), reasons
        assert all(r == TIMEOUT or "0 match the selectors" in r for r in reasons.values()), reasons
        assert elapsed < 2 * BUDGET_S, elapsed
    assert len(health) >= 3 and max(health) < PROBE_BOUND_S, health
    assert len(filters) >= 3 and max(filters) < PROBE_BOUND_S, filters


# Over Kubernetes' cost limit as cel-go counts it (1,017,683 there), though every call in it
# is cheap: 1,000 sorts of 100 elements. Before costs were counted as cel-go counts them, the
# python engine charged 12,000 and answered false, and the C++ engine counted nothing.
OVER_THE_LIMIT = "lists.range(1000).exists(i, lists.range(100 + i % 2).sort()[0] < 0)"


@pytest.mark.parametrize("engine", ENGINES)
def test_a_selector_over_the_cost_limit_fails_the_claim_as_in_kube_scheduler(engine):
    cfg = replace(Config(), cel_engine=engine)
    state = ClusterState(cfg.feature_gates)
    cluster = LocalCluster(state)
    objs = attack_objects(1, 2)
    objs.append(claim("over", claim_spec(request(selectors=[{"cel": {"expression": OVER_THE_LIMIT}}]))))
    objs.append(pod("spender", claims={"gpu": "over"}))
    cluster.load((f"object {i}", obj) for i, obj in enumerate(objs))
    for kind in KIND_NAMES:
        state.mark_synced(kind)
    ctx = SchedulingContext(cfg, state, LocalBinder(cluster), Metrics(), Environment.create(engine))
    app = create_app(ctx, cluster=cluster)
    spender = state.pod("default", "spender")
    assert spender is not None

    async def flow() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://extender") as client:
            return await filter_call(client, dict(spender.raw), ["node-0"])

    answer = asyncio.run(flow())
    assert answer["NodeNames"] == [], answer
    # kube-scheduler's wording (structured/internal/*/allocator_*.go, cel-go's cost tracker).
    assert answer["FailedAndUnresolvableNodes"] == {
        "node-0": "claim default/over: selector #0 on device gpu.example.com/node-0/gpu-0: "
        "CEL runtime error: operation cancelled: actual cost limit exceeded"
    }, answer
