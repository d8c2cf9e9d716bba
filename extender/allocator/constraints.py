"""matchAttribute / distinctAttribute with upstream's exact (sometimes lossy) bookkeeping.

A constraint is handed each device's value of its attribute (``attribute``), looked up by the
search: the device's own, or the request's derived attribute of that name (DRADerivedAttributes,
upstream lookupAttribute), which is why the value, not the device, comes in.

Upstream: matchAttributeConstraint and distinctAttributeConstraint
(structured/internal/*/allocator_*.go and constraint.go in k8s.io/dynamic-resource-allocation).
"""

from __future__ import annotations

from typing import Any, Protocol

from extender.model import AttributeValue, Constraint, Device


class ConstraintState(Protocol):
    @property
    def attribute(self) -> str:
        """The fully qualified attribute name the constraint compares."""
        ...

    def add(self, request: str, value: AttributeValue | None) -> bool:
        """Whether a device of ``request`` whose attribute is ``value`` (None: it has none)
        joins; if so it is counted until :meth:`remove`."""
        ...

    def remove(self, request: str) -> None: ...


def applies(constraint: Constraint, parent: str, sub: str | None) -> bool:
    """Whether picks for request ``parent`` (subrequest ``sub``) are bound by the constraint."""
    names = constraint.requests
    return not names or parent in names or (sub is not None and f"{parent}/{sub}" in names)


def _scalar(value: AttributeValue) -> tuple[str, Any] | None:
    if value.kind is None or value.is_list:
        return None
    return (value.kind, value.values[0])


class MatchAttribute:
    """Scalar semantics: the first accepted device sets the reference value."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._reference: AttributeValue | None = None
        self._count = 0

    @property
    def attribute(self) -> str:
        return self._name

    def add(self, request: str, value: AttributeValue | None) -> bool:
        if value is None:
            return False
        if self._count == 0:
            self._reference = value
        else:
            new = _scalar(value)
            ref = self._reference
            if new is None or ref is None or _scalar(ref) != new:
                return False
        self._count += 1
        return True

    def remove(self, request: str) -> None:
        self._count -= 1

    def admits(self, device: Device) -> bool:
        """Whether ``add`` would accept ``device``'s own value now (without changing anything)."""
        if self._count == 0:
            return device.attribute(self._name) is not None
        new = self.key(device)
        ref = self._reference
        return new is not None and ref is not None and _scalar(ref) == new

    def key(self, device: Device) -> tuple[str, Any] | None:
        """What ``add`` compares once a reference is set: devices with equal keys join each
        other; None for a device that can never join a set one (missing or not a scalar)."""
        value = device.attribute(self._name)
        return None if value is None else _scalar(value)


class MatchAttributeSets:
    """DRAListTypeAttributes: values are sets, and each accepted device leaves the running
    intersection on a stack that its undo pops, so backtracking widens it again (upstream
    matchAttributeConstraint.intersectionStack, kubernetes/kubernetes 4426859839df)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._kind: str | None = None
        self._stack: list[frozenset[Any]] = []

    @property
    def attribute(self) -> str:
        return self._name

    def add(self, request: str, value: AttributeValue | None) -> bool:
        if value is None or value.kind is None:
            return False
        values = frozenset(value.values)
        if not self._stack:
            self._kind = value.kind
            self._stack.append(values)
            return True
        if value.kind != self._kind:
            return False
        common = self._stack[-1] & values
        if not common:
            return False
        self._stack.append(common)
        return True

    def remove(self, request: str) -> None:
        self._stack.pop()


class DistinctAttribute:
    """A new value must differ from the values accepted before. With ``keep_all`` (1.37 on,
    v0.37.2 constraint.go) every accepted value stays on a stack that undo pops; before, only
    the last value accepted per request name was remembered, so [a, b, a] for one request of
    count 3 passed (Features.exact_rollback). With DRAListTypeAttributes values are sets that
    must be disjoint; 1.37 refuses a value of no known type even as the first."""

    def __init__(self, name: str, sets: bool, keep_all: bool) -> None:
        self._name = name
        self._sets = sets
        self._keep_all = keep_all
        self._accepted: list[AttributeValue] = []  # keep_all
        self._by_request: dict[str, AttributeValue] = {}  # not keep_all
        self._count = 0

    def _conflicts(self, new: AttributeValue, old: AttributeValue) -> bool:
        # A value of unknown type cannot be shown to differ, so it counts as a conflict.
        if self._sets:
            if new.kind is None:
                return True
            return new.kind == old.kind and not set(new.values).isdisjoint(old.values)
        scalar = _scalar(new)
        return scalar is None or scalar == _scalar(old)

    @property
    def attribute(self) -> str:
        return self._name

    def add(self, request: str, value: AttributeValue | None) -> bool:
        if value is None:
            return False
        if self._keep_all:
            if self._sets and value.kind is None:
                return False
            if any(self._conflicts(value, old) for old in self._accepted):
                return False
            self._accepted.append(value)
            return True
        if self._count and any(self._conflicts(value, old) for old in self._by_request.values()):
            return False
        self._by_request[request] = value
        self._count += 1
        return True

    def remove(self, request: str) -> None:
        if self._keep_all:
            self._accepted.pop()
        else:
            self._by_request.pop(request, None)
            self._count -= 1


def new_state(constraint: Constraint, list_attributes: bool, keep_all: bool) -> ConstraintState:
    if constraint.match_attribute is not None:
        if list_attributes:
            return MatchAttributeSets(constraint.match_attribute)
        return MatchAttribute(constraint.match_attribute)
    if constraint.distinct_attribute is None:
        raise ValueError("constraint without matchAttribute or distinctAttribute")  # validated earlier
    return DistinctAttribute(constraint.distinct_attribute, list_attributes, keep_all)
