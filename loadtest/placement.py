"""Placement quality: ``python -m loadtest placement``.

A seeded stream of arrivals and departures of mixed device claims on a GPU cluster, scheduled
in-process the way kube-scheduler schedules with the extender (``KubeScheduler``): the
extender's filter over every node, then the weighted sum of the extender's prioritize score
and kube-scheduler's own default scores, the best total taken with ties broken at random. The
same stream is played once per score policy, each on a fresh copy of the cluster, and the
report says what each policy made of it: big requests turned away while enough devices were
free in total, device utilisation over time, and how often multi-device claims landed on one
NUMA node or PCIe root (docs/scheduling-policy.md, "Placement quality").

The model is a loss system: a pod no node fits is turned away at once (counted, not retried),
so every policy sees exactly the same arrivals, and a pod placed leaves after its own run time.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import math
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from extender.cel.environment import Environment
from extender.config import SCORE_POLICIES, Config
from extender.local.binder import LocalBinder
from extender.local.cluster import LocalCluster
from extender.metrics import Metrics
from extender.model.kinds import KIND_NAMES
from extender.scheduling.bind import bind_pod
from extender.scheduling.claims import pod_for_request
from extender.scheduling.context import SchedulingContext
from extender.scheduling.filter import filter_nodes
from extender.scheduling.score import score_nodes
from extender.state import ClusterState
from loadtest import k8s
from loadtest.k8s import Obj
from loadtest.kube_scores import InTreeScores, PodRequests
from loadtest.wire import informer_pod
from loadtest.workloads import MAX_DEVICES_PER_COUNTER_SLICE, PARTITIONS

NUMA = f"{k8s.DRIVER}/numaNode"
GPUS_PER_NUMA = 4
GPUS_PER_PCIE_ROOT = 2
NODE_CPU, NODE_MEMORY_GI = 64, 512
VARIANTS = ("whole", "partitionable")
POLICIES = ("none", "binpack", "compact")
LARGE = 4  # whole GPUs from which a request counts as large
SCHEDULER_CONFIG = Path(__file__).resolve().parent.parent / "manifests/base/scheduler-config.yaml"


@dataclass(frozen=True)
class Kind:
    """One kind of claim in the stream: a template, its share of arrivals, its size in GPUs."""

    name: str
    gpus: float  # whole-GPU equivalents it takes (a quarter: 0.25)
    count: int  # devices it asks for
    memory: str  # the device size it selects ("80Gi": whole GPUs)
    constraint: str | None  # attribute its devices must share
    weight: int

    @property
    def large(self) -> bool:
        return self.gpus >= LARGE

    def template(self) -> Obj:
        request = k8s.exact_request("gpu", k8s.memory_exactly(self.memory), count=self.count)
        constraints = [{"requests": ["gpu"], "matchAttribute": self.constraint}] if self.constraint else None
        return k8s.claim_template(self.name, k8s.claim_spec([request], constraints))

    def requests(self) -> PodRequests:
        """CPU and memory as a job of this size asks for them (not proportional: fractions differ)."""
        cpu, memory_gi = 4 * self.gpus + 2, 32 * self.gpus + 16
        return PodRequests(cpu_milli=int(1000 * cpu), memory_mi=int(1024 * memory_gi))


WHOLE_MIX = (
    Kind("gpu-1", 1, 1, "80Gi", None, 40),
    Kind("gpu-2", 2, 2, "80Gi", None, 12),
    Kind("gpu-2-pcie", 2, 2, "80Gi", k8s.PCIE_ROOT, 8),
    Kind("gpu-4", 4, 4, "80Gi", None, 8),
    Kind("gpu-4-numa", 4, 4, "80Gi", NUMA, 8),
    Kind("gpu-8", 8, 8, "80Gi", None, 10),
)
PARTITIONABLE_MIX = (
    Kind("quarter", 0.25, 1, "20Gi", None, 25),
    Kind("half", 0.5, 1, "40Gi", None, 15),
    Kind("quarter-2", 0.5, 2, "20Gi", None, 5),
    Kind("gpu-1", 1, 1, "80Gi", None, 15),
    Kind("gpu-2", 2, 2, "80Gi", None, 6),
    Kind("gpu-2-pcie", 2, 2, "80Gi", k8s.PCIE_ROOT, 6),
    Kind("gpu-4-numa", 4, 4, "80Gi", NUMA, 8),
    Kind("gpu-8", 8, 8, "80Gi", None, 8),
)


def mix(variant: str) -> tuple[Kind, ...]:
    return WHOLE_MIX if variant == "whole" else PARTITIONABLE_MIX


def _gpu_attributes(g: int) -> dict[str, Obj]:
    return {
        "index": {"int": g},
        NUMA: {"int": g // GPUS_PER_NUMA},
        k8s.PCIE_ROOT: {"string": f"pci{g // GPUS_PER_PCIE_ROOT:04x}:00"},
    }


def _node(name: str) -> Obj:
    obj = k8s.node(name, "zone-a")
    obj["status"]["allocatable"] = {"cpu": str(NODE_CPU), "memory": f"{NODE_MEMORY_GI}Gi", "pods": "110"}
    return obj


def cluster_objects(variant: str, nodes: int, gpus_per_node: int) -> list[Obj]:
    """Nodes of ``gpus_per_node`` GPUs (NUMA nodes of 4, PCIe roots of 2); with
    ``partitionable`` each GPU is also offered as two halves and four quarters on one counter set."""
    objects: list[Obj] = [k8s.device_class()]
    for kind in mix(variant):
        objects.append(kind.template())
    for n in range(nodes):
        name = f"node-{n:03d}"
        objects.append(_node(name))
        if variant == "whole":
            devices = [k8s.device(f"gpu-{g}", "80Gi", _gpu_attributes(g)) for g in range(gpus_per_node)]
            objects.append(k8s.resource_slice(f"{name}-gpus", name, 1, devices=devices))
            continue
        devices, counter_sets = [], []
        for g in range(gpus_per_node):
            counters = f"gpu-{g}-counters"
            counter_sets.append({"name": counters, "counters": {"memory": {"value": "80Gi"}}})
            for suffix, memory, parts in PARTITIONS:
                for p in range(parts):
                    consumes = [{"counterSet": counters, "counters": {"memory": {"value": memory}}}]
                    device_name = f"gpu-{g}{suffix}" + (f"-{p}" if parts > 1 else "")
                    devices.append(k8s.device(device_name, memory, _gpu_attributes(g), consumes))
        chunks = [devices[i : i + MAX_DEVICES_PER_COUNTER_SLICE] for i in range(0, len(devices),
                                                                               MAX_DEVICES_PER_COUNTER_SLICE)]
        total = len(chunks) + 1
        for i, chunk in enumerate(chunks):
            objects.append(k8s.resource_slice(f"{name}-gpus-{i}", name, total, devices=chunk))
        objects.append(k8s.resource_slice(f"{name}-counters", name, total, shared_counters=counter_sets))
    return objects


@dataclass(frozen=True)
class Arrival:
    at: float
    kind: Kind
    runs_for: float
    uid: str


def stream(variant: str, seed: int, arrivals: int, load: float, total_gpus: int) -> list[Arrival]:
    """Poisson arrivals offering ``load`` x the cluster's GPUs (exponential run times, mean 1)."""
    rng = random.Random(f"{seed}/{variant}")
    kinds = mix(variant)
    mean_gpus = sum(k.gpus * k.weight for k in kinds) / sum(k.weight for k in kinds)
    rate = load * total_gpus / mean_gpus
    out, now = [], 0.0
    for _ in range(arrivals):
        now += rng.expovariate(rate)
        kind = rng.choices(kinds, weights=[k.weight for k in kinds])[0]
        uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        out.append(Arrival(now, kind, rng.expovariate(1.0), uid))
    return out


@dataclass
class Figures:
    """What one policy made of the stream."""

    policy: str
    arrivals: int = 0
    placed: int = 0
    large: int = 0
    large_failed: int = 0
    large_stranded: int = 0  # failed while the free GPUs in total would have held it
    small_failed: int = 0
    bind_errors: int = 0
    one_numa: list[int] = field(default_factory=lambda: [0, 0])  # [landed on one, eligible]
    one_root: list[int] = field(default_factory=lambda: [0, 0])
    utilisation: float = 0.0  # time-weighted mean over the measured window
    utilisation_over_time: list[float] = field(default_factory=list)
    prioritize_ms: float = 0.0  # CPU per scored pod
    filter_ms: float = 0.0

    def row(self) -> dict[str, Any]:
        def share(pair: list[int]) -> float | None:
            return round(100 * pair[0] / pair[1], 1) if pair[1] else None

        return {
            "policy": self.policy, "arrivals": self.arrivals, "placed": self.placed,
            "large": self.large, "large_failed": self.large_failed, "large_stranded": self.large_stranded,
            "small_failed": self.small_failed, "bind_errors": self.bind_errors,
            "utilisation_pct": round(100 * self.utilisation, 1),
            "utilisation_over_time_pct": [round(100 * u, 1) for u in self.utilisation_over_time],
            "one_numa_pct": share(self.one_numa), "one_pcie_root_pct": share(self.one_root),
            "prioritize_cpu_ms_per_pod": round(self.prioritize_ms, 3),
            "filter_cpu_ms_per_pod": round(self.filter_ms, 3),
        }


class KubeScheduler:
    """kube-scheduler's scheduling cycle for one pod, with the extender in-process.

    Filter: kube-scheduler's own filters pass every node here (no taints, affinity or ports;
    CPU and memory always fit), and below 100 nodes it looks at all of them, so the extender's
    filter gets every node. Score: the extender's score (0..10) x 10 x its weight, plus the
    in-tree scores that differ between nodes (``kube_scores``); the highest total wins, ties
    broken uniformly at random as ``selectHost`` does. A single feasible node is taken unscored.
    """

    def __init__(self, ctx: SchedulingContext, nodes: Sequence[str], weight: int, rng: random.Random) -> None:
        self.ctx, self.nodes, self.weight, self.rng = ctx, list(nodes), weight, rng
        self.in_tree = InTreeScores({name: (NODE_CPU * 1000, NODE_MEMORY_GI * 1024) for name in nodes})
        self.filter_s = self.prioritize_s = 0.0
        self.scored = 0

    def place(self, raw: Obj, requests: PodRequests) -> str | None:
        pod = pod_for_request(self.ctx.state, informer_pod(raw))
        started = time.process_time()
        passed = filter_nodes(self.ctx, pod, list(self.nodes)).passed
        self.filter_s += time.process_time() - started
        if not passed:
            return None
        if len(passed) == 1:
            return passed[0]
        started = time.process_time()
        extender = score_nodes(self.ctx, pod, passed)
        self.prioritize_s += time.process_time() - started
        self.scored += 1
        totals = {
            name: extender[name] * 10 * self.weight + self.in_tree.score(name, requests) for name in passed
        }
        best = max(totals.values())
        return self.rng.choice([name for name in passed if totals[name] == best])


def extender_context(objects: list[Obj], policy: str) -> tuple[SchedulingContext, LocalCluster]:
    config = Config(score_policy=policy)
    state = ClusterState(config.feature_gates)
    cluster = LocalCluster(state)
    cluster.load((f"object {i}", obj) for i, obj in enumerate(objects))
    for kind in KIND_NAMES:
        state.mark_synced(kind)
    cel = Environment.create(config.cel_engine)
    return SchedulingContext(config, state, LocalBinder(cluster), Metrics(), cel), cluster


def _pod(arrival: Arrival, index: int) -> Obj:
    pod = k8s.pod(f"{arrival.kind.name}-{index:05d}", arrival.uid, template=arrival.kind.name)
    requests = arrival.kind.requests()
    pod["spec"]["containers"][0]["resources"]["requests"] = {
        "cpu": f"{requests.cpu_milli}m", "memory": f"{requests.memory_mi}Mi",
    }
    return pod


def play(
    variant: str, policy: str, arrivals: Sequence[Arrival], *, nodes: int, gpus_per_node: int,
    weight: int, seed: int, warmup: float = 0.1, buckets: int = 10,
) -> Figures:
    """The stream on a fresh cluster with ``policy``; figures over the time after ``warmup``
    (a fraction of the stream's span, while the cluster fills from empty)."""
    ctx, cluster = extender_context(cluster_objects(variant, nodes, gpus_per_node), policy)
    scheduler = KubeScheduler(ctx, sorted(ctx.state.nodes), weight, random.Random(f"{seed}/select"))
    total = nodes * gpus_per_node
    span = arrivals[-1].at if arrivals else 0.0
    start = warmup * span
    figures = Figures(policy)
    departures: list[tuple[float, int, str, str, float, PodRequests]] = []
    in_use = 0.0
    weighted, last = 0.0, start
    bucket_sum = [0.0] * buckets

    def account(until: float) -> None:
        """Integrate utilisation from ``last`` to ``until`` (only the measured window counts)."""
        nonlocal weighted, last
        if until <= last:
            return
        weighted += in_use * (until - last)
        width = (span - start) / buckets
        for b in range(buckets):
            overlap = min(until, start + (b + 1) * width) - max(last, start + b * width)
            if overlap > 0:
                bucket_sum[b] += in_use * overlap
        last = until

    def depart_until(now: float) -> None:
        nonlocal in_use
        while departures and departures[0][0] <= now:
            at, _, name, node, gpus, requests = heapq.heappop(departures)
            account(at)
            cluster.delete("Pod", k8s.NAMESPACE, name)
            scheduler.in_tree.release(node, requests)
            in_use -= gpus

    for index, arrival in enumerate(arrivals):
        depart_until(arrival.at)
        account(arrival.at)
        measured = arrival.at >= start
        raw = cluster.apply(_pod(arrival, index))
        kind, requests = arrival.kind, arrival.kind.requests()
        node = scheduler.place(raw, requests)
        name = raw["metadata"]["name"]
        error = asyncio.run(bind_pod(ctx, k8s.NAMESPACE, name, arrival.uid, node)) if node else ""
        if node and error:
            figures.bind_errors += measured
            node = None
        if node is None:
            cluster.delete("Pod", k8s.NAMESPACE, raw["metadata"]["name"])
            if measured:
                figures.arrivals += 1
                if kind.large:
                    figures.large += 1
                    figures.large_failed += 1
                    figures.large_stranded += total - in_use >= kind.gpus
                else:
                    figures.small_failed += 1
            continue
        in_use += kind.gpus
        scheduler.in_tree.take(node, requests)
        heapq.heappush(departures, (arrival.at + arrival.runs_for, index, name, node, kind.gpus, requests))
        if not measured:
            continue
        figures.arrivals += 1
        figures.placed += 1
        figures.large += kind.large
        if kind.count > 1 and kind.constraint is None:
            _landing(ctx, raw["metadata"]["name"], kind, figures)
    depart_until(span)
    account(span)
    window = span - start
    figures.utilisation = weighted / (window * total) if window > 0 else 0.0
    figures.utilisation_over_time = [
        s / ((window / buckets) * total) if window > 0 else 0.0 for s in bucket_sum
    ]
    figures.filter_ms = 1000 * scheduler.filter_s / max(1, len(arrivals))
    figures.prioritize_ms = 1000 * scheduler.prioritize_s / max(1, scheduler.scored)
    return figures


def _landing(ctx: SchedulingContext, pod_name: str, kind: Kind, figures: Figures) -> None:
    """Whether the devices of a placed claim that asked for no shared attribute share one anyway."""
    pod = ctx.state.pod(k8s.NAMESPACE, pod_name)
    name = pod.claim_statuses.get("gpu") if pod is not None else None
    claim = ctx.state.claim(k8s.NAMESPACE, name) if name else None
    if claim is None or claim.allocation is None:
        return
    numa, roots = set(), set()
    for result in claim.allocation.devices:
        device = ctx.state.slices.device((result.driver, result.pool, result.device))
        if device is None:
            continue
        numa.add(device.attribute(NUMA))
        roots.add(device.attribute(k8s.PCIE_ROOT))
    if kind.count <= GPUS_PER_NUMA:
        figures.one_numa[1] += 1
        figures.one_numa[0] += len(numa) == 1
    if kind.count <= GPUS_PER_PCIE_ROOT:
        figures.one_root[1] += 1
        figures.one_root[0] += len(roots) == 1


def total_gpus(nodes: int, gpus_per_node: int) -> int:
    return nodes * gpus_per_node


def compare(
    variant: str, policies: Sequence[str], *, seed: int, nodes: int, gpus_per_node: int, arrivals: int,
    load: float, weight: int,
) -> list[Figures]:
    """Every policy on the very same stream, back to back."""
    if nodes < 1 or gpus_per_node < 1 or arrivals < 1 or not math.isfinite(load) or load <= 0:
        raise ValueError("nodes, GPUs per node, arrivals and load must be positive")
    if gpus_per_node % GPUS_PER_NUMA:
        raise ValueError(f"GPUs per node must be a multiple of {GPUS_PER_NUMA} (the size of a NUMA node)")
    the_stream = stream(variant, seed, arrivals, load, total_gpus(nodes, gpus_per_node))
    return [
        play(variant, policy, the_stream, nodes=nodes, gpus_per_node=gpus_per_node, weight=weight, seed=seed)
        for policy in policies
    ]


def extender_weight(scheduler_config: Path) -> int:
    """The extender's ``weight`` in the KubeSchedulerConfiguration that a manifest (a ConfigMap
    holding ``config.yaml``, or the configuration itself) deploys."""
    for doc in yaml.safe_load_all(scheduler_config.read_text()):
        if not isinstance(doc, dict):
            continue
        config = yaml.safe_load(doc["data"]["config.yaml"]) if doc.get("kind") == "ConfigMap" else doc
        if config.get("kind") != "KubeSchedulerConfiguration":
            continue
        extenders = [e for e in config.get("extenders") or () if e.get("prioritizeVerb")]
        if extenders:
            return int(extenders[0].get("weight", 1))
    raise ValueError(f"{scheduler_config}: no KubeSchedulerConfiguration with a prioritizing extender")


def markdown(results: dict[str, list[dict[str, Any]]]) -> str:
    """The comparison table, then utilisation over time, per cluster; ``results`` holds each
    policy's ``Figures.row()``. "placed of none's" is the share of the large requests that the
    policy without a device score (``none``) turned away which this policy placed."""
    lines = [
        "| cluster | policy | large requests | large failed (enough GPUs free in total) "
        "| of none's large failures, placed | other failed | utilisation | one NUMA node | one PCIe root "
        "| prioritize CPU ms/pod |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} %"

    for variant, rows in results.items():
        baseline = next((r["large_failed"] for r in rows if r["policy"] == "none"), None)
        for r in rows:
            placed = (
                pct(100 * (baseline - r["large_failed"]) / baseline)
                if baseline and r["policy"] != "none" else "-"
            )
            lines.append(
                f"| {variant} | {r['policy']} | {r['large']} | {r['large_failed']} ({r['large_stranded']}) "
                f"| {placed} | {r['small_failed']} | {pct(r['utilisation_pct'])} | {pct(r['one_numa_pct'])} "
                f"| {pct(r['one_pcie_root_pct'])} | {r['prioritize_cpu_ms_per_pod']} |"
            )
    lines += ["", "Utilisation over time (% of GPUs in use, mean of each tenth of the measured window):", ""]
    lines += ["| cluster | policy | " + " | ".join(f"{i + 1}" for i in range(10)) + " |",
              "|---|---|" + "---:|" * 10]
    for variant, rows in results.items():
        for r in rows:
            cells = " | ".join(f"{u:.0f}" for u in r["utilisation_over_time_pct"])
            lines.append(f"| {variant} | {r['policy']} | {cells} |")
    return "\n".join(lines) + "\n"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("placement", help="placement quality of the score policies on one seeded stream")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--nodes", type=int, default=64)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--arrivals", type=int, default=2000, help="arrivals per cluster variant")
    p.add_argument("--load", type=float, default=1.0, help="offered load, a fraction of the cluster's GPUs")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated: {', '.join(VARIANTS)}")
    p.add_argument("--policies", default=",".join(POLICIES), help="comma-separated score policies")
    p.add_argument("--scheduler-config", type=Path, default=SCHEDULER_CONFIG,
                   help="manifest whose KubeSchedulerConfiguration gives the extender's weight")
    p.add_argument("--out", type=Path, default=Path("loadtest/results/placement/placement.md"))
    p.set_defaults(func=main)


def main(args: Any) -> int:
    variants = [v for v in args.variants.split(",") if v]
    policies = [p for p in args.policies.split(",") if p]
    unknown = set(variants) - set(VARIANTS) or set(policies) - set(SCORE_POLICIES)
    if unknown or not variants or not policies:
        raise ValueError(f"unknown or no variants/policies: {sorted(unknown)}")
    weight = extender_weight(args.scheduler_config)
    print(f"placement: seed {args.seed}, {args.nodes} nodes x {args.gpus_per_node} GPUs, "
          f"{args.arrivals} arrivals per cluster at load {args.load}, "
          f"extender weight {weight} ({args.scheduler_config})", flush=True)
    results: dict[str, list[Figures]] = {}
    for variant in variants:
        started = time.monotonic()
        results[variant] = compare(variant, policies, seed=args.seed, nodes=args.nodes,
                                   gpus_per_node=args.gpus_per_node, arrivals=args.arrivals, load=args.load,
                                   weight=weight)
        print(f"{variant}: {time.monotonic() - started:.0f} s", flush=True)
    rows = {variant: [f.row() for f in figures] for variant, figures in results.items()}
    table = markdown(rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(f"seed {args.seed}\n\n{table}")
    summary = {"seed": args.seed, "weight": weight, "load": args.load, "results": rows}
    args.out.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
    print(table)
    print(f"results: {args.out} (seed {args.seed})")
    return 0
