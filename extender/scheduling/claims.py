"""Which claims a pod needs, why it must wait, and whether its allocated claims can be used.

Upstream: the DynamicResources plugin's PreEnqueue/PreFilter (kubernetes/kubernetes
``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go``) and the claim
helpers of k8s.io/dynamic-resource-allocation ``resourceclaim`` (``Name``, ``IsForPod``,
``CanBeReserved``).

All reasons raised here are ``UnschedulableAndUnresolvable`` upstream: removing other pods
cannot create a missing claim or class, so they go to FailedAndUnresolvableNodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from extender.allocator import Features
from extender.model import ExactRequest, Node, ResourceClaim
from extender.model.nodes import OPTIONAL_NODE_OPERATIONS
from extender.model.pods import POD_GROUP_API_GROUP, POD_GROUP_RESOURCE, PodInfo, parse_pod
from extender.model.refs import RESERVED_FOR_MAX, Consumer
from extender.state import ClusterState

# Upstream's Filter reason for an allocated claim the node cannot use (kubernetes/kubernetes
# pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go).
NOT_AVAILABLE = "resourceclaim not available on the node"


class PodWaits(Exception):
    """The pod cannot be scheduled anywhere right now; the message says why."""


@dataclass(frozen=True, slots=True)
class PodClaims:
    claims: tuple[ResourceClaim, ...]  # in spec.resourceClaims order, the extended-resource claim last
    to_allocate: tuple[ResourceClaim, ...]
    allocated: tuple[ResourceClaim, ...]
    # The claim an earlier bind created for the pod's DRA-backed extended resources (allocated).
    extended: ResourceClaim | None = None
    # Why an allocated claim can be used on no node at all (see ``unusable_reason``); "" if none.
    unusable: str = ""
    # Claim UID -> the PodGroup it is reserved for, for the claims the pod shares with its group
    # (DRAWorkloadResourceClaims); every other claim is reserved for the pod itself.
    consumers: Mapping[str, Consumer] = field(default_factory=dict)

    def with_extended(self, claim: ResourceClaim) -> PodClaims:
        allocated = (*self.allocated, claim)
        return replace(self, claims=(*self.claims, claim), allocated=allocated, extended=claim)

    def judged(self, state: ClusterState, features: Features) -> PodClaims:
        """These claims with ``unusable`` set from the first allocated claim no node can use."""
        for claim in self.allocated:
            why = unusable_reason(state, features, claim)
            if why is not None:
                return replace(self, unusable=f"{NOT_AVAILABLE}: {why}")
        return self


def pod_for_request(state: ClusterState, obj: Any) -> PodInfo:
    """The state's copy of the pod (it carries resourceClaimStatuses), else the request's.

    Raises ValueError for a malformed request pod.
    """
    return held_or_given(state, parse_pod(obj))


def held_or_given(state: ClusterState, given: PodInfo) -> PodInfo:
    """The state's copy of the request's pod ``given``, if it holds the same pod, else ``given``."""
    held = state.pod(given.namespace, given.name)
    if held is not None and (not given.uid or held.uid == given.uid):
        return held
    return given


def _group_name(features: Features, pod: PodInfo) -> str:
    """The pod's PodGroup, when claims may be shared with it ("" otherwise); ValueError for a
    malformed ``spec.schedulingGroup``."""
    if not features.workload_resource_claims:
        return ""
    if pod.group_problem:
        raise ValueError(pod.group_problem)
    return pod.group_name


def _owner_problem(claim: ResourceClaim, pod: PodInfo, group: str) -> str | None:
    """Upstream's resourceclaim.IsForPod for a claim generated from a template: the pod must
    control it, or with DRAWorkloadResourceClaims the pod's PodGroup (any API version)."""
    if claim.controlled_by(pod.uid):
        return None
    what = f"ResourceClaim {claim.namespace}/{claim.name} was not created for Pod {pod.ref}"
    if not group:
        return f"{what} (Pod is not owner)"
    owner = claim.controller
    if (
        owner is not None
        and owner.kind == "PodGroup"
        and owner.api_group == POD_GROUP_API_GROUP
        and owner.name == group
    ):
        return None
    return f"{what} (neither Pod nor PodGroup {group} is the owner)"


def resolve(state: ClusterState, pod: PodInfo) -> PodClaims:
    """The pod's claims in order, each once; raises PodWaits with upstream's message otherwise.

    Two entries may name the same claim (twice directly, or directly and through the claim
    generated for a template entry): it is still one claim, allocated once and reserved once.
    Listed twice, the allocator would want devices for it twice, and bind would write it twice,
    the second write finding the first one's allocation and failing the bind every time.

    With DRAWorkloadResourceClaims, an entry that matches one of the PodGroup's claims (same
    name, same source) is reserved for the group (upstream's PreFilter, podResourceClaimBindings).
    """
    try:
        group = _group_name(state.features, pod)
    except ValueError as exc:
        raise PodWaits(f"pod {pod.ref}: {exc}") from None
    claims: dict[str, ResourceClaim] = {}
    shared: list[tuple[str, ResourceClaim]] = []  # (pod claim entry, claim) pairs
    for entry in pod.claims:
        if entry.claim_name:
            name = entry.claim_name
        elif entry.template_name:
            if entry.name not in pod.claim_statuses:
                # Upstream's message, and the likeliest cause when the cache knows it: the claim
                # controller makes no claim from a template that does not exist.
                missing = (pod.namespace, entry.template_name) not in state.templates
                raise PodWaits(
                    f'pod "{pod.ref}": ResourceClaim not created yet (pod claim {entry.name})'
                    + (f": ResourceClaimTemplate {pod.namespace}/{entry.template_name} not found"
                       if missing else "")
                )
            name = pod.claim_statuses[entry.name]
            if not name:
                continue  # the controller decided no claim is needed
        else:
            raise PodWaits(
                f"pod {pod.ref}: pod claim {entry.name}: neither resourceClaimName nor template set"
            )
        claim = state.claim(pod.namespace, name)
        if claim is None:
            raise PodWaits(f'pod "{pod.ref}": ResourceClaim {pod.namespace}/{name} not found')
        if entry.template_name and (problem := _owner_problem(claim, pod, group)) is not None:
            raise PodWaits(problem)
        if claim.deleting:
            raise PodWaits(f'resourceclaim "{name}" is being deleted')
        claims.setdefault(name, claim)
        shared.append((entry.name, claim))
    unique = tuple(claims.values())
    return PodClaims(
        claims=unique,
        to_allocate=tuple(c for c in unique if c.allocation is None),
        allocated=tuple(c for c in unique if c.allocation is not None),
        consumers=_group_consumers(state, pod, group, shared),
    )


def _group_consumers(
    state: ClusterState, pod: PodInfo, group: str, used: list[tuple[str, ResourceClaim]]
) -> dict[str, Consumer]:
    """Claim UID -> the PodGroup, for each pod claim entry that is one of the group's claims
    (upstream: resourceclaim.BindTo). A pod naming a PodGroup that does not exist waits for it."""
    if not group:
        return {}
    held = state.pod_group(pod.namespace, group)
    if held is None:
        raise PodWaits(f'podgroup.{POD_GROUP_API_GROUP} "{group}" not found')
    entries = {entry.name: entry for entry in pod.claims}
    consumer = Consumer(POD_GROUP_API_GROUP, POD_GROUP_RESOURCE, held.name, held.uid)
    return {
        claim.uid: consumer
        for name, claim in used
        if held.shares(name, entries[name].claim_name, entries[name].template_name)
    }


def _class_names(
    request: ExactRequest | None, subrequests: tuple[ExactRequest, ...]
) -> list[tuple[str, str]]:
    if request is not None:
        return [("", request.device_class_name)]
    return [(f"/{sub.name}", sub.device_class_name) for sub in subrequests]


def check_before_allocation(state: ClusterState, features: Features, pod: PodInfo, claims: PodClaims) -> None:
    """PreFilter checks of the unallocated claims and the sharing limit of allocated ones."""
    for claim in claims.to_allocate:
        inflight = state.inuse.inflight.get(claim.uid)
        if inflight is not None:
            raise PodWaits(
                f"resource claim {claim.namespace}/{claim.name} is in the process of being allocated"
            )
        for request in claim.requests:
            if request.first_available and not features.prioritized_list:
                raise PodWaits(
                    f"resource claim {claim.namespace}/{claim.name}, request {request.name}: "
                    "has subrequests, but the DRAPrioritizedList feature is disabled"
                )
            for suffix, class_name in _class_names(request.exactly, request.first_available):
                if class_name and class_name not in state.classes:
                    raise PodWaits(
                        f"resource claim {claim.namespace}/{claim.name}, request {request.name}{suffix}: "
                        f"device class {class_name} does not exist"
                    )
    for claim in claims.allocated:
        if not reserved_for_pod(features, claim, pod) and len(claim.reserved_for) >= RESERVED_FOR_MAX:
            raise PodWaits(
                f"resource claim {claim.namespace}/{claim.name} is already in use by "
                f"{RESERVED_FOR_MAX} consumers, the maximum"
            )


def lacks_node_operations(claim: ResourceClaim, node: Node) -> str | None:
    """Why ``node`` cannot use an allocation whose devices skip node operations, or None.

    Upstream's Filter (kubernetes/kubernetes 4966917a, dynamicresources.go
    ``allocationResultRequiresDRAOptionalNodeOperations``) checks this whatever the gate
    says: a kubelet that does not declare DRAOptionalNodeOperations would call a driver
    that may not run on its node.
    """
    allocation = claim.allocation
    if allocation is None or OPTIONAL_NODE_OPERATIONS in node.declared_features:
        return None
    if not any(d.skip_node_operations for d in allocation.devices):
        return None
    return (
        f"{NOT_AVAILABLE}: resource claim {claim.namespace}/{claim.name} allocation requires "
        f"{OPTIONAL_NODE_OPERATIONS} feature on the node"
    )


def reserved_for(claim: ResourceClaim, pod_uid: str) -> bool:
    """Whether the pod itself is a consumer: what releasing the pod's reservations undoes (a
    reservation for its PodGroup stays, other pods of the group may use it; upstream's Unreserve)."""
    return claim.reserved_for_uid(pod_uid)


def reserved_for_pod(features: Features, claim: ResourceClaim, pod: PodInfo) -> bool:
    """Whether the pod may use the claim without reserving it: the pod is a consumer or, with
    DRAWorkloadResourceClaims, its PodGroup is (upstream: resourceclaim.IsReservedForPod)."""
    if reserved_for(claim, pod.uid):
        return True
    try:
        group = _group_name(features, pod)
    except ValueError:
        return False  # resolve refuses such a pod before anything asks
    return bool(group) and any(
        ref.api_group == POD_GROUP_API_GROUP and ref.resource == POD_GROUP_RESOURCE
        and ref.name == group
        for ref in claim.reserved_for
    )


def unusable_reason(state: ClusterState, features: Features, claim: ResourceClaim) -> str | None:
    """Why an allocated claim can be used on no node whatever the node, or None.

    With the binding gates on, a binding failure condition that is True or binding conditions
    not all met within the binding timeout (upstream's Filter: isClaimReadyForBinding,
    isClaimTimeout); with any gates, a device of the allocation that no slice publishes any more.
    """
    if claim.allocation is None:
        return None
    if features.binding:
        readiness = claim_readiness(claim)
        if readiness.failed:
            return readiness.message
    for device in claim.allocation.devices:
        if state.slices.device(device.id) is None:
            return f"claim {claim.key}: device {'/'.join(device.id)} is no longer published"
    return None


# --- binding conditions (DRADeviceBindingConditions + DRAResourceClaimDeviceStatus) ---------
#
# Upstream's PreBind (kubernetes/kubernetes
# ``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go``) polls until every
# binding condition of the allocated devices is ``True`` in ``status.devices``. An extender
# cannot hold a bind call that long (kube-scheduler's httpTimeout is seconds), so bind answers
# with an ``Error`` while conditions are pending and keeps the claims allocated and reserved;
# the scheduler retries the pod with backoff, filter then only admits the allocation's node,
# and the next bind checks again. A failure condition, or ``allocationTimestamp`` older than
# the binding timeout, makes the claim of no use on any node (``unusable_reason``, as
# upstream's Filter): bind releases (and deallocates) the claims, and a filter that finds no
# node has them released (``stale``), so that a later attempt allocates afresh.

BINDING_TIMEOUT_S = 600.0  # DynamicResourcesArgs.bindingTimeout default


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    failed: bool
    message: str


READY = Readiness(True, False, "")


def _timestamp(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def claim_readiness(claim: ResourceClaim, now: datetime | None = None) -> Readiness:
    """Whether an allocated claim's devices may be used yet."""
    allocation = claim.allocation
    if allocation is None:
        return READY
    pending: list[str] = []
    for result in allocation.devices:
        wanted, failing = result.binding_conditions, result.binding_failure_conditions
        if not wanted and not failing:
            continue
        device = "/".join(result.id)
        conditions = claim.device_conditions.get(result.id, {})
        for condition in failing:
            if conditions.get(condition) == "True":
                return Readiness(
                    False, True, f"claim {claim.key} binding failed: device {device}: {condition} is True"
                )
        pending.extend(f"{device}: {c}" for c in wanted if conditions.get(c) != "True")
    if not pending:
        return READY
    started = _timestamp(allocation.allocated_at)
    now = now or datetime.now(UTC)
    if started is not None and (now - started).total_seconds() > BINDING_TIMEOUT_S:
        return Readiness(False, True, f"claim {claim.key}: device binding timeout ({', '.join(pending)})")
    waiting = ", ".join(pending)
    return Readiness(False, False, f"claim {claim.key}: waiting for binding conditions ({waiting})")


def first_problem(claims: Iterable[ResourceClaim]) -> Readiness:
    """The first claim that is not ready (failed ones first), or READY."""
    waiting = None
    for claim in claims:
        readiness = claim_readiness(claim)
        if readiness.failed:
            return readiness
        if not readiness.ready and waiting is None:
            waiting = readiness
    return waiting or READY
