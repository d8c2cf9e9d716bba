"""PodDisruptionBudget (policy/v1), as far as preemption reads it: which pods it guards and how
many of them may still go (``status.disruptionsAllowed``, kept by the disruption controller)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.model._fields import Fields, check_metadata, metadata_name

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    key: str
    operator: str  # one of _OPERATORS
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return labels.get(self.key) not in self.values
        return (self.key in labels) == (self.operator == "Exists")


@dataclass(frozen=True, slots=True)
class PodDisruptionBudget:
    namespace: str
    name: str
    # matchLabels as In requirements plus matchExpressions; empty = selects no pod (a nil or
    # empty selector matches nothing for preemption, see filterPodsWithPDBViolation upstream).
    selector: tuple[LabelRequirement, ...]
    disruptions_allowed: int
    disrupted_pods: frozenset[str]  # pod names the API server already counted as disrupted
    raw: Mapping[str, Any]

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return (
            bool(self.selector)
            and namespace == self.namespace
            and all(r.matches(labels) for r in self.selector)
        )


def parse_pod_disruption_budget(obj: dict[str, Any]) -> PodDisruptionBudget:
    meta, name = metadata_name(obj, "PodDisruptionBudget")
    namespace = meta.get("namespace") or "default"
    f = Fields("PodDisruptionBudget", f"{namespace}/{name}" if isinstance(namespace, str) else name)
    check_metadata(f, meta)
    spec = f.mapping(obj.get("spec"), "spec")
    status = f.mapping(obj.get("status"), "status")
    selector = f.mapping(spec.get("selector"), "spec.selector")
    requirements = [
        LabelRequirement(key, "In", frozenset([value]))
        for key, value in f.string_map(selector.get("matchLabels"), "spec.selector.matchLabels").items()
    ]
    for where, expr in f.mappings(selector.get("matchExpressions"), "spec.selector.matchExpressions"):
        operator = f.string(expr.get("operator"), f"{where}.operator", required=True)
        if operator not in _OPERATORS:
            raise f.error(f"{where}.operator", f"must be one of {', '.join(_OPERATORS)}, got {operator!r}")
        values = f.strings(expr.get("values"), f"{where}.values")
        if bool(values) != (operator in ("In", "NotIn")):
            wanted = "non-empty" if not values else "empty"
            raise f.error(f"{where}.values", f"must be {wanted} for {operator}")
        key = f.string(expr.get("key"), f"{where}.key", required=True)
        requirements.append(LabelRequirement(key, operator, frozenset(values)))
    return PodDisruptionBudget(
        namespace=namespace,
        name=name,
        selector=tuple(requirements),
        disruptions_allowed=f.integer(status.get("disruptionsAllowed"), "status.disruptionsAllowed") or 0,
        disrupted_pods=frozenset(f.mapping(status.get("disruptedPods"), "status.disruptedPods")),
        raw=obj,
    )
