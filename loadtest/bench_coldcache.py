"""The first filter of a 4-GPUs-on-one-PCIe-root claim, cold: ``python -m loadtest.bench_coldcache``.

Issue 15's "cold cache" case: nodes of 64 GPUs on 16 PCIe roots, a DeviceClass with a CEL
selector, and a claim for 4 GPUs constrained by ``matchAttribute`` on the PCIe root. "Cold"
means nothing is memoised yet, as after a restart or for a new claim spec: every round runs
in a fresh process that loads the cluster, builds the service's state and CEL environment
(warmed up as ``serve`` does) and filters one pod over every node, through ``filter_nodes``
run ``in_turns`` as the HTTP route runs it (same request budget). The second filter, of
another pod of the same template, is the warm figure.

Two variants: ``fits`` (4 usable GPUs per root) and ``unsat`` (one GPU per root has too
little memory for the class selector, so every root offers only 3 and no node fits).

    python -m loadtest.bench_coldcache --rounds 5
    python -m loadtest.bench_coldcache --variant unsat --profile   # one round, cProfile top 30
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import hashlib
import json
import pstats
import re
import statistics
import subprocess
import sys
import time
from typing import Any

import orjson

from extender.scheduling.claims import pod_for_request
from extender.scheduling.filter import FilterOutcome, filter_nodes
from extender.scheduling.turns import in_turns
from loadtest import k8s
from loadtest.bench_hotpath import service
from loadtest.k8s import Obj
from loadtest.wire import informer_pod
from loadtest.workloads import Workload, WorkloadParams

VARIANTS = ("fits", "unsat")
TEMPLATE = "four-gpus-one-root"
CLASS_SELECTOR = f'device.driver == "{k8s.DRIVER}" && {k8s.memory_at_least("40Gi")}'


def _attributes(index: int, roots: int) -> dict[str, Obj]:
    return {
        "index": {"int": index},
        "model": {"string": "H100"},
        k8s.PCIE_ROOT: {"string": f"pci{index % roots:04x}:00"},
    }


def cluster(nodes: int, devices: int, roots: int, variant: str) -> Workload:
    """Nodes of ``devices`` GPUs whose PCIe roots alternate in slice order (``i % roots``), so
    the search meets every root before a second device of any; ``unsat`` gives the last GPU
    of every root 24Gi, which the class selector refuses."""
    if nodes < 1 or roots < 1 or devices < roots:
        raise ValueError("need nodes >= 1, roots >= 1 and devices >= roots")
    short = range(devices - roots, devices) if variant == "unsat" else range(0)
    objects: list[Obj] = []
    for n in range(nodes):
        name = f"node-{n:05d}"
        objects.append(k8s.node(name, "zone-a"))
        gpus = [
            k8s.device(f"gpu-{i}", "24Gi" if i in short else "80Gi", _attributes(i, roots))
            for i in range(devices)
        ]
        objects.append(k8s.resource_slice(f"{name}-gpus", name, 1, devices=gpus))
    device_class = k8s.device_class()
    device_class["spec"]["selectors"] = [{"cel": {"expression": CLASS_SELECTOR}}]
    spec = k8s.claim_spec(
        [k8s.exact_request("gpus", count=4)],
        constraints=[{"requests": ["gpus"], "matchAttribute": k8s.PCIE_ROOT}],
    )
    pods = [k8s.pod(f"pod-{i}", f"00000000-0000-4000-8000-{i:012d}", template=TEMPLATE) for i in range(2)]
    objects += [device_class, k8s.claim_template(TEMPLATE, spec), *pods]
    capacity = 0 if variant == "unsat" else nodes * (devices // 4)
    params = WorkloadParams(nodes, devices, len(pods))
    return Workload("coldcache", params, objects, pods, capacity, min(capacity, len(pods)))


def _digest(out: FilterOutcome) -> str:
    """The answer in short: equal digests mean equal passed lists, reasons and errors. Each pod's
    reasons name its own claims (made from the template, so only the names differ): they are
    blanked, so that two pods asking alike give one digest."""
    body = orjson.dumps([out.passed, out.failed, out.unresolvable, out.error], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(_CLAIM_NAME.sub(b"<claim>", body)).hexdigest()[:12]


# A claim the resource-claim controller made for one of the workload's pods from the template.
_CLAIM_NAME = re.compile(rb"pod-\d+-[a-z0-9-]+")


def one_round(nodes: int, devices: int, roots: int, variant: str, profile: bool) -> dict[str, Any]:
    """Load the cluster, then time the first and the second filter (wall and CPU)."""
    workload = cluster(nodes, devices, roots, variant)
    ctx = service(workload)
    # Frozen as `serve` freezes what it loaded; collected first, since this process also
    # generated the workload, which serve does not.
    gc.collect()
    gc.freeze()
    names = workload.node_names
    figures: dict[str, Any] = {}
    profiler = cProfile.Profile() if profile else None
    for label, raw in zip(("first", "second"), workload.pods, strict=True):
        request_names = orjson.loads(orjson.dumps(names))  # fresh strings, as a decoded request has
        pod = pod_for_request(ctx.state, informer_pod(raw))
        if profiler is not None and label == "first":
            profiler.enable()
        wall, cpu = time.perf_counter(), time.process_time()
        out = asyncio.run(in_turns(filter_nodes, ctx, pod, request_names))
        figures[f"{label}_ms"] = (time.perf_counter() - wall) * 1000
        figures[f"{label}_cpu_ms"] = (time.process_time() - cpu) * 1000
        if profiler is not None and label == "first":
            profiler.disable()
        figures[f"{label}_passed"] = len(out.passed)
        figures[f"{label}_digest"] = _digest(out)
    if profiler is not None:
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(30)
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_coldcache", description=__doc__)
    p.add_argument("--variant", choices=(*VARIANTS, "both"), default="both")
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--devices-per-node", type=int, default=64)
    p.add_argument("--roots", type=int, default=16)
    p.add_argument("--rounds", type=int, default=5, help="fresh processes per variant (median reported)")
    p.add_argument("--profile", action="store_true", help="one round here, cProfile of the first filter")
    p.add_argument("--one-round", action="store_true", help=argparse.SUPPRESS)  # a round's child process
    args = p.parse_args(argv)
    if args.nodes < 1 or args.rounds < 1 or args.roots < 1 or args.devices_per_node < args.roots:
        p.error("--nodes, --rounds, --roots must be >= 1 and --devices-per-node >= --roots")
    variants = VARIANTS if args.variant == "both" else (args.variant,)
    shape = (args.nodes, args.devices_per_node, args.roots)
    if args.one_round or args.profile:
        for variant in variants:
            figures = one_round(*shape, variant, args.profile)
            print(json.dumps({"variant": variant, **figures}))
        return 0
    for variant in variants:
        rounds = []
        for _ in range(args.rounds):
            child = subprocess.run(
                [sys.executable, "-m", "loadtest.bench_coldcache", "--one-round", "--variant", variant,
                 "--nodes", str(args.nodes), "--devices-per-node", str(args.devices_per_node),
                 "--roots", str(args.roots)],
                check=True, capture_output=True, text=True,
            )
            rounds.append(json.loads(child.stdout.strip().splitlines()[-1]))
        print(f"{variant}: {args.nodes} nodes x {args.devices_per_node} GPUs on {args.roots} roots, "
              f"{args.rounds} fresh processes; passed {rounds[0]['first_passed']} "
              f"answers {sorted({r['first_digest'] for r in rounds})}")
        for key in ("first_ms", "first_cpu_ms", "second_ms", "second_cpu_ms"):
            values = [r[key] for r in rounds]
            print(f"  {key:14} median {statistics.median(values):8.1f}  "
                  f"all {', '.join(f'{v:.1f}' for v in values)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
