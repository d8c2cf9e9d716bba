"""kube-controller-manager's resourceclaim controller, and the garbage collector's part for claims,
as the test API server's stand-ins.

They follow k8s.io/kubernetes v1.37.2, pkg/controller/resourceclaim/controller.go (syncClaim,
syncPod, handleClaim, isPodDone, owningPod) and k8s.io/dynamic-resource-allocation v0.37.2
resourceclaim/resourceclaim.go (Name, IsForPod), for pods and their claims. Not followed: PodGroup
claims of DRAWorkloadResourceClaims (off by default in 1.37) beyond dropping reservations of gone
PodGroups when asked to, the DRAAdminAccess and DRAPrioritizedList checks of templates (both on by
default), events and metrics.

The real controller reacts to watch events; tests call these where it would: ``sync_pods`` after
creating or changing a pod with claims, ``sync_claims`` after a pod or claim is deleted or a pod
finishes, and before states are compared, ``collect_garbage`` where the garbage collector would
delete the claims a deleted pod owned. Each pass is atomic for the server's clients, and looks at
every pod or claim once; the real controller, which reacts to one object at a time, reaches the
same state once its queue is empty.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from tests.apiserver.resources import BY_KIND
from tests.apiserver.store import ApiError, Store

DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
_CLAIM, _POD, _GROUP = BY_KIND["ResourceClaim"], BY_KIND["Pod"], BY_KIND["PodGroup"]
_TEMPLATE = BY_KIND["ResourceClaimTemplate"]
# handleClaim: "Leave space for hyphen and 5 random characters in a name with 63 characters."
_MAX_BASE_LEN = 57


def pod_done(pod: dict[str, Any]) -> bool:
    """isPodDone: certain that none of the pod's containers runs or ever will (phase Succeeded or
    Failed, or deleted before it was scheduled). A pod being deleted on its node is not done."""
    phase = (pod.get("status") or {}).get("phase")
    unscheduled = not (pod.get("spec") or {}).get("nodeName")
    deleted = bool(pod["metadata"].get("deletionTimestamp"))
    return phase in ("Succeeded", "Failed") or (deleted and unscheduled)


def generate_name(pod_name: str, pod_claim_name: str) -> str:
    """The generateName of a claim made from a template: ``<pod>-<pod claim>-``, or, beyond 57
    characters, both cut in proportion to their length (and no trailing hyphen), so that the
    pod claim's name is not the part the API server's own cut loses."""
    base = f"{pod_name}-{pod_claim_name}-"
    if len(base) > _MAX_BASE_LEN:
        full = len(base)
        base = pod_name[: len(pod_name) * _MAX_BASE_LEN // full] + "-" + (
            pod_claim_name[: len(pod_claim_name) * _MAX_BASE_LEN // full])
    return base


def owning_pod(claim: dict[str, Any]) -> tuple[str, str] | None:
    """owningPod: the (name, UID) of the pod that is the claim's controller, if one is."""
    for ref in claim["metadata"].get("ownerReferences") or ():
        if ref.get("controller") and ref.get("apiVersion") == "v1" and ref.get("kind") == "Pod":
            return ref["name"], ref["uid"]
    return None


# ----- claims: syncClaim --------------------------------------------------------------------------


def sync_claims(store: Store, *, workload_resource_claims: bool = False) -> int:
    """syncClaim for every claim; returns how many were written or deleted.

    A reservation of a pod goes when the pod is gone, was replaced (same name, another UID) or is
    done; of a PodGroup (only with ``workload_resource_claims``, the gate) when it is gone or was
    replaced; any other consumer's stays. A claim that thereby loses its last reservation is
    deallocated if it has the delete-protection finalizer (one without it is left allocated),
    then loses the finalizer. A claim being deleted that nobody uses loses allocation and
    finalizer even without that transition, and goes. A claim left unreserved whose controlling
    pod exists but was replaced or is done is deleted; one whose pod is gone is the garbage
    collector's (``collect_garbage``).
    """
    changed = 0
    with store.cond:  # re-entrant: the store's own calls below take it too
        for claim in store.list(_CLAIM, None)[0]:
            meta = claim["metadata"]
            synced = False
            # Its own writes bring the claim back to the real controller (as update events): a
            # claim it deleted while the finalizer held it comes back being deleted, and goes.
            while claim is not None and _sync_claim(store, claim, workload_resource_claims):
                synced = True
                claim = _get(store, _CLAIM, meta["namespace"], meta["name"])
            changed += synced
    return changed


def _get(store: Store, rtype: Any, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return store.get(rtype, namespace, name)
    except ApiError as exc:
        if exc.code == 404:
            return None
        raise


def _keeps(store: Store, namespace: str, ref: dict[str, Any], workload_resource_claims: bool) -> bool:
    """Whether a reservedFor entry is still valid (syncClaim's check of each entry)."""
    group, resource = ref.get("apiGroup") or "", ref.get("resource")
    if group == "" and resource == "pods":
        pod = _get(store, _POD, namespace, ref["name"])
        return pod is not None and pod["metadata"]["uid"] == ref["uid"] and not pod_done(pod)
    if workload_resource_claims and group == _GROUP.group and resource == "podgroups":
        pod_group = _get(store, _GROUP, namespace, ref["name"])
        return pod_group is not None and pod_group["metadata"]["uid"] == ref["uid"]
    return True  # a consumer it does not know how to check


def _without_finalizer(claim: dict[str, Any]) -> dict[str, Any]:
    new = copy.deepcopy(claim)
    meta = new["metadata"]
    meta["finalizers"] = [f for f in meta["finalizers"] if f != DELETE_PROTECTION_FINALIZER]
    return new


def _sync_claim(store: Store, claim: dict[str, Any], workload_resource_claims: bool) -> bool:
    meta, status = claim["metadata"], claim.get("status") or {}
    namespace, name = meta["namespace"], meta["name"]
    reserved = status.get("reservedFor") or []
    remaining = [r for r in reserved if _keeps(store, namespace, r, workload_resource_claims)]
    protected = DELETE_PROTECTION_FINALIZER in (meta.get("finalizers") or ())
    changed = False
    if len(remaining) < len(reserved):
        new = copy.deepcopy(claim)
        new["status"]["reservedFor"] = remaining
        if not remaining and protected:
            # Deallocation follows the transition to "not used"; the status of the devices goes
            # with it in the API server (Store.update).
            new["status"].pop("allocation", None)
        updated = store.update(_CLAIM, namespace, name, new, "status")
        changed = True
        still_protected = DELETE_PROTECTION_FINALIZER in (updated["metadata"].get("finalizers") or ())
        if still_protected and (updated.get("status") or {}).get("allocation") is None:
            store.update(_CLAIM, namespace, name, _without_finalizer(updated))  # a deleted claim goes now
    elif protected and meta.get("deletionTimestamp") and not remaining:
        current = claim
        if status.get("allocation") is not None:
            cleared = copy.deepcopy(claim)
            cleared["status"].pop("allocation")
            current = store.update(_CLAIM, namespace, name, cleared, "status")
        store.update(_CLAIM, namespace, name, _without_finalizer(current))
        changed = True
    if not remaining and (owner := owning_pod(claim)) is not None:
        pod = _get(store, _POD, namespace, owner[0])
        if pod is not None and (pod["metadata"]["uid"] != owner[1] or pod_done(pod)):
            try:
                store.delete(_CLAIM, namespace, name)
            except ApiError as exc:
                if exc.code != 404:  # 404: gone already, the finalizer was what held it
                    raise
            else:
                changed = changed or not meta.get("deletionTimestamp")  # a second delete changes nothing
    return changed


# ----- pods: syncPod and handleClaim -------------------------------------------------------------


def sync_pods(store: Store) -> int:
    """syncPod for every pod not being deleted; returns how many claims it created or reserved.

    For each of the pod's claims from a template without a claim yet: a claim the pod controls
    and whose pod-claim-name annotation names it is taken (one made before the pod's status
    could record it), else one is created from the template (``generate_name``; the template's
    ``spec.metadata`` labels and annotations, plus the annotation; the pod as controller; the
    template's ``spec.spec``); the pod's ``status.resourceClaimStatuses`` then records them, by
    pod claim name. A recorded claim that is gone, or no longer controlled by the pod, is made
    again. A missing template stops the pod's sync (the pod waits; its claims made so far are
    recorded by the next sync). For a pod already bound to a node, an allocated claim not
    reserved for it is reserved for it (a pod bound without the scheduler).
    """
    sync = _PodSync(store)
    with store.cond:
        for pod in store.list(_POD, None)[0]:
            if pod["metadata"].get("deletionTimestamp") or not pod["spec"].get("resourceClaims"):
                continue
            with contextlib.suppress(_Retry):
                sync.pod(pod)
    return sync.written


class _Retry(Exception):
    """syncPod returned an error: the real controller tries the pod again later."""


def _recorded(pod: dict[str, Any]) -> dict[str, str | None]:
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or ()
    return {s["name"]: s.get("resourceClaimName") for s in statuses}


def _controlled_by(claim: dict[str, Any], pod: dict[str, Any]) -> bool:
    """IsForPod: the claim's controller (its first owner reference marked so) is the pod, by UID."""
    for ref in claim["metadata"].get("ownerReferences") or ():
        if ref.get("controller"):
            return bool(ref.get("uid") == pod["metadata"]["uid"])
    return False


class _PodSync:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.written = 0  # claims created or reserved

    def pod(self, pod: dict[str, Any]) -> None:
        new_names: dict[str, str] = {}
        for pod_claim in pod["spec"]["resourceClaims"]:
            name = self._handle_claim(pod, pod_claim)
            if name is not None:
                new_names[pod_claim["name"]] = name
        if new_names:
            pod = self._record(pod, new_names)
        if pod["spec"].get("nodeName"):  # else the scheduler reserves
            self._reserve_for_bound_pod(pod)

    def _handle_claim(self, pod: dict[str, Any], pod_claim: dict[str, Any]) -> str | None:
        """handleClaim: the name to record for a claim from a template (None: nothing to record)."""
        store, namespace, claim_name = self.store, pod["metadata"]["namespace"], pod_claim["name"]
        template_name = pod_claim.get("resourceClaimTemplateName")
        if pod_claim.get("resourceClaimName") is not None:
            return None  # the user's claim: nothing to make
        if template_name is None:
            raise _Retry  # neither field: an API this controller does not know
        recorded = _recorded(pod)
        if claim_name in recorded:
            name = recorded[claim_name]
            if name is None:
                return None  # recorded as not needed
            existing = _get(store, _CLAIM, namespace, name)
            if existing is not None and _controlled_by(existing, pod):
                return None
        for claim in store.list(_CLAIM, namespace)[0]:  # made before the pod's status could record it
            owner = owning_pod(claim)
            annotations = claim["metadata"].get("annotations") or {}
            if owner is not None and owner[1] == pod["metadata"]["uid"] and (
                    annotations.get(POD_CLAIM_ANNOTATION) == claim_name):
                return str(claim["metadata"]["name"])
        template = _get(store, _TEMPLATE, namespace, template_name)
        if template is None:
            raise _Retry  # the pod waits for its template
        template_meta = template["spec"].get("metadata") or {}
        meta: dict[str, Any] = {
            "generateName": generate_name(pod["metadata"]["name"], claim_name),
            "namespace": namespace,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                                 "uid": pod["metadata"]["uid"], "controller": True}],
            "annotations": {**(template_meta.get("annotations") or {}), POD_CLAIM_ANNOTATION: claim_name},
        }
        if template_meta.get("labels"):
            meta["labels"] = dict(template_meta["labels"])
        claim = {"apiVersion": _CLAIM.api_version, "kind": "ResourceClaim", "metadata": meta,
                 "spec": copy.deepcopy(template["spec"]["spec"])}
        created = store.create(_CLAIM, namespace, claim)
        self.written += 1
        return str(created["metadata"]["name"])

    def _record(self, pod: dict[str, Any], new_names: dict[str, str]) -> dict[str, Any]:
        """The pod's status with the made claims' names, merged by pod claim name and sorted (an
        apply of the controller's field manager; entries without a name stay their owners')."""
        statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
        named = {s["name"]: s["resourceClaimName"] for s in statuses
                 if s.get("resourceClaimName") is not None}
        named.update(new_names)
        unnamed = [s for s in statuses if s.get("resourceClaimName") is None and s["name"] not in named]
        new = copy.deepcopy(pod)
        new.setdefault("status", {})["resourceClaimStatuses"] = [
            *({"name": n, "resourceClaimName": named[n]} for n in sorted(named)), *unnamed]
        return self.store.update(_POD, pod["metadata"]["namespace"], pod["metadata"]["name"], new, "status")

    def _reserve_for_bound_pod(self, pod: dict[str, Any]) -> None:
        """syncPod's second half: the bound pod's allocated claims reserved for it."""
        namespace, uid = pod["metadata"]["namespace"], pod["metadata"]["uid"]
        recorded = _recorded(pod)
        for pod_claim in pod["spec"]["resourceClaims"]:
            direct = pod_claim.get("resourceClaimName")
            if direct is None and pod_claim["name"] not in recorded:
                raise _Retry  # ResourceClaim not created yet
            name = direct if direct is not None else recorded[pod_claim["name"]]
            if name is None:
                continue  # not needed
            claim = _get(self.store, _CLAIM, namespace, name)
            if claim is None:
                return  # nothing to do until it exists
            if direct is None and not _controlled_by(claim, pod):
                raise _Retry
            status = claim.get("status") or {}
            reserved = status.get("reservedFor") or []
            if status.get("allocation") is not None and uid not in {r.get("uid") for r in reserved}:
                claim["status"]["reservedFor"] = [
                    *reserved, {"resource": "pods", "name": pod["metadata"]["name"], "uid": uid}]
                self.store.update(_CLAIM, namespace, name, claim, "status")
                self.written += 1


# ----- the garbage collector -------------------------------------------------------------------


def collect_garbage(store: Store) -> int:
    """The garbage collector's part for claims: one whose owners (pods and PodGroups, by UID; an
    owner of another kind counts as present) are all gone is deleted, as a background deletion
    of its owner leaves it to; returns how many. Its finalizer still holds it while it has one."""
    deleted = 0
    with store.cond:
        for claim in store.list(_CLAIM, None)[0]:
            meta = claim["metadata"]
            owners = meta.get("ownerReferences") or []
            if owners and not meta.get("deletionTimestamp") and not any(
                    _owner_exists(store, meta["namespace"], ref) for ref in owners):
                store.delete(_CLAIM, meta["namespace"], meta["name"])
                deleted += 1
    return deleted


def _owner_exists(store: Store, namespace: str, ref: dict[str, Any]) -> bool:
    kinds = {("v1", "Pod"): _POD, (_GROUP.api_version, "PodGroup"): _GROUP}
    rtype = kinds.get((ref.get("apiVersion"), ref.get("kind")))
    if rtype is None:
        return True
    owner = _get(store, rtype, namespace, ref["name"])
    return owner is not None and owner["metadata"]["uid"] == ref["uid"]
