"""The one table of the Kubernetes kinds the extender reads.

Per kind: its name, where the API serves it (group, version, plural resource name), whether
it is namespaced, whether a cluster may not serve it, and the parser that turns an API object
into the model's form. The cluster-state cache, the Kubernetes watch, the local store and the
HTTP surface all read this table instead of listing kinds of their own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from extender.model.device_class import parse_device_class
from extender.model.disruption import parse_pod_disruption_budget
from extender.model.nodes import parse_node
from extender.model.pods import parse_pod, parse_pod_group
from extender.model.resource_claim import parse_resource_claim, parse_resource_claim_template
from extender.model.resource_slice import parse_resource_slice
from extender.model.taint_rules import parse_device_taint_rule

ObjKey = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped kinds
RESOURCE_GROUP = "resource.k8s.io"

T = TypeVar("T", covariant=True)


@dataclass(frozen=True, slots=True)
class Kind(Generic[T]):
    name: str
    group: str  # "" for the core group
    version: str
    plural: str  # the resource name in API paths
    namespaced: bool
    # API object -> the model's form; raises ValueError("<kind> <name>: <field>: <problem>").
    parse: Callable[[dict[str, Any]], T]
    # A cluster may not serve the kind (its API is off): a 404 on the watch's list then means
    # "none of these", the kind counts as synced and empty, and the list is retried later.
    optional: bool = False
    # Older API versions a cluster may serve the kind at instead of ``version``, newest first;
    # the objects' fields the parser reads must be the same at each.
    older_versions: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def path(self) -> str:
        """The cluster-wide list/watch path."""
        prefix = f"/apis/{self.group}" if self.group else "/api"
        return f"{prefix}/{self.version}/{self.plural}"

    def at_version(self, version: str) -> Kind[T]:
        """The same kind as served at another API version."""
        return dataclasses.replace(self, version=version, older_versions=())

    @property
    def versions(self) -> tuple[Kind[T], ...]:
        """The kind at each version a cluster may serve it at, newest first."""
        return (self, *(self.at_version(version) for version in self.older_versions))

    def key(self, obj: Any) -> ObjKey:
        """(namespace, name) of an object of this kind; ValueError when it cannot be identified.

        A namespaced object without a namespace is in "default", as the API server defaults it.
        """
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta["name"]:
            raise ValueError(f"{self.name}: metadata.name: required")
        name: str = meta["name"]
        namespace = meta.get("namespace") or ("default" if self.namespaced else "")
        if not isinstance(namespace, str):
            raise ValueError(f"{self.name} {name}: metadata.namespace: must be a string")
        return (namespace if self.namespaced else "", name)


NODE = Kind("Node", "", "v1", "nodes", False, parse_node)
DEVICE_CLASS = Kind(
    "DeviceClass", RESOURCE_GROUP, "v1", "deviceclasses", False, parse_device_class
)
RESOURCE_SLICE = Kind(
    "ResourceSlice", RESOURCE_GROUP, "v1", "resourceslices", False, parse_resource_slice
)
# Before Kubernetes 1.37 its API is off by default (DRADeviceTaintRules), and at v1beta2 (1.36)
# or v1alpha3 (1.35) where turned on; from 1.35 the three have the same selector and taint
# fields (kubernetes#134152 dropped the class and CEL selectors).
DEVICE_TAINT_RULE = Kind(
    "DeviceTaintRule", RESOURCE_GROUP, "v1", "devicetaintrules", False, parse_device_taint_rule,
    optional=True, older_versions=("v1beta2", "v1alpha3"),
)
RESOURCE_CLAIM_TEMPLATE = Kind(
    "ResourceClaimTemplate", RESOURCE_GROUP, "v1", "resourceclaimtemplates", True,
    parse_resource_claim_template,
)
RESOURCE_CLAIM = Kind(
    "ResourceClaim", RESOURCE_GROUP, "v1", "resourceclaims", True, parse_resource_claim
)
# The claims a PodGroup's pods share (DRAWorkloadResourceClaims): an API that is off unless
# turned on, at v1beta1 from 1.37 and at v1alpha3 / v1alpha2 before; the resourceClaims and
# resourceClaimStatuses fields are the same at each.
POD_GROUP = Kind(
    "PodGroup", "scheduling.k8s.io", "v1beta1", "podgroups", True, parse_pod_group,
    optional=True, older_versions=("v1alpha3", "v1alpha2"),
)
# All pods, not only ours: the state needs every pod that holds a claim.
POD = Kind("Pod", "", "v1", "pods", True, parse_pod)
# What preemption reads to reprieve the pods whose eviction would break a budget first.
POD_DISRUPTION_BUDGET = Kind(
    "PodDisruptionBudget", "policy", "v1", "poddisruptionbudgets", True, parse_pod_disruption_budget
)

# In the order a local load applies them: a kind that others refer to comes first (a pod's
# claim template before the pod, a claim's class before the claim).
KINDS: tuple[Kind[Any], ...] = (
    NODE, DEVICE_CLASS, RESOURCE_SLICE, DEVICE_TAINT_RULE, RESOURCE_CLAIM_TEMPLATE, RESOURCE_CLAIM,
    POD_GROUP, POD, POD_DISRUPTION_BUDGET,
)
KIND_NAMES: tuple[str, ...] = tuple(k.name for k in KINDS)
BY_NAME: Mapping[str, Kind[Any]] = {k.name: k for k in KINDS}


def kind(name: Any) -> Kind[Any]:
    """The table entry for ``name``; ValueError for a kind the extender does not read."""
    found = BY_NAME.get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"unsupported kind {name!r}; expected one of {', '.join(KIND_NAMES)}")
    return found


def object_key(kind_name: str, obj: Any) -> ObjKey:
    """(namespace, name) of an API object of the named kind; ValueError when it cannot be identified."""
    return kind(kind_name).key(obj)

