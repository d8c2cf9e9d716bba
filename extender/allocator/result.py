"""Assembling one claim's AllocationResult: device results, config, node selector.

Upstream: the end of Allocate, once allocateOne has succeeded (structured/internal/*/allocator_*.go
in k8s.io/dynamic-resource-allocation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from extender.allocator.outcome import AllocationError
from extender.allocator.pools import Candidate
from extender.allocator.requests import RequestData
from extender.model import (
    AllocationResult,
    ConfigEntry,
    DeviceID,
    DeviceResult,
    Node,
    NodeSelector,
    Requirement,
    ResourceClaim,
    SelectorTerm,
)
from extender.model.features import Features
from extender.model.quantity import Quantity


class Takes(NamedTuple):
    """What an allocation takes from others, in the form verdicts keep and prioritize reads.

    A tuple: one is made for each node of a cold lap, and a dataclass costs twice as much."""

    devices: frozenset[DeviceID]
    drivers: frozenset[str]
    taken: int  # devices taken away from others (admin access takes none)
    shares: bool  # a device allocated by share ID (fresh per allocation)

    @classmethod
    def of(cls, results: Sequence[AllocationResult]) -> Takes:
        devices: list[DeviceID] = []
        drivers: set[str] = set()
        taken = 0
        shares = False
        for result in results:
            for d in result.devices:
                devices.append(d.id)
                drivers.add(d.driver)
                taken += not d.admin_access
                shares = shares or bool(d.share_id)
        return cls(frozenset(devices), frozenset(drivers), taken, shares)


@dataclass(slots=True, eq=False)
class Pick:
    """One device chosen during the search."""

    data: RequestData
    candidate: Candidate
    share_id: str | None
    consumed: Mapping[str, Quantity] | None


def device_result(pick: Pick, binding: bool, node_operations: bool) -> DeviceResult:
    """``binding``: Features.binding; ``node_operations``: whether the allocator reports the
    node operations a slice skips (only the experimental variant knows them)."""
    device = pick.candidate.device
    data = pick.data
    # Positional: this runs for each node of a cold lap, and keywords cost a third more.
    return DeviceResult(
        data.result_name,
        device.driver,
        device.pool,
        device.name,
        data.admin,
        data.result_tolerations,
        device.binding_conditions if binding else (),
        device.binding_failure_conditions if binding else (),
        pick.share_id,
        pick.consumed or None,
        # try_pick only lets such a device through the experimental allocator with
        # DRAOptionalNodeOperations on; the others allocate it without saying so.
        pick.candidate.slice.skip_node_operations if node_operations else (),
    )


def build_config(claim: ResourceClaim, chosen: Sequence[RequestData]) -> tuple[ConfigEntry, ...]:
    """Class configs (deduplicated per class), then claim configs, then normalisation.

    ``chosen`` holds, per request of the claim in order, the request or the chosen subrequest.
    """
    entries: list[tuple[str, list[str], Mapping[str, object] | None]] = []
    class_entries: dict[str, list[int]] = {}
    for data in chosen:
        name = data.result_name
        indices = class_entries.get(data.device_class.name)
        if indices is None:
            indices = class_entries[data.device_class.name] = []
            for item in data.device_class.config:
                indices.append(len(entries))
                entries.append(("FromClass", [name], item.get("opaque")))
        else:
            for i in indices:
                entries[i][1].append(name)
    for config in claim.config:
        if not config.requests:
            entries.append(("FromClaim", [], config.opaque))
            continue
        for data in chosen:
            if data.parent in config.requests or (
                data.sub is not None and data.result_name in config.requests
            ):
                entries.append(("FromClaim", list(config.requests), config.opaque))
                break
    out = []
    for source, requests, opaque in entries:
        if requests and all(d.parent in requests or d.result_name in requests for d in chosen):
            requests = []
        out.append(ConfigEntry(source=source, requests=tuple(requests), opaque=opaque))
    return tuple(out)


def only_node(name: str) -> NodeSelector:
    """The selector of an allocation bound to one node: one field term on its name."""
    only = Requirement(key="metadata.name", operator="In", values=(name,))
    return NodeSelector(terms=(SelectorTerm(match_expressions=(), match_fields=(only,)),), problem=None)


def build_node_selector(
    claim: ResourceClaim, picks: Sequence[Pick], node: Node | None, here: NodeSelector | None
) -> NodeSelector | None:
    """``here`` is the node's own selector (one field term on its name), kept with its pools."""
    expressions: list[Requirement] = []
    fields: list[Requirement] = []
    for pick in picks:
        device, slice_ = pick.candidate.device, pick.candidate.slice
        if slice_.per_device_node_selection:
            name, selector = device.node_name, device.node_selector
        else:
            name, selector = slice_.node_name, slice_.node_selector
        if name or device.binds_to_node:
            if here is not None:
                return here
            return only_node(node.name if node is not None else name)
        if selector is None:
            continue  # allNodes: usable everywhere
        if len(selector.terms) > 1:
            raise AllocationError(
                f"create NodeSelector for claim {claim.name}: unsupported ResourceSlice.NodeSelector with "
                f"{len(selector.terms)} terms"
            )
        for term in selector.terms:
            for target_list, requirements in (
                (expressions, term.match_expressions),
                (fields, term.match_fields),
            ):
                for req in requirements:
                    if not any(req.same_as(have) for have in target_list):
                        target_list.append(req)
    if not expressions and not fields:
        return None
    return NodeSelector(
        terms=(SelectorTerm(match_expressions=tuple(expressions), match_fields=tuple(fields)),), problem=None
    )


def build_result(
    claim: ResourceClaim,
    picks: Sequence[Pick],
    config: tuple[ConfigEntry, ...],
    node: Node | None,
    features: Features,
    here: NodeSelector | None,
) -> AllocationResult:
    """``config`` is ``build_config`` of the claim and its chosen (sub)requests: the same for
    every node, so a result built for a node alike reuses it."""
    binding, node_operations = features.binding, features.variant == "experimental"
    devices = tuple([device_result(p, binding, node_operations) for p in picks])
    return AllocationResult(devices, config, build_node_selector(claim, picks, node, here))
