"""What a pod's claims cost its node: ``pod.status.nodeAllocatableResourceClaimStatuses``.

A device with ``nodeAllocatableResources`` uses node resources when allocated: through a
mapping (each device adds ``deviceMultiplier``, or its consumed capacity times
``capacityMultiplier``) or an overhead (per pod, per referencing container). Facts follow
upstream's plugin (kubernetes/kubernetes pkg/scheduler/framework/plugins/dynamicresources/
nodeallocatabledynamicresources.go, released in v1.37.2: buildNodeAllocatableDRAInfo,
addDeviceMapping, addDeviceOverhead, validateNodeAllocatableDRAClaimSharing).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from extender.model import AllocationResult, Device, DeviceID, Node, ResourceClaim
from extender.model.allocation import DeviceResult
from extender.model.pods import PodInfo
from extender.model.quantity import Quantity
from extender.model.resource_slice import NodeAllocatableMapping, NodeAllocatableOverhead
from extender.state import ClusterState
from extender.state.pod_requests import ClaimFootprint, Overhead

ONE = Quantity.parse("1")


def _device(state: ClusterState, device_id: DeviceID, node: Node) -> Device | None:
    """The allocated device as the node sees it; None when its slice is gone or a per-device
    node selection puts it elsewhere (upstream's getDeviceFromSlices fails then)."""
    device = state.slices.device(device_id)
    if device is None:
        return None
    if device.node_name:
        return device if device.node_name == node.name else None
    if device.all_nodes or device.node_selector is None:
        return device
    try:
        return device if device.node_selector.matches(node) else None
    except ValueError:
        return None


def uses_node_resources(state: ClusterState, allocation: AllocationResult, node: Node) -> bool:
    """Whether some device of the allocation declares node resources it uses."""
    for result in allocation.devices:
        device = _device(state, result.id, node)
        if device is not None and device.node_allocatable:
            return True
    return False


def has_mapped_device(state: ClusterState, claim: ResourceClaim) -> bool:
    """A claim whose devices map to node resources is the pod's alone: the node's resources it
    stands for are counted once, for one pod (overheads may be shared)."""
    if claim.allocation is None:
        return False
    for device_id in claim.allocation.device_ids():
        device = state.slices.device(device_id)
        if device is not None and any(r.mapping is not None for r in device.node_allocatable.values()):
            return True
    return False


def _sum(into: dict[str, Quantity], name: str, amount: Quantity) -> None:
    held = into.get(name)
    into[name] = amount if held is None else held.add(amount)


def _mapped(
    claim: ResourceClaim, result: DeviceResult, name: str, mapping: NodeAllocatableMapping
) -> Quantity | None:
    """What one allocated device adds to node resource ``name`` (upstream's addDeviceMapping):
    its consumed capacity times the multiplier, or else the per-device amount."""
    if not mapping.capacity_key:
        return mapping.device_multiplier
    if result.consumed_capacity is None:
        raise ValueError(
            f"claim {claim.namespace}/{claim.name}, device {result.device}: ConsumedCapacity is nil, "
            f"but Capacity key '{mapping.capacity_key}' is set in NodeAllocatableResources for "
            f"resource {name}"
        )
    # A capacity the allocation did not consume does not concern this resource. The key is
    # looked up as written (v1.37.2; a later upstream commit qualifies it with the driver's
    # name: tests/conformance/upstream/node-allocatable-capacity-key-is-looked-up-as-written).
    consumed = result.consumed_capacity.get(mapping.capacity_key)
    factor = mapping.capacity_multiplier
    if consumed is not None and factor is not None and factor != ONE:
        consumed = consumed.times(factor)
    return consumed


def _add_overhead(
    into: dict[str, list[Quantity | None]], name: str, overhead: NodeAllocatableOverhead
) -> None:
    """Per-pod and per-container overheads add up over a claim's devices (addDeviceOverhead)."""
    if overhead.per_pod is None and overhead.per_container is None:
        return
    held = into.setdefault(name, [None, None])
    for i, amount in enumerate((overhead.per_pod, overhead.per_container)):
        if amount is not None:
            current = held[i]
            held[i] = amount if current is None else current.add(amount)


def footprints(
    state: ClusterState,
    pod: PodInfo,
    node: Node,
    allocations: Sequence[tuple[ResourceClaim, AllocationResult]],
) -> tuple[ClaimFootprint, ...]:
    """One entry per claim that uses node resources, sorted by claim name.

    ``allocations``: the pod's claims with the allocation each has or gets on ``node``.
    Raises ValueError (the node fails) for a device that is gone or a mapping that cannot be
    computed.
    """
    by_claim: dict[str, tuple[ResourceClaim, dict[str, Quantity], dict[str, list[Quantity | None]]]] = {}
    for claim, allocation in allocations:
        mapped: dict[str, Quantity] = {}
        overheads: dict[str, list[Quantity | None]] = {}
        for result in allocation.devices:
            device = _device(state, result.id, node)
            if device is None:
                raise ValueError(
                    f"claim {claim.namespace}/{claim.name}, device {result.device}, driver {result.driver}: "
                    f"device {result.device} not found in pool {result.pool} for driver {result.driver}"
                )
            for name, use in device.node_allocatable.items():
                if use.mapping is not None:
                    amount = _mapped(claim, result, name, use.mapping)
                    if amount is not None:
                        _sum(mapped, name, amount)
                if use.overhead is not None:
                    _add_overhead(overheads, name, use.overhead)
        if mapped or overheads:
            by_claim[claim.uid] = (claim, mapped, overheads)
    if not by_claim:
        return ()
    referenced = _containers_by_claim(pod, (c for c, _ in allocations))
    out = [
        ClaimFootprint(
            claim.name,
            tuple(referenced.get(uid, ())),
            tuple(sorted(mapped.items())),
            tuple(
                Overhead(name, per_pod, per_container)
                for name, (per_pod, per_container) in sorted(overheads.items())
            ),
        )
        for uid, (claim, mapped, overheads) in by_claim.items()
    ]
    return tuple(sorted(out, key=lambda f: f.claim_name))


def _containers_by_claim(pod: PodInfo, claims: Iterable[ResourceClaim]) -> dict[str, list[str]]:
    """Claim UID -> the containers (init containers first) that list it in resources.claims."""
    by_name = {(c.namespace, c.name): c.uid for c in claims}
    uid_of: dict[str, str] = {}
    for entry in pod.claims:
        uid = by_name.get((pod.namespace, pod.claim_name(entry)))
        if uid is not None:
            uid_of[entry.name] = uid
    out: dict[str, list[str]] = {}
    for container in pod.containers:  # init containers first
        for name in container.claims:
            uid = uid_of.get(name)
            if uid is not None:
                out.setdefault(uid, []).append(container.name)
    return out


def sharing_problem(state: ClusterState, claim: ResourceClaim, reserved_for_pod: bool) -> str | None:
    """Why an allocated claim with mapped devices cannot serve this pod: it is already in use
    by another pod (or pod group)."""
    if claim.reserved_for and not reserved_for_pod and has_mapped_device(state, claim):
        return (
            f"node allocatable resource claim {claim.name} has a mapped device and cannot be shared "
            "across pods"
        )
    return None
