"""Start-up of `dra-extender serve`: time to ready, CPU and peak RSS.

    python -m loadtest.startup --state DIR [--repeat N] [--source TREE] [-- EXTRA SERVE ARGS]

Each run starts ``python -m extender serve --state DIR`` on a free port, polls ``/readyz`` every
50 ms, and reads the process's CPU time and ``VmHWM`` once it is ready. ``--source`` runs the
extender of another checkout (its directory is the child's working directory, which ``-m`` puts
first on the path), so that two commits are compared back to back on the same machine.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from loadtest.server import cpu_seconds, free_port, peak_rss_bytes


@dataclass(frozen=True)
class Startup:
    ready_seconds: float
    cpu_seconds: float
    peak_rss_bytes: int


@contextlib.contextmanager
def running(
    serve_args: list[str], source: Path, timeout: float
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``python -m extender serve`` from ``source`` with ``serve_args``, ready: (process, URL)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "extender", "serve", "--host", "127.0.0.1", "--port", str(port), *serve_args]
    started = time.monotonic()
    process = subprocess.Popen(cmd, cwd=source, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        with httpx.Client(base_url=url, timeout=2.0) as client:
            while True:
                if process.poll() is not None:
                    err = process.stderr.read().decode(errors="replace")[-2000:] if process.stderr else ""
                    raise RuntimeError(f"extender exited with {process.returncode} before ready:\n{err}")
                if time.monotonic() - started > timeout:
                    raise RuntimeError(f"extender not ready after {timeout:.0f}s")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get("/readyz").status_code == 200:
                        break
                time.sleep(0.05)
        yield process, url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def measure(serve_args: list[str], source: Path, timeout: float) -> Startup:
    """One start of the extender with ``serve_args`` (after ``--port``), stopped once ready."""
    started = time.monotonic()
    with running(serve_args, source, timeout) as (process, _):
        ready = time.monotonic() - started
        return Startup(ready, cpu_seconds(process.pid) or 0.0, peak_rss_bytes(process.pid) or 0)


def report(label: str, runs: list[Startup]) -> str:
    ready = [r.ready_seconds for r in runs]
    cpu = [r.cpu_seconds for r in runs]
    rss = max(r.peak_rss_bytes for r in runs) / 2**20
    each = ", ".join(f"{x:.2f}" for x in ready)
    return (
        f"{label}: ready median {statistics.median(ready):.2f} s (runs {each}), "
        f"CPU median {statistics.median(cpu):.2f} s, peak RSS {rss:.0f} MB"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.startup", description=__doc__.split("\n")[0])
    parser.add_argument("--state", type=Path, required=True, help="state directory to serve")
    parser.add_argument("--repeat", type=int, default=3, help="starts to measure (default 3)")
    parser.add_argument("--source", type=Path, default=Path.cwd(), help="source tree to run (default: here)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for ready")
    parser.add_argument("serve_args", nargs="*", help="more `serve` arguments, after --")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    runs = []
    for _ in range(args.repeat):
        try:
            runs.append(measure(["--state", str(args.state), *args.serve_args], args.source, args.timeout))
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    print(report(f"{args.state} from {args.source}", runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
