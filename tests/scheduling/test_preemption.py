"""Preemption for devices, driven as kube-scheduler drives it (tests/scheduling/cluster.py).

filter reports device contention as FailedNodes; DefaultPreemption, blind to devices, proposes
the node with no victims (or few); /preempt names the victims the claims need; the victims are
deleted and the claim controller deallocates their claims; the preemptor, nominated to the node,
binds. A pod of lower or equal priority arriving in between must not take the freed devices.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.scheduling.cluster import (
    Service,
    bind_call,
    claim,
    claim_spec,
    filter_call,
    gpu_cluster,
    pod,
    request,
    template,
)

VICTIMS = {"v10": 10, "v20": 20, "v30": 30, "v40": 40}


def prio(obj: dict[str, Any], priority: int, **labels: str) -> dict[str, Any]:
    obj["spec"]["priority"] = priority
    if labels:
        obj["metadata"]["labels"] = labels
    return obj


def full_node(extra: list[dict[str, Any]] | None = None, **labels_by_pod: dict[str, str]) -> Service:
    """One node with 4 GPUs held by four single-GPU pods of priority 10..40, plus the preemptor
    (priority 1000, 2 GPUs) and a latecomer (priority 5, 1 GPU), unbound."""
    objs = [*gpu_cluster(nodes=1, per_node=4), template("one"), template("two", claim_spec(request(count=2)))]
    objs += [
        prio(pod(n, templates={"gpu": "one"}), p, **labels_by_pod.get(n, {})) for n, p in VICTIMS.items()
    ]
    objs += [prio(pod("hi", templates={"gpu": "two"}), 1000), prio(pod("lo", templates={"gpu": "one"}), 5)]
    svc = Service([*objs, *(extra or [])])

    async def bind_all(client: httpx.AsyncClient) -> None:
        for name in VICTIMS:
            assert await bind_call(client, svc.pod(name), "node-0") == ""

    svc.run(bind_all)
    return svc


def uid(svc: Service, name: str) -> str:
    return str(svc.pod(name)["metadata"]["uid"])


def names(svc: Service, uids: list[str]) -> list[str]:
    by_uid = {p.uid: p.name for p in svc.state.pods.values()}
    return [by_uid.get(u, u) for u in uids]


async def preempt_call(client: httpx.AsyncClient, pod_obj: dict[str, Any], victims: dict[str, Any]) -> Any:
    response = await client.post("/preempt", json={"Pod": pod_obj, "NodeNameToMetaVictims": victims})
    assert response.status_code == 200, response.text
    return response.json()["NodeNameToMetaVictims"]


def meta(*uids: str, pdb: int = 0) -> dict[str, Any]:
    return {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": pdb}


def test_the_whole_flow_evicts_the_two_lowest_priority_pods_and_holds_their_gpus_for_the_preemptor():
    svc = full_node()

    async def flow(client: httpx.AsyncClient) -> None:
        # 1. filter: every GPU is taken, and evicting pods could free some.
        result = await filter_call(client, svc.pod("hi"), ["node-0"])
        assert result["NodeNames"] == [] and "node-0" in result["FailedNodes"]
        # 2. preempt: kube-scheduler (>= PR 135486) proposes the node with no victims.
        chosen = await preempt_call(client, svc.pod("hi"), {"node-0": meta()})
        assert list(chosen) == ["node-0"]
        assert names(svc, [p["UID"] for p in chosen["node-0"]["Pods"]]) == ["v20", "v10"]
        assert chosen["node-0"]["NumPDBViolations"] == 0
        # 3. kube-scheduler deletes the victims (graceful: terminating first) and nominates the node.
        for name in ("v10", "v20"):
            victim = svc.pod(name)
            victim["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            svc.cluster.apply(victim)
        hi = svc.pod("hi")
        hi["status"]["nominatedNodeName"] = "node-0"
        svc.cluster.apply(hi)
        assert (await filter_call(client, svc.pod("lo"), ["node-0"]))["NodeNames"] == []
        # 4. the victims are gone, the claim controller deallocates their claims: 2 GPUs are free,
        #    but held for the nominated preemptor.
        for name in ("v10", "v20"):
            assert svc.cluster.delete("Pod", "default", name)
        assert len(svc.state.inuse.devices) == 2
        lo = await filter_call(client, svc.pod("lo"), ["node-0"])
        assert lo["NodeNames"] == [] and "node-0" in lo["FailedNodes"]
        assert await bind_call(client, svc.pod("lo"), "node-0") != ""  # bind respects the hold too
        # A more important pod does not see the hold (as kube-scheduler's nominated pods).
        urgent = prio(pod("urgent", templates={"gpu": "one"}), 2000)
        svc.cluster.apply(urgent)
        assert (await filter_call(client, svc.pod("urgent"), ["node-0"]))["NodeNames"] == ["node-0"]
        # 5. the preemptor binds on its nominated node and gets the freed GPUs.
        result = await filter_call(client, svc.pod("hi"), ["node-0"])
        assert result["NodeNames"] == ["node-0"]
        assert await bind_call(client, svc.pod("hi"), "node-0") == ""
        # Bound: the hold ends, and nothing is counted twice.
        assert len(svc.state.inuse.devices) == 4

    svc.run(flow)


def test_victims_proposed_by_kube_scheduler_are_all_kept_and_extended():
    svc = full_node()

    async def flow(client: httpx.AsyncClient) -> Any:
        return await preempt_call(client, svc.pod("hi"), {"node-0": meta(uid(svc, "v30"), pdb=1)})

    chosen = svc.run(flow)["node-0"]
    assert names(svc, [p["UID"] for p in chosen["Pods"]]) == ["v30", "v10"]
    assert chosen["NumPDBViolations"] == 1


def test_pods_a_disruption_budget_protects_are_reprieved_first():
    budget = {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-v10", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "keep"}}},
        "status": {"disruptionsAllowed": 0},
    }
    svc = full_node([budget], v10={"app": "keep"})

    async def flow(client: httpx.AsyncClient) -> Any:
        return await preempt_call(client, svc.pod("hi"), {"node-0": meta()})

    chosen = svc.run(flow)["node-0"]
    assert names(svc, [p["UID"] for p in chosen["Pods"]]) == ["v30", "v20"]
    assert chosen["NumPDBViolations"] == 0


def test_a_budget_that_cannot_be_kept_is_counted():
    budget = {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-all", "namespace": "default"},
        "spec": {"minAvailable": 4, "selector": {"matchLabels": {"app": "keep"}}},
        "status": {"disruptionsAllowed": 0},
    }
    svc = full_node([budget], **{n: {"app": "keep"} for n in VICTIMS})

    async def flow(client: httpx.AsyncClient) -> Any:
        return await preempt_call(client, svc.pod("hi"), {"node-0": meta()})

    chosen = svc.run(flow)["node-0"]
    assert names(svc, [p["UID"] for p in chosen["Pods"]]) == ["v20", "v10"]
    assert chosen["NumPDBViolations"] == 2


def test_only_lower_priority_pods_are_victims_and_nodes_no_eviction_helps_are_dropped():
    svc = full_node()

    async def flow(client: httpx.AsyncClient) -> Any:
        mid = prio(pod("mid", templates={"gpu": "two"}), 25)
        svc.cluster.apply(mid)
        # Only v10 and v20 rank below 25: both go.
        first = await preempt_call(client, svc.pod("mid"), {"node-0": meta()})
        low = prio(pod("low", templates={"gpu": "two"}), 15)
        svc.cluster.apply(low)
        # Only v10 ranks below 15: one GPU is not enough, the node is dropped.
        second = await preempt_call(client, svc.pod("low"), {"node-0": meta()})
        return first, second

    first, second = svc.run(flow)
    assert names(svc, [p["UID"] for p in first["node-0"]["Pods"]]) == ["v20", "v10"]
    assert second == {}


def test_a_claim_shared_with_a_pod_that_stays_frees_nothing():
    # v-shared-a (priority 1) and keeper (priority 2000) share one allocated GPU claim; a
    # preemptor of priority 1000 may evict v-shared-a, but the GPU stays with keeper.
    objs = [*gpu_cluster(nodes=1, per_node=1), claim("shared")]
    objs += [prio(pod("a", claims={"gpu": "shared"}), 1), prio(pod("keeper", claims={"gpu": "shared"}), 2000)]
    objs += [prio(pod("hi", claims={"gpu": "mine"}), 1000), claim("mine")]
    svc = Service(objs)

    async def flow(client: httpx.AsyncClient) -> Any:
        assert await bind_call(client, svc.pod("a"), "node-0") == ""
        assert await bind_call(client, svc.pod("keeper"), "node-0") == ""
        return await preempt_call(client, svc.pod("hi"), {"node-0": meta()})

    assert svc.run(flow) == {}


def test_admin_access_needs_no_victims():
    admin = claim_spec(request(count=1, adminAccess=True))
    objs = [*gpu_cluster(nodes=1, per_node=1), template("one"), claim("admin", admin)]
    objs += [prio(pod("v", templates={"gpu": "one"}), 1), prio(pod("hi", claims={"gpu": "admin"}), 1000)]
    svc = Service(objs)

    async def flow(client: httpx.AsyncClient) -> Any:
        assert await bind_call(client, svc.pod("v"), "node-0") == ""
        return await preempt_call(client, svc.pod("hi"), {"node-0": meta()})

    assert svc.run(flow) == {"node-0": meta()}


def test_explain_names_the_pods_that_would_have_to_go():
    svc = full_node()

    async def flow(client: httpx.AsyncClient) -> Any:
        mid = prio(pod("mid", templates={"gpu": "two"}), 15)
        svc.cluster.apply(mid)
        hi = (await client.get("/debug/explain", params={"pod": "default/hi"})).json()
        low = (await client.get("/debug/explain", params={"pod": "default/mid"})).json()
        return hi["nodes"]["node-0"], low["nodes"]["node-0"]

    hi, low = svc.run(flow)
    assert not hi["fits"]
    assert hi["preemption"] == {"evict": ["default/v20", "default/v10"], "pdbViolations": 0}
    assert low["preemption"] == "evicting pods of lower priority than 15 makes no room"
