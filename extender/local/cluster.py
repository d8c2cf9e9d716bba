"""Local mode: a manifests directory (or the shipped demo) stands in for the cluster.

This module plays the two control-plane parts the extender relies on in a real cluster:
the API server (defaulting, uid/resourceVersion/creationTimestamp, apiVersion checks) and
the resourceclaim controller (claims generated from templates, reservedFor pruning and
deallocation when pods go away, deletion of generated claims). Everything it writes goes
through :meth:`LocalCluster.write`, which stamps a new resourceVersion like the API server.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
import yaml

from extender.model import controlled_by
from extender.model._shared import shared_json
from extender.model.kinds import KIND_NAMES, KINDS
from extender.model.pods import PodInfo, parse_pod
from extender.model.refs import DELETE_PROTECTION_FINALIZER
from extender.state import ClusterState, object_key

API_VERSIONS: Mapping[str, str] = {kind.name: kind.api_version for kind in KINDS}
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
# k8s.io/apimachinery/pkg/util/rand: the alphabet generateName suffixes are drawn from.
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_MAX_BASE_LEN = 57  # the resourceclaim controller leaves room for "-" and 5 characters
# Objects a later kind refers to come first, so a pod's template exists when the pod arrives.
_LOAD_ORDER = KIND_NAMES


# libyaml's safe loader is ~10x faster than the pure-Python one on big state directories.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ManifestError(ValueError):
    """An object or file the local store refuses, with the place it came from."""


def clone(obj: Any) -> Any:
    """A deep copy in plain JSON types (YAML timestamps become RFC 3339 strings, as in the API).

    orjson is several times faster than copy.deepcopy on API objects.
    """
    try:
        return orjson.loads(orjson.dumps(obj))
    except TypeError as exc:
        raise ManifestError(f"not representable as JSON: {exc}") from None


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
    digest = hashlib.sha256(pod_uid.encode()).digest()
    return base + "".join(_SUFFIX_ALPHABET[b % len(_SUFFIX_ALPHABET)] for b in digest[:5])


def _default_request(request: dict[str, Any]) -> None:
    if request.get("allocationMode") in (None, ""):
        request["allocationMode"] = "ExactCount"
    if request["allocationMode"] == "ExactCount" and request.get("count") is None:
        request["count"] = 1
    for toleration in request.get("tolerations") or ():
        if isinstance(toleration, dict) and toleration.get("operator") in (None, ""):
            toleration["operator"] = "Equal"


def default_claim_spec(spec: Any) -> None:
    """API-server defaults of a ResourceClaimSpec, in place (malformed parts are left to parsing)."""
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if not isinstance(devices, dict):
        return
    for request in devices.get("requests") or ():
        if not isinstance(request, dict):
            continue
        if isinstance(request.get("exactly"), dict):
            _default_request(request["exactly"])
        for sub in request.get("firstAvailable") or ():
            if isinstance(sub, dict):
                _default_request(sub)


class LocalCluster:
    """The in-memory API server + claim controller feeding a :class:`ClusterState`."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._rv = 0
        self._incarnations: dict[tuple[str, str, str], int] = {}

    # --- API server -----------------------------------------------------------------------

    def write(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` with a fresh resourceVersion (the only way objects enter the cache)."""
        self._rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
        self.state.apply(kind, obj)
        return obj

    def _defaulted(self, obj: Any) -> tuple[str, dict[str, Any]]:
        if not isinstance(obj, Mapping):
            raise ManifestError(f"expected a Kubernetes object, got {type(obj).__name__}")
        kind = obj.get("kind")
        if kind not in API_VERSIONS:
            raise ManifestError(f"kind {kind!r} is not supported; expected one of {', '.join(API_VERSIONS)}")
        api_version = obj.get("apiVersion")
        if api_version is not None and api_version != API_VERSIONS[kind]:
            want = API_VERSIONS[kind]
            raise ManifestError(f"{kind}: apiVersion {api_version!r} is not supported, use {want}")
        # null means absent in the API (and would trip every later setdefault).
        obj = {k: v for k, v in clone(obj).items() if v is not None}
        try:
            namespace, name = object_key(kind, obj)
        except ValueError as exc:
            raise ManifestError(str(exc)) from None
        meta = obj["metadata"]
        if namespace:
            meta["namespace"] = namespace
        if not meta.get("uid"):
            held = self._held_uid(kind, namespace, name)
            meta["uid"] = held or self._new_uid(kind, namespace, name)
        meta.setdefault("creationTimestamp", now_rfc3339())
        obj["apiVersion"] = API_VERSIONS[kind]
        if kind in ("ResourceClaim", "ResourceClaimTemplate"):
            spec = obj.get("spec")
            if kind == "ResourceClaimTemplate" and isinstance(spec, dict):
                spec = spec.get("spec")
            default_claim_spec(spec)
        return kind, obj

    def _held_uid(self, kind: str, namespace: str, name: str) -> str | None:
        # An update without uid keeps the object's identity, as `kubectl apply` would.
        held = self.state.raw(kind, (namespace, name))
        return (held.get("metadata") or {}).get("uid") if held else None

    def _new_uid(self, kind: str, namespace: str, name: str) -> str:
        # Deterministic across runs, distinct for each re-creation of the same name.
        key = (kind, namespace, name)
        n = self._incarnations.get(key, 0)
        self._incarnations[key] = n + 1
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"dra-extender/{kind}/{namespace}/{name}/{n}"))

    # --- public operations ----------------------------------------------------------------

    def apply(self, obj: Any) -> dict[str, Any]:
        """Create or update one object, then run the claim controller on what it affects."""
        kind, obj = self._defaulted(obj)
        if kind == "Pod":
            return self._apply_pod(obj)
        try:
            written = self.write(kind, obj)
        except ValueError as exc:
            raise ManifestError(str(exc)) from None
        if kind == "ResourceClaimTemplate":
            self._sync_pods_waiting_for(written["metadata"]["namespace"], written["metadata"]["name"])
        return written

    def delete(self, kind: Any, namespace: Any, name: Any) -> bool:
        """Delete one object; False when it does not exist."""
        if kind not in API_VERSIONS:
            raise ManifestError(f"kind {kind!r} is not supported; expected one of {', '.join(API_VERSIONS)}")
        if not isinstance(name, str) or not name:
            raise ManifestError("name: required")
        if namespace is not None and not isinstance(namespace, str):
            raise ManifestError("namespace: must be a string")
        probe = {"metadata": {"name": name, "namespace": namespace or None}}
        key = object_key(kind, probe)
        raw = self.state.raw(kind, key)
        if raw is None:
            return False
        if kind == "Pod":
            self._release_pod_claims(raw)
        elif kind == "ResourceClaim" and self._has_consumers(raw):
            # The finalizer keeps an in-use claim; the controller finishes once consumers go.
            obj = clone(dict(raw))
            obj["metadata"]["deletionTimestamp"] = now_rfc3339()
            self.write(kind, obj)
            return True
        self.state.delete(kind, dict(raw))
        return True

    def load(self, docs: Iterable[tuple[str, Any]]) -> int:
        """Apply (origin, object) pairs; templates and claims go first so pods find them.

        Each document is let go once applied (the cache keeps its own copy), so a big state
        directory is never held twice over; callers hand ``docs`` over rather than keep it.
        """

        def rank(item: tuple[str, Any]) -> int:
            kind = item[1].get("kind") if isinstance(item[1], Mapping) else None
            return _LOAD_ORDER.index(kind) if kind in _LOAD_ORDER else len(_LOAD_ORDER)

        pending = sorted(((origin, doc) for origin, doc in docs if doc is not None), key=rank)
        del docs
        count = len(pending)
        pending.reverse()  # popped from the end, in load order
        while pending:
            origin, doc = pending.pop()
            try:
                self.apply(doc)
            except (ManifestError, ValueError) as exc:
                raise ManifestError(f"{origin}: {exc}") from None
        return count

    # --- resourceclaim controller ---------------------------------------------------------

    def _apply_pod(self, obj: dict[str, Any]) -> dict[str, Any]:
        try:
            pod = parse_pod(obj)
        except ValueError as exc:
            raise ManifestError(str(exc)) from None
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
        statuses = status.setdefault("resourceClaimStatuses", [])
        for pod_claim in pod.claims:
            if not pod_claim.template_name or pod_claim.name in pod.claim_statuses:
                continue
            claim_name = self._generate_claim(pod, pod_claim.name, pod_claim.template_name)
            if claim_name is not None:
                statuses.append({"name": pod_claim.name, "resourceClaimName": claim_name})
        if not statuses:
            del status["resourceClaimStatuses"]
        return self.write("Pod", obj)

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
        self.apply(claim)
        return name

    def _sync_pods_waiting_for(self, namespace: str, template_name: str) -> None:
        for pod in list(self.state.pods.values()):
            if pod.namespace == namespace and any(
                c.template_name == template_name and c.name not in pod.claim_statuses for c in pod.claims
            ):
                self._apply_pod(clone(dict(pod.raw)))

    @staticmethod
    def _has_consumers(raw: Mapping[str, Any]) -> bool:
        return bool((raw.get("status") or {}).get("reservedFor"))

    def _release_pod_claims(self, raw: Mapping[str, Any]) -> None:
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
                    self.state.delete("ResourceClaim", obj)
                    continue
            self.write("ResourceClaim", obj)


def read_manifests(paths: Iterable[Path]) -> list[tuple[str, Any]]:
    """Every YAML document of the given files as (origin, object); errors name the file."""
    docs: list[tuple[str, Any]] = []
    for path in paths:
        try:
            with path.open(encoding="utf-8") as fh:
                for i, doc in enumerate(yaml.load_all(fh, Loader=_SAFE_LOADER)):
                    if doc is None:
                        continue
                    if isinstance(doc, Mapping) and doc.get("kind") == "List":
                        items = enumerate(doc.get("items") or ())
                        docs.extend(
                            (f"{path} (document {i + 1}, item {j + 1})", _compact(item)) for j, item in items
                        )
                    else:
                        docs.append((f"{path} (document {i + 1})", _compact(doc)))
        except (OSError, yaml.YAMLError) as exc:
            raise ManifestError(f"{path}: {exc}") from None
    return docs


def _compact(doc: Any) -> Any:
    """``doc`` as it waits for its turn to load: plain JSON types with repeated subtrees shared.

    PyYAML's objects hold every key as its own string, so a big state directory took several
    times the memory of the cache it fills; documents are now shrunk one by one as they are read.
    """
    try:
        return shared_json(clone(doc))
    except ManifestError:
        return doc  # not JSON: load reports it in its place, with its origin


def state_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise ManifestError(f"{directory}: not a directory")
    return sorted(directory.glob("*.yaml"))


def demo_files() -> list[Path]:
    root = resources.files("extender") / "demo"
    return sorted(Path(str(p)) for p in root.iterdir() if p.name.endswith(".yaml"))


def load_local(state: ClusterState, directory: Path | None) -> LocalCluster:
    """Fill ``state`` from ``directory`` (or the demo cluster) and mark every kind synced."""
    cluster = LocalCluster(state)
    files = demo_files() if directory is None else state_files(directory)
    cluster.load(read_manifests(files))
    for kind in API_VERSIONS:
        state.mark_synced(kind)
    return cluster
