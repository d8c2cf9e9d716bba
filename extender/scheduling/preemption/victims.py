"""Which pods must go for a pod's claims to fit on a node: upstream's ``SelectVictimsOnNode``
(kubernetes/kubernetes pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go)
with devices as the resource.

kube-scheduler proposes victims for what it sees (CPU, memory, ...); without the
DynamicResources plugin it sees no devices, and often proposes none. Its victims are all kept.
On top of them every lower-priority pod that holds a claim is removed; if the claims do not fit
even then, no eviction on the node helps. Otherwise the removed pods are reprieved one by one,
those whose eviction would violate a PodDisruptionBudget first, each group from the most
important down, and each one whose return still leaves room for the claims stays.

A victim frees the devices of the claims only victims hold: a claim also reserved for a pod
that stays keeps its devices. Devices held for more important nominated pods stay taken.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from extender.allocator import AllocatedState, Failure
from extender.model import Holdings, Node, ResourceClaim
from extender.model.disruption import PodDisruptionBudget
from extender.model.pods import PodInfo
from extender.scheduling.preemption.nominated import importance, with_holdings
from extender.state import ClusterState
from extender.state.inuse import Owner


@dataclass(frozen=True, slots=True)
class Victims:
    """The pods to evict on one node: kube-scheduler's first, in its order, then the added ones
    from the most important down."""

    uids: tuple[str, ...]
    pdb_violations: int


@dataclass(frozen=True, slots=True)
class NodePods:
    """What victim selection reads of the cluster, gathered once per preempt call."""

    by_node: Mapping[str, Sequence[PodInfo]]  # bound pods per node
    claims_by_pod: Mapping[str, Sequence[ResourceClaim]]  # allocated claims reserved for a pod uid
    budgets: Sequence[PodDisruptionBudget]

    @classmethod
    def gather(
        cls, pods: Iterable[PodInfo], claims: Iterable[ResourceClaim], budgets: Sequence[PodDisruptionBudget]
    ) -> NodePods:
        by_node: dict[str, list[PodInfo]] = {}
        for pod in pods:
            if pod.node_name:
                by_node.setdefault(pod.node_name, []).append(pod)
        claims_by_pod: dict[str, list[ResourceClaim]] = {}
        for claim in claims:
            if claim.allocation is not None:
                for ref in claim.reserved_for:
                    claims_by_pod.setdefault(ref.uid, []).append(claim)
        return cls(by_node, claims_by_pod, budgets)

    def freed_by(self, victims: set[str]) -> set[Owner]:
        """Claims only victims hold: their devices come free when the victims go."""
        return {
            ("claim", claim.uid)
            for uid in victims
            for claim in self.claims_by_pod.get(uid, ())
            if all(ref.uid in victims for ref in claim.reserved_for)
        }


# Why the pod would not fit on the node if the devices in use were the view (None: it fits):
# the plan's what-if answer (``plan.PodPlan.failure_over``).
FailureOver = Callable[[AllocatedState], Failure | None]


def select_victims(
    state: ClusterState,
    pod: PodInfo,
    node: Node,
    given: Sequence[str],
    given_pdb_violations: int,
    cluster: NodePods,
    held: Sequence[Holdings],
    failure_over: FailureOver,
) -> Victims | Failure:
    """The victims on ``node`` that let ``pod``'s claims fit (as ``failure_over`` answers), or
    why none do: "nofit" when no set of them makes room, the "fatal" failure of the claims."""

    def failure(victims: set[str]) -> Failure | None:
        devices, shared, capacity = state.inuse.without(cluster.freed_by(victims))
        return failure_over(with_holdings(AllocatedState(devices, shared, capacity), held))

    kept = set(given)
    first = failure(kept)
    if first is None:
        return Victims(tuple(given), given_pdb_violations)
    if first.kind == "fatal":
        return first

    def fits(victims: set[str]) -> bool:
        return failure(victims) is None

    on_node = cluster.by_node.get(node.name, ())
    # Only pods holding claims can free devices; pods already going are not evicted twice.
    potential = sorted(
        (
            p for p in on_node
            if p.priority < pod.priority and p.uid not in kept and not p.deleting
            and cluster.claims_by_pod.get(p.uid)
        ),
        key=importance,
    )
    victims = kept | {p.uid for p in potential}
    if not potential or not fits(victims):
        return Failure("nofit", f"evicting pods of lower priority than {pod.priority} makes no room")
    given_pods = [p for p in on_node if p.uid in kept]
    breaking = violating(sorted([*given_pods, *potential], key=importance), cluster.budgets)
    added: list[PodInfo] = []
    for pod in [p for p in potential if p.uid in breaking] + [p for p in potential if p.uid not in breaking]:
        victims.discard(pod.uid)
        if not fits(victims):
            victims.add(pod.uid)
            added.append(pod)
    added.sort(key=importance)
    final = sorted([*given_pods, *added], key=importance)
    counted = len(violating(final, cluster.budgets))
    return Victims((*given, *(p.uid for p in added)), max(given_pdb_violations, counted))


def violating(pods: Sequence[PodInfo], budgets: Sequence[PodDisruptionBudget]) -> set[str]:
    """UIDs of the pods whose eviction, in this order, would break a budget: each pod a budget
    selects uses up one of its allowed disruptions (upstream's ``filterPodsWithPDBViolation``).
    """
    allowed = [b.disruptions_allowed for b in budgets]
    out: set[str] = set()
    for pod in pods:
        if not pod.labels:
            continue
        for i, budget in enumerate(budgets):
            if not budget.selects(pod.namespace, pod.labels) or pod.name in budget.disrupted_pods:
                continue
            allowed[i] -= 1
            if allowed[i] < 0:
                out.add(pod.uid)
    return out
