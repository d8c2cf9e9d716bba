"""End-of-run safety checks over the claims the server reports (/debug/claims)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
DeviceId = tuple[str, str, str]


@dataclass(frozen=True)
class DoubleAllocation:
    device: DeviceId
    claims: tuple[str, ...]

    def __str__(self) -> str:
        return f"{'/'.join(self.device)} allocated to {', '.join(self.claims)}"


def _claim_key(claim: Obj) -> str:
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _results(claim: Obj) -> list[Obj]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return (allocation.get("devices") or {}).get("results") or []


def find_double_allocations(claims: Iterable[Obj]) -> list[DoubleAllocation]:
    """Devices held by more than one claim.

    Admin-access results and shares of multi-allocatable devices (results with a shareID) may
    legitimately overlap, so they are left out; anything else on one device twice is a bug.
    """
    holders: dict[DeviceId, list[str]] = {}
    for claim in claims:
        key = _claim_key(claim)
        for result in _results(claim):
            if result.get("adminAccess") or result.get("shareID"):
                continue
            device = (result["driver"], result["pool"], result["device"])
            holders.setdefault(device, []).append(key)
    return [DoubleAllocation(d, tuple(c)) for d, c in sorted(holders.items()) if len(c) > 1]


def _selected_nodes(claim: Obj) -> set[str] | None:
    """Node names a claim's allocation is pinned to, or None when it is not pinned by name."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    terms = (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
    names: set[str] = set()
    for term in terms:
        for field_req in term.get("matchFields") or []:
            if field_req.get("key") == "metadata.name" and field_req.get("operator") == "In":
                names.update(field_req.get("values") or [])
    return names or None


def find_misplaced_pods(claims: Iterable[Obj], pod_nodes: Mapping[tuple[str, str], str]) -> list[str]:
    """Bound pods whose node is not one their allocated claim can be used on.

    `pod_nodes` maps (namespace, name) of bound pods to their node; pods that reserve a claim
    but are unknown there (deleted, or bound by someone else) are not judged.
    """
    problems = []
    for claim in claims:
        nodes = _selected_nodes(claim)
        if nodes is None:
            continue
        namespace = (claim.get("metadata") or {}).get("namespace", "")
        for consumer in (claim.get("status") or {}).get("reservedFor") or []:
            if consumer.get("resource") != "pods":
                continue
            node = pod_nodes.get((namespace, consumer.get("name", "")))
            if node is not None and node not in nodes:
                problems.append(
                    f"pod {namespace}/{consumer['name']} bound to {node} but claim {_claim_key(claim)} "
                    f"is usable only on {sorted(nodes)}"
                )
    return problems


def find_unreserved_pods(claims: Iterable[Obj], bound: Iterable[tuple[str, str]]) -> list[str]:
    """Bound pods that no allocated claim lists in reservedFor (the kubelet would refuse them)."""
    reserved = set()
    for claim in claims:
        if not _results(claim) and not (claim.get("status") or {}).get("allocation"):
            continue
        namespace = (claim.get("metadata") or {}).get("namespace", "")
        for consumer in (claim.get("status") or {}).get("reservedFor") or []:
            if consumer.get("resource") == "pods":
                reserved.add((namespace, consumer.get("name", "")))
    return [f"{ns}/{name}" for ns, name in sorted(set(bound) - reserved)]
