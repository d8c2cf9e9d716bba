"""The scheduler-made claim that carries a pod's DRA-backed extended resources.

Upstream (the DynamicResources plugin, kubernetes/kubernetes
``pkg/scheduler/framework/plugins/dynamicresources/``) keeps one such claim per pod: in memory
while scheduling, with one node-specific variant per set of resources the node leaves to DRA,
and created in the API only at bind, under ``generateName: <pod>-extended-resources-``. Its
requests are ``container-<i>-request-<j>`` (``i`` counts init containers, then regular ones;
``j`` is the resource's index among the container's sorted request names), init containers
sharing them (``_shares``); the pod's ``status.extendedResourceClaimStatus`` tells the kubelet
which container gets which requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from extender.model import ResourceClaim, parse_resource_claim
from extender.model.extended import EXTENDED_RESOURCE_CLAIM_ANNOTATION
from extender.model.pods import ContainerResources, PodInfo

# Deliberately not a valid object name, as upstream's, so it can never clash with a real claim.
IN_MEMORY_NAME = "<extended-resources>"
# Upstream's Filter reason for a claim an earlier cycle created (extendeddynamicresources.go).
CANNOT_SCHEDULE = "cannot schedule extended resource claim"
API_VERSION = "resource.k8s.io/v1"


@dataclass(frozen=True, slots=True)
class ExtendedClaim:
    """One node variant of the in-memory claim, and the container mappings that go with it."""

    claim: ResourceClaim
    mappings: tuple[Mapping[str, str], ...]  # {containerName, resourceName, requestName}
    body: Mapping[str, Any]  # what bind creates: no name, UID or status (the API server names it)

    def create_body(self) -> dict[str, Any]:
        """A fresh copy of the object bind creates."""
        return {key: _plain(value) for key, value in self.body.items()}


def _plain(value: Any) -> Any:
    """A deep copy of ``value`` in plain dicts and lists."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def requests_and_mappings(
    pod: PodInfo, via_dra: Iterable[str], classes: Mapping[str, str]
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The claim's ExactCount requests, sorted by name, and the container mappings.

    As upstream's ``createRequestsAndMappings`` makes them: resource by resource in sorted
    order, see ``_shares``.
    """
    requests: list[dict[str, Any]] = []
    mappings: list[dict[str, str]] = []
    for resource in sorted(via_dra):
        made, mapped = _shares(pod, resource)
        for name, count in made:
            exactly = {"deviceClassName": classes[resource], "allocationMode": "ExactCount", "count": count}
            requests.append({"name": name, "exactly": exactly})
        mappings += ({"containerName": c, "resourceName": resource, "requestName": r} for c, r in mapped)
    requests.sort(key=lambda r: r["name"])
    return requests, mappings


def _shares(pod: PodInfo, resource: str) -> tuple[list[tuple[str, int]], list[tuple[str, str]]]:
    """(request name, count) and (container name, request name) for one resource.

    Long-lived containers (sidecars and regular ones) each get a request of their own. Plain
    init containers run one at a time before the regular ones start and while only the
    sidecars started before them run, so each first uses the long-lived requests of the
    containers after it, then asks for what they leave short; of those asks only the largest
    (the first, on a tie) is made, and every init container that asked maps to it instead.
    Mappings list the long-lived containers first, then the init ones, each in pod order.
    """
    containers = pod.containers
    long_lived: list[tuple[str, int] | None] = [None] * len(containers)
    long_mapped: list[tuple[str, str]] = []
    for i, container in enumerate(containers):
        if not container.init or container.sidecar:
            long_lived[i], mapped = _container_share(i, container, resource, ())
            long_mapped += mapped
    largest: tuple[str, int] | None = None
    asked: set[str] = set()
    init_mapped: list[tuple[str, str]] = []
    for i, container in enumerate(containers):
        if container.init and not container.sidecar:
            later = [r for r in long_lived[i:] if r is not None]
            own, mapped = _container_share(i, container, resource, later)
            if own is not None:
                asked.add(own[0])
                if largest is None or largest[1] < own[1]:
                    largest = own
            init_mapped += mapped
    made = [r for r in long_lived if r is not None]
    if largest is not None:
        made.append(largest)
        init_mapped = [(c, largest[0] if r in asked else r) for c, r in init_mapped]
    return made, long_mapped + init_mapped


def _container_share(
    i: int, container: ContainerResources, resource: str, reusable: Iterable[tuple[str, int]]
) -> tuple[tuple[str, int] | None, list[tuple[str, str]]]:
    """The container's own request for ``resource`` (None when it needs none) and its mappings.

    It maps to the ``reusable`` requests in order until they hold what it needs; the rest
    is its own request, ``container-<i>-request-<j>``.
    """
    need = container.extended.get(resource, 0)
    if need <= 0:
        return None, []
    mapped: list[tuple[str, str]] = []
    held = 0
    for name, count in reusable:
        held += count
        mapped.append((container.name, name))
        if held >= need:
            return None, mapped
    name = f"container-{i}-request-{container.request_names.index(resource)}"
    mapped.append((container.name, name))
    return (name, need - held), mapped


def in_memory_claim(pod: PodInfo, via_dra: Iterable[str], classes: Mapping[str, str]) -> ExtendedClaim:
    """The node variant for the resources ``via_dra`` (names ``classes`` maps)."""
    requests, mappings = requests_and_mappings(pod, via_dra, classes)
    metadata = {
        "generateName": f"{pod.name}-extended-resources-",
        "namespace": pod.namespace,
        "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid, "controller": True}
        ],
    }
    body = {"apiVersion": API_VERSION, "kind": "ResourceClaim", "metadata": metadata}
    body["spec"] = {"devices": {"requests": requests}}
    # Stands in for the UID until the claim exists; one per pod, so its in-flight entry cannot
    # collide with another pod's.
    identity = {"name": IN_MEMORY_NAME, "uid": f"{pod.uid}/extended-resources"}
    in_memory = {**body, "metadata": {**identity, **metadata}}
    return ExtendedClaim(parse_resource_claim(in_memory), tuple(mappings), _plain(body))


def extended_status(claim_name: str, mappings: Iterable[Mapping[str, str]]) -> dict[str, Any]:
    """The pod status fields that tell the kubelet which container uses which request."""
    return {
        "extendedResourceClaimStatus": {
            "resourceClaimName": claim_name,
            "requestMappings": [dict(m) for m in mappings],
        }
    }


def mappings_of(pod: PodInfo, claim: ResourceClaim) -> list[dict[str, str]]:
    """The request mappings of an existing claim, made again for the resources it names.

    Each request name names a container's resource; the pod makes exactly the claim's
    requests for those resources, or the claim was not made for it. Raises ValueError then.
    """
    resources = set()
    for request in claim.requests:
        i, j = _indices(request.name)
        if i is None or j is None or i >= len(pod.containers) or j >= len(pod.containers[i].request_names):
            raise ValueError(f"claim {claim.key}: request {request.name} names no request of pod {pod.ref}")
        resources.add(pod.containers[i].request_names[j])
    out: list[dict[str, str]] = []
    made: list[str] = []
    for resource in sorted(resources):
        requests, mapped = _shares(pod, resource)
        made += (name for name, _ in requests)
        out += ({"containerName": c, "resourceName": resource, "requestName": r} for c, r in mapped)
    names = sorted(r.name for r in claim.requests)
    if sorted(made) != names:
        raise ValueError(
            f"claim {claim.key}: requests {', '.join(names)} are not those pod {pod.ref} makes "
            "for its extended resources"
        )
    return out


def _indices(request_name: str) -> tuple[int | None, int | None]:
    head, _, j = request_name.rpartition("-request-")
    prefix, _, i = head.partition("container-")
    if prefix or not i.isdigit() or not j.isdigit():
        return None, None
    return int(i), int(j)


def find_extended_claim(claims: Iterable[ResourceClaim], pod: PodInfo) -> ResourceClaim | None:
    """The claim an earlier bind created for this pod, if any."""
    for claim in claims:
        if claim.namespace == pod.namespace and claim.extended_for(pod.name, pod.uid):
            return claim
    return None


def leftover_reason(claim: ResourceClaim, pod_uid: str, unusable: str | None) -> str | None:
    """Why the claim an earlier attempt created for the pod cannot be taken over, or None.

    Upstream refuses every such claim and its PostFilter deletes it: its PreBind waits for the
    binding conditions and its Unreserve deletes the claim, so a later cycle only ever finds a
    stale one. Here bind leaves it allocated and reserved for the pod on purpose while binding
    conditions are pending, or when the Binding's fate is unknown, and the retry takes it over;
    anything else (not allocated, not reserved for the pod, or of no use on any node:
    ``unusable``, the caller's ``claims.unusable_reason`` of it) is a leftover.
    """
    if claim.allocation is None:
        why = "it was created by an earlier attempt and is not allocated"
    elif not any(ref.uid == pod_uid for ref in claim.reserved_for):
        why = "it was created by an earlier attempt and is not reserved for the pod"
    elif unusable is None:
        return None
    else:
        why = unusable
    return f"{CANNOT_SCHEDULE} {claim.key}: {why}"
