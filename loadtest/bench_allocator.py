"""Micro-benchmarks of the pure allocator: ``python -m loadtest.bench_allocator [--rounds N]``.

Targets (issue "The allocator"): one single-device claim on a node with 8 devices < 100 µs;
a 4-device matchAttribute claim on a node with 64 devices < 2 ms. CEL verdicts are memoized
per device, as in the service, so the warm-up round pays for evaluation once.

Each figure is the median over rounds of a fresh Allocator (what one pod's filter call
builds) allocating on the node; "reused" reuses one Allocator (the per-node path of a
filter call after the first node).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from extender.allocator import AllocatedState, Allocator, Failure, Features, SliceList
from extender.cel.environment import Environment
from extender.model import parse_device_class, parse_node, parse_resource_claim, parse_resource_slice

DRIVER = "gpu.example.com"
FEATURES = Features.from_gate_names(
    [
        "DRAAdminAccess",
        "DRAPrioritizedList",
        "DRAPartitionableDevices",
        "DRADeviceTaints",
        "DRAConsumableCapacity",
    ]
)


def _slice(devices: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "node-1-gpus"},
        "spec": {
            "driver": DRIVER,
            "nodeName": "node-1",
            "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {
                        "model": {"string": "h100"},
                        "topology.example.com/pcieRoot": {"string": f"pci-{i % 16}"},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for i in range(devices)
            ],
        },
    }


def _claim(count: int, constraint: bool) -> dict[str, Any]:
    devices: dict[str, Any] = {
        "requests": [
            {
                "name": "gpus",
                "exactly": {
                    "deviceClassName": "gpu",
                    "count": count,
                    "selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].model == "h100"'}}],
                },
            }
        ]
    }
    if constraint:
        devices["constraints"] = [{"matchAttribute": "topology.example.com/pcieRoot"}]
    return {
        "metadata": {"name": f"claim-{count}", "namespace": "default", "uid": "u1"},
        "spec": {"devices": devices},
    }


def scenario(devices: int, count: int, constraint: bool) -> tuple[Callable[[], object], Callable[[], object]]:
    node = parse_node({"metadata": {"name": "node-1"}})
    classes = {
        "gpu": parse_device_class(
            {
                "metadata": {"name": "gpu"},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            }
        )
    }
    slices = SliceList([parse_resource_slice(_slice(devices))])
    claims = [parse_resource_claim(_claim(count, constraint))]
    state = AllocatedState()
    cel = Environment.create()
    reused = Allocator(FEATURES, state, classes, slices, cel)

    def fresh() -> object:
        result = Allocator(FEATURES, state, classes, slices, cel).allocate(node, claims)
        assert not isinstance(result, Failure) and len(result[0].devices) == count
        return result

    def again() -> object:
        return reused.allocate(node, claims)

    return fresh, again


def median_us(fn: Callable[[], object], rounds: int) -> float:
    fn()  # warm-up: compiles selectors and fills the devices' CEL memo
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    cases = [
        ("1 device of 8", scenario(8, 1, False), 100.0),
        ("4 devices matchAttribute of 64", scenario(64, 4, True), 2000.0),
    ]
    for label, (fresh, again), target in cases:
        cold = median_us(fresh, args.rounds)
        warm = median_us(again, args.rounds)
        verdict = "ok" if cold < target else "OVER TARGET"
        figures = f"fresh allocator {cold:8.1f} µs   reused {warm:8.1f} µs"
        print(f"{label:34s} {figures}   target < {target:.0f} µs  {verdict}")


if __name__ == "__main__":
    main()
