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

    # The first accepted device's key: None when that value was a list or untyped, which then
    # no later device can match. Read only while a device is accepted.
    _reference: tuple[str, Any] | None

    def __init__(self, name: str) -> None:
        self._name = name
        self._count = 0

    @property
    def attribute(self) -> str:
        return self._name

    def add(self, request: str, value: AttributeValue | None) -> bool:
        if not self._admits(value):
            return False
        if not self._count:
            self._reference = self._key(value)
        self._count += 1
        return True

    def remove(self, request: str) -> None:
        self._count -= 1

    def admits(self, device: Device) -> bool:
        """Whether ``add`` accepts ``device``'s own value now (without changing anything): the
        first device needs the attribute, any later one a scalar of the reference's type and
        value."""
        return self._admits(device.attribute(self._name))

    def key(self, device: Device) -> tuple[str, Any] | None:
        """What ``add`` compares once a reference is set: devices with equal keys join each
        other; None for a device that can never join a set one (missing or not a scalar)."""
        return self._key(device.attribute(self._name))

    def _admits(self, value: AttributeValue | None) -> bool:
        if not self._count:
            return value is not None
        key = self._key(value)
        return key is not None and key == self._reference

    @staticmethod
    def _key(value: AttributeValue | None) -> tuple[str, Any] | None:
        return None if value is None else _scalar(value)


class MatchAttributeSets:
    """DRAListTypeAttributes: values are sets, and each accepted device leaves the running
    intersection on a stack that its undo pops, so backtracking widens it again (upstream
    matchAttributeConstraint.intersectionStack, kubernetes/kubernetes 4426859839df)."""

    _kind: str  # the type of the first accepted value; read only while the stack holds it

    def __init__(self, name: str) -> None:
        self._name = name
        self._stack: list[frozenset[Any]] = []

    @property
    def attribute(self) -> str:
        return self._name

    def add(self, request: str, value: AttributeValue | None) -> bool:
        if value is None or value.kind is None:
            return False
        values = frozenset(value.values)
        if self._stack:
            if value.kind != self._kind:
                return False
            values &= self._stack[-1]
            if not values:
                return False
        else:
            self._kind = value.kind
        self._stack.append(values)
        return True

    def remove(self, request: str) -> None:
        self._stack.pop()


class DistinctAttribute:
    """A new value must differ from the values accepted before. With ``keep_all`` (1.37 on,
    v0.37.2 constraint.go) every accepted value stays on a stack that undo pops; before, only
    the last value accepted per request name was remembered, so [a, b, a] for one request of
    count 3 passed (Features.exact_rollback), and an undo forgets the request's value. With
    DRAListTypeAttributes values are sets that must be disjoint; 1.37 refuses a value of no
    known type even as the first."""

    def __init__(self, name: str, sets: bool, keep_all: bool) -> None:
        self._name = name
        self._sets = sets
        self._keep_all = keep_all
        self._accepted: list[AttributeValue] = []  # keep_all
        self._by_request: dict[str, AttributeValue] = {}  # not keep_all

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
        if any(self._conflicts(value, old) for old in self._by_request.values()):
            return False
        self._by_request[request] = value
        return True

    def remove(self, request: str) -> None:
        if self._keep_all:
            self._accepted.pop()
        else:
            self._by_request.pop(request, None)


def new_state(constraint: Constraint, list_attributes: bool, keep_all: bool) -> ConstraintState:
    if constraint.match_attribute is not None:
        if list_attributes:
            return MatchAttributeSets(constraint.match_attribute)
        return MatchAttribute(constraint.match_attribute)
    if constraint.distinct_attribute is None:
        raise ValueError("constraint without matchAttribute or distinctAttribute")  # validated earlier
    return DistinctAttribute(constraint.distinct_attribute, list_attributes, keep_all)
