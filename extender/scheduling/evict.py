"""Evict mode's decision: on which node, and which pods, a preemption for a pod that no node
fits evicts (the evictor in kube/evict.py does the evicting, the ``book`` keeps the hold).

The rules are the preempt verb's: on each node where only devices held by other claims were
missing, ``victims.select_victims`` with no victims proposed — only pods of lower priority,
those a PodDisruptionBudget protects reprieved first, each victim kept only if the pod does not
fit without evicting it (asked of the allocator, over the devices the victims' claims would free
and with the holds of more important preemptors counted as taken). Among the nodes, as
upstream's ``pickOneNodeForPreemption`` (kubernetes/kubernetes
pkg/scheduler/framework/preemption/preemption.go): the fewest budget violations, then the lowest
highest-priority victim, then the lowest sum of priorities, then the fewest victims, then the
first node by name. A node where the pod fits without any eviction means no preemption at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from extender.allocator import Failure
from extender.model.pods import PodInfo
from extender.scheduling.claims import PodWaits
from extender.scheduling.context import SchedulingContext
from extender.scheduling.plan import PodPlan
from extender.scheduling.preemption.nominated import importance
from extender.scheduling.preemption.victims import NodePods, select_victims, violating


@dataclass(frozen=True, slots=True)
class Choice:
    node: str
    # In the order to evict them: those whose eviction a budget may refuse first (a refusal
    # then stops the preemption before any pod went for nothing), then the others, each group
    # from the most important down.
    victims: tuple[PodInfo, ...]
    pdb_violations: int


@dataclass(frozen=True, slots=True)
class NoChoice:
    reason: str  # "fits" (a node fits without evictions), "no_victims", or why the pod cannot preempt


def choose(ctx: SchedulingContext, pod: PodInfo, nodes: Sequence[str]) -> Choice | NoChoice:
    """Where and whom to evict so that ``pod`` fits, among ``nodes``."""
    if not pod.may_preempt:
        return NoChoice("preemptionPolicy Never")
    if not ctx.config.handles(pod) or not pod.wants_devices or not ctx.state.synced:
        return NoChoice("not ours")
    try:
        plan = PodPlan.build(ctx, pod)
    except PodWaits as exc:
        return NoChoice(f"waits: {exc}")
    if not plan.may_allocate:
        return NoChoice("nothing to allocate")
    state = ctx.state
    budgets = list(state.disruption_budgets.values())
    cluster = NodePods.gather(state.pods.values(), state.claims.values(), budgets)
    held = plan.nominated_holds()
    ranked: list[tuple[tuple[int, int, int, int, str], Choice]] = []
    for name in sorted(set(nodes)):
        node = state.nodes.get(name)
        if node is None:
            continue
        over = partial(plan.failure_over, node=node)
        chosen = select_victims(state, pod, node, (), 0, cluster, held.get(name, ()), over)
        if isinstance(chosen, Failure):
            if chosen.kind == "fatal":
                return NoChoice(f"allocation error: {chosen.reason}")
            continue
        if not chosen.uids:
            return NoChoice("fits")
        by_uid = {p.uid: p for p in cluster.by_node.get(name, ())}
        victims = sorted((by_uid[uid] for uid in chosen.uids), key=importance)
        breaking = violating(victims, cluster.budgets)
        ordered = (*[v for v in victims if v.uid in breaking], *[v for v in victims if v.uid not in breaking])
        key = (
            chosen.pdb_violations,
            max(v.priority for v in victims),
            sum(v.priority for v in victims),
            len(victims),
            name,
        )
        ranked.append((key, Choice(name, ordered, chosen.pdb_violations)))
    if not ranked:
        return NoChoice("no_victims")
    return min(ranked, key=lambda kv: kv[0])[1]
