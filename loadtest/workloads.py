"""Deterministic workload generators.

Each generator returns the full cluster (nodes, class, slices, claims, pods) plus the number of
pods that can possibly be bound, computed from the generated devices, so that a run can be
judged as "bound vs expected" without trusting the server under test.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import yaml

from extender.model.kinds import KINDS
from loadtest import k8s
from loadtest.k8s import Obj

# The slice limits of dra-api.md §4/§8: a slice with counters holds at most 64 devices and 8 sets.
MAX_DEVICES_PER_COUNTER_SLICE = 64
MAX_COUNTER_SETS_PER_SLICE = 8
PODS_PER_SHARED_CLAIM = 5
ZONES = ("zone-a", "zone-b", "zone-c")


@dataclass(frozen=True)
class WorkloadParams:
    nodes: int
    devices_per_node: int = 8
    pods: int | None = None  # None: 4 pods per node
    seed: int = 1

    def pod_count(self) -> int:
        return self.nodes * 4 if self.pods is None else self.pods


@dataclass
class Workload:
    name: str
    params: WorkloadParams
    objects: list[Obj]
    pods: list[Obj]  # pending when the run starts, in queue order (also part of `objects`)
    capacity: int  # pods the cluster can hold at the same time
    expected_bound: int
    churn_pods: list[Obj] = field(default_factory=list)  # steady: created through /local/apply

    @property
    def node_names(self) -> list[str]:
        return [o["metadata"]["name"] for o in self.objects if o["kind"] == "Node"]


class _Ids:
    """Seeded names and UIDs so that two runs with one seed produce identical objects."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))


def _validate(params: WorkloadParams, min_devices: int = 1) -> None:
    if params.nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {params.nodes}")
    if params.devices_per_node < min_devices:
        raise ValueError(f"devices per node must be >= {min_devices}, got {params.devices_per_node}")
    if params.pod_count() < 0:
        raise ValueError(f"pods must be >= 0, got {params.pods}")


def _nodes(params: WorkloadParams, rng: random.Random) -> list[Obj]:
    return [k8s.node(f"node-{i:05d}", rng.choice(ZONES)) for i in range(params.nodes)]


def _gpu_attributes(index: int, model: str, pcie_root: str) -> dict[str, Obj]:
    return {"index": {"int": index}, "model": {"string": model}, k8s.PCIE_ROOT: {"string": pcie_root}}


def _mixed_memory_cluster(params: WorkloadParams, rng: random.Random) -> tuple[list[Obj], list[Obj], int]:
    """Nodes with one slice each of GPUs of 80, 40 or 24 GiB; returns (nodes, slices, GPUs >= 40Gi)."""
    nodes = _nodes(params, rng)
    slices = []
    large_enough = 0
    for n in nodes:
        name = n["metadata"]["name"]
        devices = []
        for i in range(params.devices_per_node):
            memory = rng.choices(("80Gi", "40Gi", "24Gi"), weights=(4, 3, 1))[0]
            large_enough += memory != "24Gi"
            devices.append(k8s.device(f"gpu-{i}", memory, _gpu_attributes(i, "A100", f"pci{i // 4:04x}:00")))
        slices.append(k8s.resource_slice(f"{name}-gpus", name, 1, devices=devices))
    return nodes, slices, large_enough


TEMPLATE_SELECTOR = k8s.memory_at_least("40Gi")


def _template_pods(prefix: str, count: int, template: str, ids: _Ids) -> list[Obj]:
    return [k8s.pod(f"{prefix}-{i:05d}", ids.uid(), template=template) for i in range(count)]


def template(params: WorkloadParams) -> Workload:
    """One GPU of >= 40Gi per pod, claimed through a ResourceClaimTemplate."""
    _validate(params)
    rng = random.Random(params.seed)
    ids = _Ids(rng)
    nodes, slices, capacity = _mixed_memory_cluster(params, rng)
    tmpl = k8s.claim_template("gpu-40gi", k8s.claim_spec([k8s.exact_request("gpu", TEMPLATE_SELECTOR)]))
    pods = _template_pods("pod", params.pod_count(), "gpu-40gi", ids)
    objects = [k8s.device_class(), *nodes, *slices, tmpl, *pods]
    return Workload("template", params, objects, pods, capacity, min(len(pods), capacity))


def shared(params: WorkloadParams) -> Workload:
    """ResourceClaims each shared by five pods; all five must land where the claim is allocated."""
    _validate(params)
    rng = random.Random(params.seed)
    ids = _Ids(rng)
    nodes, slices, gpus = _mixed_memory_cluster(params, rng)
    count = params.pod_count()
    claims = [
        k8s.claim(f"shared-{c:05d}", k8s.claim_spec([k8s.exact_request("gpu", TEMPLATE_SELECTOR)]))
        for c in range(math.ceil(count / PODS_PER_SHARED_CLAIM))
    ]
    pods = [
        k8s.pod(f"pod-{i:05d}", ids.uid(), claim_name=claims[i // PODS_PER_SHARED_CLAIM]["metadata"]["name"])
        for i in range(count)
    ]
    # Only the first `gpus` claims can get a device; every pod of those claims can then run.
    expected = min(count, gpus * PODS_PER_SHARED_CLAIM)
    objects = [k8s.device_class(), *nodes, *slices, *claims, *pods]
    return Workload("shared", params, objects, pods, gpus * PODS_PER_SHARED_CLAIM, expected)


def constraint(params: WorkloadParams) -> Workload:
    """Two GPUs per claim that must share a PCIe root.

    Devices alternate between roots in slice order, so the first two devices the allocator
    tries never match and the search has to backtrack.
    """
    _validate(params, min_devices=2)
    rng = random.Random(params.seed)
    ids = _Ids(rng)
    nodes = _nodes(params, rng)
    roots = max(1, params.devices_per_node // 4)
    per_root = [0] * roots
    for i in range(params.devices_per_node):
        per_root[i % roots] += 1
    per_node = sum(size // 2 for size in per_root)
    slices = []
    for n in nodes:
        name = n["metadata"]["name"]
        devices = [
            k8s.device(f"gpu-{i}", "80Gi", _gpu_attributes(i, "H100", f"pci{i % roots:04x}:00"))
            for i in range(params.devices_per_node)
        ]
        slices.append(k8s.resource_slice(f"{name}-gpus", name, 1, devices=devices))
    spec = k8s.claim_spec(
        [k8s.exact_request("gpus", count=2)],
        constraints=[{"requests": ["gpus"], "matchAttribute": k8s.PCIE_ROOT}],
    )
    pods = _template_pods("pod", params.pod_count(), "two-gpus-same-root", ids)
    objects = [k8s.device_class(), *nodes, *slices, k8s.claim_template("two-gpus-same-root", spec), *pods]
    capacity = per_node * params.nodes
    return Workload("constraint", params, objects, pods, capacity, min(len(pods), capacity))


# A physical GPU of 80Gi offered whole, as two halves and as four quarters, all drawing on one
# counter set: picking any partition blocks the overlapping ones.
PARTITIONS = (("", "80Gi", 1), ("-half", "40Gi", 2), ("-quarter", "20Gi", 4))


def _chunks(items: list[Obj], size: int) -> list[list[Obj]]:
    return [items[i : i + size] for i in range(0, len(items), size)] or [[]]


def partitionable(params: WorkloadParams) -> Workload:
    """Pods ask for exactly a half GPU; the allocator must honour the shared counters."""
    _validate(params)
    rng = random.Random(params.seed)
    ids = _Ids(rng)
    nodes = _nodes(params, rng)
    slices = []
    for n in nodes:
        name = n["metadata"]["name"]
        devices = []
        counter_sets = []
        for g in range(params.devices_per_node):
            counter_set = f"gpu-{g}-counters"
            counter_sets.append({"name": counter_set, "counters": {"memory": {"value": "80Gi"}}})
            for suffix, memory, parts in PARTITIONS:
                for p in range(parts):
                    dev_name = f"gpu-{g}{suffix}" + (f"-{p}" if parts > 1 else "")
                    consumes = [{"counterSet": counter_set, "counters": {"memory": {"value": memory}}}]
                    attrs = _gpu_attributes(g, "H100", f"pci{g // 4:04x}:00")
                    devices.append(k8s.device(dev_name, memory, attrs, consumes))
        device_chunks = _chunks(devices, MAX_DEVICES_PER_COUNTER_SLICE)
        counter_chunks = _chunks(counter_sets, MAX_COUNTER_SETS_PER_SLICE)
        total = len(device_chunks) + len(counter_chunks)
        for i, chunk in enumerate(device_chunks):
            slices.append(k8s.resource_slice(f"{name}-gpus-{i}", name, total, devices=chunk))
        for i, chunk in enumerate(counter_chunks):
            slices.append(k8s.resource_slice(f"{name}-counters-{i}", name, total, shared_counters=chunk))
    spec = k8s.claim_spec([k8s.exact_request("gpu", k8s.memory_exactly("40Gi"))])
    pods = _template_pods("pod", params.pod_count(), "half-gpu", ids)
    objects = [k8s.device_class(), *nodes, *slices, k8s.claim_template("half-gpu", spec), *pods]
    capacity = 2 * params.devices_per_node * params.nodes
    return Workload("partitionable", params, objects, pods, capacity, min(len(pods), capacity))


def prioritized(params: WorkloadParams) -> Workload:
    """firstAvailable: one 80Gi GPU, else two 40Gi GPUs."""
    _validate(params)
    rng = random.Random(params.seed)
    ids = _Ids(rng)
    nodes = _nodes(params, rng)
    slices = []
    capacity = 0
    for n in nodes:
        name = n["metadata"]["name"]
        memories = [rng.choice(("80Gi", "40Gi")) for _ in range(params.devices_per_node)]
        capacity += memories.count("80Gi") + memories.count("40Gi") // 2
        devices = [
            k8s.device(f"gpu-{i}", m, _gpu_attributes(i, "A100", f"pci{i // 4:04x}:00"))
            for i, m in enumerate(memories)
        ]
        slices.append(k8s.resource_slice(f"{name}-gpus", name, 1, devices=devices))
    request = k8s.first_available_request(
        "gpu", [("large", k8s.memory_at_least("80Gi"), 1), ("two-small", k8s.memory_exactly("40Gi"), 2)]
    )
    pods = _template_pods("pod", params.pod_count(), "large-or-two-small", ids)
    tmpl = k8s.claim_template("large-or-two-small", k8s.claim_spec([request]))
    objects = [k8s.device_class(), *nodes, *slices, tmpl, *pods]
    return Workload("prioritized", params, objects, pods, capacity, min(len(pods), capacity))


def steady(params: WorkloadParams) -> Workload:
    """The template cluster half full, then `pods` more created while old ones are deleted.

    The initial half is in the state directory and scheduled first (warm-up); the churn pods are
    created through /local/apply during the run, and each one bound lets the oldest live pod go.
    """
    _validate(params)
    rng = random.Random(params.seed)
    ids = _Ids(rng)
    nodes, slices, capacity = _mixed_memory_cluster(params, rng)
    tmpl = k8s.claim_template("gpu-40gi", k8s.claim_spec([k8s.exact_request("gpu", TEMPLATE_SELECTOR)]))
    initial = _template_pods("pod-initial", capacity // 2, "gpu-40gi", ids)
    churn = _template_pods("pod-churn", params.pod_count(), "gpu-40gi", ids)
    objects = [k8s.device_class(), *nodes, *slices, tmpl, *initial]
    return Workload("steady", params, objects, initial, capacity, len(initial) + len(churn), churn)


GENERATORS: dict[str, Callable[[WorkloadParams], Workload]] = {
    "template": template,
    "shared": shared,
    "constraint": constraint,
    "partitionable": partitionable,
    "prioritized": prioritized,
    "steady": steady,
}


def generate(name: str, params: WorkloadParams) -> Workload:
    try:
        generator = GENERATORS[name]
    except KeyError:
        raise ValueError(f"unknown workload {name!r}; known: {', '.join(GENERATORS)}") from None
    return generator(params)


# File per kind keeps the directory readable; numbered in the kind table's load order.
_FILE_FOR_KIND = {kind.name: f"{i}0-{kind.plural}" for i, kind in enumerate(KINDS)}
STATE_FORMATS = ("yaml", "json")


def write_state(workload: Workload, directory: Path, fmt: str = "yaml") -> list[Path]:
    """Write the workload for `dra-extender serve --state`: one file per kind, as multi-document
    YAML or as JSON Lines (one object per line: loads several times faster, in less memory;
    docs/performance.md)."""
    if fmt not in STATE_FORMATS:
        raise ValueError(f"unknown state format {fmt!r}; choose one of {', '.join(STATE_FORMATS)}")
    directory.mkdir(parents=True, exist_ok=True)
    # The server loads every state file of the directory: a previous workload's files (another
    # size, or the other format) would be loaded beside this one's.
    for stem in set(_FILE_FOR_KIND.values()):
        for old in STATE_FORMATS:
            (directory / f"{stem}.{old}").unlink(missing_ok=True)
    by_file: dict[str, list[Obj]] = {}
    for obj in workload.objects:
        by_file.setdefault(f"{_FILE_FOR_KIND[obj['kind']]}.{fmt}", []).append(obj)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    written = []
    for filename, objs in sorted(by_file.items()):
        path = directory / filename
        if fmt == "json":
            path.write_bytes(b"".join(orjson.dumps(obj) + b"\n" for obj in objs))
        else:
            with path.open("w") as f:
                yaml.dump_all(objs, f, Dumper=dumper, sort_keys=False, width=4096)
        written.append(path)
    return written
