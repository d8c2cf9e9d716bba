"""The parts of a v1 Pod that DRA scheduling reads, parsed once when the pod enters the cache."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.model._fields import Fields, check_metadata, metadata_name
from extender.model.extended import integer_quantity, is_dra_extended_name
from extender.model.refs import PodRef


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One ``spec.resourceClaims`` entry. Both names empty is kept: resolution reports it."""

    name: str
    claim_name: str
    template_name: str


@dataclass(frozen=True, slots=True)
class ContainerResources:
    """One container's resource requests, as far as DRA-backed extended resources need them."""

    name: str
    init: bool
    # An init container with ``restartPolicy: Always``: it keeps running next to the regular ones.
    sidecar: bool
    # Every requested resource name, sorted: a request's index here names the claim request
    # made for it (``container-<i>-request-<j>``, as kube-scheduler's createDeviceRequests
    # names them).
    request_names: tuple[str, ...]
    extended: Mapping[str, int]  # DRA-backable names -> whole amount (zero kept)
    claims: tuple[str, ...] = ()  # the pod's claims it uses (``resources.claims[].name``)


# Phases after which a pod holds nothing on its node any more.
FINISHED_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class PodInfo:
    namespace: str
    name: str
    uid: str
    scheduler_name: str | None  # None when the field is absent
    node_name: str
    phase: str
    deleting: bool
    claims: tuple[PodClaim, ...]
    # status.resourceClaimStatuses: pod claim name -> generated claim name ("" = none needed).
    # A pod claim missing from this mapping has not been handled by the claim controller yet.
    claim_statuses: Mapping[str, str]
    # Init containers first, then regular ones (the index order of the special claim's requests).
    containers: tuple[ContainerResources, ...]
    # status.extendedResourceClaimStatus.resourceClaimName ("" = not recorded).
    extended_claim_name: str
    raw: Mapping[str, Any]
    # spec.priority as admission resolved it from the PriorityClass (absent: 0, as upstream's
    # corev1helpers.PodPriority): who may preempt whom.
    priority: int = 0
    # status.nominatedNodeName: the node a preemption freed for this pod ("" = none).
    nominated_node: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)  # what PodDisruptionBudgets select by
    start_time: str = ""  # status.startTime (RFC 3339): among equal priorities, older pods matter more
    # spec.preemptionPolicy ("" when absent: PreemptLowerPriority, the API default).
    preemption_policy: str = ""
    # spec.schedulingGroup.podGroupName ("" when the pod belongs to no PodGroup), and why the
    # field could not be read ("" when it could): such a pod waits with that reason when
    # DRAWorkloadResourceClaims is on, and is scheduled as any other pod when it is off.
    group_name: str = ""
    group_problem: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def pod_ref(self) -> PodRef:
        """How the binders address the pod (its UID guards against a re-created namesake)."""
        return PodRef(self.namespace, self.name, self.uid)

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED_PHASES

    def claim_name(self, entry: PodClaim) -> str:
        """The ResourceClaim a ``spec.resourceClaims`` entry stands for: the one it names, or
        the one the claim controller made from its template ("" while there is none yet)."""
        return entry.claim_name or self.claim_statuses.get(entry.name, "")

    @property
    def may_preempt(self) -> bool:
        """Whether the pod may evict others (``preemptionPolicy: Never`` says no)."""
        return self.preemption_policy != "Never"

    @property
    def wants_devices(self) -> bool:
        """Whether the pod asks for anything DRA might provide (claims, or extended resources)."""
        return bool(self.claims or self.extended_requests)

    @property
    def extended_requests(self) -> frozenset[str]:
        """DRA-backable resources with a non-zero pod-level request.

        The pod's effective request is the larger of the init containers' maximum and the
        regular containers' sum; it is non-zero exactly when some container asks for some.
        """
        return frozenset(name for c in self.containers for name, n in c.extended.items() if n > 0)


def _str(value: Any, what: str, pod: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"Pod {pod}: {what}: must be a string, got {type(value).__name__}")
    return value


def _map(value: Any, what: str, pod: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"Pod {pod}: {what}: must be an object, got {type(value).__name__}")
    return value


def _list(value: Any, what: str, pod: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"Pod {pod}: {what}: must be a list, got {type(value).__name__}")
    return value


def _container(item: Any, init: bool, path: str, pod: str) -> ContainerResources:
    item = _map(item, path, pod)
    resources = _map(item.get("resources"), f"{path}.resources", pod)
    requests = dict(_map(resources.get("requests"), f"{path}.resources.requests", pod))
    # API-server defaulting: a resource with a limit and no request requests its limit.
    for key, value in _map(resources.get("limits"), f"{path}.resources.limits", pod).items():
        requests.setdefault(key, value)
    extended = {
        key: integer_quantity(value, f"Pod {pod}: {path}.resources.requests[{key}]")
        for key, value in requests.items()
        if is_dra_extended_name(key)
    }
    restart_policy = _str(item.get("restartPolicy"), f"{path}.restartPolicy", pod)
    claims = _list(resources.get("claims"), f"{path}.resources.claims", pod)
    return ContainerResources(
        name=_str(item.get("name"), f"{path}.name", pod),
        init=init,
        sidecar=init and restart_policy == "Always",
        request_names=tuple(sorted(requests)),
        extended=extended,
        claims=tuple(
            str(_map(ref, f"{path}.resources.claims[{i}]", pod).get("name")) for i, ref in enumerate(claims)
        ),
    )


def _pod_claims(spec: Mapping[str, Any], ref: str) -> tuple[PodClaim, ...]:
    claims = []
    for i, item in enumerate(_list(spec.get("resourceClaims"), "spec.resourceClaims", ref)):
        item = _map(item, f"spec.resourceClaims[{i}]", ref)
        claim_name = _str(item.get("name"), f"spec.resourceClaims[{i}].name", ref)
        if not claim_name:
            raise ValueError(f"Pod {ref}: spec.resourceClaims[{i}].name: required")
        claims.append(
            PodClaim(
                name=claim_name,
                claim_name=_str(
                    item.get("resourceClaimName"), f"spec.resourceClaims[{i}].resourceClaimName", ref
                ),
                template_name=_str(
                    item.get("resourceClaimTemplateName"),
                    f"spec.resourceClaims[{i}].resourceClaimTemplateName",
                    ref,
                ),
            )
        )
    return tuple(claims)


def _claim_statuses(status: Mapping[str, Any], ref: str) -> dict[str, str]:
    """status.resourceClaimStatuses: pod claim name -> generated claim name."""
    statuses: dict[str, str] = {}
    for i, item in enumerate(_list(status.get("resourceClaimStatuses"), "status.resourceClaimStatuses", ref)):
        item = _map(item, f"status.resourceClaimStatuses[{i}]", ref)
        entry = _str(item.get("name"), f"status.resourceClaimStatuses[{i}].name", ref)
        statuses[entry] = _str(
            item.get("resourceClaimName"), f"status.resourceClaimStatuses[{i}].resourceClaimName", ref
        )
    return statuses


def parse_pod(obj: Any) -> PodInfo:
    """Parse a pod; raises ValueError naming the pod and field for malformed input."""
    if not isinstance(obj, Mapping):
        raise ValueError(f"Pod: must be an object, got {type(obj).__name__}")
    meta = _map(obj.get("metadata"), "metadata", "<unnamed>")
    name = _str(meta.get("name"), "metadata.name", "<unnamed>")
    if not name:
        raise ValueError("Pod <unnamed>: metadata.name: required")
    namespace = _str(meta.get("namespace"), "metadata.namespace", name) or "default"
    ref = f"{namespace}/{name}"
    check_metadata(Fields("Pod", ref), meta)
    spec = _map(obj.get("spec"), "spec", ref)
    status = _map(obj.get("status"), "status", ref)
    scheduler = spec.get("schedulerName")
    claims = _pod_claims(spec, ref)
    statuses = _claim_statuses(status, ref)
    containers = [
        _container(item, True, f"spec.initContainers[{i}]", ref)
        for i, item in enumerate(_list(spec.get("initContainers"), "spec.initContainers", ref))
    ]
    containers += [
        _container(item, False, f"spec.containers[{i}]", ref)
        for i, item in enumerate(_list(spec.get("containers"), "spec.containers", ref))
    ]
    priority = spec.get("priority")
    if priority is None:
        priority = 0
    elif isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError(f"Pod {ref}: spec.priority: must be an integer, got {type(priority).__name__}")
    labels = _map(meta.get("labels"), "metadata.labels", ref)  # check_metadata checked the values
    try:
        group_name, group_problem = pod_group_name(obj), ""
    except ValueError as exc:
        group_name, group_problem = "", str(exc)
    extended_status = _map(
        status.get("extendedResourceClaimStatus"), "status.extendedResourceClaimStatus", ref
    )
    return PodInfo(
        namespace=namespace,
        name=name,
        uid=_str(meta.get("uid"), "metadata.uid", ref),
        scheduler_name=_str(scheduler, "spec.schedulerName", ref) if scheduler is not None else None,
        node_name=_str(spec.get("nodeName"), "spec.nodeName", ref),
        phase=_str(status.get("phase"), "status.phase", ref),
        deleting=meta.get("deletionTimestamp") is not None,
        claims=claims,
        claim_statuses=statuses,
        containers=tuple(containers),
        extended_claim_name=_str(
            extended_status.get("resourceClaimName"),
            "status.extendedResourceClaimStatus.resourceClaimName",
            ref,
        ),
        raw=obj,
        priority=priority,
        nominated_node=_str(status.get("nominatedNodeName"), "status.nominatedNodeName", ref),
        labels=dict(labels),
        start_time=_str(status.get("startTime"), "status.startTime", ref),
        preemption_policy=_str(spec.get("preemptionPolicy"), "spec.preemptionPolicy", ref),
        group_name=group_name,
        group_problem=group_problem,
    )


# --- PodGroup (scheduling.k8s.io), as far as DRA reads it: the claims its pods share --------
#
# A pod shares a PodGroup's claim by listing, in its own ``spec.resourceClaims``, an entry with
# the same name and the same source (the same ResourceClaim, or the same ResourceClaimTemplate)
# as one of the group's ``spec.resourceClaims``; the claim is then reserved for the group, not
# the pod (upstream: k8s.io/dynamic-resource-allocation/resourceclaim ``BindTo``, kubernetes/
# kubernetes, DRAWorkloadResourceClaims).

POD_GROUP_API_GROUP = "scheduling.k8s.io"
POD_GROUP_RESOURCE = "podgroups"


@dataclass(frozen=True, slots=True)
class PodGroupClaim:
    """One ``spec.resourceClaims`` entry: exactly one of the two sources is set."""

    name: str
    claim_name: str
    template_name: str


@dataclass(frozen=True, slots=True)
class PodGroup:
    namespace: str
    name: str
    uid: str
    claims: tuple[PodGroupClaim, ...]
    raw: Mapping[str, Any]

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def shares(self, name: str, claim_name: str, template_name: str) -> bool:
        """Whether a pod claim entry with this name and source is one of the group's claims."""
        return any(
            c.name == name
            and ((claim_name != "" and c.claim_name == claim_name)
                 or (template_name != "" and c.template_name == template_name))
            for c in self.claims
        )


def parse_pod_group(obj: dict[str, Any]) -> PodGroup:
    """Parse a PodGroup; raises ValueError naming the object and field for malformed input."""
    meta, name = metadata_name(obj, "PodGroup")
    namespace = meta.get("namespace") or "default"
    f = Fields("PodGroup", f"{namespace}/{name}" if isinstance(namespace, str) else name)
    check_metadata(f, meta)
    spec = f.mapping(obj.get("spec"), "spec")
    claims = []
    for where, item in f.mappings(spec.get("resourceClaims"), "spec.resourceClaims"):
        claim_name = f.string(item.get("resourceClaimName"), f"{where}.resourceClaimName")
        template_name = f.string(item.get("resourceClaimTemplateName"), f"{where}.resourceClaimTemplateName")
        if bool(claim_name) == bool(template_name):
            both = f"{where}.resourceClaimName or {where}.resourceClaimTemplateName"
            raise f.error(both, "exactly one must be set")
        claims.append(PodGroupClaim(f.string(item.get("name"), f"{where}.name", required=True),
                                    claim_name, template_name))
    return PodGroup(
        namespace=namespace,
        name=name,
        uid=f.string(meta.get("uid"), "metadata.uid"),
        claims=tuple(claims),
        raw=obj,
    )


def pod_group_name(pod: Mapping[str, Any]) -> str:
    """``spec.schedulingGroup.podGroupName`` of a pod ("" when it belongs to no group).

    Raises ValueError for a value of the wrong type.
    """
    spec = pod.get("spec") or {}
    group = spec.get("schedulingGroup") if isinstance(spec, Mapping) else None
    if group is None:
        return ""
    if not isinstance(group, Mapping):
        raise ValueError("spec.schedulingGroup: must be an object")
    name = group.get("podGroupName")
    if name is not None and not isinstance(name, str):
        raise ValueError(f"spec.schedulingGroup.podGroupName: must be a string, got {type(name).__name__}")
    return name or ""
