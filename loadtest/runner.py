"""One load-test run: generate, (start the server,) schedule, check, measure."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from loadtest import checks, promtext
from loadtest.churn import Churn
from loadtest.driver import DriverConfig, SchedulerDriver
from loadtest.http import KeepAlivePool
from loadtest.server import ExtenderServer, ServerError
from loadtest.stats import LatencyLog
from loadtest.workloads import Workload, WorkloadParams, generate, write_state

MIB = 1024 * 1024


@dataclass(frozen=True)
class RunSpec:
    workload: str
    params: WorkloadParams
    driver: DriverConfig = field(default_factory=DriverConfig)
    out_dir: Path = Path("loadtest/results")
    url: str | None = None  # None: start `dra-extender serve` on the generated state
    http_timeout: float = 5.0  # kube-scheduler's default httpTimeout
    ready_timeout: float = 300.0
    churn_window: int = 32
    state_format: str = "yaml"  # of the generated state the started extender loads: yaml or json


@dataclass
class RunOutcome:
    """Everything measured; `log` keeps every sample for the plot."""

    result: dict[str, Any]
    log: LatencyLog


@dataclass(frozen=True)
class Phase:
    name: str
    pods: int
    bound: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        rate = self.bound / self.seconds if self.seconds > 0 else 0.0
        return {**asdict(self), "seconds": round(self.seconds, 3), "pods_per_second": round(rate, 1)}


async def _metrics(client: httpx.AsyncClient) -> str:
    """The server's exposition, or "" when it has none (the figures are then reported as n/a)."""
    try:
        response = await client.get("/metrics")
    except httpx.HTTPError:
        return ""
    return response.text if response.status_code == 200 else ""


def _server_latency(before: str, after: str) -> dict[str, dict[str, float | None]]:
    """Per verb, the server's own view: calls, mean and the bucket bound holding p99, in ms.

    Set beside the client's figures, this separates the extender's time from the HTTP and
    load-generator overhead in the same machine.
    """
    earlier = promtext.request_histograms(before)
    out: dict[str, dict[str, float | None]] = {}
    for verb, histogram in promtext.request_histograms(after).items():
        delta = histogram.minus(earlier.get(verb))
        if delta.count <= 0:
            continue
        mean, p99 = delta.mean(), delta.percentile_bound(99)
        out[verb] = {
            "calls": delta.count,
            "mean_ms": None if mean is None else round(mean * 1000, 3),
            "p99_bucket_ms": None if p99 is None else p99 * 1000,
        }
    return out


async def _claims(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    response = await client.get("/debug/claims")
    response.raise_for_status()
    items = response.json().get("items")
    if not isinstance(items, list):
        raise ValueError("/debug/claims did not return {'items': [...]}")
    return items


def _phase(name: str, pods: int, driver: SchedulerDriver, started: float, bound_before: int) -> Phase:
    ends = driver.bound_at[bound_before:]
    seconds = (ends[-1] if ends else driver.now()) - started
    return Phase(name, pods, len(driver.bound) - bound_before, seconds)


async def drive(
    workload: Workload, url: str, spec: RunSpec, transport: httpx.AsyncBaseTransport | None = None
) -> tuple[dict[str, Any], LatencyLog]:
    """Schedule the workload against a ready extender at `url` and check what it allocated.

    `transport` replaces the network, for exercising the driver against an in-process extender.
    """
    limits = httpx.Limits(max_connections=spec.driver.bind_concurrency + 8)
    async with httpx.AsyncClient(
        base_url=url, timeout=spec.http_timeout, limits=limits, transport=transport
    ) as client:
        metrics_before = await _metrics(client)
        # Over a real network the verbs skip httpx, whose CPU cost would be taken from the server.
        pool = KeepAlivePool(url, spec.http_timeout) if transport is None else None
        driver = SchedulerDriver(client, workload.node_names, spec.driver, poster=pool)
        try:
            for pod in workload.pods:
                driver.submit(pod)
            started, cpu_started = driver.now(), time.process_time()
            load_before = os.getloadavg()[0]
            await driver.run()
            first = "warm-up" if workload.churn_pods else "all"
            phases = [_phase(first, len(workload.pods), driver, started, 0)]
            deleted: set[tuple[str, str]] = set()
            errors: list[str] = []
            if workload.churn_pods:
                churn = Churn(driver, window=spec.churn_window)
                before, started = len(driver.bound), driver.now()
                await churn.run(workload.churn_pods)
                phases.append(_phase("churn", len(workload.churn_pods), driver, started, before))
                deleted, errors = churn.deleted, churn.errors
            driver_cpu = time.process_time() - cpu_started
            load_after = os.getloadavg()[0]
        finally:
            if pool is not None:
                pool.close()
        metrics_after = await _metrics(client)
        claims = await _claims(client)

    live = {key: node for key, node in driver.bound.items() if key not in deleted}
    bound = len(driver.bound)
    cel_before = promtext.cel_evaluations(metrics_before)
    cel_after = promtext.cel_evaluations(metrics_after)
    cel_per_pod = None
    if cel_after is not None and bound:  # a counter may only appear after its first increment
        cel_per_pod = round((cel_after - (cel_before or 0.0)) / bound, 1)
    total_seconds = sum(p.seconds for p in phases)
    result = {
        "workload": workload.name,
        "nodes": workload.params.nodes,
        "devices_per_node": workload.params.devices_per_node,
        "seed": workload.params.seed,
        "candidates_per_filter": driver.sampler.count,
        "bind_concurrency": spec.driver.bind_concurrency,
        "capacity": workload.capacity,
        "pods_expected": workload.expected_bound,
        "pods_bound": bound,
        "pods_unschedulable": len(driver.unschedulable),
        "unschedulable_sample": sorted(f"{ns}/{n}: {r}" for (ns, n), r in driver.unschedulable.items())[:5],
        "failed_attempts": {kind: len(msgs) for kind, msgs in driver.failures.items()},
        "failed_attempt_samples": {kind: sorted(set(msgs))[:3] for kind, msgs in driver.failures.items()},
        "pods_per_second": round(bound / total_seconds, 1) if total_seconds > 0 else 0.0,
        "phases": [p.as_dict() for p in phases],
        "latency_ms": driver.log.summary(),
        "server_latency_ms": _server_latency(metrics_before, metrics_after),
        "cel_evaluations_per_pod": cel_per_pod,
        "driver_cpu_ms_per_pod": _per_pod_ms(0.0, driver_cpu, bound),
        # The machine is shared: 1-minute load average as scheduling started and as it ended.
        "load_average": [round(load_before, 2), round(load_after, 2)],
        "claims_allocated": sum(1 for c in claims if (c.get("status") or {}).get("allocation")),
        "double_allocations": [str(d) for d in checks.find_double_allocations(claims)],
        "misplaced_pods": checks.find_misplaced_pods(claims, live)[:20],
        "unreserved_pods": checks.find_unreserved_pods(claims, live)[:20],
        "churn_errors": errors[:20],
    }
    result["ok"] = (
        bound == workload.expected_bound
        and not result["double_allocations"]
        and not result["misplaced_pods"]
        and not result["unreserved_pods"]
        and not errors
    )
    return result, driver.log


def _require_ready(url: str) -> None:
    try:
        status = httpx.get(f"{url.rstrip('/')}/readyz", timeout=5.0).status_code
    except httpx.HTTPError as e:
        raise ServerError(f"no extender reachable at {url}: {e}") from None
    if status != 200:
        raise ServerError(f"the extender at {url} is not ready (/readyz answered {status})")


def run(spec: RunSpec) -> RunOutcome:
    workload = generate(spec.workload, spec.params)
    if spec.url is not None:
        _require_ready(spec.url)
        result, log = asyncio.run(drive(workload, spec.url, spec))
        result["server_peak_rss_mb"] = None
        result["server_cpu_ms_per_pod"] = None
        return RunOutcome(result, log)
    state = spec.out_dir / "state"
    write_state(workload, state, spec.state_format)
    with ExtenderServer(state, spec.out_dir / "server.log", spec.ready_timeout) as server:
        cpu_before = server.cpu_seconds()
        result, log = asyncio.run(drive(workload, server.url, spec))
        rss, cpu_after = server.peak_rss_bytes(), server.cpu_seconds()
        result["server_startup_seconds"] = round(server.startup_seconds or 0.0, 2)
        result["server_peak_rss_mb"] = round(rss / MIB, 1) if rss is not None else None
        result["server_cpu_ms_per_pod"] = _per_pod_ms(cpu_before, cpu_after, result["pods_bound"])
    return RunOutcome(result, log)


def _per_pod_ms(before: float | None, after: float | None, pods: int) -> float | None:
    if before is None or after is None or not pods:
        return None
    return round((after - before) * 1000 / pods, 2)
