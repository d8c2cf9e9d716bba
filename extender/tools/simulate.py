"""``dra-extender simulate``: where would these pods go, and whom would they preempt?

A thin driver over the service's own verbs (``scheduling.filter``, ``score``, ``preempt``,
``bind``) on an in-memory copy of the cluster (the demo, a ``--state`` directory, or a
``/debug/snapshot`` saved into one). It plays kube-scheduler's part: the pending pods are taken in
its queue order (higher priority first, then the order they arrived: the state's pending pods by
creation, then the file's in file order), and for each one

* filter over every node; if some pass, prioritize and take the best score (ties: the first
  node by name), then bind with the local binder;
* if none passes and the pod may preempt, every node filter found resolvable is a candidate with
  no victims (as kube-scheduler proposes for devices it cannot see); preempt names each one's
  victims, one node is picked as kube-scheduler picks (``pick_node``), the victims are deleted
  (the claim controller deallocates their claims), the pod is nominated there and tried again,
  its nominated node first;
* otherwise it stays pending with filter's reasons.

Only what this extender decides is simulated: CPU, memory, affinity, taints and the other
kube-scheduler plugins are not. Nothing is written anywhere: the copy lives in memory.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from extender.cel.engine import ENGINE_CHOICES
from extender.cel.environment import Environment
from extender.config import SCORE_POLICIES, Config, ConfigError, parse_gate_overrides, parse_release
from extender.local.binder import LocalBinder
from extender.local.cluster import LocalCluster, load_local
from extender.local.manifests import read_manifests
from extender.local.store import ManifestError, clone
from extender.metrics import Metrics
from extender.model.features import DEFAULT_RELEASE, RELEASES
from extender.model.pods import PodInfo
from extender.scheduling.bind import bind_pod
from extender.scheduling.context import SchedulingContext
from extender.scheduling.filter import FilterOutcome, filter_nodes
from extender.scheduling.preempt import preempt
from extender.scheduling.preemption.victims import Victims
from extender.scheduling.score import score_nodes
from extender.state import ClusterState
from extender.tools.simulate_report import Placement, render_json, render_table

# The help text: plain, for a terminal (the module's docstring is for readers of the code).
DESCRIPTION = """\
Where would these pods go, and whom would they preempt?

Places a batch of pending pods on an in-memory copy of the cluster (the demo, a --state
directory, or a /debug/snapshot saved into one) with the service's own verbs, playing
kube-scheduler's part. The pods are taken in its queue order: higher priority first, then as
they arrived (the state's pending pods by creation, then the file's in file order). For each one:

  - filter over every node; if some pass, prioritize and take the best score (ties: the first
    node by name), then bind;
  - if none passes and the pod may preempt, the nodes filter found resolvable go to preempt, one
    node is picked as kube-scheduler picks, its victims are deleted (their claims deallocated),
    and the pod, nominated there, is tried again;
  - otherwise it stays pending with filter's reasons.

Only what this extender decides is simulated: CPU, memory, affinity, taints and the other
kube-scheduler plugins are not. Nothing is written: not the state directory, not any API.
"""

EPILOG = "Example: dra-extender simulate --pods docs/examples/jobs.yaml (see docs/usage.md)."


def add_parser(sub: Any) -> None:
    """Register ``simulate`` with the CLI's subcommands."""
    parser = sub.add_parser(
        "simulate", help="place a batch of pending pods on a copy of the cluster, writing nothing",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--state", type=Path,
                        help="directory of *.yaml manifests, e.g. a saved /debug/snapshot (default: demo)")
    parser.add_argument("--pods", type=Path, required=True,
                        help="YAML file of the Pods to place (and claims, templates, ... they need)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--include-pending", action="store_true",
                        help="also queue the state's unbound pods, as kube-scheduler would")
    parser.add_argument("--feature-gates", default="", help="kube-scheduler syntax: A=true,B=false")
    parser.add_argument(
        "--kubernetes-version", metavar="MAJOR.MINOR", default=DEFAULT_RELEASE,
        help=f"whose feature-gate defaults apply ({', '.join(RELEASES)}; default %(default)s)",
    )
    parser.add_argument("--score-policy", choices=SCORE_POLICIES, default="compact",
                        help="how prioritize ranks nodes that fit; match the service's (default %(default)s)")
    parser.add_argument("--cel-engine", choices=ENGINE_CHOICES, default="auto",
                        help="CEL engine for device selectors (default %(default)s)")
    parser.set_defaults(log_level="warning", log_format="text")


def main(args: argparse.Namespace) -> int:
    try:
        config = Config(
            state_dir=args.state,
            feature_gate_overrides=parse_gate_overrides(args.feature_gates),
            score_policy=args.score_policy,
            cel_engine=args.cel_engine,
        ).with_release(parse_release(args.kubernetes_version))
        placements = simulate(config, read_manifests([args.pods]), include_pending=args.include_pending)
    except (ConfigError, ManifestError) as exc:
        print(f"dra-extender simulate: {exc}", file=sys.stderr)
        return 2
    print(render_json(placements) if args.json else render_table(placements))
    return 0


def simulate(
    config: Config, docs: Iterable[tuple[str, Any]], include_pending: bool = False
) -> list[Placement]:
    """Load ``config.state_dir`` (or the demo), add ``docs`` (origin, object), and place the
    pods among them (and with ``include_pending`` the state's unbound ones): one entry per pod."""
    try:
        cel = Environment.create(config.cel_engine)
    except (ValueError, RuntimeError) as exc:
        raise ConfigError(f"--cel-engine {config.cel_engine}: {exc}") from None
    state = ClusterState(config.feature_gates)
    cluster = load_local(state, config.state_dir)
    queue = [p.key for p in state.pods.values() if _pending(p)] if include_pending else []
    queue.sort(key=lambda key: _created(state, key))
    queue += _add(cluster, docs)
    ctx = SchedulingContext(config, state, LocalBinder(cluster), Metrics(), cel)
    return asyncio.run(_Simulation(ctx, cluster).run(queue))


def _pending(pod: PodInfo) -> bool:
    return not pod.node_name and not pod.deleting and not pod.finished


def _created(state: ClusterState, key: tuple[str, str]) -> str:
    # Ties (timestamps have whole seconds) keep the cache's order: the order pods were loaded.
    return str(state.pods[key].raw["metadata"].get("creationTimestamp") or "")


def _add(cluster: LocalCluster, docs: Iterable[tuple[str, Any]]) -> list[tuple[str, str]]:
    """Apply the pods file: its other objects first, then its pods in file order; the pods' keys."""
    pods: list[tuple[str, Any]] = []
    others: list[tuple[str, Any]] = []
    for origin, doc in docs:
        (pods if isinstance(doc, Mapping) and doc.get("kind") == "Pod" else others).append((origin, doc))
    if not pods:
        raise ManifestError("the pods file holds no Pod")
    cluster.load(others)
    keys = []
    for origin, doc in pods:
        try:
            _, admitted = cluster.store.admit(doc)
            meta = admitted["metadata"]
            key = (meta["namespace"], meta["name"])
            if key in cluster.state.pods:
                raise ManifestError(f"pod {key[0]}/{key[1]} is already in the cluster")
            cluster.apply(admitted)
        except (ManifestError, ValueError) as exc:
            raise ManifestError(f"{origin}: {exc}") from None
        if not admitted.get("spec", {}).get("nodeName"):
            keys.append(key)
    return keys


@dataclass
class _Simulation:
    ctx: SchedulingContext
    cluster: LocalCluster
    async def run(self, queue: Sequence[tuple[str, str]]) -> list[Placement]:
        # kube-scheduler's PrioritySort: higher priority first, then arrival (a stable sort).
        state = self.ctx.state
        ordered = sorted(queue, key=lambda key: -state.pods[key].priority)
        # A pod placed here is never a later one's victim: those come after it in this order.
        return [await self._place(state.pods[key]) for key in ordered]

    async def _place(self, pod: PodInfo) -> Placement:
        placement = Placement(pod.ref, pod.priority)
        outcome = self._filter(pod)
        if not outcome.passed and self._may_preempt(pod) and outcome.failed:
            node, victims = self._preempt(pod, sorted(outcome.failed))
            if node:
                placement.preempted = self._evict(pod, node, victims)
                pod = self._nominate(pod, node)
                outcome = self._filter(pod)
        if not outcome.passed:
            placement.reason = _reason(self.ctx, outcome)
            return placement
        node = self._best(pod, outcome.passed)
        error = await bind_pod(self.ctx, pod.namespace, pod.name, pod.uid, node)
        if error:
            placement.reason = error
            return placement
        placement.node = node
        placement.devices = _devices(self.ctx.state, pod.uid)
        return placement

    def _filter(self, pod: PodInfo) -> FilterOutcome:
        """filter as kube-scheduler calls it: a nominated pod's node alone first, then all nodes."""
        if pod.nominated_node:
            outcome = filter_nodes(self.ctx, pod, [pod.nominated_node])
            if outcome.passed:
                return outcome
        return filter_nodes(self.ctx, pod, sorted(self.ctx.state.nodes))

    def _best(self, pod: PodInfo, passed: list[str]) -> str:
        if len(passed) == 1:
            return passed[0]  # kube-scheduler skips scoring for a single feasible node
        scores = score_nodes(self.ctx, pod, passed)
        return min(passed, key=lambda name: (-scores[name], name))

    @staticmethod
    def _may_preempt(pod: PodInfo) -> bool:
        return bool(pod.raw.get("spec", {}).get("preemptionPolicy") != "Never")

    def _preempt(self, pod: PodInfo, candidates: list[str]) -> tuple[str, Victims]:
        chosen = preempt(self.ctx, pod, {name: ((), 0) for name in candidates})
        # kube-scheduler refuses a candidate an extender leaves without victims.
        chosen = {name: v for name, v in chosen.items() if v.uids}
        by_uid = {p.uid: p for p in self.ctx.state.pods.values()}
        node = pick_node({name: [by_uid[u] for u in v.uids if u in by_uid] for name, v in chosen.items()},
                         {name: v.pdb_violations for name, v in chosen.items()})
        return node, chosen.get(node, Victims((), 0))

    def _evict(self, pod: PodInfo, node: str, victims: Victims) -> list[str]:
        state = self.ctx.state
        by_uid = {p.uid: p for p in state.pods.values()}
        evicted = []
        for uid in victims.uids:
            victim = by_uid[uid]
            self.cluster.delete("Pod", victim.namespace, victim.name)
            evicted.append(victim.ref)
        # Lower-priority pods nominated to the node lose the nomination (upstream's prepareCandidate).
        for other in list(state.pods.values()):
            if other.nominated_node == node and not other.node_name and other.priority < pod.priority:
                self._set_nomination(other, "")
        return evicted

    def _nominate(self, pod: PodInfo, node: str) -> PodInfo:
        self._set_nomination(pod, node)
        nominated = self.ctx.state.pod(pod.namespace, pod.name)
        assert nominated is not None  # just written
        return nominated

    def _set_nomination(self, pod: PodInfo, node: str) -> None:
        obj = clone(dict(pod.raw))
        status = obj.setdefault("status", {})
        if node:
            status["nominatedNodeName"] = node
        else:
            status.pop("nominatedNodeName", None)
        self.cluster.apply(obj)


def pick_node(victims: Mapping[str, Sequence[PodInfo]], pdb_violations: Mapping[str, int]) -> str:
    """The node kube-scheduler preempts on, "" for none.

    Its ``pickOneNodeForPreemption`` (kubernetes/kubernetes
    pkg/scheduler/framework/preemption/preemption.go, at 00e6d95): fewest PDB violations, then
    the lowest highest victim priority, then the lowest sum of priorities (each shifted by 2^31 so
    that negative ones add up), then the fewest victims, then the latest start among the highest
    priority victims (no start time: now), then the first node (here: by name).
    """
    nodes = sorted(name for name, pods in victims.items() if pods)
    if not nodes:
        return ""

    now = datetime.now(UTC).timestamp()

    def key(name: str) -> tuple[int, int, int, int, float]:
        pods = victims[name]
        top = max(p.priority for p in pods)
        earliest = min(_started(p, now) for p in pods if p.priority == top)
        total = sum(p.priority + 2**31 for p in pods)
        return (pdb_violations.get(name, 0), top, total, len(pods), -earliest)

    return min(nodes, key=key)


def _started(pod: PodInfo, now: float) -> float:
    """status.startTime in seconds; a pod not started (or with a malformed time) counts as now."""
    try:
        return datetime.fromisoformat(pod.start_time).timestamp()
    except ValueError:
        return now


def _reason(ctx: SchedulingContext, outcome: FilterOutcome) -> str:
    """As kube-scheduler's FitError: "0/N nodes are available: ", then each reason with its count."""
    if outcome.error:
        return outcome.error
    reasons: dict[str, int] = {}
    for reason in (*outcome.failed.values(), *outcome.unresolvable.values()):
        reasons[reason] = reasons.get(reason, 0) + 1
    counted = "; ".join(f"{n} node{'s' if n > 1 else ''}: {reason}" for reason, n in sorted(reasons.items()))
    return f"0/{len(ctx.state.nodes)} nodes are available: {counted}"


def _devices(state: ClusterState, pod_uid: str) -> list[dict[str, str]]:
    """The devices of the claims reserved for the pod, claim by claim."""
    out = []
    for claim in sorted(state.claims.values(), key=lambda c: c.key):
        if claim.allocation is None or all(ref.uid != pod_uid for ref in claim.reserved_for):
            continue
        for result in claim.allocation.devices:
            out.append({"claim": claim.key, "request": result.request, "driver": result.driver,
                        "pool": result.pool, "device": result.device})
    return out
