"""Stale claims are released through the API server when filter finds no node (upstream's
PostFilter), with the production binder and watch; and a claim of another pod never is."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer
from tests.kube import objects
from tests.kube.conftest import eventually
from tests.reliability.harness import CLAIM, POD, audit, extender, filter_nodes, pod_obj, schedule

pytestmark = pytest.mark.anyio


def seed(server: ApiServer, allocation: dict[str, Any], reserved_for: list[str], devices: Any = None) -> None:
    """Two nodes of one GPU each, pod p, and its claim c with ``allocation`` reserved for the
    named pods (``p`` or others)."""
    store = server.store
    store.seed(BY_KIND["DeviceClass"], objects.device_class())
    for name in ("node-a", "node-b"):
        store.seed(BY_KIND["Node"], objects.node(name))
        store.seed(BY_KIND["ResourceSlice"], objects.resource_slice(name, devices=1))
    store.seed(BY_KIND["ResourceSlice"], objects.resource_slice("gone", devices=1))
    store.seed(POD, objects.pod("p", claim_name="c"))
    uid = store.get(POD, "default", "p")["metadata"]["uid"]
    status: dict[str, Any] = {
        "allocation": allocation,
        "reservedFor": [
            {"resource": "pods", "name": n, "uid": uid if n == "p" else f"{n}-uid"} for n in reserved_for
        ],
    }
    if devices is not None:
        status["devices"] = devices
    store.seed(CLAIM, {**objects.claim("c"), "status": status})


def failed_binding() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    allocation = objects.allocation("node-a")
    allocation["allocationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    allocation["devices"]["results"][0].update(
        bindingConditions=["attached"], bindingFailureConditions=["broken"]
    )
    condition = {
        "type": "broken",
        "status": "True",
        "reason": "Broken",
        "message": "",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }
    device = {"driver": objects.DRIVER, "pool": "node-a", "device": "gpu-0", "conditions": [condition]}
    return allocation, [device]


def server_status(server: ApiServer) -> dict[str, Any]:
    return dict(server.store.get(CLAIM, "default", "c").get("status") or {})


@pytest.mark.parametrize("case", ["its node is gone", "its binding failed"])
async def test_a_stale_claim_is_deallocated_in_the_api_and_the_pod_then_schedules(
    apiserver: ApiServer, case: str
) -> None:
    if case == "its node is gone":
        seed(apiserver, objects.allocation("gone"), [])
    else:
        allocation, devices = failed_binding()
        seed(apiserver, allocation, ["p"], devices)
    async with extender(apiserver) as (http, state, _):
        first = await filter_nodes(http, apiserver, "p")
        assert first["NodeNames"] == []
        await eventually(lambda: "allocation" not in server_status(apiserver), what="the deallocation")
        assert "reservedFor" not in server_status(apiserver) and "devices" not in server_status(apiserver)
        await eventually(lambda: state.claim("default", "c").allocation is None, what="the watch echo")
        node, error = await schedule(http, apiserver, "p")
        assert error == "" and node in ("node-a", "node-b")
        assert pod_obj(apiserver, "p")["spec"]["nodeName"] == node
        await audit(apiserver, state)


async def test_a_claim_reserved_for_another_pod_is_never_released(apiserver: ApiServer) -> None:
    seed(apiserver, objects.allocation("gone"), ["q"])
    before = apiserver.store.get(CLAIM, "default", "c")["metadata"]["resourceVersion"]
    async with extender(apiserver) as (http, _, _):
        assert (await filter_nodes(http, apiserver, "p"))["NodeNames"] == []
        await asyncio.sleep(0.3)
        assert apiserver.store.get(CLAIM, "default", "c")["metadata"]["resourceVersion"] == before
        assert server_status(apiserver)["allocation"] == objects.allocation("gone")
