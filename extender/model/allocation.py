"""AllocationResult: what the allocator decides and what status.allocation holds."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from extender.model._fields import Fields
from extender.model.features import Features
from extender.model.nodes import NodeSelector, parse_node_selector
from extender.model.quantity import Quantity
from extender.model.resource_slice import DeviceID


@dataclass(frozen=True, slots=True)
class DeviceResult:
    request: str  # "<request>" or "<request>/<subrequest>"
    driver: str
    pool: str
    device: str
    admin_access: bool
    tolerations: tuple[Mapping[str, Any], ...]
    binding_conditions: tuple[str, ...]
    binding_failure_conditions: tuple[str, ...]
    share_id: str | None
    consumed_capacity: Mapping[str, Quantity] | None
    skip_node_operations: tuple[str, ...] = ()

    @property
    def id(self) -> DeviceID:
        return (self.driver, self.pool, self.device)

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "request": self.request,
            "driver": self.driver,
            "pool": self.pool,
            "device": self.device,
        }
        if self.admin_access:
            out["adminAccess"] = True
        if self.tolerations:
            out["tolerations"] = [dict(t) for t in self.tolerations]
        if self.binding_conditions:
            out["bindingConditions"] = list(self.binding_conditions)
        if self.binding_failure_conditions:
            out["bindingFailureConditions"] = list(self.binding_failure_conditions)
        if self.share_id is not None:
            out["shareID"] = self.share_id
        if self.consumed_capacity:
            out["consumedCapacity"] = {k: str(v) for k, v in self.consumed_capacity.items()}
        if self.skip_node_operations:
            out["skipNodeOperations"] = list(self.skip_node_operations)
        return out


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    source: str  # "FromClass" | "FromClaim"
    requests: tuple[str, ...]  # empty: applies to every request
    opaque: Mapping[str, Any] | None

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source}
        if self.requests:
            out["requests"] = list(self.requests)
        if self.opaque is not None:
            out["opaque"] = self.opaque
        return out


@dataclass(frozen=True, slots=True)
class AllocationResult:
    devices: tuple[DeviceResult, ...]
    config: tuple[ConfigEntry, ...]
    node_selector: NodeSelector | None
    # status.allocation.allocationTimestamp (RFC 3339; "" when unset): when binding conditions
    # started to count against the binding timeout.
    allocated_at: str = ""

    @property
    def node_name(self) -> str | None:
        """The single node the allocation is bound to, when its node selector names exactly one."""
        return None if self.node_selector is None else self.node_selector.single_node()

    def device_ids(self) -> Iterator[DeviceID]:
        return (r.id for r in self.devices)

    def to_api(self) -> dict[str, Any]:
        devices: dict[str, Any] = {"results": [r.to_api() for r in self.devices]}
        if self.config:
            devices["config"] = [c.to_api() for c in self.config]
        out: dict[str, Any] = {"devices": devices}
        if self.node_selector is not None:
            out["nodeSelector"] = self.node_selector.to_api()
        if self.allocated_at:
            out["allocationTimestamp"] = self.allocated_at
        return out


@dataclass(frozen=True, slots=True)
class Holdings:
    """What one allocation keeps from every other: whole devices, shares of devices (by
    shareID), and the capacity those shares consume, per share: a share is one thing however
    many holders name it (a claim in flight and its committed echo), so its capacity counts once."""

    devices: tuple[DeviceID, ...]
    shares: tuple[tuple[DeviceID, str], ...]
    capacity: tuple[tuple[tuple[DeviceID, str], Mapping[str, Quantity]], ...]


def holdings(allocation: AllocationResult, features: Features) -> Holdings:
    """What ``allocation`` holds, as kube-scheduler accounts it (foreachAllocatedDevice in
    pkg/scheduler/framework/plugins/dynamicresources/allocateddevices.go).

    A result with admin access holds nothing. With DRAConsumableCapacity a result with a
    shareID is a share, and its consumed capacity adds up with the device's other shares;
    any other result holds its whole device.
    """
    devices: list[DeviceID] = []
    shares: list[tuple[DeviceID, str]] = []
    capacity: list[tuple[tuple[DeviceID, str], Mapping[str, Quantity]]] = []
    consumable = features.consumable_capacity
    for result in allocation.devices:
        if result.admin_access:
            continue
        if consumable and result.share_id:
            share = (result.id, result.share_id)
            shares.append(share)
            if result.consumed_capacity:
                capacity.append((share, result.consumed_capacity))
        else:
            devices.append(result.id)
    return Holdings(tuple(devices), tuple(shares), tuple(capacity))


def _device_result(f: Fields, raw: Any, path: str) -> DeviceResult:
    raw = f.mapping(raw, path)
    consumed = raw.get("consumedCapacity")
    return DeviceResult(
        request=f.string(raw.get("request"), f"{path}.request", required=True),
        driver=f.string(raw.get("driver"), f"{path}.driver", required=True),
        pool=f.string(raw.get("pool"), f"{path}.pool", required=True),
        device=f.string(raw.get("device"), f"{path}.device", required=True),
        admin_access=bool(f.boolean(raw.get("adminAccess"), f"{path}.adminAccess")),
        tolerations=tuple(
            f.mapping(t, f"{path}.tolerations[{i}]")
            for i, t in enumerate(f.sequence(raw.get("tolerations"), f"{path}.tolerations"))
        ),
        binding_conditions=f.strings(raw.get("bindingConditions"), f"{path}.bindingConditions"),
        binding_failure_conditions=f.strings(
            raw.get("bindingFailureConditions"), f"{path}.bindingFailureConditions"
        ),
        share_id=f.string(raw.get("shareID"), f"{path}.shareID") or None,
        consumed_capacity=None
        if consumed is None
        else {
            k: f.quantity(v, f"{path}.consumedCapacity[{k}]")
            for k, v in f.mapping(consumed, f"{path}.consumedCapacity").items()
        },
        skip_node_operations=f.strings(raw.get("skipNodeOperations"), f"{path}.skipNodeOperations"),
    )


def parse_allocation_with(f: Fields, obj: Any, field: str) -> AllocationResult:
    obj = f.mapping(obj, field)
    devices = f.mapping(obj.get("devices"), f"{field}.devices")
    config = []
    for where, item in f.mappings(devices.get("config"), f"{field}.devices.config"):
        config.append(
            ConfigEntry(
                source=f.string(item.get("source"), f"{where}.source"),
                requests=f.strings(item.get("requests"), f"{where}.requests"),
                opaque=item.get("opaque"),
            )
        )
    selector = obj.get("nodeSelector")
    return AllocationResult(
        devices=tuple(
            _device_result(f, r, f"{field}.devices.results[{i}]")
            for i, r in enumerate(f.sequence(devices.get("results"), f"{field}.devices.results"))
        ),
        config=tuple(config),
        node_selector=None if selector is None else parse_node_selector(f, selector, f"{field}.nodeSelector"),
        allocated_at=f.string(obj.get("allocationTimestamp"), f"{field}.allocationTimestamp"),
    )


def parse_allocation(obj: dict[str, Any]) -> AllocationResult:
    """Parse a bare status.allocation object (errors name it "AllocationResult")."""
    return parse_allocation_with(Fields("AllocationResult", "status.allocation"), obj, "allocation")
