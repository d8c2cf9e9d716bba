"""What an operator scrapes from /metrics: platform collectors, build info, leader status,
one count per bind whatever its outcome, verb requests by status code, no ``_created`` series."""

from __future__ import annotations

import importlib.metadata

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.scheduling.cluster import Service, bind_call, claim, gpu_cluster, pod


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float:
    return samples(text)[(name, frozenset(labels.items()))]


@pytest.fixture
def svc() -> Service:
    objs = [*gpu_cluster(nodes=2, per_node=1), claim("c"), pod("p", claims={"g": "c"})]
    objs += [pod(f"plain-{i}") for i in range(8)]
    objs.append(pod("foreign", scheduler="default-scheduler"))
    return Service(objs, scheduler_names=("dra-extender-scheduler",))


def test_process_platform_gc_and_build_info_are_exported(svc):
    text = svc.run(lambda c: c.get("/metrics")).text
    names = {s[0] for s in samples(text)}
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"} <= names
    assert "python_info" in names and "python_gc_collections_total" in names
    version = importlib.metadata.version("dra-extender")
    assert value(text, "dra_extender_build_info", version=version) == 1


def test_no_created_series(svc):
    async def call(client):
        await bind_call(client, svc.pod("p"), "node-0")
        return (await client.get("/metrics")).text

    text = svc.run(call)
    assert "_created" not in text
    assert value(text, "dra_extender_binds_total", outcome="bound") == 1


def test_every_bind_request_is_counted_under_an_outcome(svc):
    """Ten bind requests, one of them refused before the bind starts: ten counted."""

    async def call(client):
        errors = [await bind_call(client, svc.pod("p"), "node-0")]
        errors += [await bind_call(client, svc.pod(f"plain-{i}"), "node-1") for i in range(8)]
        errors.append(await bind_call(client, svc.pod("foreign"), "node-1"))
        return errors, (await client.get("/metrics")).text

    errors, text = svc.run(call)
    assert errors[:9] == [""] * 9 and "schedulerName" in errors[9]
    binds = {dict(labels)["outcome"]: v for (name, labels), v in samples(text).items()
             if name == "dra_extender_binds_total"}
    assert binds["bound"] == 9 and binds["refused"] == 1
    assert sum(binds.values()) == 10


def test_unknown_pod_stale_uid_and_standby_binds_are_refused(svc):
    async def call(client):
        unknown = {"PodName": "ghost", "PodNamespace": "default", "PodUID": "u", "Node": "node-0"}
        stale = {**unknown, "PodName": "p", "PodUID": "not-its-uid"}
        for body in (unknown, stale):
            assert "Error" in (await client.post("/bind", json=body)).json()
        svc.ctx.is_leader = lambda: False
        await bind_call(client, svc.pod("p"), "node-0")
        return (await client.get("/metrics")).text

    text = svc.run(call)
    assert value(text, "dra_extender_binds_total", outcome="refused") == 3
    assert value(text, "dra_extender_binds_total", outcome="bound") == 0


def test_leader_status_and_cache_sync_are_gauges(svc):
    text = svc.run(lambda c: c.get("/metrics")).text
    assert value(text, "dra_extender_leader") == 1
    assert value(text, "dra_extender_cache_synced") == 1
    svc.ctx.is_leader = lambda: False
    text = svc.run(lambda c: c.get("/metrics")).text
    assert value(text, "dra_extender_leader") == 0


def test_without_leader_election_the_gauge_follows_the_schedulers_lease(svc):
    # --no-leader-elect: every replica commits binds, but only the one whose kube-scheduler
    # holds its Lease schedules, and that is what the gauge (and DRAExtenderNoLeader) reads.
    holds = [False]
    svc.ctx.scheduler_leader = lambda: holds[0]
    assert value(svc.run(lambda c: c.get("/metrics")).text, "dra_extender_leader") == 0
    assert svc.ctx.leading
    holds[0] = True
    assert value(svc.run(lambda c: c.get("/metrics")).text, "dra_extender_leader") == 1


def test_verb_requests_are_counted_by_status_code(svc):
    async def call(client):
        await client.post("/filter", content=b"{not json")
        await bind_call(client, svc.pod("p"), "node-0")
        return (await client.get("/metrics")).text

    text = svc.run(call)
    assert value(text, "dra_extender_requests_total", verb="filter", code="400") == 1
    assert value(text, "dra_extender_requests_total", verb="bind", code="200") == 1
