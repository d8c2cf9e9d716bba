"""DeviceTaintRule: taints an administrator adds to devices without touching their slices.

The scheduler hands the allocator slices whose devices already carry the taints of matching
rules, appended in rule order after the device's own (kube-scheduler's ResourceSlice tracker,
k8s.io/dynamic-resource-allocation/resourceslice/tracker); ``apply_taint_rules`` produces
exactly that view.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.model._fields import Fields, check_metadata, metadata_name
from extender.model.resource_slice import Device, ResourceSlice, Taint


@dataclass(frozen=True, slots=True)
class DeviceTaintRule:
    name: str
    # Without deviceSelector a rule selects no device; an empty one selects every device
    # (resource/v1 DeviceTaintRuleSpec, and the tracker's applyPatches).
    has_selector: bool
    # Selector fields; "" means "any".
    driver: str
    pool: str
    device: str
    taint: Taint
    raw: Mapping[str, Any]

    def applies_to(self, device: Device) -> bool:
        return (
            self.has_selector
            and (not self.driver or self.driver == device.driver)
            and (not self.pool or self.pool == device.pool)
            and (not self.device or self.device == device.name)
        )


def parse_device_taint_rule(obj: dict[str, Any]) -> DeviceTaintRule:
    meta, name = metadata_name(obj, "DeviceTaintRule")
    f = Fields("DeviceTaintRule", name)
    check_metadata(f, meta)
    spec = f.mapping(obj.get("spec"), "spec")
    has_selector = spec.get("deviceSelector") is not None
    selector = f.mapping(spec.get("deviceSelector"), "spec.deviceSelector")
    taint = f.mapping(spec.get("taint"), "spec.taint")
    if not taint:
        raise f.error("spec.taint", "required")
    # Only the fields the allocator result carries are copied into the device's taint.
    copied = {k: taint[k] for k in ("key", "value", "effect", "timeAdded") if taint.get(k) is not None}
    return DeviceTaintRule(
        name=name,
        has_selector=has_selector,
        driver=f.string(selector.get("driver"), "spec.deviceSelector.driver"),
        pool=f.string(selector.get("pool"), "spec.deviceSelector.pool"),
        device=f.string(selector.get("device"), "spec.deviceSelector.device"),
        taint=Taint(
            key=f.string(taint.get("key"), "spec.taint.key", required=True),
            value=f.string(taint.get("value"), "spec.taint.value"),
            effect=f.string(taint.get("effect"), "spec.taint.effect", required=True),
            raw=copied,
        ),
        raw=obj,
    )


def apply_taint_rules(slice_: ResourceSlice, rules: Sequence[DeviceTaintRule]) -> ResourceSlice:
    """The slice as the allocator must see it: rule taints appended, in rule order, after
    each device's own taints. Untouched slices and devices are returned as they are, so
    their CEL memo survives; taints are invisible to CEL, so tainted copies share it too."""
    changed = False
    devices = []
    for device in slice_.devices:
        extra = tuple(rule.taint for rule in rules if rule.applies_to(device))
        if extra:
            changed = True
            device = dataclasses.replace(device, taints=device.taints + extra, cel_memo=device.cel_memo)
        devices.append(device)
    if not changed:
        return slice_
    return dataclasses.replace(slice_, devices=tuple(devices))
