"""Every workload at several cluster sizes, summarised as one markdown table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx

from loadtest.report import write_json
from loadtest.runner import RunSpec, run
from loadtest.server import ServerError

COLUMNS = (
    ("workload", "workload"),
    ("nodes", "nodes"),
    ("candidates", "candidates_per_filter"),
    ("bound/expected", None),
    ("pods/s", "pods_per_second"),
    ("filter p50 ms", ("filter", "p50_ms")),
    ("filter p99 ms", ("filter", "p99_ms")),
    ("prioritize p99 ms", ("prioritize", "p99_ms")),
    ("bind p99 ms", ("bind", "p99_ms")),
    ("peak RSS MiB", "server_peak_rss_mb"),
    ("server CPU ms/pod", "server_cpu_ms_per_pod"),
    ("CEL evals/pod", "cel_evaluations_per_pod"),
    ("double allocs", None),
    ("load avg", None),
    ("ok", "ok"),
)


def _cell(result: dict[str, Any], title: str, key: Any) -> str:
    if title == "bound/expected":
        return f"{result['pods_bound']}/{result['pods_expected']}"
    if title == "double allocs":
        return str(len(result["double_allocations"]))
    if title == "load avg":
        load = result.get("load_average")
        return "n/a" if not load else f"{load[0]}→{load[1]}"

    if isinstance(key, tuple):
        verb, stat = key
        value = result["latency_ms"].get(verb, {}).get(stat)
    else:
        value = result.get(key)
    return "n/a" if value is None else str(value)


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "| " + " | ".join(title for title, _ in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for result in results:
        if "error" in result:
            lines.append(f"| {result['workload']} | {result['nodes']} | run failed: {result['error']} |")
            continue
        lines.append("| " + " | ".join(_cell(result, title, key) for title, key in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def run_matrix(
    base: RunSpec,
    workloads: list[str],
    node_counts: list[int],
    pods_per_node: int,
    progress: Callable[[str], None] = print,
    pods: int | None = None,
) -> list[dict[str, Any]]:
    """Run every (workload, node count); a failed run is reported in its row, not raised.

    ``pods`` fixes the pod count of every run (big clusters), else it is ``pods_per_node`` per node.
    """
    results = []
    for nodes in node_counts:
        for workload in workloads:
            params = replace(base.params, nodes=nodes, pods=pods or nodes * pods_per_node)
            out_dir = base.out_dir / f"{workload}-{nodes}"
            spec = replace(base, workload=workload, params=params, out_dir=out_dir)
            progress(f"running {workload} at {nodes} nodes ...")
            try:
                result = run(spec).result
                write_json(result, out_dir / "results.json")
            except (ServerError, OSError, ValueError, httpx.HTTPError) as e:
                result = {"workload": workload, "nodes": nodes, "error": str(e).splitlines()[0]}
            results.append(result)
    return results
