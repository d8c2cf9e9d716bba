"""Nodes and v1 NodeSelectors with the matching rules of kube's nodeaffinity helpers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.model._fields import Fields, check_metadata, metadata_name
from extender.model.extended import (
    amount_of,
    is_dra_extended_name,
    is_node_allocatable_name,
    rounded_up_quantity,
    scheduler_units,
)

# The Node Declared Features name a kubelet publishes when it can skip node operations.
OPTIONAL_NODE_OPERATIONS = "DRAOptionalNodeOperations"

_LABEL_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    labels: Mapping[str, str]
    # status.allocatable of the names DRA could also back: a node listing one with a non-zero
    # amount serves it through a device plugin, and kube-scheduler makes no DRA claim for it
    # there (DRAExtendedResource, KEP-5004). Other resources are
    # kube-scheduler's business and are not kept.
    extended_allocatable: Mapping[str, int] = field(default_factory=dict)
    # status.declaredFeatures: what this node's kubelet says it supports (Node Declared Features)
    declared_features: frozenset[str] = frozenset()
    # status.allocatable of cpu (milli-units), memory, ephemeral-storage and hugepages-*, as
    # kube-scheduler counts them: what devices mapped to node resources draw on
    # (DRANodeAllocatableResources).
    allocatable: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...]

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "operator": self.operator}
        if self.values:
            out["values"] = list(self.values)
        return out

    def same_as(self, other: Requirement) -> bool:
        """Equality as the allocator merges selectors: values compared as a set."""
        return (
            self.key == other.key
            and self.operator == other.operator
            and set(self.values) == set(other.values)
        )


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    match_expressions: tuple[Requirement, ...]
    match_fields: tuple[Requirement, ...]

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.match_expressions:
            out["matchExpressions"] = [r.to_api() for r in self.match_expressions]
        if self.match_fields:
            out["matchFields"] = [r.to_api() for r in self.match_fields]
        return out


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """A parsed selector. ``problem`` is set when kube would refuse to evaluate it.

    Upstream only notices a malformed selector when it matches against a node, which is a
    fatal allocation error, so parsing records the problem instead of rejecting the slice.
    """

    terms: tuple[SelectorTerm, ...]
    problem: str | None

    def matches(self, node: Node) -> bool:
        """Terms are ORed, requirements ANDed; raises ValueError for a malformed selector."""
        if self.problem is not None:
            raise ValueError(self.problem)
        return any(_term_matches(term, node) for term in self.terms)

    def to_api(self) -> dict[str, Any]:
        return {"nodeSelectorTerms": [t.to_api() for t in self.terms]}

    def single_node(self) -> str | None:
        """The node a ``metadata.name In [one]`` field requirement pins the selector to, if any."""
        for term in self.terms:
            for req in term.match_fields:
                if req.key == "metadata.name" and req.operator == "In" and len(req.values) == 1:
                    return req.values[0]
        return None


def _term_matches(term: SelectorTerm, node: Node) -> bool:
    # An empty term selects nothing (nodeaffinity semantics).
    if not term.match_expressions and not term.match_fields:
        return False
    for req in term.match_fields:
        if (node.name in req.values) != (req.operator == "In"):
            return False
    return all(_label_matches(req, node.labels) for req in term.match_expressions)


def _label_matches(req: Requirement, labels: Mapping[str, str]) -> bool:
    op = req.operator
    present = req.key in labels
    if op == "In":
        return present and labels[req.key] in req.values
    if op == "NotIn":
        return not present or labels[req.key] not in req.values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if not present:
        return False
    try:
        have = int(labels[req.key])
    except ValueError:
        return False
    want = int(req.values[0])
    return have > want if op == "Gt" else have < want


def _requirement_problem(req: Requirement, fields: bool) -> str | None:
    if fields:
        if req.key != "metadata.name":
            return f"{req.key!r} is not a valid field selector key"
        if req.operator not in ("In", "NotIn"):
            return f"{req.operator!r} is not a valid field selector operator"
        if len(req.values) != 1:
            return f"field selector {req.key} must have exactly one value"
        return None
    if not req.key:
        return "label selector key must not be empty"
    if req.operator not in _LABEL_OPERATORS:
        return f"{req.operator!r} is not a valid label selector operator"
    if req.operator in ("In", "NotIn") and not req.values:
        return f"for 'in', 'notin' operators, values set can't be empty (key {req.key})"
    if req.operator in ("Exists", "DoesNotExist") and req.values:
        return f"values set must be empty for exists and does not exist (key {req.key})"
    if req.operator in ("Gt", "Lt"):
        if len(req.values) != 1:
            return f"for 'Gt', 'Lt' operators, exactly one value is required (key {req.key})"
        try:
            int(req.values[0])
        except ValueError:
            return f"for 'Gt', 'Lt' operators, the value must be an integer (key {req.key})"
    return None


def _requirements(
    f: Fields, raw: Any, field: str, fields: bool, problems: list[str]
) -> tuple[Requirement, ...]:
    out = []
    for path, item in f.mappings(raw, field):
        req = Requirement(
            key=f.string(item.get("key"), f"{path}.key"),
            operator=f.string(item.get("operator"), f"{path}.operator"),
            values=f.strings(item.get("values"), f"{path}.values"),
        )
        problem = _requirement_problem(req, fields)
        if problem is not None:
            problems.append(problem)
        out.append(req)
    return tuple(out)


def parse_node_selector(f: Fields, raw: Any, field: str) -> NodeSelector:
    raw = f.mapping(raw, field)
    problems: list[str] = []
    terms = []
    for path, term in f.mappings(raw.get("nodeSelectorTerms"), f"{field}.nodeSelectorTerms"):
        terms.append(
            SelectorTerm(
                match_expressions=_requirements(
                    f, term.get("matchExpressions"), f"{path}.matchExpressions", False, problems
                ),
                match_fields=_requirements(f, term.get("matchFields"), f"{path}.matchFields", True, problems),
            )
        )
    return NodeSelector(terms=tuple(terms), problem="; ".join(problems) or None)


def parse_node(obj: dict[str, Any]) -> Node:
    meta, name = metadata_name(obj, "Node")
    f = Fields("Node", name)
    check_metadata(f, meta)
    labels = f.string_map(meta.get("labels"), "metadata.labels")
    status = f.mapping(obj.get("status"), "status")
    allocatable = f.mapping(status.get("allocatable"), "status.allocatable")
    extended = {
        key: rounded_up_quantity(value, f"Node {name}: status.allocatable[{key}]")
        for key, value in allocatable.items()
        if is_dra_extended_name(key)
    }
    node_resources = {
        key: scheduler_units(key, amount_of(value, f"Node {name}: status.allocatable[{key}]"))
        for key, value in allocatable.items()
        if is_node_allocatable_name(key)
    }
    declared = frozenset(f.strings(status.get("declaredFeatures"), "status.declaredFeatures"))
    return Node(
        name=name,
        labels=dict(labels),
        extended_allocatable=extended,
        declared_features=declared,
        allocatable=node_resources,
    )
