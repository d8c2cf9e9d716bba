"""The resource types the test API server serves, with the URL and schema facts each one needs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    # Subresources whose writes go to .status only (the main resource then ignores status).
    has_status: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


RESOURCE_TYPES: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "pods", "Pod", namespaced=True, has_status=True),
    ResourceType("", "v1", "nodes", "Node", namespaced=False, has_status=True),
    ResourceType("", "v1", "events", "Event", namespaced=True),
    ResourceType("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False),
    ResourceType("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False),
    ResourceType("resource.k8s.io", "v1", "devicetaintrules", "DeviceTaintRule", namespaced=False),
    ResourceType("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", namespaced=True,
                 has_status=True),
    ResourceType("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", namespaced=True),
    ResourceType("scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup", namespaced=True, has_status=True),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True),
    ResourceType("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True,
                 has_status=True),
)

# By (group, plural): the server may serve a resource at other versions than its own (ApiServer's
# ``served``); the store keeps each object once, at the resource's own version.
BY_PLURAL: dict[tuple[str, str], ResourceType] = {(t.group, t.plural): t for t in RESOURCE_TYPES}
BY_KIND: dict[str, ResourceType] = {t.kind: t for t in RESOURCE_TYPES}
