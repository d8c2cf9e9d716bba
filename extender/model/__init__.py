"""Typed, immutable views of the Kubernetes objects allocation reads, parsed once on entry.

Parsing validates what the allocator relies on and raises
``ValueError("<kind> <name>: <field>: <problem>")`` for malformed objects.
"""

from extender.model._fields import controlled_by
from extender.model.allocation import (
    AllocationResult,
    ConfigEntry,
    DeviceResult,
    Holdings,
    holdings,
    parse_allocation,
)
from extender.model.device_class import DeviceClass, parse_device_class
from extender.model.features import Features
from extender.model.nodes import Node, NodeSelector, Requirement, SelectorTerm, parse_node
from extender.model.resource_claim import (
    ClaimConfig,
    Constraint,
    ConsumerRef,
    DerivedAttribute,
    DeviceRequest,
    ExactRequest,
    ResourceClaim,
    Toleration,
    parse_resource_claim,
    parse_resource_claim_template,
)
from extender.model.resource_slice import (
    AttributeValue,
    Capacity,
    CounterSet,
    Device,
    DeviceID,
    PoolRef,
    RequestPolicy,
    ResourceSlice,
    Taint,
    parse_resource_slice,
)
from extender.model.taint_rules import DeviceTaintRule, apply_taint_rules, parse_device_taint_rule

__all__ = [
    "AllocationResult",
    "AttributeValue",
    "Capacity",
    "ClaimConfig",
    "ConfigEntry",
    "Constraint",
    "ConsumerRef",
    "CounterSet",
    "DerivedAttribute",
    "Device",
    "DeviceClass",
    "DeviceID",
    "DeviceRequest",
    "DeviceResult",
    "DeviceTaintRule",
    "ExactRequest",
    "Features",
    "Holdings",
    "Node",
    "NodeSelector",
    "PoolRef",
    "RequestPolicy",
    "Requirement",
    "ResourceClaim",
    "ResourceSlice",
    "SelectorTerm",
    "Taint",
    "Toleration",
    "apply_taint_rules",
    "controlled_by",
    "holdings",
    "parse_allocation",
    "parse_device_class",
    "parse_device_taint_rule",
    "parse_node",
    "parse_resource_claim",
    "parse_resource_claim_template",
    "parse_resource_slice",
]
