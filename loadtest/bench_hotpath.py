"""The scheduling hot path in-process, without HTTP: ``python -m loadtest.bench_hotpath``.

Plays the load test's scheduling loop (candidate windows, filter, prioritize, bind of the best
node) straight against the scheduling functions, so that a profile or a timing shows the
extender's own work without the HTTP layers and without a load generator on the same cores.
Figures are CPU time (``time.process_time``) per pod and per candidate node.

    python -m loadtest.bench_hotpath --workload template --nodes 500 --pods 2000
    python -m loadtest.bench_hotpath --nodes 5000 --candidates 500 --profile   # + cProfile top 25
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import time
from dataclasses import dataclass

import orjson

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
from loadtest.driver import CandidateSampler, nodes_to_find
from loadtest.wire import informer_pod
from loadtest.workloads import GENERATORS, Workload, WorkloadParams, generate


@dataclass
class HotPathFigures:
    pods: int
    bound: int
    candidates: int
    filter_ms_per_pod: float
    prioritize_ms_per_pod: float
    bind_ms_per_pod: float
    filter_ms: tuple[float, ...] = ()  # each filter call's CPU time, in call order

    def filter_percentile(self, q: float) -> float:
        ordered = sorted(self.filter_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0

    @property
    def filter_us_per_node(self) -> float:
        return self.filter_ms_per_pod * 1000 / self.candidates


def service(workload: Workload, score_policy: str | None = None) -> SchedulingContext:
    """The extender's state and context over the workload's objects, as ``serve --state`` builds them."""
    config = Config() if score_policy is None else Config(score_policy=score_policy)
    state = ClusterState(config.feature_gates)
    cluster = LocalCluster(state)
    cluster.load((f"object {i}", obj) for i, obj in enumerate(workload.objects))
    for kind in KIND_NAMES:
        state.mark_synced(kind)
    cel = Environment.create(config.cel_engine)
    cel.warm_up()
    return SchedulingContext(config, state, LocalBinder(cluster), Metrics(), cel)


async def schedule(ctx: SchedulingContext, workload: Workload, candidates: int) -> HotPathFigures:
    """Each pod once, in order: filter a window, score the survivors, bind the best one."""
    sampler = CandidateSampler(workload.node_names, candidates)
    spent = {"filter": 0.0, "prioritize": 0.0, "bind": 0.0}
    each_filter: list[float] = []
    bound = 0
    for raw in workload.pods:
        # Fresh strings, as each request decodes them: lookups by name cost more than on
        # the very objects the state keys its maps with.
        names = orjson.loads(orjson.dumps(sampler.next()))
        pod = pod_for_request(ctx.state, informer_pod(raw))
        started = time.process_time()
        passed = filter_nodes(ctx, pod, names).passed
        filtered = time.process_time()
        spent["filter"] += filtered - started
        each_filter.append((filtered - started) * 1000)
        if not passed:
            continue
        scores = score_nodes(ctx, pod, passed)
        scored = time.process_time()
        spent["prioritize"] += scored - filtered
        best = max(passed, key=scores.__getitem__)
        error = await bind_pod(ctx, pod.namespace, pod.name, pod.uid, best)
        spent["bind"] += time.process_time() - scored
        bound += not error
    per_pod = {verb: round(seconds * 1000 / len(workload.pods), 4) for verb, seconds in spent.items()}
    return HotPathFigures(
        len(workload.pods),
        bound,
        sampler.count,
        per_pod["filter"],
        per_pod["prioritize"],
        per_pod["bind"],
        tuple(each_filter),
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_hotpath", description=__doc__)
    p.add_argument("--workload", choices=list(GENERATORS), default="template")
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--pods", type=int, default=2000)
    p.add_argument("--devices-per-node", type=int, default=8)
    p.add_argument("--candidates", type=int, default=None, help="default: the adaptive rule")
    p.add_argument("--profile", action="store_true", help="print cProfile's top 25 by own time")
    p.add_argument("--score-policy", choices=SCORE_POLICIES, default=Config.score_policy)
    args = p.parse_args(argv)
    if args.nodes < 1 or args.pods < 1 or args.devices_per_node < 1:
        p.error("--nodes, --pods and --devices-per-node must be >= 1")
    workload = generate(args.workload, WorkloadParams(args.nodes, args.devices_per_node, args.pods, seed=1))
    ctx = service(workload, args.score_policy)
    # Frozen as `serve` freezes what it loaded (full collections skip the loaded cluster); collected
    # first, since this process also generated the workload, which serve does not.
    gc.collect()
    gc.freeze()
    candidates = args.candidates or nodes_to_find(args.nodes)
    profiler = cProfile.Profile() if args.profile else None
    if profiler is not None:
        profiler.enable()
    figures = asyncio.run(schedule(ctx, workload, candidates))
    if profiler is not None:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    gc.unfreeze()
    print(
        f"{args.workload}: {args.nodes} nodes, {figures.candidates} candidates, {args.score_policy} scores, "
        f"{figures.bound}/{figures.pods} pods bound"
    )
    print(
        f"CPU ms per pod: filter {figures.filter_ms_per_pod}, prioritize {figures.prioritize_ms_per_pod}, "
        f"bind {figures.bind_ms_per_pod}; filter {figures.filter_us_per_node:.2f} µs per candidate node "
        "(first visits of each node included)"
    )
    lap = -(-args.nodes // candidates)  # filters until every node was a candidate once
    lap_ms = figures.filter_ms[:lap]
    print(
        f"filter CPU ms per call: p50 {figures.filter_percentile(0.5):.3f}, "
        f"p90 {figures.filter_percentile(0.9):.3f}, p99 {figures.filter_percentile(0.99):.3f}, "
        f"max {max(figures.filter_ms, default=0.0):.3f}; the first {lap} calls "
        f"(every node seen once) {sum(lap_ms) / max(1, len(lap_ms)):.3f} on average"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
