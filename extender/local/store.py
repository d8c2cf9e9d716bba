"""The embedded API server's storage side: what it does to every object before keeping it.

Its one job is admission and storage, as kube-apiserver does it for the kinds the extender
uses: the apiVersion check, API defaults, uid, creationTimestamp, generateName, and a fresh
resourceVersion on every write. It keeps nothing of its own: objects live in the
:class:`ClusterState` it writes to, which is what the extender reads.
"""

from __future__ import annotations

import hashlib
import itertools
import time
import uuid
from collections.abc import Mapping
from typing import Any, cast

import orjson

from extender.logs import utc_rfc3339
from extender.model.kinds import KINDS
from extender.model.pods import PodInfo
from extender.model.validation import validate
from extender.state import ClusterState, object_key

API_VERSIONS: Mapping[str, str] = {kind.name: kind.api_version for kind in KINDS}
# k8s.io/apimachinery/pkg/util/rand: the alphabet generateName suffixes are drawn from.
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# apimachinery's names.SimpleNameGenerator: the prefix is cut to leave room for 5 characters.
_MAX_GENERATE_PREFIX = 58
_NAMESPACE_URL = uuid.NAMESPACE_URL.bytes


class ManifestError(ValueError):
    """An object or file the local store refuses, with the place it came from."""


def clone(obj: Any) -> Any:
    """A deep copy in plain JSON types (YAML timestamps become RFC 3339 strings, as in the API).

    orjson is several times faster than copy.deepcopy on API objects.
    """
    try:
        return orjson.loads(orjson.dumps(obj))
    except TypeError as exc:
        where = _unrepresentable(obj, "")
        raise ManifestError(f"{where}{': ' if where else ''}not representable as JSON: {exc}") from None


def _unrepresentable(obj: Any, path: str) -> str:
    """The path of the first value in ``obj`` that JSON cannot hold (a YAML integer beyond 64 bits,
    a key that is not a string, a set ...), so that the error can name the field."""
    if isinstance(obj, dict):
        items: list[tuple[str, Any]] = []
        for key, value in obj.items():
            if not isinstance(key, str):
                return path
            items.append((f"{path}.{key}" if path else key, value))
    elif isinstance(obj, list):
        items = [(f"{path}[{i}]", value) for i, value in enumerate(obj)]
    else:
        return path
    for where, value in items:
        try:
            orjson.dumps(value)
        except TypeError:
            return _unrepresentable(value, where)
    return path


def now_rfc3339() -> str:
    """Every admitted object is stamped: formatted once a second (``logs.utc_rfc3339``), not once
    an object."""
    return utc_rfc3339(int(time.time()))


def uuid5_url(name: str) -> str:
    """``str(uuid.uuid5(uuid.NAMESPACE_URL, name))`` at a third of its cost (one per object loaded)."""
    digest = bytearray(hashlib.sha1(_NAMESPACE_URL + name.encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # the RFC 4122 variant
    x = digest.hex()
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


def name_suffix(seed: str) -> str:
    """The 5 characters generateName appends, drawn from a hash of ``seed`` rather than at random,
    so that local runs repeat exactly."""
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(_SUFFIX_ALPHABET[b % len(_SUFFIX_ALPHABET)] for b in digest[:5])


def unsupported_kind(kind: Any) -> ManifestError:
    return ManifestError(f"kind {kind!r} is not supported; expected one of {', '.join(API_VERSIONS)}")


def _default_request(request: dict[str, Any]) -> None:
    if request.get("allocationMode") in (None, ""):
        request["allocationMode"] = "ExactCount"
    if request["allocationMode"] == "ExactCount" and request.get("count") is None:
        request["count"] = 1
    for toleration in _objects(request.get("tolerations")):
        if toleration.get("operator") in (None, ""):
            toleration["operator"] = "Equal"


def _objects(items: Any) -> list[dict[str, Any]]:
    """The objects of a list field; anything malformed is skipped here and refused by parsing."""
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def default_claim_spec(spec: Any) -> None:
    """API-server defaults of a ResourceClaimSpec, in place (malformed parts are left to parsing)."""
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if not isinstance(devices, dict):
        return
    for request in _objects(devices.get("requests")):
        if isinstance(request.get("exactly"), dict):
            _default_request(request["exactly"])
        for sub in _objects(request.get("firstAvailable")):
            _default_request(sub)


class LocalStore:
    """Admits objects the way the API server does and writes them into a :class:`ClusterState`."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._rv = 0
        self._incarnations: dict[tuple[str, str, str], int] = {}

    def write(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` with a fresh resourceVersion (the only way objects enter the cache)."""
        self._rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
        self.state.apply(kind, obj)
        return obj

    def remove(self, kind: str, obj: dict[str, Any]) -> None:
        self.state.delete(kind, obj)

    def write_pod(self, pod: PodInfo) -> dict[str, Any]:
        """``write`` for a pod its writer has parsed already: ``pod`` is what the pod parser
        makes of ``pod.raw``, the object stored."""
        self._rv += 1
        obj = cast(dict[str, Any], pod.raw)
        obj["metadata"]["resourceVersion"] = str(self._rv)
        self.state.put_pod(pod)
        return obj

    def create(self, obj: Any, owned: bool = False) -> dict[str, Any]:
        """Admit and write one object that needs nobody else's reaction (a claim, a node ...)."""
        kind, obj = self.admit(obj, owned)
        try:
            return self.write(kind, obj)
        except ValueError as exc:
            raise ManifestError(str(exc)) from None

    def admit(self, obj: Any, owned: bool = False) -> tuple[str, dict[str, Any]]:
        """``obj``'s kind and a defaulted copy of it, or ManifestError when the API would refuse it.

        ``owned``: the caller hands ``obj`` over (plain JSON nobody else holds, as a document just
        decoded), so it is defaulted in place rather than copied first.
        """
        if not isinstance(obj, Mapping):
            raise ManifestError(f"expected a Kubernetes object, got {type(obj).__name__}")
        if not isinstance(obj.get("kind"), str) or obj["kind"] not in API_VERSIONS:
            raise unsupported_kind(obj.get("kind"))
        kind = cast(str, obj["kind"])  # one of the table's keys, checked just above
        api_version = obj.get("apiVersion")
        if api_version is not None and api_version != API_VERSIONS[kind]:
            want = API_VERSIONS[kind]
            raise ManifestError(f"{kind}: apiVersion {api_version!r} is not supported, use {want}")
        # The API server's limits and name formats, on the object as sent: a slice of 10,000
        # devices is refused before it is copied, let alone parsed.
        try:
            validate(kind, obj)
        except ValueError as exc:
            raise ManifestError(str(exc)) from None
        # null means absent in the API (and would trip every later setdefault).
        obj = {k: v for k, v in (obj if owned else clone(obj)).items() if v is not None}
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

    def get(self, kind: Any, namespace: Any, name: Any) -> Mapping[str, Any] | None:
        """The stored object, None when there is none; ManifestError for a malformed reference."""
        if kind not in API_VERSIONS:
            raise unsupported_kind(kind)
        if not isinstance(name, str) or not name:
            raise ManifestError("name: required")
        if namespace is not None and not isinstance(namespace, str):
            raise ManifestError("namespace: must be a string")
        probe = {"metadata": {"name": name, "namespace": namespace or None}}
        return self.state.raw(kind, object_key(kind, probe))

    def generate_name(self, kind: str, namespace: str, prefix: str, seed: str) -> str:
        """The API server's generateName: ``prefix`` (cut to 58 characters) plus the first
        5-character suffix not taken yet, drawn from ``seed``."""
        prefix = prefix[:_MAX_GENERATE_PREFIX]
        names = (prefix + name_suffix(f"{seed}/{n}") for n in itertools.count())
        return next(name for name in names if self.state.raw(kind, (namespace, name)) is None)

    def _held_uid(self, kind: str, namespace: str, name: str) -> str | None:
        # An update without uid keeps the object's identity, as `kubectl apply` would.
        held = self.state.raw(kind, (namespace, name))
        return (held.get("metadata") or {}).get("uid") if held else None

    def _new_uid(self, kind: str, namespace: str, name: str) -> str:
        # Deterministic across runs, distinct for each re-creation of the same name.
        key = (kind, namespace, name)
        n = self._incarnations.get(key, 0)
        self._incarnations[key] = n + 1
        return uuid5_url(f"dra-extender/{kind}/{namespace}/{name}/{n}")
