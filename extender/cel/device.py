"""The engine-independent ``device`` value: API attribute/capacity maps, parsed once.

Mirrors ``DeviceMatches`` in k8s.io/dynamic-resource-allocation/cel: every attribute of
the device is converted before any selector runs, so one malformed attribute turns every
evaluation on the device into a runtime error (kept in :attr:`DeviceView.error`), even for
selectors that never mention it.  A view is built once per device version and memoized
in the device's ``cel_memo``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from extender.cel import DeviceInput
from extender.cel.runtime.semver import Semver
from extender.model.quantity import Quantity

AttrValue = int | bool | str | Semver | list[int] | list[bool] | list[str] | list[Semver]
_T = TypeVar("_T")

VIEW_MEMO_KEY: Final = "view"

_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
_LIST_KINDS: Final = ("ints", "bools", "strings", "versions")
_SCALAR_KINDS: Final = ("int", "bool", "string", "version")


@dataclass(frozen=True, slots=True)
class DeviceView:
    """What a selector sees of one device; ``error`` set means every evaluation fails with it."""

    driver: str
    attributes: dict[str, dict[str, AttrValue]]
    capacity: dict[str, dict[str, Quantity]]
    allow_multiple_allocations: bool
    error: str | None = None
    # Engines keep their own per-device activation here (keyed by engine).
    engine_cache: dict[Any, Any] = field(default_factory=dict)


@dataclass
class PlainDevice:
    """A :class:`~extender.cel.DeviceInput` given as plain API-shaped maps, for callers that have
    no parsed model device: the environment's warm-up, the parity runner, benchmarks, tests."""

    driver: str
    attributes: Mapping[str, Mapping[str, Any]]
    capacity: Mapping[str, Mapping[str, Any]]
    allow_multiple_allocations: bool
    cel_memo: dict[Any, Any] = field(default_factory=dict)


class _BadAttribute(Exception):
    """The reason one attribute cannot be converted (without the attribute's name)."""


def split_qualified_name(name: str, driver: str) -> tuple[str, str]:
    """``parseQualifiedName``: domain and id split at the first ``/``; bare names are the driver's."""
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def _version(text: Any) -> Semver:
    if not isinstance(text, str):
        raise _BadAttribute(f"version must be a string, not {type(text).__name__}")
    try:
        return Semver.parse(text)
    except ValueError as exc:
        raise _BadAttribute(f"parse semantic version: {exc}") from None


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _BadAttribute(f"int value must be an integer, not {type(value).__name__}")
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise _BadAttribute(f"int value {value} is outside the int64 range")
    return value


def _typed(value: Any, kind: str, py_type: type[_T]) -> _T:
    if not isinstance(value, py_type):
        raise _BadAttribute(f"{kind} value expected, got {type(value).__name__}")
    return value


def _scalar(kind: str, value: Any) -> int | bool | str | Semver:
    if kind == "int":
        return _int(value)
    if kind == "bool":
        return _typed(value, kind, bool)
    if kind == "string":
        return _typed(value, kind, str)
    return _version(value)


def _attribute_value(attr: Any) -> AttrValue:
    """``getAttributeValue``: the first member set, lists before scalars as upstream checks them."""
    if not isinstance(attr, Mapping):
        raise _BadAttribute("unsupported attribute value")
    for list_kind, kind in zip(_LIST_KINDS, _SCALAR_KINDS, strict=True):
        values = attr.get(list_kind)
        if values is not None:
            if not isinstance(values, list | tuple):
                raise _BadAttribute(f"{list_kind} must be a list, not {type(values).__name__}")
            return [_scalar(kind, v) for v in values]  # type: ignore[return-value]
    for kind in _SCALAR_KINDS:
        value = attr.get(kind)
        if value is not None:
            return _scalar(kind, value)
    raise _BadAttribute("unsupported attribute value")


def _capacity_value(cap: Any) -> Quantity:
    value = cap.get("value") if isinstance(cap, Mapping) else None
    if isinstance(value, Quantity):
        return value
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError("value must be a quantity")
    # JSON may carry a quantity as a bare number; upstream parses its text.
    return Quantity.parse(value if isinstance(value, str) else repr(value))


def _put(by_domain: dict[str, dict[str, Any]], name: str, driver: str, value: Any) -> None:
    """File ``value`` under its domain (the driver's for a bare name) and id."""
    domain, ident = split_qualified_name(name, driver)
    inner = by_domain.get(domain)
    if inner is None:
        inner = by_domain[domain] = {}
    inner[ident] = value


def build_device_view(device: DeviceInput) -> DeviceView:
    """Convert every attribute and capacity of ``device``; the first failure becomes ``error``."""
    driver = device.driver
    allow_multiple = bool(device.allow_multiple_allocations)
    attributes: dict[str, dict[str, AttrValue]] = {}
    for name, attr in device.attributes.items():
        try:
            value = _attribute_value(attr)
        except _BadAttribute as exc:
            return DeviceView(driver, {}, {}, allow_multiple, f"attribute {name}: {exc}")
        _put(attributes, name, driver, value)
    capacity: dict[str, dict[str, Quantity]] = {}
    for name, cap in device.capacity.items():
        try:
            quantity = _capacity_value(cap)
        except ValueError as exc:
            # Upstream gets an already parsed Quantity; here bad input must still fail loudly.
            return DeviceView(driver, {}, {}, allow_multiple, f"capacity {name}: {exc}")
        _put(capacity, name, driver, quantity)
    return DeviceView(driver, attributes, capacity, allow_multiple)


def view_for(device: DeviceInput) -> DeviceView:
    """The device's view, built on first use and memoized for the device's lifetime."""
    memo = device.cel_memo
    view = memo.get(VIEW_MEMO_KEY)
    if view is None:
        view = memo[VIEW_MEMO_KEY] = build_device_view(device)
    return view
