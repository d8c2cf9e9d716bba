"""Devices held for nominated pods: what a preemption freed stays free for its preemptor.

After kube-scheduler evicts the victims it sets the preemptor's ``status.nominatedNodeName``;
the victims' devices come free only when their claims are deallocated, seconds later, and the
preemptor binds after that. Until it is bound (or deleted, or its nomination cleared), the
devices it would get on its nominated node count as taken for every other pod of lower or
equal priority, as kube-scheduler counts nominated pods' CPU and memory
(``addGeneralNominatedPods`` in kubernetes/kubernetes pkg/scheduler/framework/runtime/framework.go).
Higher-priority pods do not see the hold, as upstream.

With --preemption=evict the extender's own preemptions hold the same way: the preemptor and its
node come from the ``book.EvictionBook`` (kube-scheduler nominates nobody there), keyed by the
preemptor's UID, and end as the book says.

Nothing else is stored: the holds are worked out afresh from the cache for each request, so they
end by themselves when the nomination does. A nominated pod whose claims are allocated (or in
flight) has nothing left to allocate and holds nothing beyond what the in-use sets already count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from extender.allocator import AllocatedState, Features
from extender.model import AllocationResult, Holdings, Node, holdings
from extender.model.pods import PodInfo
from extender.scheduling.preemption.book import EvictionBook
from extender.state import ClusterState
from extender.state.inuse import Owner

if TYPE_CHECKING:
    from extender.config import Config


# What ``pod`` would be given on ``node`` if the devices in use were ``view`` (nothing if it
# does not fit there): the plan's answer (``plan.expected_results``), which holds are made of.
Expected = Callable[[PodInfo, Node, AllocatedState], Sequence[AllocationResult]]


class HoldWiring(Protocol):
    """What holds read of the scheduling context: the cluster, the gates, who is handled and
    the holds of evict mode."""

    @property
    def state(self) -> ClusterState: ...

    @property
    def features(self) -> Features: ...

    @property
    def config(self) -> Config: ...

    @property
    def evictions(self) -> EvictionBook | None: ...

    def allocated_state(self) -> AllocatedState: ...


def importance(pod: PodInfo) -> tuple[int, str]:
    """Sort key, most important first: higher priority, then the earlier start (upstream's
    ``MoreImportantPod``; a pod without a start time counts as started now)."""
    return (-pod.priority, pod.start_time or "\uffff")


def nominated_pods(ctx: HoldWiring, pod: PodInfo) -> dict[str, list[PodInfo]]:
    """Unbound pods nominated to a node (by kube-scheduler, or by an eviction of ours) whose
    holds ``pod`` must respect, by node."""
    out: dict[str, list[PodInfo]] = {}
    nominated = [(other, other.nominated_node) for other in ctx.state.nominated.values()]
    if ctx.evictions is not None:
        seen = {other.uid for other, _ in nominated}
        nominated += [(other, node) for other, node in ctx.evictions.holds() if other.uid not in seen]
    for other, node in nominated:
        if (
            not other.deleting
            and other.uid != pod.uid
            and other.priority >= pod.priority
            and ctx.config.handles(other)
            and other.wants_devices
        ):
            out.setdefault(node, []).append(other)
    return out


def freed_soon(state: ClusterState, evicting: frozenset[str] = frozenset()) -> set[Owner]:
    """Claims whose every consumer is a pod being deleted, gone, or among ``evicting`` (the
    victims of our evictions in flight): their deallocation is coming.

    The victims count as gone from the moment they are evicted, not from when the watch shows
    them deleted: the claim controller may deallocate one victim's claim before the watch has
    shown the next victim deleting, and over that half-freed node a preemptor that needs all the
    victims' devices would fit nowhere, hold nothing, and leave the freed device to anyone.
    """
    live = {p.uid: p for p in state.pods.values()}
    out: set[Owner] = set()
    for claim in state.claims.values():
        if claim.allocation is None or not claim.reserved_for:
            continue
        if all(
            ref.uid not in live or live[ref.uid].deleting or ref.uid in evicting for ref in claim.reserved_for
        ):
            out.add(("claim", claim.uid))
    return out


def holds(ctx: HoldWiring, pod: PodInfo, expected: Expected) -> dict[str, list[Holdings]]:
    """What nominated pods of at least ``pod``'s priority hold, by node name: what each would
    be given (``expected``) on its node."""
    by_node = nominated_pods(ctx, pod)
    if not by_node:
        return {}
    evicting = ctx.evictions.evicting() if ctx.evictions is not None else frozenset()
    devices, shared, capacity = ctx.state.inuse.without(freed_soon(ctx.state, evicting))
    out: dict[str, list[Holdings]] = {}
    for node_name, pods in by_node.items():
        node = ctx.state.nodes.get(node_name)
        if node is None:
            continue
        held: list[Holdings] = []
        # The more important pods pick first, and the others count with what they took.
        for nominated in sorted(pods, key=importance):
            view = with_holdings(AllocatedState(devices, shared, capacity), held)
            held += [holdings(r, ctx.features) for r in expected(nominated, node, view)]
        if held:
            out[node_name] = held
    return out


def held_views(ctx: HoldWiring, pod: PodInfo, expected: Expected) -> dict[str, AllocatedState]:
    """The in-use view ``pod`` gets on nodes where nominated pods hold devices, by node name."""
    return {
        name: with_holdings(ctx.allocated_state(), held)
        for name, held in holds(ctx, pod, expected).items()
    }


def with_holdings(base: AllocatedState, held: Iterable[Holdings]) -> AllocatedState:
    """A copy of ``base`` that also counts ``held`` as taken."""
    extra = AllocatedState.from_holdings(held)
    capacity = {device: dict(totals) for device, totals in base.aggregated_capacity.items()}
    for device, consumed in extra.aggregated_capacity.items():
        totals = capacity.setdefault(device, {})
        for name, amount in consumed.items():
            totals[name] = totals[name].add(amount) if name in totals else amount
    return AllocatedState(
        base.allocated_devices | extra.allocated_devices,
        base.allocated_shared | extra.allocated_shared,
        capacity,
    )
