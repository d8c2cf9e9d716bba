"""ResourceClaim: what is requested (spec.devices) and what is already decided (status)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from extender.model._fields import Fields, check_metadata, metadata_name
from extender.model._shared import ContentMemo
from extender.model.allocation import AllocationResult, parse_allocation_with
from extender.model.device_class import parse_config_items, parse_selectors
from extender.model.extended import is_extended_claim_of
from extender.model.quantity import Quantity
from extender.model.refs import resource_version


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # defaulted to "Equal" like the API server does
    value: str
    effect: str
    raw: Mapping[str, Any]  # API shape with the operator default filled in, copied into results


@dataclass(frozen=True, slots=True)
class DerivedAttribute:
    """One entry of a request's ``derivedAttributes`` (DRADerivedAttributes): a virtual
    attribute ``name`` that constraints read for this request's devices instead of the device's
    own, computed by the CEL ``expression`` (k8s.io/api resource/v1 DeviceDerivedAttribute)."""

    name: str
    expression: str


@dataclass(frozen=True, slots=True)
class ExactRequest:
    """`exactly` of a request, or one `firstAvailable` subrequest (admin_access always None)."""

    name: str
    device_class_name: str
    selectors: tuple[str | None, ...]
    allocation_mode: str
    count: int
    admin_access: bool | None  # None when unset: any explicit value needs the feature
    tolerations: tuple[Toleration, ...]
    capacity_requests: Mapping[str, Quantity] | None  # None when `capacity` is unset
    # `derivedAttributes`, in order (DRADerivedAttributes; the allocator refuses a request
    # that has any while the gate is off, as upstream does).
    derived_attributes: tuple[DerivedAttribute, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    name: str
    exactly: ExactRequest | None
    first_available: tuple[ExactRequest, ...]


@dataclass(frozen=True, slots=True)
class Constraint:
    requests: tuple[str, ...]
    match_attribute: str | None
    distinct_attribute: str | None


@dataclass(frozen=True, slots=True)
class ClaimConfig:
    requests: tuple[str, ...]
    opaque: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class ConsumerRef:
    api_group: str
    resource: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class Controller:
    """The owner reference marked ``controller: true`` (metav1.GetControllerOf)."""

    api_version: str
    kind: str
    name: str
    uid: str

    @property
    def api_group(self) -> str:
        """The group of ``apiVersion`` ("" for the core group): any version of it counts."""
        group, slash, _ = self.api_version.rpartition("/")
        return group if slash else ""


# status.devices: (driver, pool, device) -> condition type -> its status ("True", "False", ...).
DeviceConditions = Mapping[tuple[str, str, str], Mapping[str, str]]


@dataclass(frozen=True, slots=True, eq=False)
class ResourceClaim:
    namespace: str
    name: str
    uid: str
    requests: tuple[DeviceRequest, ...]
    constraints: tuple[Constraint, ...]
    config: tuple[ClaimConfig, ...]
    allocation: AllocationResult | None
    reserved_for: tuple[ConsumerRef, ...]
    raw: Mapping[str, Any]
    # metadata.resourceVersion as a number (0 when absent): what a conditional write is based on.
    resource_version: int = 0
    deleting: bool = False  # metadata.deletionTimestamp is set
    controller: Controller | None = None
    # The conditions the drivers report per allocated device (binding conditions among them).
    device_conditions: DeviceConditions = field(default_factory=dict)

    @property
    def key(self) -> str:
        """ "ns/name", or just the name without a namespace (klog.KObj rendering)."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def controlled_by(self, uid: str) -> bool:
        """Whether the controller owner reference names ``uid`` (metav1.IsControlledBy)."""
        return self.controller is not None and self.controller.uid == uid

    def reserved_for_uid(self, uid: str) -> bool:
        """Whether ``uid`` (a pod's, or a PodGroup's) is among the consumers."""
        return any(ref.uid == uid for ref in self.reserved_for)

    def extended_for(self, pod_name: str, pod_uid: str) -> bool:
        """Whether this is the claim a scheduler made for the pod's extended resources."""
        return is_extended_claim_of(self.raw, pod_name, pod_uid)

    def spec_key(self) -> bytes:
        """The claim's spec as canonical JSON: equal exactly for claims that ask for the same
        devices the same way (what the scheduler shares node verdicts by)."""
        return orjson.dumps(self.raw.get("spec"), option=orjson.OPT_SORT_KEYS)


def _tolerations(f: Fields, raw: Any, path: str) -> tuple[Toleration, ...]:
    out = []
    for where, item in f.mappings(raw, path):
        item = dict(item)
        if not item.get("operator"):
            item["operator"] = "Equal"
        out.append(
            Toleration(
                key=f.string(item.get("key"), f"{where}.key"),
                operator=f.string(item.get("operator"), f"{where}.operator"),
                value=f.string(item.get("value"), f"{where}.value"),
                effect=f.string(item.get("effect"), f"{where}.effect"),
                raw=item,
            )
        )
    return tuple(out)


def _derived_attributes(f: Fields, raw: Any, path: str) -> tuple[DerivedAttribute, ...]:
    """Both fields are required by the API (model/validation); here, as in the released
    allocator, an empty name matches no constraint and an empty expression fails to compile
    when a constraint first reads it."""
    return tuple(
        DerivedAttribute(
            name=f.string(item.get("name"), f"{where}.name"),
            expression=f.string(item.get("expression"), f"{where}.expression"),
        )
        for where, item in f.mappings(raw, path)
    )


def _exact(f: Fields, raw: Any, path: str, name: str, sub: bool) -> ExactRequest:
    raw = f.mapping(raw, path)
    mode = f.string(raw.get("allocationMode"), f"{path}.allocationMode") or "ExactCount"
    count = f.integer(raw.get("count"), f"{path}.count")
    if count is None:
        count = 1 if mode == "ExactCount" else 0
    elif mode == "ExactCount" and count <= 0:
        raise f.error(f"{path}.count", f"must be greater than zero, got {count}")
    capacity = raw.get("capacity")
    capacity_requests = None
    if capacity is not None:
        reqs = f.mapping(f.mapping(capacity, f"{path}.capacity").get("requests"), f"{path}.capacity.requests")
        capacity_requests = {k: f.quantity(v, f"{path}.capacity.requests[{k}]") for k, v in reqs.items()}
    derived = _derived_attributes(f, raw.get("derivedAttributes"), f"{path}.derivedAttributes")
    if sub and raw.get("adminAccess") is not None:
        raise f.error(f"{path}.adminAccess", "not allowed in a subrequest")
    return ExactRequest(
        name=name,
        device_class_name=f.string(raw.get("deviceClassName"), f"{path}.deviceClassName"),
        selectors=parse_selectors(f, raw.get("selectors"), f"{path}.selectors"),
        allocation_mode=mode,
        count=count,
        admin_access=f.boolean(raw.get("adminAccess"), f"{path}.adminAccess"),
        tolerations=_tolerations(f, raw.get("tolerations"), f"{path}.tolerations"),
        capacity_requests=capacity_requests,
        derived_attributes=derived,
    )


def _request(f: Fields, raw: Any, path: str) -> DeviceRequest:
    raw = f.mapping(raw, path)
    name = f.string(raw.get("name"), f"{path}.name", required=True)
    exactly = raw.get("exactly")
    subs = f.sequence(raw.get("firstAvailable"), f"{path}.firstAvailable")
    # Neither set is left to the allocator, which refuses it like upstream does
    # ("missing device class name (unsupported request type?)").
    if exactly is not None and subs:
        raise f.error(path, "exactly and firstAvailable are mutually exclusive")
    first_available = []
    for i, sub in enumerate(subs):
        where = f"{path}.firstAvailable[{i}]"
        sub_name = f.string(f.mapping(sub, where).get("name"), f"{where}.name", required=True)
        first_available.append(_exact(f, sub, where, sub_name, sub=True))
    return DeviceRequest(
        name=name,
        exactly=None if exactly is None else _exact(f, exactly, f"{path}.exactly", name, sub=False),
        first_available=tuple(first_available),
    )


_ClaimSpec = tuple[tuple[DeviceRequest, ...], tuple[Constraint, ...], tuple[ClaimConfig, ...]]

# Every claim a template makes has the template's spec: thousands of claims, a few distinct
# specs, each parsed once (issue 15; docs/performance.md, "Start-up in local mode"). The path
# only shapes error messages, and a failed parse is never shared, so claims and templates can
# share one memo. Process-wide, as parsing is: a pure function of the spec's content with
# immutable results, bounded to 1024 specs (the oldest go first).
_SPECS: ContentMemo[_ClaimSpec] = ContentMemo(1024)


def _claim_spec(f: Fields, raw: Any, path: str) -> _ClaimSpec:
    """A ResourceClaimSpec at ``path``: a claim's own, or the one a template makes claims from."""
    return _SPECS.parse(raw, lambda: _parse_claim_spec(f, raw, path))


def _parse_claim_spec(f: Fields, raw: Any, path: str) -> _ClaimSpec:
    devices = f.mapping(f.mapping(raw, path).get("devices"), f"{path}.devices")
    requests = tuple(
        _request(f, r, f"{path}.devices.requests[{i}]")
        for i, r in enumerate(f.sequence(devices.get("requests"), f"{path}.devices.requests"))
    )
    constraints = []
    for where, item in f.mappings(devices.get("constraints"), f"{path}.devices.constraints"):
        constraints.append(
            Constraint(
                requests=f.strings(item.get("requests"), f"{where}.requests"),
                match_attribute=f.string(item.get("matchAttribute"), f"{where}.matchAttribute") or None,
                distinct_attribute=f.string(item.get("distinctAttribute"), f"{where}.distinctAttribute")
                or None,
            )
        )
    config = []
    for i, item in enumerate(parse_config_items(f, devices.get("config"), f"{path}.devices.config")):
        config.append(
            ClaimConfig(
                requests=f.strings(item.get("requests"), f"{path}.devices.config[{i}].requests"),
                opaque=item.get("opaque"),
            )
        )
    return requests, tuple(constraints), tuple(config)


def _controller(meta: Mapping[str, Any]) -> Controller | None:
    """The controller reference; ``check_metadata`` has checked the owner references' types."""
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller") is True:
            return Controller(ref["apiVersion"], ref["kind"], ref["name"], ref["uid"])
    return None


def _device_conditions(f: Fields, raw: Any) -> DeviceConditions:
    out: dict[tuple[str, str, str], Mapping[str, str]] = {}
    for where, entry in f.mappings(raw, "status.devices"):
        device = tuple(f.string(entry.get(k), f"{where}.{k}") for k in ("driver", "pool", "device"))
        out[(device[0], device[1], device[2])] = {
            f.string(c.get("type"), f"{w}.type"): f.string(c.get("status"), f"{w}.status")
            for w, c in f.mappings(entry.get("conditions"), f"{where}.conditions")
        }
    return out


def parse_resource_claim(obj: dict[str, Any]) -> ResourceClaim:
    meta, name = metadata_name(obj, "ResourceClaim")
    namespace = meta.get("namespace") or ""
    f = Fields("ResourceClaim", f"{namespace}/{name}" if namespace else name)
    check_metadata(f, meta)
    requests, constraints, config = _claim_spec(f, obj.get("spec"), "spec")
    status = f.mapping(obj.get("status"), "status")
    allocation = status.get("allocation")
    reserved = []
    for where, item in f.mappings(status.get("reservedFor"), "status.reservedFor"):
        reserved.append(
            ConsumerRef(
                api_group=f.string(item.get("apiGroup"), f"{where}.apiGroup"),
                resource=f.string(item.get("resource"), f"{where}.resource", required=True),
                name=f.string(item.get("name"), f"{where}.name", required=True),
                uid=f.string(item.get("uid"), f"{where}.uid", required=True),
            )
        )
    return ResourceClaim(
        resource_version=resource_version(obj),
        deleting=meta.get("deletionTimestamp") is not None,
        controller=_controller(meta),
        device_conditions=_device_conditions(f, status.get("devices")),
        namespace=f.string(namespace, "metadata.namespace"),
        name=name,
        uid=f.string(meta.get("uid"), "metadata.uid"),
        requests=requests,
        constraints=constraints,
        config=config,
        allocation=None if allocation is None else parse_allocation_with(f, allocation, "status.allocation"),
        reserved_for=tuple(reserved),
        raw=obj,
    )


def parse_resource_claim_template(obj: dict[str, Any]) -> Mapping[str, Any]:
    """A ResourceClaimTemplate is kept as written (claims are made from it by the claim
    controller); its claim metadata and spec must be what a claim would be admitted with."""
    meta, name = metadata_name(obj, "ResourceClaimTemplate")
    f = Fields("ResourceClaimTemplate", f"{meta.get('namespace') or 'default'}/{name}")
    check_metadata(f, meta)
    spec = f.mapping(obj.get("spec"), "spec")
    if not isinstance(spec.get("spec"), Mapping):
        raise f.error("spec.spec", "required (the claim spec)")
    check_metadata(f, f.mapping(spec.get("metadata"), "spec.metadata"), "spec.metadata")
    _claim_spec(f, spec["spec"], "spec.spec")
    return obj
