"""Micro-benchmark of the CEL engines: ``python -m loadtest.bench_cel [--devices N] [--engines cpp,python]``.

Per engine, for the typical selector (driver, string attribute and quantity comparison):

- compile: one distinct expression through ``engine.compile`` (no cache);
- device view: API attributes/capacity parsed into a ``DeviceView`` (shared by the engines);
- cold: first ``Selector.matches`` on a new device version (view, activation, evaluation);
- eval: evaluation alone on a device whose view and activation exist (a second selector);
- memoized: ``Selector.matches`` again on the same device (the steady state).

Every figure is the median of per-operation time over ``--rounds`` rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from extender.cel.device import PlainDevice, build_device_view
from extender.cel.engine import Engine, make_engine, unavailable_reason
from extender.cel.environment import Environment

DRIVER = "gpu.example.com"
TYPICAL = (
    f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "a100" && '
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0'
)
ENGINES = ("cpp", "python")


def _devices(n: int) -> list[PlainDevice]:
    models = ("a100", "h100", "l4")
    return [
        PlainDevice(
            driver=DRIVER,
            attributes={
                "model": {"string": models[i % len(models)]},
                "index": {"int": i},
                "driverVersion": {"version": f"1.{i % 5}.0"},
                "numa": {"int": i % 2},
            },
            capacity={"memory": {"value": f"{16 * (1 + i % 6)}Gi"}, "cores": {"value": str(8 + i % 4)}},
            allow_multiple_allocations=False,
        )
        for i in range(n)
    ]


def _per_op(rounds: int, ops: int, body: Callable[[int], None]) -> float:
    """Median over rounds of seconds per operation; ``body(round)`` performs ``ops`` operations."""
    samples = []
    for r in range(rounds):
        started = time.perf_counter()
        body(r)
        samples.append((time.perf_counter() - started) / ops)
    return statistics.median(samples)


def bench_engine(name: str, devices: int, rounds: int) -> dict[str, float]:
    engine: Engine = make_engine(name)
    compile_count = 50

    def compile_round(r: int) -> None:
        for i in range(compile_count):
            engine.compile(TYPICAL.replace("40Gi", f"{r * compile_count + i}Mi"))

    results = {"compile": _per_op(rounds, compile_count, compile_round)}

    # A fresh fleet per round: "cold" must meet every device version for the first time.
    fleets = [_devices(devices) for _ in range(rounds)]
    spare = _devices(devices)
    selector = Environment(engine).compile_selector(TYPICAL)
    other = engine.compile(TYPICAL.replace("40Gi", "41Gi"))

    def views(r: int) -> None:
        for device in spare:
            build_device_view(device)

    def matches(r: int) -> None:
        for device in fleets[r]:
            selector.matches(device)

    def evaluate(r: int) -> None:
        for device in fleets[0]:
            other.evaluate(device.cel_memo["view"])

    results["device view"] = _per_op(rounds, devices, views)
    results["cold"] = _per_op(rounds, devices, matches)
    results["eval"] = _per_op(rounds, devices, evaluate)
    results["memoized"] = _per_op(rounds, devices, matches)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench_cel", description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=2000, help="devices per round (default 2000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per figure (default 5)")
    parser.add_argument(
        "--engines", default="cpp,python", help="comma-separated engines (default cpp,python)"
    )
    args = parser.parse_args(argv)
    if args.devices < 1 or args.rounds < 1:
        parser.error("--devices and --rounds must be at least 1")
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        parser.error(f"unknown engine(s): {', '.join(unknown)}; choose from {', '.join(ENGINES)}")

    print(f"typical selector: {TYPICAL}")
    print(f"{args.devices} devices x {args.rounds} rounds; median per operation in microseconds\n")
    columns = ("compile", "device view", "cold", "eval", "memoized")
    print(f"{'engine':<8}" + "".join(f"{c:>14}" for c in columns))
    for name in engines:
        reason = unavailable_reason(name)
        if reason is not None:
            print(f"{name:<8}  {reason}")
            continue
        figures = bench_engine(name, args.devices, args.rounds)
        print(f"{name:<8}" + "".join(f"{figures[c] * 1e6:>14.2f}" for c in columns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
