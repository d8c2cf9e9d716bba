"""The Binder protocol: where bind's side effects go (claim writes, the extended-resource
claim, pod status, the Binding).

Scheduling owns this contract and only ever talks to a :class:`Binder`; the Kubernetes API
(``extender/kube/binder.py``) and the embedded cluster (``extender/local/binder.py``)
implement it. Defining it here keeps the import arrows pointing from the binders down to
scheduling, never back.
"""

from __future__ import annotations

from typing import Any, Protocol

from extender.model import ResourceClaim
from extender.model.refs import PodRef

# What a standby replica answers a bind with, and what stops its binder's writes.
NOT_THE_LEADER = "this dra-extender replica is not the leader; binds go to the leader"


class BindError(Exception):
    """A write the binder could not perform; the message is shown to the user as is."""


class BindingUncertain(BindError):
    """A Binding whose fate is unknown: an attempt went unanswered and no later one succeeded,
    and the pod is not (yet) seen bound there, nor bound elsewhere or gone. The unanswered
    request may still land: the pod's claims must stay reserved until it is settled."""


class WriteUncertain(BindError):
    """A claim write whose fate is unknown: a request was sent and no definite answer came back.

    The API server may still apply it later (a request held in the server, a reply lost on the
    way back). Its resourceVersion precondition is what makes it harmless eventually: once the
    claim is seen at a newer version than ``resource_version`` (the highest one any attempt was
    conditioned on) without the write in it, that write can never land.
    """

    def __init__(self, message: str, resource_version: int) -> None:
        super().__init__(message)
        self.resource_version = resource_version


class Binder(Protocol):
    async def write_claim(
        self, claim: ResourceClaim, allocation: dict[str, Any] | None, pod: PodRef,
        deadline: float | None = None,
    ) -> dict[str, Any]:
        """Set ``allocation`` (None: already allocated) and add ``pod`` to reservedFor.

        Returns the written claim object (API JSON). No attempt starts after ``deadline`` (a
        ``time.monotonic()`` value; None: the binder's own bound) and no request outlives it.
        Raises :class:`WriteUncertain` when the last word on some attempt is missing,
        :class:`BindError` otherwise.
        """
        ...

    async def read_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The claim as the API server holds it now (None: it does not exist)."""
        ...

    async def fence_claim(self, claim: dict[str, Any]) -> dict[str, Any] | None:
        """Move ``claim`` (API JSON as just read) to a newer resourceVersion without changing
        what it says, conditioned on the version it carries: every request conditioned on that
        version or an older one can no longer be applied.

        Returns the claim as left (None: it is gone). Raises :class:`BindError` when the write
        is refused or unanswered (a conflict included: the claim moved on by itself).
        """
        ...

    async def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod as the API server holds it now (None: it does not exist)."""
        ...

    async def bind_pod(self, pod: PodRef, node: str, deadline: float | None = None) -> None:
        """Bind the pod to ``node`` (a Binding); no attempt starts after ``deadline`` (as for
        ``write_claim``). Raises :class:`BindingUncertain` when an attempt went unanswered and
        the pod is not seen bound, :class:`BindError` when the Binding was refused."""
        ...

    async def release_claim(
        self, claim: ResourceClaim, pod: PodRef, deallocate: bool
    ) -> dict[str, Any] | None:
        """Rollback: remove the pod's reservedFor entry; clear the allocation if ``deallocate``.

        Returns the claim as it is now (API JSON), or None when it is gone. The caller caches it
        at once: until the watch echoes the rollback, a retry must not see the old reservation.
        """
        ...

    async def create_extended_claim(self, body: dict[str, Any], pod: PodRef) -> dict[str, Any]:
        """Create the pod's extended-resource claim from ``body`` (``generateName``, no name).

        Idempotent: a claim an earlier attempt created for the pod (annotation
        ``resource.kubernetes.io/extended-resource-claim: "true"``, controlled by the pod) is
        returned instead of creating a second one.
        """
        ...

    async def delete_extended_claims(self, pod: PodRef) -> list[dict[str, Any]]:
        """Rollback: delete the pod's extended-resource claims, our finalizer removed first.

        Returns the deleted objects (none when there was nothing to delete).
        """
        ...

    async def patch_pod_status(self, pod: PodRef, status: dict[str, Any]) -> None:
        """Set the given top-level fields of the pod's status (the status subresource)."""
        ...
