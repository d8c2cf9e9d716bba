"""Micro-benchmark of the CEL engines: ``python -m loadtest.bench_cel [--devices N] [--engines cpp,python]``.

Per engine, for the typical selector (driver, string attribute and quantity comparison):

- compile: one distinct expression through ``engine.compile`` (no cache);
- device view: API attributes/capacity parsed into a ``DeviceView`` (shared by the engines);
- cold: first ``Selector.matches`` on a new device version (view, activation, evaluation);
- eval: evaluation alone on a device whose view and activation exist (a second selector);
- memoized: ``Selector.matches`` again on the same device (the steady state).

Every figure is the median of per-operation time over ``--rounds`` rounds.

``--costly`` instead times expensive selectors (comprehensions, string, list and Kubernetes
functions, regex; table ``COSTLY``) on one device, against cel-go through the Go oracle
(tests/oracle, built by scripts/oracle/build.sh; skipped when Go is missing): cel-go's cost of
one evaluation and the python engine's count of it, cel-go's time, each engine's time, and
each engine's time divided by cel-go's (the factor; the costs being equal, also the ratio of
time per cost unit).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable

from extender.cel import CelRuntimeError
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


def _numbers(n: int) -> str:
    return "[" + ",".join(str(i) for i in range(n)) + "]"


_D = f'device.attributes["{DRIVER}"]'
_C = f'device.capacity["{DRIVER}"]'
# Name -> selector. Each is within the API server's estimate of 1,000,000 (but ``sort``, an
# actual cost over the limit in cel-go), false on the device, and reads the device inside its
# loop, so that no engine can fold the work away at compile time.
COSTLY = {
    "arith 350x350": f"{_numbers(350)}.exists(a, {_numbers(350)}.exists(b, a + b < -1))",
    "lists.range 300x300": "lists.range(300).exists(a, lists.range(300).exists(b, a + b < -1))",
    "attribute lookup": f'lists.range(20000).exists(i, {_D}.model == "h100")',
    "strings": f'lists.range(5000).exists(i, {_D}.name.lowerAscii().replace("a", "b").contains("zz"))',
    "split": f'lists.range(5000).exists(i, {_D}.csv.split(",").size() < 0)',
    "concatenation": f"lists.range(10000).exists(i, ({_D}.name + string(i)).size() < 0)",
    "regex": f'lists.range(5000).exists(i, {_D}.name.matches("^([a-z]+[0-9]*)+x$"))',
    "sort": "lists.range(1000).exists(i, lists.range(100 + i % 2).sort()[0] < 0)",
    "quantity": f'lists.range(5000).exists(i, {_C}.memory.isGreaterThan(quantity("80Gi")))',
    "semver": f'lists.range(5000).exists(i, {_D}.driverVersion.isGreaterThan(semver("9.0.0")))',
}
COSTLY_DEVICE = {
    "driver": DRIVER,
    "attributes": {
        "model": {"string": "a100"},
        "name": {"string": "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz01"},
        "csv": {"string": ",".join("abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ")[:63]},
        "driverVersion": {"version": "1.2.3"},
    },
    "capacity": {"memory": {"value": "40Gi"}},
}


def bench_costly(engines: list[str], rounds: int) -> None:
    """The ``--costly`` table (docs/performance.md, "CEL cost and speed")."""
    from extender.tools.oracle import Oracle, OracleUnavailable, oracle_path

    try:
        oracle: Oracle | None = Oracle(oracle_path())
    except OracleUnavailable as exc:
        print(f"cel-go columns skipped: {exc}")
        oracle = None
    device = PlainDevice(
        DRIVER, COSTLY_DEVICE["attributes"], COSTLY_DEVICE["capacity"], allow_multiple_allocations=False
    )
    view = build_device_view(device)
    programs = {name: make_engine(name) for name in engines if unavailable_reason(name) is None}
    counter = None
    if "python" in programs:
        from extender.cel.python.engine import PythonEngine  # counts costs as cel-go does

        counter = PythonEngine()
    print(f"median of {rounds} evaluations in ms; factor: engine time / cel-go time at the same cost")
    header = f"{'expression':<22}{'cost':>10}{'ours':>10}{'cel-go':>10}" + "".join(
        f"{name:>10}{'factor':>8}" for name in programs
    )
    print(header)
    for label, expression in COSTLY.items():
        cost, go_s = None, None
        if oracle is not None:
            request = {"mode": "bench", "name": label, "expression": expression, "device": COSTLY_DEVICE}
            answer = oracle.ask({**request, "minRuns": rounds, "minSeconds": 0.3})
            cost, go_s = answer.get("cost"), answer["nsPerEval"] / 1e9
        ours_cost = counter.compile(expression).actual_cost(view) if counter is not None else "-"
        row = f"{label:<22}{cost if cost is not None else '-':>10}{ours_cost:>10}"
        row += f"{go_s * 1e3:>10.1f}" if go_s else f"{'-':>10}"
        for engine in programs.values():
            program = engine.compile(expression)
            samples = []
            for _ in range(rounds):
                started = time.perf_counter()
                with contextlib.suppress(CelRuntimeError):  # over the cost limit: timed until it stopped
                    program.evaluate(view)
                samples.append(time.perf_counter() - started)
            ours = statistics.median(samples)
            row += f"{ours * 1e3:>10.1f}" + (f"{ours / go_s:>8.1f}" if go_s else f"{'-':>8}")
        print(row)
    if oracle is not None:
        oracle.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench_cel", description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=2000, help="devices per round (default 2000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per figure (default 5)")
    parser.add_argument(
        "--engines", default="cpp,python", help="comma-separated engines (default cpp,python)"
    )
    parser.add_argument("--costly", action="store_true", help="expensive selectors against cel-go instead")
    args = parser.parse_args(argv)
    if args.devices < 1 or args.rounds < 1:
        parser.error("--devices and --rounds must be at least 1")
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        parser.error(f"unknown engine(s): {', '.join(unknown)}; choose from {', '.join(ENGINES)}")

    if args.costly:
        bench_costly(engines, args.rounds)
        return 0
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
