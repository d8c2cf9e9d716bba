"""References and API constants shared by every layer that names a pod or writes a claim.

They live on the ground floor so that scheduling, the binders and the local cluster can all
use them without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# ResourceClaim.status.reservedFor holds at most this many entries (the API's validation limit).
RESERVED_FOR_MAX = 256
# Upstream's finalizer on claims the scheduler creates (extended-resource claims): it keeps a
# claim from vanishing while its allocation may still be in use.
DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"


@dataclass(frozen=True)
class Consumer:
    """A ``status.reservedFor`` entry: who a claim is reserved for."""

    api_group: str  # "" for the core group (pods)
    resource: str
    name: str
    uid: str

    def entry(self) -> dict[str, str]:
        out = {"resource": self.resource, "name": self.name, "uid": self.uid}
        if self.api_group:
            out["apiGroup"] = self.api_group
        return out


@dataclass(frozen=True)
class PodRef:
    """A pod as the binder addresses it; the UID guards against a re-created pod of that name."""

    namespace: str
    name: str
    uid: str
    # Whom a claim written for this pod is reserved for, when not the pod itself: its PodGroup,
    # for a claim the group shares (DRAWorkloadResourceClaims).
    consumer: Consumer | None = None

    def __str__(self) -> str:
        """ "namespace/name", how messages name the pod."""
        return f"{self.namespace}/{self.name}"

    @property
    def reservation(self) -> Consumer:
        return self.consumer or Consumer("", "pods", self.name, self.uid)


def resource_version(obj: Mapping[str, Any]) -> int:
    """The object's ``metadata.resourceVersion`` as a number (0 when absent or not a number).

    Kubernetes calls it opaque; every API server we talk to (etcd-backed, and the test one)
    counts it up, which is what comparing two versions of one object relies on.
    """
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0
