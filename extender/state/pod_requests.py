"""What a pod takes of its node's CPU, memory, ephemeral storage and hugepages.

With DRANodeAllocatableResources a device can use node resources: a CPU device maps its cores
to the node's ``cpu``, a memory device to ``memory``, and a GPU may cost some memory per pod or
per container. The scheduler records what a pod's claims cost in
``pod.status.nodeAllocatableResourceClaimStatuses`` and counts it like the pod's own requests:
against the node's allocatable, for this pod and for every pod already on the node.

The arithmetic follows upstream's pod-resource helpers (k8s.io/component-helpers/resource,
``PodRequests`` with ``UseDRANodeAllocatableResourceClaimStatus``, kubernetes/kubernetes
0411cc704533): regular containers add up, init containers run one after the other (sidecars
keep running), a claim's mapped quantities and per-pod overhead hold for the pod's lifetime,
and per-container overhead counts where a referencing container runs. Only the resources a
device may use are computed; every other name is kube-scheduler's own business.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from extender.model.extended import (
    HUGE_PAGES_PREFIX,
    amount_of,
    is_node_allocatable_name,
    quantity_of,
    scheduler_units,
)
from extender.model.quantity import Quantity

Amounts = dict[str, Fraction]

# Pod-level resources (spec.resources) cover cpu, memory and hugepages (upstream's
# IsSupportedPodLevelResource).
_POD_LEVEL = ("cpu", "memory")


def _pod_level(name: str) -> bool:
    return name in _POD_LEVEL or name.startswith(HUGE_PAGES_PREFIX)


@dataclass(frozen=True, slots=True)
class Overhead:
    name: str
    per_pod: Quantity | None
    per_container: Quantity | None

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.per_pod is not None:
            out["perPod"] = str(self.per_pod)
        if self.per_container is not None:
            out["perContainer"] = str(self.per_container)
        return out


@dataclass(frozen=True, slots=True)
class ClaimFootprint:
    """One ``nodeAllocatableResourceClaimStatuses`` entry: what one claim costs the node."""

    claim_name: str
    containers: tuple[str, ...]  # the containers that reference the claim
    mapping: tuple[tuple[str, Quantity], ...] = ()  # sorted by resource name
    overhead: tuple[Overhead, ...] = ()  # sorted by resource name

    def to_api(self) -> dict[str, Any]:
        return {
            "resourceClaimName": self.claim_name,
            "containers": list(self.containers),
            "mapping": [{"name": name, "quantity": str(q)} for name, q in self.mapping],
            "overhead": [o.to_api() for o in self.overhead],
        }


def _optional(value: Any, where: str) -> Quantity | None:
    return None if value is None else quantity_of(value, where)


def _mappings(value: Any, where: str) -> list[Mapping[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        raise ValueError(f"{where}: must be a list of objects")
    return value


def parse_footprints(status: Mapping[str, Any], pod: str) -> tuple[ClaimFootprint, ...]:
    """``status.nodeAllocatableResourceClaimStatuses``; raises ValueError naming the field."""
    where = f"Pod {pod}: status.nodeAllocatableResourceClaimStatuses"
    out = []
    for i, entry in enumerate(_mappings(status.get("nodeAllocatableResourceClaimStatuses"), where)):
        at = f"{where}[{i}]"
        containers = entry.get("containers") or []
        if not isinstance(containers, list) or not all(isinstance(c, str) for c in containers):
            raise ValueError(f"{at}.containers: must be a list of strings")
        mapping = tuple(
            (str(m.get("name")), quantity_of(m.get("quantity"), f"{at}.mapping[{j}].quantity"))
            for j, m in enumerate(_mappings(entry.get("mapping"), f"{at}.mapping"))
            if m.get("quantity") is not None
        )
        overhead = tuple(
            Overhead(
                str(o.get("name")),
                _optional(o.get("perPod"), f"{at}.overhead[{j}].perPod"),
                _optional(o.get("perContainer"), f"{at}.overhead[{j}].perContainer"),
            )
            for j, o in enumerate(_mappings(entry.get("overhead"), f"{at}.overhead"))
        )
        out.append(
            ClaimFootprint(str(entry.get("resourceClaimName") or ""), tuple(containers), mapping, overhead)
        )
    return tuple(out)


def _add(into: Amounts, amounts: Mapping[str, Fraction] | None) -> None:
    for name, amount in (amounts or {}).items():
        into[name] = into.get(name, 0) + amount


def _max_into(into: Amounts, amounts: Mapping[str, Fraction]) -> None:
    for name, amount in amounts.items():
        if name not in into or amount > into[name]:
            into[name] = amount


def _list(resources: Any, where: str) -> Amounts | None:
    """A ResourceList, keeping only the names a device may use; None when absent."""
    if resources is None:
        return None
    if not isinstance(resources, Mapping):
        raise ValueError(f"{where}: must be an object")
    return {
        name: amount_of(value, f"{where}[{name}]")
        for name, value in resources.items()
        if is_node_allocatable_name(name)
    }


@dataclass(slots=True)
class _Dra:
    """What a pod's claims add: for its whole life, and per referencing container."""

    fixed: Amounts = field(default_factory=dict)
    per_container: dict[str, Amounts] = field(default_factory=dict)


def _dra(footprints: Iterable[ClaimFootprint], container_names: list[str]) -> _Dra:
    dra = _Dra()
    for claim in footprints:
        for name, q in claim.mapping:
            _add(dra.fixed, {name: q.value})
        for o in claim.overhead:
            if o.per_pod is not None:
                _add(dra.fixed, {o.name: o.per_pod.value})
        per_container = {o.name: o.per_container.value for o in claim.overhead if o.per_container is not None}
        if not per_container:
            continue
        known = 0
        for name in container_names:
            if name in claim.containers:
                known += 1
                _add(dra.per_container.setdefault(name, {}), per_container)
        # A reference to a container the pod does not have counts for the pod's whole life.
        unknown = len(claim.containers) - known
        if unknown > 0:
            _add(dra.fixed, {name: amount * unknown for name, amount in per_container.items()})
    return dra


class _Pod:
    """The parts of a raw pod the arithmetic reads."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        meta = raw.get("metadata") or {}
        self.ref = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
        spec = raw.get("spec") or {}
        self.status = raw.get("status") or {}
        self.init = list(spec.get("initContainers") or [])
        self.regular = list(spec.get("containers") or [])
        self.spec = spec

    def where(self, field_path: str) -> str:
        return f"Pod {self.ref}: {field_path}"

    def names(self) -> list[str]:
        return [str(c.get("name")) for c in (*self.init, *self.regular)]

    def spec_requests(self, container: Mapping[str, Any], where: str) -> Amounts:
        resources = container.get("resources") or {}
        requests = _list(resources.get("requests"), f"{where}.resources.requests") or {}
        # API-server defaulting: a resource with a limit and no request requests its limit.
        for name, amount in (_list(resources.get("limits"), f"{where}.resources.limits") or {}).items():
            requests.setdefault(name, amount)
        return requests

    def spec_limits(self, container: Mapping[str, Any], where: str) -> Amounts:
        resources = container.get("resources") or {}
        return _list(resources.get("limits"), f"{where}.resources.limits") or {}

    def container_status(self, name: str) -> Mapping[str, Any] | None:
        for key in ("containerStatuses", "initContainerStatuses"):
            for cs in self.status.get(key) or ():
                if isinstance(cs, Mapping) and cs.get("name") == name:
                    return cs
        return None

    def resize_infeasible(self) -> bool:
        for condition in self.status.get("conditions") or ():
            if isinstance(condition, Mapping) and condition.get("type") == "PodResizePending":
                return condition.get("reason") == "Infeasible"
        return False


def _aggregate(pod: _Pod, amounts_of: Any, dra: _Dra) -> Amounts:
    """Upstream's aggregateContainerResourcesByFn over ``amounts_of(container, where)``."""
    total: Amounts = {}
    for i, container in enumerate(pod.regular):
        _add(total, amounts_of(container, f"spec.containers[{i}]"))
        _add(total, dra.per_container.get(str(container.get("name"))))
    sidecars: Amounts = {}
    init_peak: Amounts = {}
    for i, container in enumerate(pod.init):
        own = dict(amounts_of(container, f"spec.initContainers[{i}]") or {})
        _add(own, dra.per_container.get(str(container.get("name"))))
        if container.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            own = dict(sidecars)
        else:
            _add(own, sidecars)
        _max_into(init_peak, own)
    _max_into(total, init_peak)
    _add(total, dra.fixed)
    return total


def _container_requests(pod: _Pod, use_status: bool, dra: _Dra) -> Amounts:
    """Upstream's AggregateContainerRequests (pod-level status resources off, as their gate)."""

    def spec(container: Mapping[str, Any], where: str) -> Amounts:
        return pod.spec_requests(container, pod.where(where))

    if not use_status:
        return _aggregate(pod, spec, dra)
    infeasible = pod.resize_infeasible()

    def allocated(container: Mapping[str, Any], where: str) -> Amounts | None:
        cs = pod.container_status(str(container.get("name")))
        if cs is not None and cs.get("allocatedResources") is not None:
            return _list(cs.get("allocatedResources"), pod.where(f"status of {where}.allocatedResources"))
        return None if infeasible else spec(container, where)

    def actuated(container: Mapping[str, Any], where: str) -> Amounts | None:
        cs = pod.container_status(str(container.get("name")))
        requests = ((cs or {}).get("resources") or {}).get("requests")
        if requests is not None:
            return _list(requests, pod.where(f"status of {where}.resources.requests"))
        return allocated(container, where)

    out = {} if infeasible else _aggregate(pod, spec, dra)
    _max_into(out, _aggregate(pod, allocated, dra))
    # Kubelet's actuated values already include what devices add.
    _max_into(out, _aggregate(pod, actuated, _Dra()))
    return out


def pod_requests(
    raw: Mapping[str, Any], footprints: Iterable[ClaimFootprint] = (), use_status: bool = False
) -> Amounts:
    """The pod's request of every resource a device may use (upstream's PodRequests with the
    pod-level resources on). ``use_status``: count resized containers as kubelet runs them, as
    the scheduler does for pods already on a node. Raises ValueError naming a malformed field."""
    pod = _Pod(raw)
    total = _container_requests(pod, use_status, _dra(footprints, pod.names()))
    pod_level = _list((pod.spec.get("resources") or {}).get("requests"), pod.where("spec.resources.requests"))
    for name, amount in (pod_level or {}).items():
        if _pod_level(name):
            total[name] = amount
    _add(total, _list(pod.spec.get("overhead"), pod.where("spec.overhead")))
    return total


def uncovered_pod_level(raw: Mapping[str, Any], footprints: tuple[ClaimFootprint, ...]) -> str | None:
    """Why the pod's own budget (``spec.resources``) cannot also hold what its devices add, or
    None (upstream's validatePodLevelResourcesCoverDRA)."""
    pod = _Pod(raw)
    resources = pod.spec.get("resources")
    if not isinstance(resources, Mapping) or not footprints:
        return None
    dra = _dra(footprints, pod.names())
    requests = _list(resources.get("requests"), pod.where("spec.resources.requests"))
    if requests is not None:
        containers = _container_requests(pod, False, dra)
        for name, budget in requests.items():
            if _pod_level(name) and name in containers and containers[name] > budget:
                return (
                    f"pod level request for {name} is insufficient to cover the aggregated container "
                    "and node-allocatable DRA requests"
                )
    limits = _list(resources.get("limits"), pod.where("spec.resources.limits"))
    if limits is None:
        return None
    declared = {
        name for c in (*pod.init, *pod.regular) for name in ((c.get("resources") or {}).get("limits") or {})
    }
    # Kubelet sets no limit for an undeclared resource, so what devices add counts only where a
    # container declares one; hugepages never overcommit and always count.
    kept = _Dra(
        {n: a for n, a in dra.fixed.items() if n.startswith(HUGE_PAGES_PREFIX) or n in declared},
        {
            c: {n: a for n, a in amounts.items() if n.startswith(HUGE_PAGES_PREFIX) or n in declared}
            for c, amounts in dra.per_container.items()
        },
    )

    def spec_limits(container: Mapping[str, Any], where: str) -> Amounts:
        return pod.spec_limits(container, pod.where(where))

    for name, total in _aggregate(pod, spec_limits, kept).items():
        if name.startswith(HUGE_PAGES_PREFIX) and name in limits and total > limits[name]:
            return (
                f"pod level limit for {name} is insufficient to cover the aggregated container "
                "and node-allocatable DRA limits"
            )
    for i, container in enumerate(pod.regular):
        name_of = str(container.get("name"))
        own = _container_dra(footprints, name_of)
        for name, limit in pod.spec_limits(container, pod.where(f"spec.containers[{i}]")).items():
            if name.startswith(HUGE_PAGES_PREFIX) or name not in limits:
                continue
            if limit + own.get(name, 0) > limits[name]:
                return (
                    f"pod level limit for {name} is insufficient to cover the limit and DRA "
                    f"overhead for container {name_of}"
                )
    return None


def _container_dra(footprints: Iterable[ClaimFootprint], container: str) -> Amounts:
    """Everything the claims a container references add (upstream's GetContainerDRAAllocations)."""
    out: Amounts = {}
    for claim in footprints:
        if container not in claim.containers:
            continue
        for name, quantity in claim.mapping:
            _add(out, {name: quantity.value})
        for o in claim.overhead:
            for amount in (o.per_pod, o.per_container):
                if amount is not None:
                    _add(out, {o.name: amount.value})
    return out


def in_units(amounts: Mapping[str, Fraction]) -> dict[str, int]:
    """As kube-scheduler's Resource counts them: milli-CPU, whole units otherwise (rounded up)."""
    return {name: scheduler_units(name, amount) for name, amount in amounts.items()}


class NodeRequests:
    """What the pods on each node request of the resources devices may use, in scheduler units.

    kube-scheduler counts every pod assigned to a node, and the pods it assumed there before the
    watch shows them bound; so does this index: ``put`` follows the cache's pods, ``assume``
    records a pod our bind just bound. A pod that finished (Succeeded, Failed) no longer counts.
    """

    def __init__(self) -> None:
        # pod key -> (node, units, assumed)
        self._entries: dict[tuple[str, str], tuple[str, dict[str, int], bool]] = {}
        self._totals: dict[str, dict[str, int]] = {}

    @staticmethod
    def units_of(raw: Mapping[str, Any]) -> dict[str, int]:
        """A bound pod's requests; raises ValueError naming a malformed field."""
        status = raw.get("status") or {}
        meta = raw.get("metadata") or {}
        ref = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
        return in_units(pod_requests(raw, parse_footprints(status, ref), use_status=True))

    def put(self, key: tuple[str, str], node: str, finished: bool, units: dict[str, int] | None) -> None:
        """The cache's current version of a pod (``units``: ``units_of`` it, when bound)."""
        held = self._entries.get(key)
        if node and not finished and units is not None:
            self._set(key, (node, units, False))
        elif held is not None and not (held[2] and not node and not finished):
            self.drop(key)  # an assumed pod stays until the watch shows it bound, or finished

    def assume(self, key: tuple[str, str], node: str, units: dict[str, int]) -> None:
        held = self._entries.get(key)
        if held is None or held[2]:
            self._set(key, (node, units, True))

    def drop(self, key: tuple[str, str]) -> None:
        held = self._entries.pop(key, None)
        if held is not None:
            self._count(held[0], held[1], -1)

    def requested(self, node: str, excluding: tuple[str, str] | None = None) -> Mapping[str, int]:
        """The node's total; ``excluding`` a pod already counted there (a bind being retried)."""
        totals = self._totals.get(node, {})
        held = self._entries.get(excluding) if excluding is not None else None
        if held is None or held[0] != node:
            return totals
        return {name: n - held[1].get(name, 0) for name, n in totals.items()}

    def _set(self, key: tuple[str, str], entry: tuple[str, dict[str, int], bool]) -> None:
        self.drop(key)
        self._entries[key] = entry
        self._count(entry[0], entry[1], 1)

    def _count(self, node: str, units: Mapping[str, int], sign: int) -> None:
        totals = self._totals.setdefault(node, {})
        for name, n in units.items():
            totals[name] = totals.get(name, 0) + sign * n
        if sign < 0 and not any(totals.values()):
            self._totals.pop(node, None)
