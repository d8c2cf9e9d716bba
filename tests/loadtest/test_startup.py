"""loadtest.startup: start a real `dra-extender serve`, wait for ready, read its CPU and memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.startup import main, measure
from loadtest.workloads import WorkloadParams, generate, write_state


def test_measure_reports_a_started_server(tmp_path: Path) -> None:
    write_state(generate("template", WorkloadParams(nodes=3, devices_per_node=2)), tmp_path, fmt="json")
    run = measure(["--state", str(tmp_path)], Path.cwd(), timeout=600.0)
    assert run.ready_seconds > 0 and run.cpu_seconds > 0 and run.peak_rss_bytes > 10 * 2**20


def test_a_server_that_cannot_start_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.json").write_text("[1]")
    assert main(["--state", str(tmp_path), "--repeat", "1"]) == 2
    assert "bad.json: expected a Kubernetes object or a List" in capsys.readouterr().err
