"""preempt: on each candidate node, the victims whose eviction lets the pod's claims fit.

kube-scheduler's DefaultPreemption proposes candidates from what it sees; with its
DynamicResources plugin disabled that is no devices, so a candidate may come with no victims
at all. Here every candidate gets the victims its devices need on top of the ones proposed
(``preemption.victims``), and nodes where no eviction helps are dropped. Pods we do not
handle, pods without claims and pods with nothing left to allocate pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

from extender.allocator import Failure
from extender.model.pods import PodInfo
from extender.scheduling.claims import PodWaits
from extender.scheduling.context import SchedulingContext
from extender.scheduling.plan import PodPlan
from extender.scheduling.preemption.victims import NodePods, Victims, select_victims


def preempt(
    ctx: SchedulingContext, pod: PodInfo, candidates: Mapping[str, tuple[Sequence[str], int]]
) -> dict[str, Victims]:
    """The candidates to keep, by node, each with its victims' UIDs and PDB violations;
    ``candidates`` maps node names to (victim UIDs, PDB violations) as kube-scheduler sent them."""
    ctx.memory.expire()
    if ctx.evictions is not None:
        # kube-scheduler asks for this pod: its preemption is the verb's, never evict mode's.
        ctx.evictions.verb_called(pod.uid, any(not uids for uids, _ in candidates.values()))
    unchanged = {name: Victims(tuple(uids), pdb) for name, (uids, pdb) in candidates.items()}
    if not ctx.config.handles(pod) or not pod.wants_devices or not ctx.state.synced:
        return unchanged
    try:
        plan = PodPlan.build(ctx, pod)
    except PodWaits:
        return {}  # nothing a victim does creates a missing claim or class
    if not plan.may_allocate:
        return unchanged
    state = ctx.state
    budgets = list(state.disruption_budgets.values())
    cluster = NodePods.gather(state.pods.values(), state.claims.values(), budgets)
    held = plan.nominated_holds()
    kept: dict[str, Victims] = {}
    for name, (uids, pdb) in candidates.items():
        node = state.nodes.get(name)
        if node is None:
            continue
        over = partial(plan.failure_over, node=node)
        chosen = select_victims(ctx.state, pod, node, uids, pdb, cluster, held.get(name, ()), over)
        if not isinstance(chosen, Failure):
            kept[name] = chosen
        elif chosen.kind == "fatal":
            return {}
    return kept
