"""Human-readable and machine-readable forms of a run's result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from loadtest.stats import PERCENTILES

VERB_ORDER = ("filter", "prioritize", "bind", "apply", "delete")
PROBLEM_KEYS = (
    "double_allocations",
    "misplaced_pods",
    "unreserved_pods",
    "churn_errors",
    "unschedulable_sample",
)


def _fmt(value: Any) -> str:
    return "n/a" if value is None else str(value)


def _load(result: dict[str, Any]) -> str:
    load = result.get("load_average")
    return "n/a" if not load else f"{load[0]} -> {load[1]}"


def latency_table(latency: dict[str, dict[str, float]]) -> list[str]:
    header = ["verb", "calls", "errors", *(f"p{p} ms" for p in PERCENTILES), "max ms"]
    rows = [header]
    for verb in sorted(latency, key=lambda v: (VERB_ORDER.index(v) if v in VERB_ORDER else 99, v)):
        row = latency[verb]
        rows.append(
            [verb, str(row["calls"]), str(row["errors"])]
            + [f"{row[f'p{p}_ms']:.2f}" for p in PERCENTILES]
            + [f"{row['max_ms']:.2f}"]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return ["  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True)) for r in rows]


def server_latency_lines(server: dict[str, dict[str, Any]]) -> list[str]:
    if not server:
        return []
    lines = ["", "server-side (from its histogram): verb  calls  mean ms  p99 within ms"]
    for verb in sorted(server, key=lambda v: (VERB_ORDER.index(v) if v in VERB_ORDER else 99, v)):
        row = server[verb]
        lines.append(
            f"  {verb:<12} {int(row['calls']):>7}  {_fmt(row['mean_ms']):>7}  {_fmt(row['p99_bucket_ms'])}"
        )
    return lines


def render(result: dict[str, Any]) -> str:
    lines = [
        f"workload {result['workload']}: {result['nodes']} nodes x {result['devices_per_node']} devices, "
        f"{result['candidates_per_filter']} candidates per filter, {result['bind_concurrency']} binders",
        f"pods bound        {result['pods_bound']} / {result['pods_expected']} expected "
        f"({result['pods_unschedulable']} given up)",
        f"throughput        {result['pods_per_second']} pods/s end to end",
    ]
    failed = result.get("failed_attempts") or {}
    if failed:
        lines.append("failed attempts   " + ", ".join(f"{kind} {n}" for kind, n in sorted(failed.items())))
    lines += [
        f"  phase {p['name']:<9} {p['bound']}/{p['pods']} pods in {p['seconds']} s"
        f" = {p['pods_per_second']} pods/s"
        for p in result["phases"]
    ]
    lines += [
        f"server peak RSS   {_fmt(result.get('server_peak_rss_mb'))} MiB",
        f"CEL evals / pod   {_fmt(result['cel_evaluations_per_pod'])}",
        f"CPU ms / pod      server {_fmt(result.get('server_cpu_ms_per_pod'))}, "
        f"load generator {_fmt(result.get('driver_cpu_ms_per_pod'))}",
        f"load average      {_load(result)} (1 min, start -> end)",
        f"double allocs     {len(result['double_allocations'])}",
        f"misplaced pods    {len(result['misplaced_pods'])}",
        f"unreserved pods   {len(result['unreserved_pods'])}",
        "",
        *latency_table(result["latency_ms"]),
        *server_latency_lines(result.get("server_latency_ms") or {}),
        "",
        "RESULT: " + ("OK" if result["ok"] else "FAILED"),
    ]
    for key in PROBLEM_KEYS:
        lines += [f"  {key}: {item}" for item in (result.get(key) or [])[:5]]
    for kind, samples in sorted((result.get("failed_attempt_samples") or {}).items()):
        lines += [f"  {kind}: {sample}" for sample in samples]
    return "\n".join(lines)


def write_json(result: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")


def median_run(results: list[dict[str, Any]]) -> int:
    """Index of the run with the median throughput (the lower middle for an even count).

    A real run is reported, not a mix of figures from several: its latencies, RSS and checks
    belong together.
    """
    if not results:
        raise ValueError("no runs to take the median of")
    order = sorted(range(len(results)), key=lambda i: results[i]["pods_per_second"])
    return order[(len(order) - 1) // 2]


def repeat_summary(result: dict[str, Any]) -> dict[str, Any]:
    """The figures of one run that a list of repeats shows side by side."""
    filter_ms = result["latency_ms"].get("filter", {})
    return {
        "pods_per_second": result["pods_per_second"],
        "filter_p99_ms": filter_ms.get("p99_ms"),
        "server_cpu_ms_per_pod": result.get("server_cpu_ms_per_pod"),
        "load_average": result.get("load_average"),
        "ok": result["ok"],
    }


def repeats_lines(runs: list[dict[str, Any]], median: int) -> list[str]:
    lines = [f"{len(runs)} runs; the median by throughput is run {median + 1}:"]
    for i, run in enumerate(runs):
        lines.append(
            f"  run {i + 1}: {run['pods_per_second']} pods/s, filter p99 {_fmt(run['filter_p99_ms'])} ms, "
            f"server CPU {_fmt(run['server_cpu_ms_per_pod'])} ms/pod, load {_load(run)}, "
            + ("OK" if run["ok"] else "FAILED")
        )
    return lines
