"""The part of kube-controller-manager's resourceclaim controller that tests of bind need.

One pass of its claim sync over every claim: reservations of pods that no longer exist are
dropped, and a claim left without any loses its allocation and the delete-protection finalizer
(which lets a claim waiting for deletion go). Tests call :func:`sync_claims` where the real
controller would react: after deleting a pod or a claim, and before they compare states.
"""

from __future__ import annotations

import copy

from tests.apiserver.resources import BY_KIND
from tests.apiserver.store import Store

DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"
_CLAIM, _POD = BY_KIND["ResourceClaim"], BY_KIND["Pod"]


def sync_claims(store: Store) -> int:
    """Sync every claim once; returns how many were changed. Atomic for the server's clients."""
    changed = 0
    with store.cond:  # re-entrant: the store's own calls below take it too
        pods = {p["metadata"]["uid"] for p in store.list(_POD, None)[0]}
        for claim in store.list(_CLAIM, None)[0]:
            meta, status = claim["metadata"], claim.get("status") or {}
            reserved = status.get("reservedFor") or []
            valid = [r for r in reserved if r.get("uid") in pods]
            protected = DELETE_PROTECTION_FINALIZER in (meta.get("finalizers") or ())
            unused = not valid and (status.get("allocation") is not None or (
                protected and meta.get("deletionTimestamp")))
            if valid == reserved and not unused:
                continue
            namespace, name = meta["namespace"], meta["name"]
            new = copy.deepcopy(claim)
            new_status = new.setdefault("status", {})
            new_status["reservedFor"] = valid
            if not valid:
                new_status.pop("allocation", None)
                new_status.pop("devices", None)
            updated = store.update(_CLAIM, namespace, name, new, "status")
            if not valid and protected:
                updated["metadata"]["finalizers"] = [
                    f for f in updated["metadata"]["finalizers"] if f != DELETE_PROTECTION_FINALIZER
                ]
                store.update(_CLAIM, namespace, name, updated)  # a claim being deleted goes now
            changed += 1
    return changed
