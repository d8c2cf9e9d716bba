"""A tiny run against a real `dra-extender serve` subprocess."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from loadtest.driver import DriverConfig
from loadtest.runner import RunSpec, run
from loadtest.workloads import WorkloadParams


def _service_missing() -> str | None:
    try:
        importlib.import_module("extender.cli")
    except ImportError as e:
        return f"the extender service (extender.cli) is not importable yet: {e}"
    return None


pytestmark = pytest.mark.skipif(_service_missing() is not None, reason=str(_service_missing()))


@pytest.mark.parametrize(("workload", "pods"), [("template", 6), ("steady", 4)])
def test_tiny_run_binds_every_pod_without_double_allocation(workload: str, pods: int, tmp_path: Path) -> None:
    spec = RunSpec(
        workload=workload,
        params=WorkloadParams(nodes=4, devices_per_node=2, pods=pods, seed=3),
        driver=DriverConfig(bind_concurrency=4, backoff_initial=0.01),
        out_dir=tmp_path,
        ready_timeout=60,
    )
    result = run(spec).result
    assert result["pods_bound"] == result["pods_expected"] >= pods, result
    assert result["double_allocations"] == []
    assert result["misplaced_pods"] == [] and result["unreserved_pods"] == []
    assert result["latency_ms"]["filter"]["errors"] == 0
    assert result["server_peak_rss_mb"] > 0
    assert result["ok"], result
