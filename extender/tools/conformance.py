"""Run allocation conformance cases: ``python -m extender.tools.conformance PATH... [--json]``.

Each case (format: tests/conformance/cases/FORMAT.md) is judged exactly as FORMAT.md says:
results entry by entry and in order, shareID present-or-absent only, quantities by value,
node selectors as sets, allocationTimestamp ignored; an `error` outcome accepts any
failure but "nofit", `unsatisfiable` needs a "nofit" failure.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from extender.allocator import AllocatedState, Allocator, Failure, SliceList
from extender.cel.environment import Environment
from extender.model import (
    AllocationResult,
    DeviceID,
    Features,
    Holdings,
    Node,
    ResourceClaim,
    ResourceSlice,
    kinds,
    parse_device_class,
    parse_node,
    parse_resource_claim,
)
from extender.model.features import release_of
from extender.model.quantity import Quantity
from extender.scheduling import node_resources
from extender.scheduling.node_resources import NodeResourcesOutcome
from extender.state import ClusterState


@dataclass(frozen=True, slots=True)
class Verdict:
    name: str
    passed: bool
    diff: str


def _device_id(text: str, extra: int = 0) -> tuple[DeviceID, list[str]]:
    """Split "driver/pool/device[/shareID]"; the pool name itself may contain slashes."""
    parts = text.split("/")
    if len(parts) < 3 + extra:
        raise ValueError(f"malformed device reference {text!r}")
    tail = parts[len(parts) - extra :] if extra else []
    core = parts[: len(parts) - extra] if extra else parts
    return (core[0], "/".join(core[1:-1]), core[-1]), tail


def build_state(case: Mapping[str, Any]) -> AllocatedState:
    """What the case's cluster already holds: its allocated devices, shares and capacity."""
    devices = [_device_id(text)[0] for text in case.get("allocatedDevices") or []]
    shares: list[tuple[DeviceID, str]] = []
    for text in case.get("allocatedSharedDevices") or []:
        dev_id, (share,) = _device_id(text, extra=1)
        shares.append((dev_id, share))
    # A case gives each device's consumed total, which counts here as one share of the device.
    capacity: list[tuple[tuple[DeviceID, str], Mapping[str, Quantity]]] = []
    for text, amounts in (case.get("allocatedCapacity") or {}).items():
        consumed = {name: Quantity.parse(str(value)) for name, value in (amounts or {}).items()}
        capacity.append(((_device_id(text)[0], ""), consumed))
    return AllocatedState.from_holdings([Holdings(tuple(devices), tuple(shares), tuple(capacity))])


# The release a case without ``kubernetesVersion`` is answered for. The given cases
# (tests/conformance/cases) hold the answers of the allocator of July 2025, which behaves as
# 1.34 to 1.36 do where 1.37 differs beyond the gates (Features.exact_rollback, docs/upstream.md).
CASE_RELEASE = "1.36"


def case_features(case: Mapping[str, Any], release: str | None = None) -> Features:
    """The case's gates, read by ``release``'s allocator, else by the release the case names
    (``kubernetesVersion``, "1.37" or "v1.37.2"), else by CASE_RELEASE; in the variant the
    case names (``allocatorVariant``), else the gates'. Raises ValueError."""
    if release is None:
        version = case.get("kubernetesVersion")
        release = CASE_RELEASE if version is None else release_of(str(version))
    features = Features.from_gate_names(case.get("features") or [], release)
    variant = case.get("allocatorVariant")
    return features if variant is None else features.with_variant(str(variant))


def watched_slices(case: Mapping[str, Any], features: Features) -> list[ResourceSlice]:
    """The case's slices, in order, as the cluster-state cache holds them once the watch has
    delivered them and the case's ``deviceTaintRules``: with the rules' taints on the devices
    they select where the gates say so (extender/state/store.py). Raises ValueError.

    A case without rules may hold two slices of one name (the given cases do, one per driver),
    which no cluster can: their slices are parsed as they are."""
    rules = case.get("deviceTaintRules") or []
    if not rules:
        return [kinds.RESOURCE_SLICE.parse(dict(obj)) for obj in case.get("resourceSlices") or []]
    state = ClusterState(features)
    for rule in rules:
        state.apply(kinds.DEVICE_TAINT_RULE.name, dict(rule))
    names = []
    for obj in case.get("resourceSlices") or []:
        state.apply(kinds.RESOURCE_SLICE.name, dict(obj))
        names.append(kinds.RESOURCE_SLICE.key(obj)[1])
    if len(set(names)) != len(names):
        raise ValueError("two resourceSlices share a name (a case with deviceTaintRules is a cluster)")
    return [state.slices.by_name[name] for name in names]


def run_case(case: Mapping[str, Any], cel: Environment, release: str | None = None) -> tuple[str, Any]:
    """("allocated", Allocated) | ("unsatisfiable", reason) | ("error", message);
    ``release`` overrides the case's (:func:`case_features`)."""
    try:
        features = case_features(case, release)
        node = parse_node(case["node"]) if case.get("node") else None
        classes = {c.name: c for c in map(parse_device_class, case.get("deviceClasses") or [])}
        slices = SliceList(watched_slices(case, features))
        claims = [parse_resource_claim(c) for c in case.get("claims") or []]
        state = build_state(case)
    except ValueError as exc:
        return "error", f"invalid input: {exc}"
    allocator = Allocator(features, state, classes, slices, cel)
    results = allocator.allocate(node, claims)
    if isinstance(results, Failure):
        if results.kind == "nofit":
            return "unsatisfiable", results.naming([c.key for c in claims]).reason
        return "error", results.reason
    api = [r.to_api() for r in results]
    if case.get("pod") is None or not features.node_allocatable_resources or node is None:
        return "allocated", Allocated(api)
    try:
        fit = node_resources_check(case, features, node, list(zip(claims, results, strict=True)))
    except ValueError as exc:
        return "error", f"invalid input: {exc}"
    if fit.reason:
        return ("error" if fit.error else "unsatisfiable"), fit.reason
    return "allocated", Allocated(api, [f.to_api() for f in fit.footprints])


@dataclass(frozen=True, slots=True)
class Allocated:
    """An allocated answer: one v1 AllocationResult per claim, and what the devices cost the node
    (v1 NodeAllocatableResourceClaimStatus entries, as kube-scheduler writes them into the pod)."""

    results: list[Any]
    node_statuses: list[Any] = field(default_factory=list)


def node_resources_check(
    case: Mapping[str, Any],
    features: Features,
    node: Node,
    allocations: list[tuple[ResourceClaim, AllocationResult]],
) -> NodeResourcesOutcome:
    """The case's ``pod`` with its claims allocated on ``node`` (DRANodeAllocatableResources):
    the cluster-state cache gets the node, the rules, the slices and the node's pods
    (``nodePods``) as the watch delivers them. Raises ValueError for malformed objects."""
    state = ClusterState(features)
    state.apply(kinds.NODE.name, dict(case["node"]))
    for rule in case.get("deviceTaintRules") or []:
        state.apply(kinds.DEVICE_TAINT_RULE.name, dict(rule))
    for obj in case.get("resourceSlices") or []:
        state.apply(kinds.RESOURCE_SLICE.name, dict(obj))
    for pod in case.get("nodePods") or []:
        state.apply(kinds.POD.name, dict(pod))
    return node_resources.check(state, kinds.POD.parse(dict(case["pod"])), node, allocations)


# -- normalisation for comparison ----------------------------------------------------------------


def _quantity(value: Any) -> Any:
    try:
        return Quantity.parse(str(value)).value
    except ValueError:
        return ("unparsable", value)


def _toleration(t: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in t.items() if v not in (None, "")}
    out.setdefault("operator", "Equal")
    return out


def _device_result(r: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "request": r.get("request"),
        "driver": r.get("driver"),
        "pool": r.get("pool"),
        "device": r.get("device"),
        "adminAccess": bool(r.get("adminAccess")),
        "tolerations": [_toleration(t) for t in r.get("tolerations") or []],
        "bindingConditions": list(r.get("bindingConditions") or []),
        "bindingFailureConditions": list(r.get("bindingFailureConditions") or []),
        "shareID": bool(r.get("shareID")),
        "consumedCapacity": {k: _quantity(v) for k, v in (r.get("consumedCapacity") or {}).items()},
        "skipNodeOperations": sorted(r.get("skipNodeOperations") or []),
    }


def _config(c: Mapping[str, Any]) -> dict[str, Any]:
    return {"source": c.get("source"), "requests": list(c.get("requests") or []), "opaque": c.get("opaque")}


def _requirements(reqs: Sequence[Mapping[str, Any]] | None) -> frozenset[Any]:
    return frozenset((r.get("key"), r.get("operator"), frozenset(r.get("values") or [])) for r in reqs or [])


def _node_selector(sel: Mapping[str, Any] | None) -> frozenset[Any] | None:
    if sel is None:
        return None
    return frozenset(
        (_requirements(t.get("matchExpressions")), _requirements(t.get("matchFields")))
        for t in sel.get("nodeSelectorTerms") or []
    )


def _node_status(s: Mapping[str, Any]) -> dict[str, Any]:
    overhead = {
        o.get("name"): (_quantity(o.get("perPod") or 0), _quantity(o.get("perContainer") or 0))
        for o in s.get("overhead") or []
    }
    return {
        "resourceClaimName": s.get("resourceClaimName"),
        "containers": list(s.get("containers") or []),
        "mapping": {m.get("name"): _quantity(m.get("quantity")) for m in s.get("mapping") or []},
        "overhead": overhead,
    }


def _normalise(result: Mapping[str, Any]) -> dict[str, Any]:
    devices = result.get("devices") or {}
    return {
        "results": [_device_result(r) for r in devices.get("results") or []],
        "config": [_config(c) for c in devices.get("config") or []],
        "nodeSelector": _node_selector(result.get("nodeSelector")),
    }


def judge(case: Mapping[str, Any], cel: Environment) -> Verdict:
    name = str(case.get("name", "<unnamed>"))
    outcome, detail = run_case(case, cel)
    problems = compare(case.get("expect") or {}, outcome, detail)
    return Verdict(name, not problems, "\n".join(problems))


def compare(expect: Mapping[str, Any], outcome: str, detail: Any) -> list[str]:
    """How an answer (``outcome`` and ``detail`` as :func:`run_case` returns them) departs from
    a case's ``expect``, judged as FORMAT.md says; empty when it passes."""
    want = expect.get("outcome")
    if outcome != want:
        hint = f" (expected error text: {expect.get('error')})" if want == "error" else ""
        shown = detail.results if isinstance(detail, Allocated) else detail
        return [f"expected outcome {want}{hint}, got {outcome}: {_short(shown)}"]
    if outcome != "allocated":
        return []
    expected = expect.get("results") or []
    if len(expected) != len(detail.results):
        return [f"expected {len(expected)} results, got {len(detail.results)}"]
    problems = []
    want_statuses = expect.get("nodeAllocatableResourceClaimStatuses") or []
    if [_node_status(s) for s in want_statuses] != [_node_status(s) for s in detail.node_statuses]:
        problems.append(
            f"nodeAllocatableResourceClaimStatuses:\n  expected: {_short(want_statuses)}\n"
            f"  got:      {_short(detail.node_statuses)}"
        )
    for i, (exp, got) in enumerate(zip(expected, detail.results, strict=True)):
        n_exp, n_got = _normalise(exp), _normalise(got)
        for key in ("results", "config", "nodeSelector"):
            if n_exp[key] != n_got[key]:
                expected_text, got_text = _short(_part(exp, key)), _short(_part(got, key))
                problems.append(f"claim #{i} {key}:\n  expected: {expected_text}\n  got:      {got_text}")
    return problems


def _part(result: Mapping[str, Any], key: str) -> Any:
    if key == "nodeSelector":
        return result.get("nodeSelector")
    return (result.get("devices") or {}).get(key)


def _short(value: Any, limit: int = 600) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= limit else text[:limit] + " ..."


def case_files(paths: Sequence[str]) -> Iterator[Path]:
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*.yaml") if p.is_file())
        elif path.is_file():
            yield path
        else:
            raise FileNotFoundError(f"no such case file or directory: {raw}")


def load_case(path: Path) -> Mapping[str, Any]:
    case = yaml.safe_load(path.read_text())
    if not isinstance(case, Mapping) or "expect" not in case:
        raise ValueError(f"{path}: not a conformance case (mapping with `expect`)")
    return case


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m extender.tools.conformance", description=__doc__.splitlines()[0]
    )
    parser.add_argument("paths", nargs="+", help="case files or directories")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    args = parser.parse_args(argv)
    verdicts = []
    try:
        files = list(case_files(args.paths))
    except FileNotFoundError as exc:
        parser.error(str(exc))
    cel = Environment.create()
    for path in files:
        try:
            verdicts.append(judge(load_case(path), cel))
        except (ValueError, yaml.YAMLError) as exc:
            verdicts.append(Verdict(path.stem, False, f"cannot load case: {exc}"))
    failed = [v for v in verdicts if not v.passed]
    if args.json:
        doc = {
            "passed": len(verdicts) - len(failed),
            "failed": len(failed),
            "cases": [{"name": v.name, "passed": v.passed, "diff": v.diff} for v in verdicts],
        }
        print(json.dumps(doc, indent=2))
    else:
        for v in verdicts:
            print(f"{'PASS' if v.passed else 'FAIL'} {v.name}")
            if v.diff:
                print("  " + v.diff.replace("\n", "\n  "))
        print(f"{len(verdicts) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
