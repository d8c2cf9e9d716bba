"""The in-process hot-path benchmark schedules like the load test and reports sane figures."""

from __future__ import annotations

import asyncio

import pytest

from loadtest.bench_hotpath import main, schedule, service
from loadtest.workloads import WorkloadParams, generate


@pytest.mark.parametrize("name", ["template", "constraint", "partitionable"])
def test_every_schedulable_pod_is_bound(name: str) -> None:
    workload = generate(name, WorkloadParams(nodes=6, devices_per_node=4, pods=8, seed=2))
    figures = asyncio.run(schedule(service(workload), workload, candidates=3))
    assert figures.bound == workload.expected_bound > 0
    assert figures.pods == 8 and figures.candidates == 3
    assert figures.filter_ms_per_pod > 0 and figures.prioritize_ms_per_pod > 0
    assert figures.filter_us_per_node == pytest.approx(figures.filter_ms_per_pod * 1000 / 3)


def test_cli_prints_figures_and_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--nodes", "4", "--pods", "3", "--profile"]) == 0
    out = capsys.readouterr().out
    assert "function calls" in out and "3/3 pods bound" in out and "µs per candidate node" in out
    with pytest.raises(SystemExit):
        main(["--nodes", "0"])
