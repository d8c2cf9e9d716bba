"""Where bind's side effects go: claim status writes and the pod binding.

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


__all__ = ["DELETE_PROTECTION_FINALIZER", "RESERVED_FOR_MAX", "BindError", "Binder", "PodRef"]
