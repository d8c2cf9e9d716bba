"""The extender as kube-scheduler meets it, over the test API server, for the fault tests.

``extender`` runs the app with the production Kubernetes source and binder against an
:class:`ApiServer`; ``filter_nodes``, ``bind`` and ``schedule`` play the scheduler's part;
``audit`` is the check every fault test ends with: no device allocated to two claims, no claim
allocated without a consumer, every bound pod holding its claims on its node, and the
extender's cache agreeing with the server.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import httpx

from extender.api import create_app
from extender.cel.environment import Environment
from extender.config import Config
from extender.kube.binder import KubeBinder
from extender.kube.client import RawClient
from extender.kube.source import Backoff, KubeSource
from extender.metrics import Metrics
from extender.scheduling.context import SchedulingContext
from extender.state import ClusterState
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer
from tests.kube import objects
from tests.kube.conftest import eventually
from tests.kube.test_service import NODES
from tests.reliability.figures import record

CLAIM, POD = BY_KIND["ResourceClaim"], BY_KIND["Pod"]
FAST = Backoff(initial=0.05, cap=0.2)


@contextlib.asynccontextmanager
async def extender(
    server: ApiServer, *, wait_ready: bool = True, request_timeout: float = 5.0,
    lease_term: Callable[[], str | None] | None = None, **config: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, ClusterState, SchedulingContext]]:
    client = RawClient(server.api_client(), request_timeout=request_timeout)
    state = ClusterState()
    cfg = replace(Config(kube=True), **config)
    binder = KubeBinder(client, retry_delay=0.001)
    ctx = SchedulingContext(
        cfg, state, binder, Metrics(), Environment.create(), lease_term=lease_term
    )
    background = [KubeSource(client, state, backoff=FAST).run]
    if lease_term is not None:
        background.append(ctx.handover.watch)
    app = create_app(ctx, background=background)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://extender") as http:
            if wait_ready:
                await eventually(lambda: state.synced, what="extender ready")
            yield http, state, ctx


def pod_obj(server: ApiServer, name: str) -> dict[str, Any]:
    return server.store.get(POD, "default", name)


async def filter_nodes(http: httpx.AsyncClient, server: ApiServer, name: str) -> dict[str, Any]:
    reply = await http.post("/filter", json={"Pod": pod_obj(server, name), "NodeNames": NODES})
    assert reply.status_code == 200, reply.text
    return reply.json()


async def bind(http: httpx.AsyncClient, server: ApiServer, name: str, node: str) -> str:
    body = {
        "PodName": name,
        "PodNamespace": "default",
        "PodUID": pod_obj(server, name)["metadata"]["uid"],
        "Node": node,
    }
    reply = await http.post("/bind", json=body)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["Error"])


async def schedule(http: httpx.AsyncClient, server: ApiServer, name: str) -> tuple[str | None, str]:
    result = await filter_nodes(http, server, name)
    if result["Error"] or not result["NodeNames"]:
        return None, result["Error"] or f"no node fits: {result}"
    node = result["NodeNames"][0]
    error = await bind(http, server, name, node)
    return (None if error else node), error


def devices(status: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (r["pool"], r["device"])
        for r in ((status.get("allocation") or {}).get("devices") or {}).get("results") or ()
    ]


async def audit(server: ApiServer, state: ClusterState) -> None:
    claims, _ = server.store.list(CLAIM, None)
    held = [d for c in claims for d in devices(c.get("status") or {})]
    doubles = [d for d, n in Counter(held).items() if n > 1]
    record("double allocations", len(doubles))
    assert not doubles, doubles
    for c in claims:
        status = c.get("status") or {}
        if status.get("allocation"):
            assert status.get("reservedFor"), f"claim {c['metadata']['name']} is allocated for nobody"
    pods, _ = server.store.list(POD, None)
    by_name = {c["metadata"]["name"]: c for c in claims}
    for p in pods:
        node = p["spec"].get("nodeName")
        if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue  # a finished pod holds nothing: the resourceclaim controller takes its claims back
        generated = {s["name"]: s.get("resourceClaimName")
                     for s in (p.get("status") or {}).get("resourceClaimStatuses") or ()}
        for ref in p["spec"].get("resourceClaims") or ():
            used = by_name.get(ref.get("resourceClaimName") or generated.get(ref["name"]) or "")
            if used is None:
                assert not node, f"pod {p['metadata']['name']} is bound without its claim {ref['name']}"
                continue  # not made yet, or gone and to be made again
            status = used.get("status") or {}
            if node:
                assert p["metadata"]["uid"] in {r["uid"] for r in status.get("reservedFor") or ()}
                assert {pool for pool, _ in devices(status)} == {node}
    expected = {(objects.DRIVER, pool, device) for pool, device in held}
    # Entries of timed-out writes are dropped by their TTL, as the next filter call would.
    await eventually(
        lambda: not state.expire_inflight() and state.inuse.devices == expected and not state.inuse.inflight,
        what="the cache to agree with the server",
    )


def cached_allocation(state: ClusterState, name: str) -> bool:
    held = state.claim("default", name)
    return held is not None and held.allocation is not None


def claim_reserved(name: str, server: ApiServer) -> bool:
    return bool((server.store.get(CLAIM, "default", name).get("status") or {}).get("reservedFor"))
