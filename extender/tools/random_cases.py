"""Seeded random cases for differential testing against the released upstream code.

:func:`allocation_case` builds one conformance case (tests/conformance/cases/FORMAT.md, without
its ``expect``): a node, classes, slices and claims over the DRA features and 1.37 gates, each
gate on or off at random (partitionable devices and counter sets, consumable capacity with
request policies, binding conditions, taints and tolerations, prioritized lists, admin access,
allocation mode All, matchAttribute and distinctAttribute constraints, list-type attributes,
compatibility groups, slices that skip node operations, node-allocatable resource mappings,
incomplete pools, devices already in use, and errors: selectors that fail at runtime or do not
compile, derived attributes, gated fields with their gate off). The gates that do not change
the allocator (NEUTRAL_GATES) are switched on and off too.

:func:`cel_case` builds one CEL parity case (tests/cel/cases.yaml, without its ``expect``): a
device and a selector drawn from Kubernetes' CEL environment, reaching its edges: equality of
library values with other types, optional selection and indexing on maps, lists and scalars,
strings v2 formatting, one- and two-variable comprehensions followed by binds, map literals and
constant indexes, the semver/quantity/ip/cidr libraries, the lists, sets and strings
extensions, backtick-quoted fields and JSON literals.

Case ``index`` of ``seed`` depends on nothing else, so any case can be made again alone.
"""

from __future__ import annotations

import random
from typing import Any

from extender.model.features import VARIANTS, Features

GATES = (
    "DRAAdminAccess",
    "DRAPrioritizedList",
    "DRAPartitionableDevices",
    "DRADeviceTaints",
    "DRAConsumableCapacity",
    "DRADeviceBindingConditions",
    "DRAResourceClaimDeviceStatus",
    "DRAListTypeAttributes",
    "DRAFractionalCapacityRange",
    "DRAOptionalNodeOperations",
    "DRADeviceCompatibilityGroups",
    "DRADerivedAttributes",
)
# 1.37 gates that change what kube-scheduler gives the allocator (DeviceTaintRules: the taints
# of the case's rules, which the oracle applies with the released tracker; extended resources,
# workload claims, node-allocatable resources, the filter timeout) or nothing the scheduler
# decides, not the allocator itself: on or off, allocation must not change but through that.
NEUTRAL_GATES = (
    "DRADeviceTaintRules",
    "DRAExtendedResource",
    "DRAWorkloadResourceClaims",
    "DRANodeAllocatableResources",
    "DRASchedulerFilterTimeout",
    "DRAPartitionableDevicesType",
)
DRIVERS = ("driver-a", "driver-b")
MODELS = ("a100", "h100", "t4")
API = "resource.k8s.io/v1"


def rng_for(seed: int, index: int) -> random.Random:
    return random.Random(f"{seed}/{index}")


# -- devices -------------------------------------------------------------------------------------


def _attributes(r: random.Random, driver: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "model": {"string": r.choice(MODELS)},
        "numa": {"int": r.randint(0, 1)},
    }
    if r.random() < 0.5:
        attrs["driverVersion"] = {"version": f"1.{r.randint(0, 3)}.{r.randint(0, 2)}"}
    if r.random() < 0.4:
        attrs["fast"] = {"bool": r.random() < 0.5}
    if r.random() < 0.3:
        attrs["pcieRoot"] = {"string": f"pci-{r.randint(0, 1)}"}
    if r.random() < 0.3:
        attrs["links"] = {"strings": r.sample(["l0", "l1", "l2", "l3"], r.randint(1, 3))}
    if r.random() < 0.2:
        attrs["ids"] = {"ints": r.sample(range(8), r.randint(1, 3))}
    if r.random() < 0.2:
        attrs["topology.example.com/rack"] = {"string": f"rack-{r.randint(0, 1)}"}
    return attrs


def _capacity(r: random.Random, consumable: bool) -> dict[str, Any]:
    cap: dict[str, Any] = {"memory": {"value": r.choice(["1Gi", "2Gi", "4Gi", "8Gi"])}}
    if r.random() < 0.3:
        cap["cores"] = {"value": str(r.choice([1, 2, 4]))}
    if consumable and r.random() < 0.5:
        policy: dict[str, Any] = {"default": r.choice(["512Mi", "1Gi"])}
        choice = r.random()
        if choice < 0.35:
            policy["validRange"] = {"min": "512Mi", "step": r.choice(["512Mi", "1Gi"])}
            if r.random() < 0.4:
                policy["validRange"]["max"] = "4Gi"
        elif choice < 0.6:
            policy["validValues"] = sorted({policy["default"], r.choice(["1Gi", "2Gi"])}, key=_mebibytes)
        cap["memory"]["requestPolicy"] = policy
    return cap


def _mebibytes(text: str) -> int:
    return int(text[:-2]) * (1024 if text.endswith("Gi") else 1)


def _device(r: random.Random, name: str, driver: str, gates: set[str]) -> dict[str, Any]:
    device: dict[str, Any] = {"name": name, "attributes": _attributes(r, driver)}
    consumable = r.random() < 0.35
    if r.random() < 0.8:
        device["capacity"] = _capacity(r, consumable)
    if consumable:
        device["allowMultipleAllocations"] = True
    if r.random() < 0.1:
        device["taints"] = [
            {
                "key": "example.com/" + r.choice(["unhealthy", "maintenance"]),
                "value": r.choice(["yes", "thermal"]),
                "effect": r.choice(["NoSchedule", "NoExecute"]),
            }
        ]
    if r.random() < 0.1:
        mapping: dict[str, Any] = {"capacityKey": "cores"} if "cores" in device.get("capacity", {}) else {}
        device["nodeAllocatableResources"] = {
            r.choice(["cpu", "memory"]): {"mapping": mapping} if mapping else {"overhead": {"perPod": "100m"}}
        }
    if r.random() < 0.08:
        device["bindingConditions"] = ["ready"]
        device["bindingFailureConditions"] = ["failed"]
        if r.random() < 0.5:
            device["bindsToNode"] = True
    return device


def _slice(
    name: str, driver: str, pool: str, count: int, generation: int = 1, **spec: Any
) -> dict[str, Any]:
    body = {"driver": driver, "pool": {"name": pool, "generation": generation, "resourceSliceCount": count}}
    body.update(spec)
    return {"kind": "ResourceSlice", "apiVersion": API, "metadata": {"name": name}, "spec": body}


def _placement(r: random.Random) -> dict[str, Any]:
    roll = r.random()
    if roll < 0.75:
        return {"nodeName": "node-1"}
    if roll < 0.85:
        return {"allNodes": True}
    if roll < 0.93:
        return {"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "region", "operator": "In", "values": [r.choice(["region-1", "region-2"])]}
        ]}]}}
    return {"nodeName": "node-2"}


def _plain_pool(
    r: random.Random, driver: str, pool: str, gates: set[str], serial: list[int]
) -> list[dict[str, Any]]:
    n_slices = 1 if r.random() < 0.75 else 2
    declared = n_slices + (1 if r.random() < 0.08 else 0)  # incomplete now and then
    placement = _placement(r)
    slices = []
    for s in range(n_slices):
        devices = []
        for _ in range(r.randint(2, 5)):
            serial[0] += 1
            devices.append(_device(r, f"dev-{serial[0]}", driver, gates))
        extra: dict[str, Any] = dict(placement)
        if r.random() < 0.1:
            extra["skipNodeOperations"] = ["*"]
        slices.append(_slice(f"{pool}-s{s}", driver, pool, declared, devices=devices, **extra))
    return slices


def _gpu_attributes(g: int, profile: str) -> dict[str, Any]:
    return {"model": {"string": "a100"}, "numa": {"int": g % 2}, "profile": {"string": profile}}


def _partitioned_pool(r: random.Random, driver: str, pool: str, serial: list[int]) -> list[dict[str, Any]]:
    """A counter slice and a device slice: whole GPUs and their halves sharing counters."""
    groups = r.random() < 0.3
    counter_sets = []
    devices = []
    for g in range(r.randint(1, 2)):
        cs = f"gpu-{g}-counters"
        counter_sets.append({"name": cs, "counters": {"mem": {"value": "8"}, "slots": {"value": "2"}}})
        whole = {"counterSet": cs, "counters": {"mem": {"value": "8"}, "slots": {"value": "2"}}}
        if groups and r.random() < 0.5:
            whole["compatibilityGroups"] = ["whole"]
        serial[0] += 1
        devices.append({
            "name": f"gpu-{serial[0]}",
            "attributes": _gpu_attributes(g, "full"),
            "capacity": {"memory": {"value": "8Gi"}},
            "consumesCounters": [whole],
        })
        for h in range(2):
            half = {"counterSet": cs, "counters": {"mem": {"value": "4"}, "slots": {"value": "1"}}}
            if groups and r.random() < 0.6:
                half["compatibilityGroups"] = r.sample(["mig", "half", "whole"], r.randint(1, 2))
            devices.append({
                "name": f"gpu-{serial[0]}-h{h}",
                "attributes": _gpu_attributes(g, "half"),
                "capacity": {"memory": {"value": "4Gi"}},
                "consumesCounters": [half],
            })
    per_device = r.random() < 0.2
    device_spec: dict[str, Any]
    if per_device:
        for d in devices:
            d["nodeName"] = "node-1"
        device_spec = {"perDeviceNodeSelection": True}
    else:
        device_spec = {"nodeName": "node-1"}
    return [
        _slice(f"{pool}-counters", driver, pool, 2, sharedCounters=counter_sets),
        _slice(f"{pool}-devices", driver, pool, 2, devices=devices, **device_spec),
    ]


# -- claims --------------------------------------------------------------------------------------

SELECTORS = (
    'device.attributes["{d}"].model == "a100"',
    'device.attributes["{d}"].numa == 0',
    'device.capacity["{d}"].memory.compareTo(quantity("2Gi")) >= 0',
    '"fast" in device.attributes["{d}"] && device.attributes["{d}"].fast',
    'device.attributes["{d}"].?driverVersion.orValue(semver("0.0.0")).isGreaterThan(semver("1.0.0"))',
    'device.attributes["{d}"].model.startsWith("h") || device.attributes["{d}"].numa == 1',
    "device.allowMultipleAllocations",
    'has(device.attributes["{d}"].links) && device.attributes["{d}"].links.includes("l1")',
    'device.attributes["{d}"].profile == "half"',  # runtime error on devices without a profile
    'device.attributes["{d}"].fast',  # runtime error where fast is missing
    "device.nosuchfield == 1",  # compile error
)


def _request(r: random.Random, name: str, driver: str, gates: set[str]) -> dict[str, Any]:
    exact: dict[str, Any] = {"deviceClassName": r.choice(["class-a", "class-b", "class-any", "class-any"])}
    if r.random() < 0.1:
        exact["allocationMode"] = "All"
    else:
        exact["allocationMode"] = "ExactCount"
        exact["count"] = r.choice([1, 1, 1, 2, 3])
    if r.random() < 0.3:
        # The last three fail at runtime or do not compile: rarer.
        choices = SELECTORS if r.random() < 0.25 else SELECTORS[:-3]
        exact["selectors"] = [{"cel": {"expression": r.choice(choices).format(d=driver)}}]
    # With the gate off the released stable allocator ignores capacity requests, where this
    # project refuses them as the answers it is held to do (tests/conformance/cases,
    # random-gates-0007; docs/upstream.md): that known difference is not asked.
    asks_capacity = _on(r, gates, "DRAConsumableCapacity", 0.3)
    if asks_capacity and ("DRAConsumableCapacity" in gates or _variant(gates) != "stable"):
        exact["capacity"] = {"requests": {"memory": r.choice(["512Mi", "1Gi", "1536Mi", "3Gi"])}}
    if _on(r, gates, "DRAAdminAccess", 0.1):
        exact["adminAccess"] = True
    # Gate off: now and then (refused), no more often than before the gate was implemented, so
    # that other features' cases are not all refused.
    if r.random() < (0.5 if "DRADerivedAttributes" in gates else 0.02):
        exact["derivedAttributes"] = _derived_attributes(r, driver)
    if _on(r, gates, "DRADeviceTaints", 0.3):
        exact["tolerations"] = [r.choice([
            {"key": "example.com/unhealthy", "operator": "Exists"},
            {"key": "example.com/maintenance", "value": "yes", "effect": "NoSchedule"},
            {"operator": "Exists", "effect": "NoExecute"},
        ])]
    if _on(r, gates, "DRAPrioritizedList", 0.25):
        subs = []
        for i in range(r.randint(2, 3)):
            sub = {k: v for k, v in exact.items() if k != "adminAccess"}
            sub["name"] = f"sub-{i}"
            sub["deviceClassName"] = r.choice(["class-a", "class-b", "class-any"])
            if sub.get("allocationMode") == "ExactCount":
                sub["count"] = r.choice([1, 2, 3])
            subs.append(sub)
        return {"name": name, "firstAvailable": subs}
    return {"name": name, "exactly": exact}


# Derived attributes: names that shadow a device attribute or stand alone, and expressions
# whose results match or differ, are lists (to compare as sets with DRAListTypeAttributes),
# have a type no attribute has, or fail on some devices.
DERIVED_NAMES = ("derived/group", "derived/numa", "{d}/numa", "{d}/model")
DERIVED_EXPRESSIONS = (
    'device.attributes["{d}"].numa',
    'device.attributes["{d}"].numa % 2 == 0 ? "even" : "odd"',
    'device.attributes["{d}"].numa == 0',
    'device.attributes["{d}"].model',
    'device.attributes["{d}"].model.startsWith("a") ? 1 : 2',
    '"fast" in device.attributes["{d}"] && device.attributes["{d}"].fast',
    'device.attributes["{d}"].?driverVersion.orValue(semver("1.0.0"))',
    'semver("1.0.0+build")',
    'device.attributes["{d}"].?links.orValue(["l0"])',
    'device.attributes["{d}"].?ids.orValue([device.attributes["{d}"].numa])',
    '[string(device.attributes["{d}"].numa), device.attributes["{d}"].model]',
    "[]",
    '"same"',
    'device.attributes["{d}"].pcieRoot',  # a runtime error where pcieRoot is missing
    "dyn(1u)",  # a runtime error: no attribute type
    'device.capacity["{d}"].memory',  # does not compile: a quantity
    '[device.attributes["{d}"].numa, 7]',  # does not compile: a mixed list
)


def _derived_attributes(r: random.Random, driver: str) -> list[dict[str, str]]:
    names = r.sample(DERIVED_NAMES, r.choice([1, 1, 2]))
    # The last four fail on some device or do not compile: rarer.
    choices = DERIVED_EXPRESSIONS if r.random() < 0.25 else DERIVED_EXPRESSIONS[:-4]
    return [
        {"name": name.format(d=driver), "expression": r.choice(choices).format(d=driver)} for name in names
    ]


def _exact_requests(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [q.get("exactly", sub) for q in requests for sub in q.get("firstAvailable", [q])]


def _derived_names(requests: list[dict[str, Any]]) -> list[str]:
    """The names of the derived attributes of the requests and their subrequests."""
    return sorted({a["name"] for e in _exact_requests(requests) for a in e.get("derivedAttributes", [])})


def _share_derived(requests: list[dict[str, Any]]) -> None:
    """The first derived attributes given to every (sub)request: a constraint over several
    requests then compares derived values only (where one request derives a name and another
    does not, the other's devices are compared by their own attribute of that name)."""
    exact = _exact_requests(requests)
    first = next((e["derivedAttributes"] for e in exact if "derivedAttributes" in e), None)
    for e in exact if first else ():
        e.setdefault("derivedAttributes", first)


def _claim(r: random.Random, index: int, gates: set[str]) -> dict[str, Any]:
    driver = r.choice(DRIVERS)
    requests = [_request(r, f"req-{i}", driver, gates) for i in range(r.choice([1, 1, 2, 3]))]
    devices: dict[str, Any] = {"requests": requests}
    if "DRADerivedAttributes" in gates and r.random() < 0.6:
        _share_derived(requests)
    derived = _derived_names(requests)
    if r.random() < (0.8 if derived else 0.25):
        names = [f"{driver}/numa", f"{driver}/model", f"{driver}/links", "topology.example.com/rack"]
        attribute = r.choice(derived if derived and r.random() < 0.8 else names)
        constraint: dict[str, Any] = {"matchAttribute": attribute}
        if r.random() < 0.3:
            constraint = {"distinctAttribute": attribute if derived else f"{driver}/numa"}
        if len(requests) > 1 and r.random() < 0.5:
            constraint["requests"] = [requests[0]["name"], requests[1]["name"]]
        devices["constraints"] = [constraint]
    if r.random() < 0.15:
        devices["config"] = [{
            "requests": [requests[0]["name"]],
            "opaque": {"driver": driver, "parameters": {"mode": "shared"}},
        }]
    return {
        "kind": "ResourceClaim",
        "apiVersion": API,
        "metadata": {"name": f"claim-{index}", "namespace": "default", "uid": f"uid-claim-{index}"},
        "spec": {"devices": devices},
    }


def _classes(r: random.Random) -> list[dict[str, Any]]:
    def cls(name: str, expression: str, **spec: Any) -> dict[str, Any]:
        return {
            "kind": "DeviceClass", "apiVersion": API, "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}], **spec},
        }

    out = [
        cls("class-a", 'device.driver == "driver-a"'),
        cls("class-b", 'device.driver == "driver-b"'),
        cls("class-any", "true"),
    ]
    if r.random() < 0.2:
        out[2]["spec"]["config"] = [{"opaque": {"driver": "driver-a", "parameters": {"from": "class"}}}]
    return out


STABLE_GATES = GATES[:4]
INCUBATING_GATES = (*GATES[:7], "DRAFractionalCapacityRange")


def _gates(r: random.Random) -> set[str]:
    """Each of the three allocator variants equally often; within one, each gate it supports
    on or off."""
    pool = r.choice([STABLE_GATES, INCUBATING_GATES, GATES])
    gates = {g for g in (*pool, *NEUTRAL_GATES) if r.random() < 0.6}
    if "DRADeviceBindingConditions" in gates and r.random() < 0.8:
        gates.add("DRAResourceClaimDeviceStatus")
    return gates


def _variant(gates: set[str]) -> str:
    return Features.from_gate_names(gates).variant


def _on(r: random.Random, gates: set[str], gate: str, p: float) -> bool:
    """Use a gated feature with probability ``p`` when its gate is on, and now and then
    (a fifth as often) when it is off, which is an error or changes the answer."""
    return r.random() < (p if gate in gates else p / 5)


def allocation_case(seed: int, index: int) -> dict[str, Any]:
    r = rng_for(seed, index)
    gates = _gates(r)
    serial = [0]
    slices: list[dict[str, Any]] = []
    for driver in DRIVERS:
        for p in range(r.choice([0, 1, 1, 2]) if driver == "driver-b" else r.randint(1, 2)):
            pool = f"{driver}-pool-{p}"
            if driver == "driver-a" and p == 0 and r.random() < 0.4:
                slices += _partitioned_pool(r, driver, pool, serial)
            else:
                slices += _plain_pool(r, driver, pool, gates, serial)
    devices = [
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d)
        for s in slices
        for d in s["spec"].get("devices") or []
    ]
    case: dict[str, Any] = {
        "name": f"differential-{seed}-{index}",
        "description": f"random differential case: seed {seed}, index {index}",
        "features": sorted(gates),
        "node": {
            "kind": "Node", "apiVersion": "v1",
            "metadata": {"name": "node-1", "labels": {"region": "region-1"}},
        },
        "deviceClasses": _classes(r),
        "resourceSlices": slices,
    }
    if r.random() < 0.3:
        case["node"]["status"] = {"declaredFeatures": ["DRAOptionalNodeOperations"]}
    in_use = [d for d in devices if r.random() < 0.15]
    whole = [f"{drv}/{pool}/{d['name']}" for drv, pool, d in in_use
               if not d.get("allowMultipleAllocations")]
    shared = [(f"{drv}/{pool}/{d['name']}", d) for drv, pool, d in in_use
               if d.get("allowMultipleAllocations")]
    if whole:
        case["allocatedDevices"] = whole
    if shared:
        case["allocatedSharedDevices"] = [f"{ref}/share-{i}" for i, (ref, _) in enumerate(shared)]
        case["allocatedCapacity"] = {ref: {"memory": r.choice(["512Mi", "1Gi", "2Gi"])} for ref, _ in shared}
    case["claims"] = [_claim(r, i, gates) for i in range(r.randint(1, 2))]
    rules = _taint_rules(random.Random(f"{seed}/{index}/taint-rules"), devices)
    if rules:
        case["deviceTaintRules"] = rules
    _node_resources(random.Random(f"{seed}/{index}/node-resources"), case, devices)
    variant = random.Random(f"{seed}/{index}/variant")
    if variant.random() < 0.1:  # FORMAT.md, allocatorVariant: now and then one the gates don't allow
        case["allocatorVariant"] = variant.choice(VARIANTS)
    return case


_NODE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "hugepages-2Mi")


def _node_use(r: random.Random, driver: str, capacity: dict[str, Any]) -> dict[str, Any]:
    """One device's ``nodeAllocatableResources``: mappings by device count or by a consumed
    capacity (its key as written, driver-qualified, or one the device lacks), overheads."""
    uses: dict[str, Any] = {}
    for name in r.sample(_NODE_RESOURCES, r.randint(1, 2)):
        use: dict[str, Any] = {}
        roll = r.random()
        if roll < 0.35:
            use["mapping"] = {"deviceMultiplier": r.choice(["1", "2", "500m", "1Gi"])}
        elif roll < 0.6:
            key = r.choice([*capacity, "missing"]) if capacity else "missing"
            use["mapping"] = {
                "capacityKey": key if r.random() < 0.8 else f"{driver}/{key}",
                "capacityMultiplier": r.choice(["1", "2", "250m"]),
            }
        if roll >= 0.5:
            overhead = {"perPod": r.choice(["100m", "64Mi", "1"])}
            if r.random() < 0.5:
                overhead["perContainer"] = r.choice(["50m", "16Mi"])
            use["overhead"] = overhead
        uses[name] = use
    return uses


def _resources(r: random.Random) -> dict[str, Any]:
    requests = {"cpu": r.choice(["0", "500m", "1", "2"]), "memory": r.choice(["256Mi", "1Gi", "4Gi"])}
    if r.random() < 0.2:
        requests["hugepages-2Mi"] = r.choice(["2Mi", "20Mi"])
    return {"requests": requests}


def _node_resources(
    r: random.Random, case: dict[str, Any], devices: list[tuple[str, str, dict[str, Any]]]
) -> None:
    """The pod whose claims these are and the pods already on the node (FORMAT.md, pod and
    nodePods), with node resources some devices use, in two cases of five: what the devices
    cost the node and whether the pod still fits (DRANodeAllocatableResources). From its own
    stream, so the rest of a case is as it was before."""
    if r.random() < 0.6:
        return
    for driver, _, device in devices:
        if r.random() < 0.6:
            device["nodeAllocatableResources"] = _node_use(r, driver, device.get("capacity") or {})
    node: dict[str, Any] = case["node"]
    status: dict[str, Any] = node.setdefault("status", {})
    status["allocatable"] = {
        "cpu": r.choice(["2", "8", "32"]), "memory": r.choice(["4Gi", "64Gi"]),
        "ephemeral-storage": "100Gi", "hugepages-2Mi": r.choice(["0", "64Mi"]), "pods": "110",
    }
    claims = [f"claim-{i}" for i in range(len(case["claims"]))]  # as _claim names them
    containers = []
    for i in range(r.randint(1, 2)):
        container: dict[str, Any] = {"name": f"c{i}", "resources": _resources(r)}
        referenced = [{"name": f"dev-{j}"} for j in range(len(claims)) if r.random() < 0.7]
        if referenced:
            container["resources"]["claims"] = referenced
        containers.append(container)
    spec: dict[str, Any] = {
        "resourceClaims": [{"name": f"dev-{j}", "resourceClaimName": name} for j, name in enumerate(claims)],
        "containers": containers,
    }
    if r.random() < 0.2:
        init = {"name": "init", "resources": {**_resources(r), "claims": [{"name": "dev-0"}]}}
        spec["initContainers"] = [init]
    meta = {"name": "pod-0", "namespace": "default", "uid": "uid-pod-0"}
    case["pod"] = {"kind": "Pod", "apiVersion": "v1", "metadata": meta, "spec": spec}
    others = []
    for i in range(r.randint(0, 2)):
        other_spec = {"nodeName": "node-1", "containers": [{"name": "main", "resources": _resources(r)}]}
        pod_status: dict[str, Any] = {"phase": r.choice(["Running", "Running", "Succeeded"])}
        other: dict[str, Any] = {
            "kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": f"running-{i}", "namespace": "default", "uid": f"uid-running-{i}"},
            "spec": other_spec,
            "status": pod_status,
        }
        if r.random() < 0.3:
            pod_status["nodeAllocatableResourceClaimStatuses"] = [{
                "resourceClaimName": "theirs", "containers": ["main"],
                "mapping": [{"name": "cpu", "quantity": r.choice(["1", "2"])}],
            }]
        others.append(other)
    if others:
        case["nodePods"] = others


def _taint_rules(r: random.Random, devices: list[tuple[str, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """DeviceTaintRules for a case, in two cases of five: selecting by driver, pool and device
    (named in the case or not), every device (an empty selector) or none (no selector), with
    the taints the requests' tolerations are drawn for. Drawn from their own stream, so the
    rest of a case is as it was before rules were made."""
    if not devices or r.random() < 0.6:
        return []
    rules = []
    for n in range(r.randint(1, 3)):
        driver, pool, device = r.choice(devices)
        selector: dict[str, Any] = {}
        roll = r.random()  # below 0.1: no selector; below 0.2: an empty one
        if roll >= 0.2:
            for key, value in (("driver", driver), ("pool", pool), ("device", device["name"])):
                if r.random() < 0.5:
                    selector[key] = value if r.random() < 0.9 else f"other-{key}"
        taint: dict[str, Any] = {
            "key": "example.com/" + r.choice(["unhealthy", "maintenance"]),
            "effect": r.choice(["NoSchedule", "NoExecute", "None"]),
        }
        if r.random() < 0.7:
            taint["value"] = r.choice(["yes", "thermal"])
        spec: dict[str, Any] = {"taint": taint}
        if roll >= 0.1:
            spec["deviceSelector"] = selector
        meta = {"name": f"rule-{n}"}
        rules.append({"kind": "DeviceTaintRule", "apiVersion": API, "metadata": meta, "spec": spec})
    return rules


# -- CEL -----------------------------------------------------------------------------------------

_CEL_TERMS = (
    'device.driver == "{d}"',
    'device.attributes["{d}"].model == "{m}"',
    'device.attributes["{d}"].model != "{m}"',
    'device.attributes["{d}"].numa {cmp} {i}',
    'device.attributes["{d}"].numa + {i} * 2 > 1',
    'device.attributes["{d}"].numa / {i0} == 0',
    'device.attributes["{d}"].numa % {i0} == 1',
    '"fast" in device.attributes["{d}"]',
    'has(device.attributes["{d}"].fast)',
    'device.attributes["{d}"].fast == true',
    'device.attributes["{d}"].?fast.orValue(false)',
    'device.attributes["{d}"].driverVersion.isGreaterThan(semver("1.{i}.0"))',
    'device.attributes["{d}"].driverVersion.compareTo(semver("1.1.0")) {cmp} 0',
    'semver("1.{i}.0").isLessThan(semver("1.2.0"))',
    'isSemver("1.{i}") || isSemver("1.{i}.0")',
    'device.capacity["{d}"].memory.compareTo(quantity("{q}")) {cmp} 0',
    'device.capacity["{d}"].memory.isGreaterThan(quantity("{q}"))',
    'quantity("{q}").add(quantity("1Gi")).asInteger() > 0',
    'isQuantity("{q}")',
    'device.attributes["{d}"].model.matches("^[ah][0-9]+$")',
    'device.attributes["{d}"].model.startsWith("a") && device.attributes["{d}"].model.size() == 4',
    'device.attributes["{d}"].model.upperAscii() == "A100"',
    'device.attributes["{d}"].model.indexOf("1") >= 0',
    'device.attributes["{d}"].model.split("1").size() == 2',
    'device.attributes["{d}"].links.includes("l{i}")',
    'device.attributes["{d}"].links.exists(l, l.endsWith("{i}"))',
    'device.attributes["{d}"].links.all(l, l.startsWith("l"))',
    'size(device.attributes["{d}"].links) > {i}',
    'device.attributes["{d}"].ids.includes({i})',
    'device.attributes["{d}"].ids.sum() > {i}',
    'device.attributes["{d}"].ids.max() >= {i}',
    'device.attributes["{d}"].ids.isSorted()',
    '[1, 2, 3].filter(x, x > {i}).size() == 1',
    'device.attributes["{d}"].exists(k, k.startsWith("m"))',
    'device.attributes.exists(domain, domain == "{d}")',
    'device.capacity["{d}"].exists(k, k == "memory")',
    "device.allowMultipleAllocations",
    "9223372036854775807 + {i} > 0",
    'int("{i}") + 1 == {i} + 1',
    'string(device.attributes["{d}"].numa) == "{i}"',
    'ip("10.0.0.{i}").family() == 4',
    'cidr("10.0.0.0/8").containsIP("10.1.2.{i}")',
    'url("https://example.com/{i}").getHost() == "example.com"',
    'format.dns1123Label().validate("{m}").hasValue()',
    'sets.contains([1, 2, 3], [{i}])',
    '"{m}".format([]) == "{m}"',
    'device.attributes["other.example.com"].model == "x"',
    'device.nosuch == 1',
    'device.attributes["{d}"].model + 1',
    # Equality of library values with other types (cel-go: == fails, != is true).
    'device.attributes["{d}"].{a} {eq} "{m}"',
    'device.attributes["{d}"].{a} {eq} {i}',
    'device.capacity["{d}"].memory {eq} quantity("{q}")',
    'device.capacity["{d}"].memory {eq} dyn({i})',
    '[device.attributes["{d}"].{a}] {eq} [dyn("{m}")]',
    'device.attributes["{d}"].{a} in ["{m}", "t4"]',
    'device.attributes["{d}"].{a} in [device.driver]',
    # Optional selection and indexing, on maps, lists and scalars.
    'device.attributes["{d}"].?{a}.hasValue()',
    'device.attributes["{d}"].?{a}.?x.hasValue()',
    'device.attributes["{d}"].?{a}[{i0}].hasValue()',
    'device.attributes["{d}"].?{a}.orValue("{m}") == "{m}"',
    'device.attributes["{d}"].?{a}.orValue({i}) == {i}',
    'has(device.attributes["{d}"].{a}.x)',
    '{{"k": dyn({lit})}}.?k.x.hasValue()',
    'dyn({lit})[?{i0}].hasValue()',
    'optional.of(device.attributes["{d}"].{a}).optMap(v, v == "{m}").orValue(false)',
    '[1, 2, 3].first().orValue(0) == {i} || [1, 2].last().hasValue()',
    # Formatting (strings v2: %e pads non-finite values to the precision).
    '"%{fmt}".format([{num}]) == "{m}"',
    '"%{fmt}".format([{num}]).size() {cmp} {i}',
    '"%s/%d".format([device.attributes["{d}"].model, device.attributes["{d}"].numa]).size() > 0',
    '"%e".format([double("{special}")]).startsWith(" ")',
    '"%x".format([device.attributes["{d}"].model]) == "{m}"',
    # Comprehensions: two variables, early stopping followed by binds, one name twice.
    'device.attributes["{d}"].exists(k, k.startsWith("m")) && cel.bind(x, {i}, x == {i})',
    'device.attributes["{d}"].all(k, k.size() < {i}) || cel.bind(y, "{m}", y == device.driver)',
    '[1, 2, 3].exists(i, v, v > {i} && i < 2)',
    '[1, 2, 3].all({n1}, {n2}, {n2} > 0)',
    '{{"a": 1, "b": 2}}.transformMap(k, v, v * {i}).size() == 2',
    '[1, 2].transformList(i, v, v + i) == [1, {i}]',
    '[3, 1, 2].sortBy(e, -e)[0] == {i}',
    # Map literals and constant indexes cel-go plans (bytes/null/list keys fail).
    '{{{key}: 1}}.size() == 1',
    'dyn({{0: 1}})[{idx}] == 1',
    # Kubernetes' libraries.
    'device.attributes["{d}"].driverVersion.major() == 1',
    'device.attributes["{d}"].driverVersion.minor() {cmp} {i}',
    'semver("1.{i}.0") {eq} device.attributes["{d}"].driverVersion',
    'semver("1.{i}.0", true).isLessThan(semver("v1.2", true))',
    'quantity("{q}").sub(quantity("1Gi")).sign() {cmp} 0',
    'quantity("{q}").isInteger() && quantity("{q}").asApproximateFloat() > 1.0',
    'device.capacity["{d}"].memory.compareTo(quantity("{q}")) {cmp} 0 && isQuantity("{q}")',
    'ip("10.0.0.{i}").isLoopback() || ip("::{i}").family() == 6',
    'cidr("10.0.{i}.0/24").containsCIDR("10.0.{i}.128/25")',
    'cidr("10.0.0.0/{i}8").masked() == cidr("10.0.0.0/8")',
    'ip.isCanonical("10.0.0.{i}") && isIP("10.0.0.{i}")',
    'string(cidr("10.{i}.0.0/16").ip()) == "10.{i}.0.0"',
    # Lists and sets.
    'lists.range({r}).size() == {i}',
    '[{i}, 1, 2].sort() == [1, 2, {i}]',
    '[[1], [{i}]].flatten().distinct().size() == 2',
    '[1, 2, 3].slice({i0}, 3).size() {cmp} 1',
    'device.attributes["{d}"].ids.reverse().size() > 0',
    'sets.equivalent([1, {i}], [{i}, 1]) && sets.intersects([{i}], [1, 2])',
    # Strings.
    'device.attributes["{d}"].model.charAt({i0}) == "{c}"',
    'device.attributes["{d}"].model.substring({i0}) {eq} "{m}"',
    'device.attributes["{d}"].model.lastIndexOf("{c}") {cmp} {i}',
    'device.attributes["{d}"].model.replace("{c}", "x", {i0}) != "{m}"',
    '["{m}", device.attributes["{d}"].model].join("-").split("-").size() == 2',
    '" {m} ".trim().lowerAscii() == "{m}"',
    'strings.quote(device.attributes["{d}"].model) == "\\"{m}\\""',
    '"{m}".reverse() == "{m}"',
    # List-type attributes of versions and bools; any attribute through the lists library.
    'device.attributes["{d}"].versions.includes(semver("1.{i}.0"))',
    'device.attributes["{d}"].versions.exists(v, v.isGreaterThan(semver("1.1.0")))',
    'device.attributes["{d}"].flags.all(f, f) || device.attributes["{d}"].flags.includes(false)',
    'device.attributes["{d}"].{a}.includes(device.attributes["{d}"].{a})',
    'size(device.attributes["{d}"].{a}) {cmp} {i}',
    'device.attributes["{d}"].{a}.sort().size() > 0',
    'device.attributes["{d}"].{a}.max() {eq} device.attributes["{d}"].{a}.min()',
    'string(device.attributes["{d}"].{a}) == "{m}"',
    'type(device.attributes["{d}"].{a}) {eq} list',
    # Backtick-quoted fields and JSON literals.
    'device.attributes["{d}"].`{a}` {eq} "{m}"',
    'google.protobuf.Value{{number_value: {num}}} == {num}',
    'google.protobuf.Struct{{fields: {{"a": {i}}}}}.a == {i}',
)
_ATTRIBUTE_NAMES = (
    *("model", "numa", "driverVersion", "fast", "links", "ids", "pcieRoot", "missing"),
    *("versions", "flags"),
)
_LITERALS = ("null", "0", "1.5", '"s"', "[1]", '{"x": 1}', "true", 'b"b"')
_MAP_KEYS = ("1", '"a"', "true", "1u", 'b"a"', "null", "1.5")
_INDEXES = ("0", "0.0", '"0"', 'b""', "null", "[0]", "dyn(b\"\")", 'duration("1s")', "int")
_FORMATS = ("e", ".2e", ".10e", "f", ".3f", "s", "d", "x", "b", "o")
_NUMBERS = ("2.5", "-0.0", "1e100", '{i}', 'double("NaN")', 'double("-Inf")', "3u")


def cel_case(seed: int, index: int) -> dict[str, Any]:
    r = rng_for(seed, index)
    driver = r.choice(DRIVERS)
    attrs = _attributes(r, driver)
    if r.random() < 0.5:
        attrs["fast"] = {"bool": r.random() < 0.5}
    if r.random() < 0.25:  # list-type attributes of the other kinds
        attrs["versions"] = {"versions": [f"1.{n}.0" for n in r.sample(range(4), r.randint(1, 3))]}
    if r.random() < 0.2:
        attrs["flags"] = {"bools": [r.random() < 0.5 for _ in range(r.randint(1, 3))]}
    device: dict[str, Any] = {
        "driver": driver,
        "attributes": attrs,
        "capacity": _capacity(r, False) if r.random() < 0.85 else {},
    }
    if r.random() < 0.3:
        device["allowMultipleAllocations"] = r.random() < 0.5
    terms = []
    for _ in range(r.randint(1, 3)):
        n1 = r.choice(["x", "y"])
        i = r.randint(0, 3)
        terms.append(r.choice(_CEL_TERMS).format(
            d=driver if r.random() < 0.9 else r.choice(DRIVERS),
            m=r.choice(MODELS),
            i=i,
            i0=r.randint(0, 2),
            q=r.choice(["1Gi", "2Gi", "1500Mi", "4G", "0"]),
            cmp=r.choice(["==", "!=", "<", ">=", ">"]),
            eq=r.choice(["==", "!="]),
            a=r.choice(_ATTRIBUTE_NAMES),
            lit=r.choice(_LITERALS),
            key=r.choice(_MAP_KEYS),
            idx=r.choice(_INDEXES),
            fmt=r.choice(_FORMATS),
            num=r.choice(_NUMBERS).format(i=i),
            special=r.choice(["NaN", "Inf", "-Inf"]),
            n1=n1,
            n2=n1 if r.random() < 0.3 else "v",
            r=r.choice([-2, 0, i, 3]),
            c=r.choice(["a", "1", "0", "t"]),
        ))
    expression = terms[0]
    for term in terms[1:]:
        expression = f"({expression}) {r.choice(['&&', '||'])} ({term})"
    if r.random() < 0.1:
        expression = f"!({expression})"
    return {"name": f"differential-cel-{seed}-{index}", "expression": expression, "device": device}
