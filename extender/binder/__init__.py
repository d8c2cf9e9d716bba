"""Where bind's side effects go: claim writes (and the extended-resource claim), pod status, binding.

The contract is shared by the local store (``local.py``) and the Kubernetes API
(``kube.py``); the scheduling code only ever talks to a :class:`Binder`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from extender.model import ResourceClaim

RESERVED_FOR_MAX = 256
DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str


class BindError(Exception):
    """A write the binder could not perform; the message is shown to the user as is."""


class Binder(Protocol):
    async def write_claim(self, claim: ResourceClaim, allocation: dict | None, pod: PodRef) -> dict:
        """Set ``allocation`` (None: already allocated) and add ``pod`` to reservedFor.

        Returns the written claim object (API JSON).
        """
        ...

    async def bind_pod(self, pod: PodRef, node: str) -> None: ...

    async def release_claim(self, claim: ResourceClaim, pod: PodRef, deallocate: bool) -> dict | None:
        """Rollback: remove the pod's reservedFor entry; clear the allocation if ``deallocate``.

        Returns the claim as it is now (API JSON), or None when it is gone. The caller caches it
        at once: until the watch echoes the rollback, a retry must not see the old reservation.
        """
        ...

    async def create_extended_claim(self, body: dict, pod: PodRef) -> dict:
        """Create the pod's extended-resource claim from ``body`` (``generateName``, no name).

        Idempotent: a claim an earlier attempt created for the pod (annotation
        ``resource.kubernetes.io/extended-resource-claim: "true"``, controlled by the pod) is
        returned instead of creating a second one.
        """
        ...

    async def delete_extended_claims(self, pod: PodRef) -> list[dict]:
        """Rollback: delete the pod's extended-resource claims, our finalizer removed first.

        Returns the deleted objects (none when there was nothing to delete).
        """
        ...

    async def patch_pod_status(self, pod: PodRef, status: dict) -> None:
        """Set the given top-level fields of the pod's status (the status subresource)."""
        ...


__all__ = ["DELETE_PROTECTION_FINALIZER", "RESERVED_FOR_MAX", "BindError", "Binder", "PodRef"]
