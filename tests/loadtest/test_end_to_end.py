"""A tiny run against a real `dra-extender serve` subprocess, over loopback.

The full suite may run on a loaded 2-core machine: every limit here is generous (the server's
start-up, each HTTP call, the number of attempts), and nothing asserts on timing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.driver import DriverConfig
from loadtest.runner import RunSpec, run
from loadtest.workloads import WorkloadParams


@pytest.mark.parametrize(("workload", "pods"), [("template", 6), ("steady", 4)])
def test_tiny_run_binds_every_pod_without_double_allocation(workload: str, pods: int, tmp_path: Path) -> None:
    spec = RunSpec(
        workload=workload,
        params=WorkloadParams(nodes=4, devices_per_node=2, pods=pods, seed=3),
        driver=DriverConfig(bind_concurrency=4, backoff_initial=0.01, max_attempts=100),
        out_dir=tmp_path,
        http_timeout=120.0,
        ready_timeout=600.0,
    )
    result = run(spec).result
    assert result["pods_bound"] == result["pods_expected"] >= pods, result
    assert result["double_allocations"] == []
    assert result["misplaced_pods"] == [] and result["unreserved_pods"] == []
    assert result["latency_ms"]["filter"]["errors"] == 0
    assert result["server_peak_rss_mb"] > 0
    assert result["ok"], result
