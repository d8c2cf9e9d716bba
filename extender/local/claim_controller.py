"""The resourceclaim controller of the embedded cluster.

Its one job is kube-controller-manager's resourceclaim controller, for pods in the store:
claims generated from templates (and recorded in the pod's status), pods waiting for a
template synced when it arrives, and when a pod goes, its reservations dropped, claims nobody
uses any more deallocated, and the claims it owned (or that wait for deletion) deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from extender.local.store import API_VERSIONS, LocalStore, ManifestError, clone, name_suffix
from extender.model import controlled_by
from extender.model.pods import PodInfo, parse_pod
from extender.model.refs import DELETE_PROTECTION_FINALIZER

POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
_MAX_BASE_LEN = 57  # the resourceclaim controller leaves room for "-" and 5 characters


def generated_claim_name(pod_name: str, pod_uid: str, pod_claim: str) -> str:
    """``generateName`` semantics of the resourceclaim controller, with a deterministic suffix.

    The base is ``<pod>-<claim>-``; beyond 57 characters both parts are cut proportionally
    (and the trailing hyphen is lost, as upstream). The 5-character suffix comes from a hash
    of the pod UID so a restart regenerates the same names.
    """
    base = f"{pod_name}-{pod_claim}-"
    if len(base) > _MAX_BASE_LEN:
        full = len(base)
        pod_part = pod_name[: len(pod_name) * _MAX_BASE_LEN // full]
        base = pod_part + "-" + pod_claim[: len(pod_claim) * _MAX_BASE_LEN // full]
    return base + name_suffix(pod_uid)


def in_use(claim: Mapping[str, Any]) -> bool:
    """Whether some pod holds the claim (then its deletion waits for the controller)."""
    return bool((claim.get("status") or {}).get("reservedFor"))


class ClaimController:
    def __init__(self, store: LocalStore) -> None:
        self.store = store
        self.state = store.state

    def sync_pod(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Write the admitted pod ``obj``, after creating the claims its templates stand for."""
        try:
            pod = parse_pod(obj)
        except ValueError as exc:
            raise ManifestError(str(exc)) from None
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
        # null is absent in the API: parsing has let it through, the list starts empty.
        statuses = status["resourceClaimStatuses"] = status.get("resourceClaimStatuses") or []
        generated: dict[str, str] = {}
        for pod_claim in pod.claims:
            if not pod_claim.template_name or pod_claim.name in pod.claim_statuses:
                continue
            claim_name = self._generate_claim(pod, pod_claim.name, pod_claim.template_name)
            if claim_name is not None:
                statuses.append({"name": pod_claim.name, "resourceClaimName": claim_name})
                generated[pod_claim.name] = claim_name
        if not statuses:
            del status["resourceClaimStatuses"]
        # Only the phase and the claim statuses changed: the pod is not parsed a second time.
        return self.store.write_pod(
            replace(pod, phase=status["phase"] or "", claim_statuses={**pod.claim_statuses, **generated})
        )

    def _generate_claim(self, pod: PodInfo, pod_claim: str, template_name: str) -> str | None:
        namespace, pod_name, pod_uid = pod.namespace, pod.name, pod.uid
        template = self.state.templates.get((namespace, template_name))
        if template is None:
            return None  # the pod waits ("ResourceClaim not created yet") until the template exists
        name = generated_claim_name(pod_name, pod_uid, pod_claim)
        existing = self.state.claim(namespace, name)
        if existing is not None:
            return name
        tmpl_spec = template["spec"]
        tmpl_meta = tmpl_spec.get("metadata") or {}
        annotations = dict(tmpl_meta.get("annotations") or {})
        annotations[POD_CLAIM_ANNOTATION] = pod_claim
        claim: dict[str, Any] = {
            "apiVersion": API_VERSIONS["ResourceClaim"],
            "kind": "ResourceClaim",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "generateName": name[:-5],
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": pod_name,
                        "uid": pod_uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": clone(dict(tmpl_spec["spec"])),
        }
        if tmpl_meta.get("labels"):
            claim["metadata"]["labels"] = dict(tmpl_meta["labels"])
        self.store.create(claim, owned=True)
        return name

    def template_added(self, namespace: str, template_name: str) -> None:
        """Sync the pods that waited for this template."""
        for pod in list(self.state.pods.values()):
            if pod.namespace == namespace and any(
                c.template_name == template_name and c.name not in pod.claim_statuses for c in pod.claims
            ):
                self.sync_pod(clone(dict(pod.raw)))

    def pod_deleted(self, raw: Mapping[str, Any]) -> None:
        """Drop the pod's reservations; free the claims it was the last user of, delete those it owned."""
        pod = parse_pod(raw)
        names = {c.claim_name for c in pod.claims if c.claim_name}
        names.update(name for name in pod.claim_statuses.values() if name)
        if pod.extended_claim_name:
            names.add(pod.extended_claim_name)
        for name in sorted(names):
            claim = self.state.claim(pod.namespace, name)
            if claim is None:
                continue
            obj = clone(dict(claim.raw))
            meta, status = obj["metadata"], obj.setdefault("status", {})
            reserved = [r for r in status.get("reservedFor") or () if r.get("uid") != pod.uid]
            status["reservedFor"] = reserved
            owned = controlled_by(obj, pod.uid)
            if not reserved:
                status.pop("reservedFor")
                if DELETE_PROTECTION_FINALIZER in (meta.get("finalizers") or ()):
                    status.pop("allocation", None)
                    status.pop("devices", None)
                    meta["finalizers"] = [f for f in meta["finalizers"] if f != DELETE_PROTECTION_FINALIZER]
                    if not meta["finalizers"]:
                        del meta["finalizers"]
                if owned or meta.get("deletionTimestamp"):
                    self.store.remove("ResourceClaim", obj)
                    continue
            self.store.write("ResourceClaim", obj)
