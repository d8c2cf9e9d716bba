"""The API server's storage: objects, one global resourceVersion counter, a bounded event history.

Kept separate from HTTP so that semantics (optimistic concurrency, finalizers, status and
binding subresources, ResourceClaim status rules, schema validation) are in one place and the
HTTP layer only translates. All state sits behind one condition variable; watchers wait on it.
"""

from __future__ import annotations

import copy
import datetime
import functools
import random
import re
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import kubernetes_validate
import referencing
from kubernetes_validate.utils import schema_contents

from tests.apiserver.patch import PatchError, merge_patch, strategic_merge_patch
from tests.apiserver.resources import BY_KIND, ResourceType

SCHEMA_VERSION = kubernetes_validate.latest_version()
RESERVED_FOR_MAX = 256

Key = tuple[str, str]  # (namespace or "", name)


class ApiError(Exception):
    """An error the server turns into a metav1.Status response."""

    REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 409: "Conflict", 410: "Expired",
               422: "Invalid", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}

    def __init__(self, code: int, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or self.REASONS.get(code, "Unknown")

    def status(self) -> dict[str, Any]:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}


@dataclass(frozen=True)
class WatchEvent:
    rv: int
    rtype: ResourceType
    type: str
    obj: dict[str, Any]
    at: float = field(default_factory=time.monotonic)  # when it happened, for watches that lag


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A policy/v1 label selector (an empty one selects every pod of the namespace)."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if (op == "In" and (not present or labels[key] not in values)) \
                or (op == "NotIn" and present and labels[key] in values) \
                or (op == "Exists" and not present) or (op == "DoesNotExist" and present):
            return False
    return True


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Store:
    def __init__(self, history_size: int = 1000) -> None:
        self.cond = threading.Condition()
        self._rv = 0
        self._objects: dict[ResourceType, dict[Key, dict[str, Any]]] = {}
        self._history: deque[WatchEvent] = deque(maxlen=history_size)
        # Events with rv <= this are gone; a watch from an older resourceVersion gets 410.
        self._compacted_rv = 0

    # ----- reads -----------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self.cond:
            return self._rv

    def get(self, rtype: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        with self.cond:
            return copy.deepcopy(self._get(rtype, namespace, name))

    def list(self, rtype: ResourceType, namespace: str | None) -> tuple[list[dict[str, Any]], int]:
        with self.cond:
            items = [copy.deepcopy(o) for (ns, _), o in sorted(self._objects.get(rtype, {}).items())
                     if namespace is None or ns == namespace]
            return items, self._rv

    def page(self, rtype: ResourceType, namespace: str | None, offset: int, limit: int
             ) -> tuple[list[dict[str, Any]], int, int]:
        """One page of :meth:`list` (``limit`` 0: everything from ``offset``), the current resource
        version and the number of objects in all. Only the page is copied: copying every object for
        every page made a paginated list of 20,000 pods take minutes."""
        with self.cond:
            objects = self._objects.get(rtype, {})
            keys = sorted(k for k in objects if namespace is None or k[0] == namespace)
            chosen = keys[offset:offset + limit] if limit else keys[offset:]
            return [copy.deepcopy(objects[k]) for k in chosen], self._rv, len(keys)

    def events_after(self, rtype: ResourceType, rv: int, namespace: str | None) -> list[WatchEvent]:
        """Events newer than ``rv``; caller holds ``cond``. Raises 410 when they were compacted."""
        if rv < self._compacted_rv:
            raise ApiError(410, f"too old resource version: {rv} ({self._compacted_rv})", "Expired")
        return [e for e in self._history if e.rv > rv and e.rtype == rtype
                and (namespace is None or e.obj["metadata"].get("namespace") == namespace)]

    def events_of(self, plurals: frozenset[str], rv: int) -> list[WatchEvent]:
        """Events of these resources newer than ``rv``, oldest first, as far as history reaches."""
        with self.cond:
            return [e for e in self._history if e.rv > rv and e.rtype.plural in plurals]

    def compact(self) -> None:
        """Forget the whole event history, as etcd compaction does."""
        with self.cond:
            self._compacted_rv = self._rv
            self._history.clear()

    # ----- writes ----------------------------------------------------------------------------

    def create(self, rtype: ResourceType, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(body)
        self._check_kind(rtype, obj)
        meta = obj.setdefault("metadata", {})
        if meta.get("namespace", namespace) != namespace:
            raise ApiError(400, "the namespace of the provided object does not match the namespace sent on "
                                "the request")
        if rtype.namespaced:
            meta["namespace"] = namespace
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(422, "metadata.name: Required value: name or generateName is required")
            meta["name"] = generate_name(meta["generateName"])
        if rtype.has_status and rtype.kind != "Node":
            obj.pop("status", None)
        for server_field in ("resourceVersion", "deletionTimestamp"):
            meta.pop(server_field, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        with self.cond:
            key = (namespace if rtype.namespaced else "", meta["name"])
            if key in self._objects.get(rtype, {}):
                raise ApiError(409, f'{rtype.plural} "{meta["name"]}" already exists', "AlreadyExists")
            validate(obj)
            return self._store(rtype, key, obj, "ADDED")

    def update(self, rtype: ResourceType, namespace: str, name: str, body: dict[str, Any],
               subresource: str | None = None) -> dict[str, Any]:
        body = copy.deepcopy(body)
        self._check_kind(rtype, body)
        with self.cond:
            old = self._get(rtype, namespace, name)
            self._check_preconditions(rtype, name, old, body.get("metadata") or {})
            if subresource == "status":
                new = copy.deepcopy(old)
                new["status"] = body.get("status") or {}
                if rtype.kind == "ResourceClaim":
                    _drop_deallocated_device_status(old, new)
            elif subresource is None:
                new = body
                meta = new.setdefault("metadata", {})
                for server_field in ("uid", "creationTimestamp", "deletionTimestamp", "namespace", "name"):
                    if server_field in old["metadata"]:
                        meta[server_field] = old["metadata"][server_field]
                    else:
                        meta.pop(server_field, None)
                if rtype.has_status:
                    new["status"] = copy.deepcopy(old.get("status")) if "status" in old else None
                    if new["status"] is None:
                        new.pop("status")
                if old["metadata"].get("deletionTimestamp"):
                    added = set(meta.get("finalizers") or []) - set(old["metadata"].get("finalizers") or [])
                    if added:
                        raise ApiError(422, "metadata.finalizers: Forbidden: no new finalizers can be "
                                            f"added if the object is being deleted, found {sorted(added)}")
            else:
                raise ApiError(404, f"the server could not find the requested resource ({subresource})")
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            _omit_empty(new)
            if new == old:
                return copy.deepcopy(old)
            if rtype.kind == "ResourceClaim":
                validate_claim_status(old, new)
            validate(new)
            key = (namespace if rtype.namespaced else "", name)
            if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
                return self._remove(rtype, key, new)
            return self._store(rtype, key, new, "MODIFIED")

    def patch(self, rtype: ResourceType, namespace: str, name: str, patch: Any, content_type: str,
              subresource: str | None = None) -> dict[str, Any]:
        if not isinstance(patch, dict):
            raise ApiError(400, "patch body must be a JSON object")
        with self.cond:
            old = self._get(rtype, namespace, name)
            try:
                if content_type == "application/strategic-merge-patch+json":
                    patched = strategic_merge_patch(old, patch)
                elif content_type == "application/merge-patch+json":
                    patched = merge_patch(old, patch)
                else:
                    raise ApiError(415, f"unsupported patch type {content_type!r}", "UnsupportedMediaType")
            except PatchError as exc:
                raise ApiError(422, str(exc)) from exc
            return self.update(rtype, namespace, name, patched, subresource)

    def delete(self, rtype: ResourceType, namespace: str, name: str,
               preconditions: dict[str, Any] | None = None) -> dict[str, Any]:
        """DeleteOptions.preconditions (uid, resourceVersion) are checked as for an update: 409."""
        with self.cond:
            old = self._get(rtype, namespace, name)
            self._check_preconditions(rtype, name, old, preconditions or {})
            key = (namespace if rtype.namespaced else "", name)
            if not old["metadata"].get("finalizers"):
                return self._remove(rtype, key, copy.deepcopy(old))
            if old["metadata"].get("deletionTimestamp"):
                return copy.deepcopy(old)
            new = copy.deepcopy(old)
            new["metadata"]["deletionTimestamp"] = now_rfc3339()
            return self._store(rtype, key, new, "MODIFIED")

    def bind(self, rtype: ResourceType, namespace: str, name: str, binding: dict[str, Any]) -> None:
        """``POST pods/<name>/binding`` as kube-apiserver decodes and checks it: a missing kind or
        apiVersion is taken from the URL, any other than v1 Binding is refused, as is a namespace
        other than the URL's (an absent one is the URL's) and a name that is not the pod's, absent
        included (pkg/registry/core/pod/storage/storage.go, BindingREST.Create)."""
        target = binding.get("target") or {}
        if binding.get("kind", "Binding") != "Binding" or not target.get("name"):
            raise ApiError(400, "a Binding with target.name is required")
        if binding.get("apiVersion", "v1") != "v1":
            raise ApiError(400, f"no kind \"Binding\" is registered for version {binding['apiVersion']!r}")
        meta = binding.get("metadata") or {}
        if meta.get("namespace", namespace) != namespace:
            raise ApiError(400, "the namespace of the provided object does not match the namespace sent on "
                                "the request")
        if meta.get("name") != name:
            raise ApiError(400, "name in URL does not match name in Binding object")
        if target.get("kind", "Node") != "Node":
            raise ApiError(422, f"target.kind: Unsupported value: {target.get('kind')!r}")
        with self.cond:
            pod = self._get(rtype, namespace, name)
            self._check_preconditions(rtype, name, pod, meta)
            if pod["metadata"].get("deletionTimestamp"):
                raise ApiError(409, f'pod {name} is being deleted, cannot be assigned to a host')
            current = (pod.get("spec") or {}).get("nodeName")
            if current:
                raise ApiError(409, f'pod {name} is already assigned to node "{current}"')
            new = copy.deepcopy(pod)
            new["spec"]["nodeName"] = target["name"]
            self._store(rtype, (namespace, name), new, "MODIFIED")

    def evict(self, rtype: ResourceType, namespace: str, name: str, eviction: dict[str, Any]) -> None:
        """``POST pods/<name>/eviction`` (policy/v1 Eviction), as kube-apiserver's eviction REST
        (pkg/registry/core/pod/storage/eviction.go): a pod that is terminating or finished goes
        without a budget check; otherwise the one PodDisruptionBudget selecting the pod must allow
        a disruption (429 if not; 500 for more than one budget), which uses it up and records the
        pod in ``status.disruptedPods``. The pod is then deleted gracefully: a pod on a node gets
        ``deletionTimestamp`` (its kubelet — a test — removes it), an unbound one goes at once."""
        if eviction.get("kind", "Eviction") != "Eviction":
            raise ApiError(400, f"expected an Eviction, got {eviction.get('kind')}")
        budgets_type = BY_KIND["PodDisruptionBudget"]
        with self.cond:
            pod = self._get(rtype, namespace, name)
            preconditions = (eviction.get("deleteOptions") or {}).get("preconditions") or {}
            self._check_preconditions(rtype, name, pod, preconditions)
            meta, status = pod["metadata"], pod.get("status") or {}
            terminal = status.get("phase") in ("Succeeded", "Failed")
            if not meta.get("deletionTimestamp") and not terminal:
                labels = meta.get("labels") or {}
                matching = [(key, b) for key, b in self._objects.get(budgets_type, {}).items()
                            if key[0] == namespace
                            and _selects((b.get("spec") or {}).get("selector"), labels)]
                if len(matching) > 1:
                    raise ApiError(500, "This pod has more than one PodDisruptionBudget, which the "
                                        "eviction subresource does not support.")
                if matching:
                    key, budget = matching[0]
                    budget_status = budget.get("status") or {}
                    if int(budget_status.get("disruptionsAllowed") or 0) <= 0:
                        raise ApiError(429, "Cannot evict pod as it would violate the pod's "
                                            "disruption budget.")
                    new_budget = copy.deepcopy(budget)
                    new_status = new_budget.setdefault("status", {})
                    new_status["disruptionsAllowed"] = int(budget_status.get("disruptionsAllowed") or 0) - 1
                    new_status.setdefault("disruptedPods", {})[name] = now_rfc3339()
                    self._store(budgets_type, key, new_budget, "MODIFIED")
            key = (namespace, name)
            if meta.get("deletionTimestamp"):
                return
            if not (pod.get("spec") or {}).get("nodeName") or terminal:
                self._remove(rtype, key, copy.deepcopy(pod))
                return
            new = copy.deepcopy(pod)
            new["metadata"]["deletionTimestamp"] = now_rfc3339()
            new["metadata"]["deletionGracePeriodSeconds"] = int(
                (pod.get("spec") or {}).get("terminationGracePeriodSeconds") or 30)
            self._store(rtype, key, new, "MODIFIED")

    def seed(self, rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """Put an object as-is (status included), as a controller's earlier writes would have left it."""
        with self.cond:
            created = self.create(rtype, obj["metadata"].get("namespace", ""), obj)
            if "status" in obj and rtype.has_status:
                created["status"] = copy.deepcopy(obj["status"])
                return self.update(rtype, created["metadata"].get("namespace", ""),
                                   created["metadata"]["name"], created, "status")
            return created

    # ----- internals -------------------------------------------------------------------------

    def _get(self, rtype: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        key = (namespace if rtype.namespaced else "", name)
        try:
            return self._objects.get(rtype, {})[key]
        except KeyError:
            raise ApiError(404, f'{rtype.plural}.{rtype.group or "core"} "{name}" not found') from None

    @staticmethod
    def _check_kind(rtype: ResourceType, obj: dict[str, Any]) -> None:
        kind, api_version = obj.get("kind", rtype.kind), obj.get("apiVersion", rtype.api_version)
        if kind != rtype.kind or api_version != rtype.api_version:
            raise ApiError(400, f"expected {rtype.api_version} {rtype.kind}, got {obj.get('apiVersion')} "
                                f"{obj.get('kind')}")
        obj["kind"] = rtype.kind
        obj["apiVersion"] = rtype.api_version

    @staticmethod
    def _check_preconditions(rtype: ResourceType, name: str, old: dict[str, Any],
                             meta: dict[str, Any]) -> None:
        uid = meta.get("uid")
        if uid and uid != old["metadata"]["uid"]:
            raise ApiError(409, f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                                f"{old['metadata']['uid']}")
        rv = meta.get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise ApiError(409, f'Operation cannot be fulfilled on {rtype.plural} "{name}": the object has '
                                "been modified; please apply your changes to the latest version and try again"
                           )

    def _store(self, rtype: ResourceType, key: Key, obj: dict[str, Any], event: str) -> dict[str, Any]:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        self._objects.setdefault(rtype, {})[key] = obj
        self._record(rtype, event, obj)
        return copy.deepcopy(obj)

    def _remove(self, rtype: ResourceType, key: Key, obj: dict[str, Any]) -> dict[str, Any]:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        del self._objects[rtype][key]
        self._record(rtype, "DELETED", obj)
        return copy.deepcopy(obj)

    def _record(self, rtype: ResourceType, event: str, obj: dict[str, Any]) -> None:
        if len(self._history) == self._history.maxlen:
            self._compacted_rv = self._history[0].rv
        self._history.append(WatchEvent(self._rv, rtype, event, copy.deepcopy(obj)))
        self.cond.notify_all()


# The API server's SimpleNameGenerator (k8s.io/apiserver pkg/storage/names/generate.go): at most
# 58 characters of generateName, then 5 of utilrand's alphabet (no vowels, no 0, 1 or 3).
_GENERATED_BASE_MAX = 58
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def generate_name(base: str) -> str:
    """A name for ``metadata.generateName`` ``base``, as the API server makes it."""
    return base[:_GENERATED_BASE_MAX] + "".join(random.choice(_SUFFIX_ALPHABET) for _ in range(5))


def _device_id(entry: dict[str, Any]) -> tuple[Any, ...]:
    return entry.get("driver"), entry.get("pool"), entry.get("device"), entry.get("shareID")


def _device_ids(status: dict[str, Any]) -> set[tuple[Any, ...]]:
    results = (((status.get("allocation") or {}).get("devices") or {}).get("results")) or ()
    return {_device_id(r) for r in results}


def _drop_deallocated_device_status(old: dict[str, Any], new: dict[str, Any]) -> None:
    """The status of devices the update deallocates goes with them, as the claim status strategy's
    dropDeallocatedStatusDevices does (k8s.io/kubernetes pkg/registry/resource/resourceclaim/strategy.go)."""
    status = new["status"]
    gone = _device_ids(old.get("status") or {}) - _device_ids(status)
    if gone and status.get("devices"):
        status["devices"] = [d for d in status["devices"] if _device_id(d) not in gone]


def _omit_empty(obj: dict[str, Any]) -> None:
    """Go's ``omitempty``: the lists a patch can empty are not serialized when empty."""
    for parent, name in (("metadata", "finalizers"), ("status", "reservedFor"), ("status", "devices")):
        section = obj.get(parent)
        if isinstance(section, dict) and section.get(name) == []:
            del section[name]
    if obj.get("status") == {} and "status" in obj and obj.get("kind") == "ResourceClaim":
        del obj["status"]


@functools.cache
def _validator(kind: str, api_version: str) -> jsonschema.protocols.Validator:
    """The strict schema of one kind, as ``kubernetes_validate.validate`` builds it on every call.

    Built once per kind: reading the schema files each time cost ~8 ms per write, which made every
    API call of the tests slow. The schemas are package data, so nothing invalidates the cache.
    """
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    folder = f"kubernetes-json-schema/v{SCHEMA_VERSION}-local-strict"
    try:
        schema = schema_contents(f"{folder}/{kind.lower()}-{group_version}.json", SCHEMA_VERSION)
    except FileNotFoundError:
        raise kubernetes_validate.SchemaNotFoundError(kind, SCHEMA_VERSION, api_version) from None
    definitions = schema_contents(f"{folder}/_definitions.json", SCHEMA_VERSION)
    registry = referencing.Resource.from_contents(definitions) @ (
        referencing.Resource.from_contents(schema) @ referencing.Registry()
    )
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def validate(obj: dict[str, Any]) -> None:
    """Check an object against the official OpenAPI schema (strict: unknown fields are errors)."""
    try:
        _validator(obj["kind"], obj["apiVersion"]).validate(obj)
    except jsonschema.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        name = obj["metadata"].get("name")
        raise ApiError(422, f"{obj['kind']} {name!r} is invalid: {path}: {exc.message}") from exc


def validate_claim_status(old: dict[str, Any], new: dict[str, Any]) -> None:
    """The ResourceClaim status rules of the API server that a scheduler's writes can hit."""
    old_status, new_status = old.get("status") or {}, new.get("status") or {}
    old_alloc, new_alloc = old_status.get("allocation"), new_status.get("allocation")
    if old_alloc is not None and new_alloc is not None and old_alloc != new_alloc:
        raise ApiError(422, "status.allocation: Invalid value: field is immutable")
    reserved = new_status.get("reservedFor") or []
    uids = [r.get("uid") for r in reserved]
    if len(set(uids)) != len(uids):
        raise ApiError(422, "status.reservedFor: Duplicate value: uid")
    if len(reserved) > RESERVED_FOR_MAX:
        raise ApiError(422, f"status.reservedFor: Too many: {len(reserved)}: must have at most "
                            f"{RESERVED_FOR_MAX} items")
    if reserved and new_alloc is None:
        raise ApiError(422, "status.reservedFor: Forbidden: may not be specified when `allocated` is not set")
    old_uids = {r.get("uid") for r in old_status.get("reservedFor") or []}
    if new["metadata"].get("deletionTimestamp") and set(uids) - old_uids:
        raise ApiError(422, "status.reservedFor: Forbidden: new entries may not be added while "
                            "`deallocationRequested` or `metadata.deletionTimestamp` are set")
