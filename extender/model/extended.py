"""Which resource names DRA may back, and their integer quantities (``DRAExtendedResource``).

A pod asks for a DRA-backed extended resource by an extended-resource name (``example.com/gpu``:
a domain that is not ``kubernetes.io``) or by a class's implicit name
``deviceclass.resource.kubernetes.io/<class>``; the latter lies in the native domain and is
therefore named explicitly (upstream's ``IsDRAExtendedResourceName``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from extender.model._fields import controlled_by
from extender.model.quantity import Quantity

DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
_REQUESTS_PREFIX = "requests."


def is_dra_extended_name(name: str) -> bool:
    if name.startswith(DEVICE_CLASS_PREFIX):
        return len(name) > len(DEVICE_CLASS_PREFIX)
    # Native names have no domain or lie in kubernetes.io; "requests.*" are quota names.
    return "/" in name and "kubernetes.io/" not in name and not name.startswith(_REQUESTS_PREFIX)


def quantity_of(value: object, what: str) -> Quantity:
    """A quantity as a raw API map holds it; raises ValueError naming ``what``."""
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise ValueError(f"{what}: must be a quantity string, got {type(value).__name__}")
    try:
        return Quantity.parse(str(value))
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None


def amount_of(value: object, what: str) -> Fraction:
    return quantity_of(value, what).value


def rounded_up_quantity(value: object, what: str) -> int:
    """A node's allocatable amount as the scheduler's scalar resources hold it (rounded up)."""
    return math.ceil(amount_of(value, what))


# The node resources a device may use (DRANodeAllocatableResources) and how the scheduler counts
# each (framework.Resource: milli-CPU; bytes rounded up for the others).
NODE_ALLOCATABLE_NAMES = ("cpu", "memory", "ephemeral-storage")
HUGE_PAGES_PREFIX = "hugepages-"


def is_node_allocatable_name(name: str) -> bool:
    return name in NODE_ALLOCATABLE_NAMES or name.startswith(HUGE_PAGES_PREFIX)


def scheduler_units(name: str, amount: Fraction) -> int:
    """``amount`` of resource ``name`` as kube-scheduler's Resource holds it (rounded up)."""
    return math.ceil(amount * 1000) if name == "cpu" else math.ceil(amount)


def integer_quantity(value: object, what: str) -> int:
    """A container's request; the API only admits whole numbers for extended resources.

    Raises ValueError naming ``what`` for anything else.
    """
    amount = amount_of(value, what)
    if amount.denominator != 1:
        raise ValueError(f"{what}: must be a whole number for an extended resource, got {value}")
    if amount < 0:
        raise ValueError(f"{what}: must not be negative, got {value}")
    return int(amount)


def is_extended_claim_of(raw: Mapping[str, Any], pod_name: str, pod_uid: str) -> bool:
    """Annotated as the extended-resource claim and controlled by this pod (upstream's lookup)."""
    meta = raw.get("metadata") or {}
    if (meta.get("annotations") or {}).get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) != "true":
        return False
    return controlled_by(raw, pod_uid, pod_name)
