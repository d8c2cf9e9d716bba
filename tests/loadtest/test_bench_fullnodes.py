"""loadtest.bench_fullnodes: filters with full Node objects against a real server."""

from __future__ import annotations

from pathlib import Path

import orjson

from loadtest.bench_fullnodes import realistic_node, run
from loadtest.k8s import node


def test_a_realistic_node_weighs_what_a_kubelet_reported_one_does() -> None:
    full = realistic_node(node("node-00001", "zone-a"), 1)
    assert 5_000 < len(orjson.dumps(full)) < 10_000
    assert full["status"]["allocatable"] == node("node-00001", "zone-a")["status"]["allocatable"]


def test_tiny_run_answers_every_filter() -> None:
    result = run(nodes=3, requests=2, source=Path.cwd(), engine="python")
    assert result["p50_ms"] > 0 and result["server_cpu_ms"] >= 0


def test_a_run_longer_than_the_server_s_log_pipe_holds_completes() -> None:
    # A line of decision log per filter: 600 of them are more than a pipe's 64 KiB.
    result = run(nodes=2, requests=600, source=Path.cwd(), engine="python")
    assert result["p50_ms"] > 0
