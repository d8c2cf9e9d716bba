from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from loadtest.driver import CandidateSampler, DriverConfig, SchedulerDriver, nodes_to_find
from loadtest.runner import RunSpec, drive
from loadtest.workloads import WorkloadParams, generate
from tests.loadtest.fake_extender import FakeExtender

FAST = DriverConfig(bind_concurrency=4, max_attempts=3, backoff_initial=0.001, backoff_max=0.005)


@pytest.mark.parametrize(
    ("nodes", "percentage", "expected"),
    [(5, 0, 5), (99, 0, 99), (100, 0, 100), (500, 0, 230), (1000, 0, 420), (5000, 0, 500), (20000, 0, 1000)],
)
def test_adaptive_percentage_of_nodes_to_score(nodes: int, percentage: int, expected: int) -> None:
    assert nodes_to_find(nodes, percentage) == expected


def test_explicit_percentage_has_a_floor_of_100_nodes() -> None:
    assert nodes_to_find(5000, 20) == 1000
    assert nodes_to_find(300, 10) == 100
    assert nodes_to_find(300, 100) == 300


def test_sampler_rotates_through_every_node() -> None:
    sampler = CandidateSampler([f"n{i}" for i in range(5)], 3)
    assert sampler.next() == ["n0", "n1", "n2"]
    assert sampler.next() == ["n3", "n4", "n0"]
    assert sampler.next() == ["n1", "n2", "n3"]


def test_sampler_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="no nodes"):
        CandidateSampler([], 1)
    with pytest.raises(ValueError, match=">= 1"):
        CandidateSampler(["n"], 0)


def _drive(name: str, params: WorkloadParams, fake: FakeExtender | None = None, **driver: object) -> dict:
    workload = generate(name, params)
    fake = fake or FakeExtender(workload.objects)
    config = DriverConfig(**{**FAST.__dict__, **driver})
    spec = RunSpec(workload=name, params=params, driver=config, out_dir=Path("unused"))
    result, _log = asyncio.run(drive(workload, "http://fake", spec, transport=fake.transport()))
    result["_calls"] = fake.calls
    return result


@pytest.mark.parametrize("name", ["template", "shared", "steady"])
def test_every_pod_is_bound_once_and_nothing_doubles(name: str) -> None:
    result = _drive(name, WorkloadParams(nodes=4, devices_per_node=2, pods=6))
    assert result["pods_bound"] == result["pods_expected"] > 0
    assert result["double_allocations"] == [] and result["misplaced_pods"] == []
    assert result["unreserved_pods"] == [] and result["ok"]
    assert result["latency_ms"]["filter"]["calls"] >= result["pods_bound"]
    assert result["cel_evaluations_per_pod"] > 0


def test_steady_deletes_one_old_pod_per_churn_pod() -> None:
    params = WorkloadParams(nodes=4, devices_per_node=4, pods=12)
    workload = generate("steady", params)
    fake = FakeExtender(workload.objects)
    result = _drive("steady", params, fake)
    assert result["_calls"]["/local/delete"] == 12
    assert result["_calls"]["/local/apply"] == 2  # batches of 8
    assert [p["name"] for p in result["phases"]] == ["warm-up", "churn"]
    assert result["phases"][1]["bound"] == 12 and result["ok"]
    # Oldest first: with fewer warm-up pods than churn pods, only the newest churn pods remain.
    warm = len(workload.pods)
    assert 0 < warm < 12
    assert sorted(fake.pods) == [f"pod-churn-{i:05d}" for i in range(12 - warm, 12)]


def test_planted_double_allocation_fails_the_run() -> None:
    workload = generate("template", WorkloadParams(nodes=2, devices_per_node=4, pods=6))
    result = _drive("template", workload.params, FakeExtender(workload.objects, reuse_devices=True))
    assert result["double_allocations"] and not result["ok"]


def test_unschedulable_pods_are_retried_a_bounded_number_of_times() -> None:
    params = WorkloadParams(nodes=2, devices_per_node=1, pods=5)
    result = _drive("template", params, max_attempts=3)
    bound = result["pods_bound"]
    assert bound == result["pods_expected"] <= 2
    assert result["pods_unschedulable"] == 5 - bound
    assert result["_calls"]["/filter"] == bound + 3 * (5 - bound)
    # Pods filtered before earlier binds landed may lose the device at bind: also an attempt.
    failed = result["failed_attempts"]
    assert sum(failed.values()) == 3 * (5 - bound) and set(failed) <= {"no feasible node", "bind failed"}
    assert "0/2 nodes available" in result["unschedulable_sample"][0]


def test_prioritize_is_skipped_when_one_node_survives() -> None:
    single = _drive("template", WorkloadParams(nodes=1, devices_per_node=4, pods=3))
    assert single["pods_bound"] == 3 and "/prioritize" not in single["_calls"]
    several = _drive("template", WorkloadParams(nodes=3, devices_per_node=4, pods=3))
    assert several["_calls"]["/prioritize"] == 3


def test_bind_failure_requeues_the_pod() -> None:
    workload = generate("template", WorkloadParams(nodes=1, devices_per_node=2, pods=1))
    fake = FakeExtender(workload.objects)
    failures = iter([True, False])
    original = fake.bind

    def flaky_bind(args: dict) -> dict:
        return {"Error": "conflict, try again"} if next(failures) else original(args)

    fake.bind = flaky_bind  # type: ignore[method-assign]
    result = _drive("template", workload.params, fake)
    assert result["pods_bound"] == 1 and result["latency_ms"]["bind"]["calls"] == 2
    assert result["latency_ms"]["bind"]["errors"] == 0  # an Error reply is a valid HTTP exchange
    assert result["failed_attempts"] == {"bind failed": 1}
    assert "conflict, try again" in result["failed_attempt_samples"]["bind failed"][0]


def test_filter_errors_count_and_retry() -> None:
    workload = generate("template", WorkloadParams(nodes=1, devices_per_node=1, pods=1))

    def broken(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, text="boom")

    async def go() -> SchedulerDriver:
        async with httpx.AsyncClient(base_url="http://x", transport=httpx.MockTransport(broken)) as client:
            driver = SchedulerDriver(client, workload.node_names, FAST)
            driver.submit(workload.pods[0])
            await driver.run()
            return driver

    driver = asyncio.run(go())
    assert not driver.bound
    (reason,) = driver.unschedulable.values()
    assert "HTTP 500" in reason
    assert driver.log.summary()["filter"] == {**driver.log.summary()["filter"], "calls": 3, "errors": 3}
