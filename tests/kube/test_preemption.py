"""Preemption for devices with --kube, against the test API server, driven as kube-scheduler
drives it: filter reports device contention as FailedNodes, DefaultPreemption (blind to
devices) proposes the node with no victims, /preempt names them, they are deleted, the
resourceclaim controller deallocates their claims, and the nominated preemptor binds; a pod of
lower priority arriving in between does not get the freed devices."""

from __future__ import annotations

from typing import Any

import pytest

from tests.apiserver.controller import sync_claims
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer
from tests.kube import objects
from tests.kube.conftest import eventually
from tests.reliability.harness import audit, bind, extender, filter_nodes, pod_obj

pytestmark = pytest.mark.anyio

POD, CLAIM = BY_KIND["Pod"], BY_KIND["ResourceClaim"]
VICTIMS = {"v10": 10, "v20": 20, "v30": 30, "v40": 40}


def seed(server: ApiServer, budget_on: str | None = None) -> None:
    """node-a with 4 GPUs, four single-GPU pods of priority 10..40, the preemptor (priority
    1000, 2 GPUs) and a latecomer (priority 5, 1 GPU); with ``budget_on``, a budget that
    allows no disruption of that pod."""
    store = server.store
    store.seed(BY_KIND["DeviceClass"], objects.device_class())
    store.seed(BY_KIND["Node"], objects.node("node-a"))
    store.seed(BY_KIND["ResourceSlice"], objects.resource_slice("node-a", devices=4))
    for name, priority in [*VICTIMS.items(), ("hi", 1000), ("lo", 5)]:
        claim = objects.claim(f"{name}-gpu")
        if name == "hi":
            claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
        store.seed(CLAIM, claim)
        pod = objects.pod(name, claim_name=f"{name}-gpu")
        pod["spec"]["priority"] = priority
        pod["metadata"]["labels"] = {"app": name}
        store.seed(POD, pod)
    if budget_on is not None:
        store.seed(BY_KIND["PodDisruptionBudget"], {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": f"keep-{budget_on}", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": budget_on}}},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1,
                       "expectedPods": 1, "observedGeneration": 1},
        })


async def preempt(http: Any, server: ApiServer, name: str) -> list[str]:
    """The victims /preempt names on node-a for a candidate proposed without any."""
    body = {"Pod": pod_obj(server, name),
            "NodeNameToMetaVictims": {"node-a": {"Pods": [], "NumPDBViolations": 0}}}
    reply = await http.post("/preempt", json=body)
    assert reply.status_code == 200, reply.text
    chosen = reply.json()["NodeNameToMetaVictims"]
    assert list(chosen) == ["node-a"], chosen
    by_uid = {p["metadata"]["uid"]: p["metadata"]["name"] for p in server.store.list(POD, None)[0]}
    return [by_uid[v["UID"]] for v in chosen["node-a"]["Pods"]]


async def test_a_high_priority_pod_evicts_the_two_lowest_priority_pods_and_gets_their_gpus() -> None:
    with ApiServer(bookmark_interval=0.2) as server:
        seed(server)
        async with extender(server) as (http, state, _):
            for name in VICTIMS:
                assert await bind(http, server, name, "node-a") == ""
            await eventually(lambda: len(state.inuse.devices) == 4, what="the victims' claims cached")
            filtered = await filter_nodes(http, server, "hi")
            assert filtered["NodeNames"] == [] and "node-a" in filtered["FailedNodes"]
            victims = await preempt(http, server, "hi")
            assert victims == ["v20", "v10"]
            # kube-scheduler deletes the victims and nominates node-a for the preemptor.
            for name in victims:
                server.store.delete(POD, "default", name)
            hi = pod_obj(server, "hi")
            hi["status"] = {**hi.get("status", {}), "nominatedNodeName": "node-a"}
            server.store.update(POD, "default", "hi", hi, "status")
            await eventually(
                lambda: state.pod("default", "v10") is None and state.pod("default", "v20") is None
                and state.pod("default", "hi").nominated_node == "node-a",  # type: ignore[union-attr]
                what="the deletions and the nomination cached",
            )
            assert (await filter_nodes(http, server, "lo"))["NodeNames"] == []
            # The resourceclaim controller deallocates the victims' claims: two GPUs are free,
            # but held for the nominated preemptor.
            assert sync_claims(server.store) == 2
            await eventually(lambda: len(state.inuse.devices) == 2, what="the deallocations cached")
            late = await filter_nodes(http, server, "lo")
            assert late["NodeNames"] == [] and "node-a" in late["FailedNodes"]
            assert await bind(http, server, "lo", "node-a") != ""
            filtered = await filter_nodes(http, server, "hi")
            assert filtered["NodeNames"] == ["node-a"]
            assert await bind(http, server, "hi", "node-a") == ""
            assert pod_obj(server, "hi")["spec"]["nodeName"] == "node-a"
            await audit(server, state)


async def test_a_watched_disruption_budget_spares_the_pod_it_protects() -> None:
    with ApiServer(bookmark_interval=0.2) as server:
        seed(server, budget_on="v10")
        async with extender(server) as (http, state, _):
            for name in VICTIMS:
                assert await bind(http, server, name, "node-a") == ""
            await eventually(lambda: len(state.inuse.devices) == 4 and state.disruption_budgets,
                             what="claims and budget cached")
            assert await preempt(http, server, "hi") == ["v30", "v20"]
