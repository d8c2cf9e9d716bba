"""Derived attributes (DRADerivedAttributes): which results an expression may have, and its
value as the attribute constraints compare.

Both engines check an expression's static type with :func:`result_type_problem` when they
compile it, and turn what an evaluation returns into an :class:`AttributeValue` with
:func:`to_attribute`, the rules of k8s.io/dynamic-resource-allocation v0.37.2 cel/compile.go
(validateOutputType with a derived attribute, valToDeviceAttribute). The allocator compiles in
Kubernetes' stored-expressions environment, where lists are always allowed.
"""

from __future__ import annotations

from typing import Any, Final

from extender.cel.runtime.semver import Semver
from extender.cel.runtime.values import type_name
from extender.model import AttributeValue

# Static result types a derived attribute may have, as cel-go spells them: a scalar of these
# (dyn: known only at runtime), or a list of one of them.
_SCALAR_TYPES: Final = frozenset({"bool", "int", "string", "dyn", "kubernetes.Semver"})
_KINDS: Final = {bool: "bool", int: "int", str: "string", Semver: "version"}
_CEL_NAMES: Final = {bool: "bool", int: "int", str: "string", Semver: "semver"}


def result_type_allowed(spelling: str, lists: bool = True) -> bool:
    """Whether a static type (``int``, ``list(dyn)``, ...) may be a derived attribute's."""
    if spelling in _SCALAR_TYPES:
        return True
    return lists and spelling.startswith("list(") and spelling[5:-1] in _SCALAR_TYPES


def result_type_problem(spelling: str, lists: bool = True) -> str | None:
    """The compile error for an expression of static type ``spelling``, or None when it may be
    a derived attribute's. ``lists``: list results allowed (always, for the allocator)."""
    if result_type_allowed(spelling, lists):
        return None
    if lists:
        return (
            "must evaluate to a primitive scalar (string, integer, boolean, semver) or a list of "
            f"these scalars, not {spelling}"
        )
    return f"must evaluate to a primitive scalar (string, integer, boolean, semver), not {spelling}"


def to_attribute(value: Any) -> AttributeValue:
    """An evaluation's result as constraints compare it; raises ValueError (the message of
    the runtime error) for a value of another type. An empty list carries no value, as in a
    slice (upstream makes it an empty string list, which constraints cannot use either)."""
    kind = _KINDS.get(type(value))
    if kind is not None:
        return AttributeValue(kind=kind, values=(_stored(value),), is_list=False)
    if type(value) is not list and type(value) is not tuple:
        raise ValueError(f"unsupported CEL return type: {type_name(value)}")
    if not value:
        return AttributeValue(kind=None, values=(), is_list=False)
    first = type(value[0])
    kind = _KINDS.get(first)
    if kind is None:
        raise ValueError(f"unsupported list element type: {type_name(value[0])}")
    for i, item in enumerate(value):
        if type(item) is not first:
            expected = _CEL_NAMES[first]
            raise ValueError(f"expected list element at index {i} to be {expected}, got {type_name(item)}")
    return AttributeValue(kind=kind, values=tuple(_stored(v) for v in value), is_list=True)


def _stored(value: Any) -> Any:
    """A version as a slice states it: its text (blang's String(), build metadata included)."""
    return str(value) if type(value) is Semver else value
