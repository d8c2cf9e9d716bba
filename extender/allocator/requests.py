"""Up-front validation of the claims and what the search needs per (sub)request.

Upstream: the checks Allocate makes before its search, in claim, request and subrequest order
(structured/internal/*/allocator_*.go in k8s.io/dynamic-resource-allocation).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from extender.allocator.constraints import applies
from extender.allocator.outcome import AllocationError
from extender.allocator.pools import Candidate, Pool
from extender.model import DeviceClass, ExactRequest, ResourceClaim
from extender.model.features import Features

# AllocationResultsMaxSize: results per claim, and therefore devices per claim.
MAX_DEVICES_PER_CLAIM = 32


@dataclass(slots=True, eq=False)
class RequestData:
    """One request, or one subrequest of a firstAvailable list, ready for the search."""

    claim_index: int
    claim_key: str
    parent: str  # the request's name
    sub: str | None  # the subrequest's name, if this is one
    exact: ExactRequest
    device_class: DeviceClass
    class_selectors: tuple[str, ...]
    selectors: tuple[str, ...]
    admin: bool
    all_mode: bool
    num_devices: int = 0
    # The tolerations as an allocation result records them: every result of the request has them.
    result_tolerations: tuple[Mapping[str, Any], ...] = ()
    all_devices: list[Candidate] = field(default_factory=list)
    constraints: tuple[int, ...] = ()  # indices into the claim's constraints that bind this request
    # DRADerivedAttributes: attribute name -> the expression that derives it for this request's
    # devices (a repeated name: the last one, as upstream's map keeps it).
    derived: Mapping[str, str] = field(default_factory=dict)

    @property
    def result_name(self) -> str:
        return self.parent if self.sub is None else f"{self.parent}/{self.sub}"

    @property
    def has_parent(self) -> bool:
        return self.sub is not None


# Per claim: per request, the request itself or its subrequests in order.
ClaimRequests = list[list[RequestData]]


def _prefix(claim: ResourceClaim, name: str) -> str:
    return f"claim {claim.key}, request {name}"


def _request_data(
    claim: ResourceClaim,
    claim_index: int,
    parent: str,
    exact: ExactRequest,
    sub: bool,
    features: Features,
    classes: Mapping[str, DeviceClass],
) -> RequestData:
    prefix = _prefix(claim, exact.name)
    if exact.derived_attributes and not features.derived_attributes:
        # Refused rather than ignored, which would drop the constraints' meaning; only the
        # experimental allocator knows them, the others refuse them alike
        # (validateDeviceRequest, v0.37.2).
        raise AllocationError(
            f"{prefix}: cannot handle request with derived attributes, the feature is disabled"
        )
    for i, selector in enumerate(exact.selectors):
        if selector is None:
            raise AllocationError(
                f"{prefix}, selector #{i}: CEL expression empty (unsupported selector type?)"
            )
    if not features.admin_access and exact.admin_access is not None:
        raise AllocationError(f"{prefix}: admin access is requested, but the feature is disabled")
    if not exact.device_class_name:
        raise AllocationError(f"{prefix}: missing device class name (unsupported request type?)")
    device_class = classes.get(exact.device_class_name)
    if device_class is None:
        name = exact.device_class_name
        raise AllocationError(
            f"{prefix}: could not retrieve device class {name}: "
            f'deviceclasses.resource.k8s.io "{name}" not found'
        )
    for i, selector in enumerate(device_class.selectors):
        if selector is None:
            raise AllocationError(
                f"class {device_class.name}: selector #{i}: CEL expression empty (unsupported selector type?)"
            )
    if exact.allocation_mode not in ("ExactCount", "All"):
        raise AllocationError(f"{prefix}: unsupported count mode {exact.allocation_mode}")
    return RequestData(
        claim_index=claim_index,
        claim_key=claim.key,
        parent=parent,
        sub=exact.name if sub else None,
        exact=exact,
        device_class=device_class,
        class_selectors=tuple(s for s in device_class.selectors if s is not None),
        selectors=tuple(s for s in exact.selectors if s is not None),
        admin=exact.admin_access is True,
        all_mode=exact.allocation_mode == "All",
        num_devices=exact.count,
        result_tolerations=tuple(t.raw for t in exact.tolerations),
        derived={attribute.name: attribute.expression for attribute in exact.derived_attributes},
    )


def all_mode_devices(data: RequestData, pools: Sequence[Pool], usable: Callable[[Candidate], bool]) -> None:
    """Fix the device list of an `All` request; every visible pool must be complete and valid."""
    prefix = _prefix_from(data)
    devices: list[Candidate] = []
    for pool in pools:
        if pool.incomplete:
            raise AllocationError(
                f"{prefix}: asks for all devices, but resource pool {pool.driver}/{pool.name} "
                "is currently being updated"
            )
        if pool.invalid is not None:
            raise AllocationError(
                f"{prefix}: asks for all devices, but resource pool {pool.driver}/{pool.name} "
                "is currently invalid"
            )
        devices.extend(c for c in pool.candidates if usable(c))
    data.all_devices = devices
    data.num_devices = len(devices)


def _prefix_from(data: RequestData) -> str:
    return f"claim {data.claim_key}, request {data.exact.name}"


def validate_claims(
    claims: Sequence[ResourceClaim],
    features: Features,
    classes: Mapping[str, DeviceClass],
    fill_all: Callable[[RequestData], None],
) -> list[ClaimRequests]:
    """Check every claim in order; the first problem is a fatal AllocationError."""
    out: list[ClaimRequests] = []
    for c, claim in enumerate(claims):
        per_request: ClaimRequests = []
        minimum = 0
        for request in claim.requests:
            prefix = _prefix(claim, request.name)
            if request.first_available and not features.prioritized_list:
                raise AllocationError(
                    f"{prefix}: has subrequests, but the DRAPrioritizedList feature is disabled"
                )
            # The released stable allocator (v0.37.2) allocates as if there were no capacity
            # requests; the answers this project is held to (tests/conformance/cases) refuse
            # them, as the allocator of the July snapshot did. Kept as recorded until those
            # answers change (tests/oracle reports the difference).
            if not features.consumable_capacity:
                problem = "has capacity requests, but the DRAConsumableCapacity feature is disabled"
                if request.exactly is not None and request.exactly.capacity_requests is not None:
                    raise AllocationError(f"{prefix}: {problem}")
                for sub in request.first_available:
                    if sub.capacity_requests is not None:
                        raise AllocationError(f"claim {claim.key}, subrequest {sub.name}: {problem}")
            if request.exactly is None and not request.first_available:
                raise AllocationError(f"{prefix}: missing device class name (unsupported request type?)")
            if request.exactly is not None:
                variants = [(request.exactly, False)]
            else:
                variants = [(sub, True) for sub in request.first_available]
            datas = []
            for exact, is_sub in variants:
                data = _request_data(claim, c, request.name, exact, is_sub, features, classes)
                if data.all_mode:
                    fill_all(data)
                data.constraints = tuple(
                    i
                    for i, constraint in enumerate(claim.constraints)
                    if applies(constraint, data.parent, data.sub)
                )
                datas.append(data)
            minimum += min(d.num_devices for d in datas)
            per_request.append(datas)
        if minimum > MAX_DEVICES_PER_CLAIM:
            raise AllocationError(
                f"claim {claim.key}: number of requested devices {minimum} exceeds the claim limit of "
                f"{MAX_DEVICES_PER_CLAIM}"
            )
        # The stable allocator knows only matchAttribute: to it a distinctAttribute
        # constraint is empty (allocator_stable.go, v0.37.2).
        distinct_known = features.variant != "stable"
        for i, constraint in enumerate(claim.constraints):
            known = constraint.match_attribute is not None or (
                distinct_known and constraint.distinct_attribute is not None
            )
            if not known:
                raise AllocationError(
                    f"claim {claim.key}, constraint #{i}: empty constraint (unsupported constraint type?)"
                )
        out.append(per_request)
    return out
