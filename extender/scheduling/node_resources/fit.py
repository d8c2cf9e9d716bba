"""Whether a pod, with what its devices use, still fits its node's CPU, memory, ephemeral storage
and hugepages (DRANodeAllocatableResources).

kube-scheduler's NodeResourcesFit checks the pod's own requests; the DynamicResources plugin
checks them again with what the pod's devices add, against the node's allocatable minus what
the pods already there request, their devices included (upstream: nodeFitsResources in
nodeallocatabledynamicresources.go, kubernetes/kubernetes 0411cc704533).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from extender.model import AllocationResult, Node, ResourceClaim
from extender.model.extended import HUGE_PAGES_PREFIX
from extender.model.pods import PodInfo
from extender.scheduling.node_resources.footprint import footprints, uses_node_resources
from extender.state import ClusterState
from extender.state.pod_requests import ClaimFootprint, in_units, pod_requests, uncovered_pod_level

_FIXED = ("cpu", "memory", "ephemeral-storage")


@dataclass(frozen=True, slots=True)
class NodeResourcesOutcome:
    """The claims' footprints on the node (to record in the pod's status), or why it fails."""

    footprints: tuple[ClaimFootprint, ...] = ()
    reason: str = ""  # "" = fits
    resolvable: bool = False  # freeing the node's pods could make room
    # The footprint cannot be worked out (a device gone, a capacityKey mapping without
    # consumedCapacity): upstream's plugin returns an error status then, which fails the pod's
    # scheduling attempt rather than the node (statusError in nodeallocatabledynamicresources.go).
    error: bool = False


FITS_WITHOUT_FOOTPRINT = NodeResourcesOutcome()


def insufficient(
    allocatable: Mapping[str, int], requested: Mapping[str, int], demand: Mapping[str, int]
) -> tuple[str, bool] | None:
    """``Insufficient cpu, Insufficient memory, ...`` and whether that is beyond even an empty
    node; None when the demand fits."""
    reasons = []
    unresolvable = False
    for name in _FIXED:
        want = demand.get(name, 0)
        if want > 0 and want > allocatable.get(name, 0) - requested.get(name, 0):
            reasons.append(f"Insufficient {name}")
            unresolvable |= want > allocatable.get(name, 0)
    for name in sorted(n for n in demand if n.startswith(HUGE_PAGES_PREFIX)):
        want = demand[name]
        if want > allocatable.get(name, 0) - requested.get(name, 0):
            reasons.append(f"Insufficient {name}")
            unresolvable |= want > allocatable.get(name, 0)
    return (", ".join(reasons), not unresolvable) if reasons else None


def check(
    state: ClusterState,
    pod: PodInfo,
    node: Node,
    allocations: Sequence[tuple[ResourceClaim, AllocationResult]],
) -> NodeResourcesOutcome:
    """The pod's node-resource footprint on ``node`` given the claims' allocations there.

    Nothing is checked unless some allocated device uses node resources (upstream returns
    early then too).
    """
    using = [(c, a) for c, a in allocations if uses_node_resources(state, a, node)]
    if not using:
        return FITS_WITHOUT_FOOTPRINT
    try:
        found = footprints(state, pod, node, using)
        demand = pod_requests(pod.raw, found)
        uncovered = uncovered_pod_level(pod.raw, found)
    except ValueError as exc:
        return NodeResourcesOutcome(reason=str(exc), error=True)
    if uncovered is not None:
        return NodeResourcesOutcome(reason=uncovered)
    requests = state.node_requests
    requested = requests.requested(node.name, excluding=pod.key) if requests is not None else {}
    short = insufficient(node.allocatable, requested, in_units(demand))
    if short is not None:
        return NodeResourcesOutcome(reason=short[0], resolvable=short[1])
    return NodeResourcesOutcome(found)
