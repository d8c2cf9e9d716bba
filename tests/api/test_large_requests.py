"""Large requests within the limits do not hold the other requests back (issue 28, item 6).

Each attack was measured against a served extender (loadtest/hostile.py, docs/reliability.md);
here the same requests run in-process, where the event loop's delay shows as the latency of
``/healthz`` probes sent meanwhile.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from extender.api import wire
from tests.api.test_stalls import hostile_service

JSON = {"Content-Type": "application/json"}


def minimal_node(i: int) -> dict[str, Any]:
    return {"metadata": {"name": f"big-{i}", "uid": f"uid-{i}"},
            "status": {"allocatable": {"cpu": "8", "memory": "1Gi"}}}


def test_a_filter_over_more_nodes_than_the_limit_is_refused_before_any_is_parsed() -> None:
    svc = hostile_service()
    nodes = [minimal_node(i) for i in range(wire.MAX_NODES + 1)]
    body = orjson.dumps({"Pod": svc.pod("normal"), "Nodes": {"items": nodes}})

    async def call(client: httpx.AsyncClient) -> httpx.Response:
        return await client.post("/filter", content=body, headers=JSON)

    reply = svc.run(call)
    assert reply.status_code == 400, reply.text[:300]
    assert reply.json()["error"].endswith(f"Nodes.items: {wire.MAX_NODES + 1} entries, more than the "
                                          f"limit of {wire.MAX_NODES}")


def test_a_preempt_over_more_node_names_than_the_limit_is_refused() -> None:
    svc = hostile_service()
    victims = {"Pods": [{"UID": "nobody"}], "NumPDBViolations": 0}
    body = {"Pod": svc.pod("attacker"),
            "NodeNameToMetaVictims": {f"ghost-{i}": victims for i in range(wire.MAX_NODES + 1)}}

    async def call(client: httpx.AsyncClient) -> httpx.Response:
        return await client.post("/preempt", content=orjson.dumps(body), headers=JSON)

    reply = svc.run(call)
    assert reply.status_code == 400, reply.text[:300]
    assert "NodeNameToMetaVictims: 10001 entries, more than the limit of 10000" in reply.json()["error"]
