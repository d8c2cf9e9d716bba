"""Run the end-to-end scenarios against a real control plane; what `make e2e` calls.

    python -m tests.e2e --bin DIR --version 1.37.2 [--only NAME,...] [--run DIR] [--keep]
    python -m tests.e2e --down [--run DIR]      stop what an interrupted run left (by PID)

Prints one line per scenario (PASS/FAIL, seconds, its evidence) and ``N passed, M failed``;
exits 1 when a scenario failed. Logs of every component stay in ``RUN/logs``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from tests.e2e import objects as o
from tests.e2e import shipped
from tests.e2e.control_plane import ControlPlane, stop_leftovers
from tests.e2e.scenarios import SCENARIOS, Scene


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--bin", type=Path, help="directory of etcd, kube-apiserver, ... (scripts/e2e/build.sh)"
    )
    parser.add_argument("--version", default="1.37.2", help="the release those binaries are")
    parser.add_argument("--only", default="", help=f"comma-separated scenarios, of: {', '.join(SCENARIOS)}")
    parser.add_argument(
        "--run",
        type=Path,
        default=Path(tempfile.gettempdir()) / "dra-extender-e2e",
        help="working directory: certificates, etcd data, logs, PIDs",
    )
    parser.add_argument("--keep", action="store_true", help="leave the run directory (logs) in place")
    parser.add_argument("--down", action="store_true", help="only stop processes a previous run left")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    stopped = stop_leftovers(args.run)
    if stopped:
        print(f"stopped what an earlier run left: {', '.join(stopped)}", flush=True)
    if args.down:
        return 0
    if args.bin is None:
        print("--bin is required (scripts/e2e/build.sh prints it)", file=sys.stderr)
        return 2
    chosen = [n for n in args.only.split(",") if n] or list(SCENARIOS)
    unknown = [n for n in chosen if n not in SCENARIOS]
    if unknown:
        print(f"unknown scenarios: {', '.join(unknown)}", file=sys.stderr)
        return 2
    shutil.rmtree(args.run, ignore_errors=True)
    plane = ControlPlane(args.bin, args.run, args.version)
    passed = failed = 0
    started = time.monotonic()
    try:
        try:
            plane.start()
            plane.api.apply(shipped.example("deviceclass.yaml"))  # gpu.example.com, as a driver installs it
            pair = plane.pair()
            pair.start()
        except Exception:
            failed += 1
            print(f"FAIL control plane: {traceback.format_exc()}", flush=True)
            chosen = []
        else:
            print(
                f"control plane {plane.server_version()} up in {time.monotonic() - started:.0f} s "
                f"(run directory {args.run})",
                flush=True,
            )
        for name in chosen:
            scene = Scene(name, plane, pair)
            o.ensure_namespace(plane.api, scene.ns)
            t0 = time.monotonic()
            try:
                evidence = SCENARIOS[name](scene)
                double = o.double_allocations(plane.api)
                assert not double, f"devices in two claims: {double}"
                line, passed = f"PASS {name} ({time.monotonic() - t0:.0f} s): {evidence}", passed + 1
            except Exception as exc:  # a scenario's failure is reported, and the others still run
                detail = (
                    str(exc) if isinstance(exc, AssertionError | TimeoutError) else traceback.format_exc()
                )
                try:
                    state = o.summary(plane.api, scene.ns)
                except Exception as summary_exc:
                    state = {"unavailable": repr(summary_exc)}
                line, failed = f"FAIL {name} ({time.monotonic() - t0:.0f} s): {detail} | {state}", failed + 1
            print(line, flush=True)
            pair = scene.pair
            try:
                scene.cleanup()
            except Exception as exc:
                print(f"     cleanup after {name} failed: {exc}", flush=True)
    finally:
        plane.down()
        if not args.keep and not failed:
            shutil.rmtree(args.run, ignore_errors=True)
        elif failed:
            print(f"logs: {args.run}/logs", flush=True)
    print(f"{passed} passed, {failed} failed ({time.monotonic() - started:.0f} s, Kubernetes {args.version})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
