"""python -m loadtest generate | run | matrix | placement"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import httpx

from loadtest import placement, report
from loadtest.driver import DriverConfig
from loadtest.matrix import markdown, run_matrix
from loadtest.runner import RunSpec, run
from loadtest.server import ServerError
from loadtest.workloads import GENERATORS, STATE_FORMATS, WorkloadParams, generate, write_state

RESULTS = Path("loadtest/results")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _node_list(text: str) -> list[int]:
    return [_positive(part) for part in text.split(",") if part]


def _workload_args(p: argparse.ArgumentParser, with_workload: bool = True) -> None:
    if with_workload:
        p.add_argument("--workload", choices=list(GENERATORS), default="template")
        p.add_argument("--nodes", type=_positive, default=100)
        p.add_argument("--pods", type=int, default=None, help="default: 4 per node")
    p.add_argument("--devices-per-node", type=_positive, default=8)
    p.add_argument("--seed", type=int, default=1)


def _driver_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--candidates",
        type=_positive,
        default=None,
        help="nodes per filter call (default: the percentageOfNodesToScore rule)",
    )
    p.add_argument("--percentage", type=int, default=0, help="percentageOfNodesToScore (0 = adaptive)")
    p.add_argument("--concurrency", type=_positive, default=16, help="concurrent binding workers")
    p.add_argument("--max-attempts", type=_positive, default=20, help="scheduling attempts per pod")
    p.add_argument("--backoff", type=float, default=0.05, help="initial retry backoff in seconds")
    p.add_argument("--timeout", type=float, default=5.0, help="httpTimeout per call in seconds")
    p.add_argument("--url", default=None, help="target a running extender instead of starting one")
    p.add_argument("--ready-timeout", type=float, default=300.0)


def _spec(args: argparse.Namespace, out_dir: Path) -> RunSpec:
    params = WorkloadParams(
        nodes=getattr(args, "nodes", 1),
        devices_per_node=args.devices_per_node,
        pods=getattr(args, "pods", None),
        seed=args.seed,
    )
    driver = DriverConfig(
        candidates=args.candidates,
        percentage=args.percentage,
        bind_concurrency=args.concurrency,
        max_attempts=args.max_attempts,
        backoff_initial=args.backoff,
        seed=args.seed,
    )
    return RunSpec(
        workload=getattr(args, "workload", "template"),
        params=params,
        driver=driver,
        out_dir=out_dir,
        url=args.url,
        http_timeout=args.timeout,
        ready_timeout=args.ready_timeout,
        state_format=getattr(args, "format", "yaml"),
    )


def cmd_generate(args: argparse.Namespace) -> int:
    params = WorkloadParams(args.nodes, args.devices_per_node, args.pods, args.seed)
    workload = generate(args.workload, params)
    for path in write_state(workload, args.out, args.format):
        print(path)
    print(f"{len(workload.pods)} pending pods, capacity {workload.capacity}, ", end="")
    print(f"expected bound {workload.expected_bound}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    out = args.out or RESULTS / f"{args.workload}-{args.nodes}" / "results.json"
    spec = _spec(args, out.parent)
    outcomes = []
    for i in range(args.repeat):
        outcome = run(spec)
        outcomes.append(outcome)
        if args.repeat > 1:
            report.write_json(outcome.result, out.with_name(f"{out.stem}-{i + 1}{out.suffix}"))
            print(f"run {i + 1}/{args.repeat}: {outcome.result['pods_per_second']} pods/s", flush=True)
    median = report.median_run([o.result for o in outcomes])
    chosen = outcomes[median]
    if args.repeat > 1:
        runs = [report.repeat_summary(o.result) for o in outcomes]
        chosen.result["repeats"] = {"median_run": median + 1, "runs": runs}
    report.write_json(chosen.result, out)
    print(report.render(chosen.result))
    if args.repeat > 1:
        print("\n" + "\n".join(report.repeats_lines(chosen.result["repeats"]["runs"], median)))
    print(f"\nresults: {out}")
    if not args.no_plot:
        from loadtest.plot import plot

        png = out.with_suffix(".png")
        plot(chosen.log, f"{args.workload}, {args.nodes} nodes", png)
        print(f"plot:    {png}")
    return 0 if all(o.result["ok"] for o in outcomes) else 1


def cmd_matrix(args: argparse.Namespace) -> int:
    workloads = args.workloads.split(",") if args.workloads != "all" else list(GENERATORS)
    unknown = set(workloads) - set(GENERATORS)
    if unknown:
        raise ValueError(f"unknown workloads: {sorted(unknown)}")
    spec = _spec(args, args.out.parent)
    results = run_matrix(spec, workloads, args.nodes, args.pods_per_node, pods=args.pods)
    table = markdown(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    print(table)
    return 0 if all(r.get("ok") for r in results) else 1


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m loadtest", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="write a workload as a state directory")
    _workload_args(gen)
    gen.add_argument("--out", type=Path, required=True, help="state directory to write")
    gen.add_argument(
        "--format", choices=STATE_FORMATS, default="yaml",
        help="state files as YAML (readable) or JSON Lines (loads several times faster); default yaml",
    )
    gen.set_defaults(func=cmd_generate)

    run_p = sub.add_parser("run", help="play kube-scheduler against the extender")
    _workload_args(run_p)
    _driver_args(run_p)
    run_p.add_argument("--out", type=Path, default=None, help="results JSON (plot goes next to it)")
    run_p.add_argument("--no-plot", action="store_true")
    run_p.add_argument(
        "--repeat", type=_positive, default=1, help="run N times; report (and plot) the median run"
    )
    run_p.add_argument(
        "--format", choices=STATE_FORMATS, default="yaml",
        help="state files the started extender loads: yaml, or json (JSON Lines: big clusters start faster)",
    )
    run_p.set_defaults(func=cmd_run)

    mat = sub.add_parser("matrix", help="every workload at several node counts, as markdown")
    _workload_args(mat, with_workload=False)
    _driver_args(mat)
    mat.add_argument("--nodes", type=_node_list, default=[100, 500], help="comma-separated node counts")
    mat.add_argument("--workloads", default="all", help=f"comma-separated, or all: {', '.join(GENERATORS)}")
    mat.add_argument("--pods-per-node", type=_positive, default=4)
    mat.add_argument("--pods", type=_positive, default=None, help="pods per run (overrides --pods-per-node)")
    mat.add_argument("--out", type=Path, default=RESULTS / "matrix" / "matrix.md")
    mat.set_defaults(func=cmd_matrix)

    placement.add_parser(sub)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ValueError, ServerError, RuntimeError, httpx.HTTPError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
