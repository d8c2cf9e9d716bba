"""PodGroup (scheduling.k8s.io), as far as DRA reads it: the claims its pods share.

A pod shares a PodGroup's claim by listing, in its own ``spec.resourceClaims``, an entry with
the same name and the same source (the same ResourceClaim, or the same ResourceClaimTemplate)
as one of the group's ``spec.resourceClaims``; the claim is then reserved for the group, not
the pod (upstream: k8s.io/dynamic-resource-allocation/resourceclaim ``BindTo``, kubernetes/
kubernetes, DRAWorkloadResourceClaims).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.model._fields import Fields, check_metadata, metadata_name

GROUP = "scheduling.k8s.io"
RESOURCE = "podgroups"


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
