"""Valid objects of every kind the extender reads, and their one-change mutants.

A mutant replaces the value at one path (any key of any object, any element of any list) by
a value of a wrong type, or deletes one key. The fuzz tests of the model, the local cluster
and the state directory all draw from here, so each layer meets the same malformed objects.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

DRIVER = "gpu.example.com"
CLASS = DRIVER
RESOURCE = "resource.k8s.io/v1"

# One of each wrong type: object, list, string, float, bool, negative, null and an integer
# beyond 64 bits (JSON allows it; Go's int64 and orjson do not).
WRONG: tuple[tuple[str, Any], ...] = (
    ("object", {"a": 1}),
    ("list", [1]),
    ("string", "x"),
    ("float", 1.5),
    ("bool", True),
    ("negative", -1),
    ("null", None),
    ("huge", 2**64),
)

MODEL_IS_A100 = f'device.attributes["{DRIVER}"].model == "a100"'
_SELECTOR = {
    "nodeSelectorTerms": [
        {
            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-0"]}],
        }
    ]
}


def _node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-0", "labels": {"zone": "a"}},
        "status": {"allocatable": {"cpu": "4", "example.com/gpu": "0"}},
    }


def _device_class() -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE,
        "kind": "DeviceClass",
        "metadata": {"name": CLASS},
        "spec": {
            "selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}],
            "config": [{"opaque": {"driver": DRIVER, "parameters": {"mode": "fast"}}}],
            "extendedResourceName": "example.com/gpu",
        },
    }


def _device(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {
            "model": {"string": "a100"},
            "cores": {"int": 8},
            "ecc": {"bool": True},
            "driverVersion": {"version": "1.2.3"},
        },
        "capacity": {
            "memory": {
                "value": "40Gi",
                "requestPolicy": {
                    "default": "1Gi",
                    "validRange": {"min": "1Gi", "max": "40Gi", "step": "1Gi"},
                },
            },
            "slots": {"value": 4, "requestPolicy": {"validValues": ["1", "2"]}},
        },
        "consumesCounters": [{"counterSet": "mem", "counters": {"memory": {"value": "40Gi"}}}],
        "taints": [{"key": "flaky", "value": "yes", "effect": "NoSchedule"}],
        "allowMultipleAllocations": True,
        "bindingConditions": ["ready"],
        "bindingFailureConditions": ["failed"],
        "bindsToNode": True,
    }


def _slice() -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE,
        "kind": "ResourceSlice",
        "metadata": {"name": "node-0-gpu"},
        "spec": {
            "driver": DRIVER,
            "nodeName": "node-0",
            "pool": {"name": "node-0", "generation": 1, "resourceSliceCount": 1},
            "sharedCounters": [{"name": "mem", "counters": {"memory": {"value": "80Gi"}}}],
            "devices": [_device("gpu-0"), {"name": "gpu-1"}],
        },
    }


def _selector_slice() -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE,
        "kind": "ResourceSlice",
        "metadata": {"name": "zone-a-gpu"},
        "spec": {
            "driver": DRIVER,
            "nodeSelector": copy.deepcopy(_SELECTOR),
            "perDeviceNodeSelection": False,
            "pool": {"name": "zone-a", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "nodeSelector": copy.deepcopy(_SELECTOR), "allNodes": False}],
        },
    }


def _taint_rule() -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE,
        "kind": "DeviceTaintRule",
        "metadata": {"name": "drain"},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": "node-0", "device": "gpu-1"},
            "taint": {"key": "maintenance", "value": "now", "effect": "NoSchedule"},
        },
    }


def _claim_spec() -> dict[str, Any]:
    return {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": CLASS,
                        "allocationMode": "ExactCount",
                        "count": 1,
                        "selectors": [{"cel": {"expression": MODEL_IS_A100}}],
                        "tolerations": [{"key": "flaky", "operator": "Equal", "value": "yes"}],
                        "capacity": {"requests": {"memory": "1Gi"}},
                    },
                },
                {
                    "name": "any",
                    "firstAvailable": [
                        {"name": "big", "deviceClassName": CLASS, "count": 1},
                        {"name": "all", "deviceClassName": CLASS, "allocationMode": "All"},
                    ],
                },
            ],
            "constraints": [{"requests": ["gpu", "any"], "matchAttribute": f"{DRIVER}/model"}],
            "config": [{"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {}}}],
        }
    }


def _template() -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "tmpl", "namespace": "default"},
        "spec": {
            "metadata": {"labels": {"app": "train"}, "annotations": {"note": "x"}},
            "spec": _claim_spec(),
        },
    }


def _claim() -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE,
        "kind": "ResourceClaim",
        "metadata": {"name": "free", "namespace": "default"},
        "spec": _claim_spec(),
    }


def _allocated_claim() -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE,
        "kind": "ResourceClaim",
        "metadata": {
            "name": "held",
            "namespace": "default",
            "finalizers": ["resource.kubernetes.io/delete-protection"],
            "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "holder", "uid": "holder-uid",
                                 "controller": True}],
        },
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": DRIVER,
                            "pool": "node-0",
                            "device": "gpu-1",
                            "adminAccess": False,
                            "tolerations": [{"key": "k", "operator": "Exists"}],
                            "shareID": "share-1",
                            "consumedCapacity": {"memory": "1Gi"},
                        }
                    ],
                    "config": [{"source": "FromClass", "requests": ["gpu"], "opaque": {"driver": DRIVER}}],
                },
                "nodeSelector": copy.deepcopy(_SELECTOR),
            },
            "reservedFor": [{"resource": "pods", "name": "holder", "uid": "holder-uid"}],
        },
    }


def _container(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": "img",
        "resources": {"requests": {"cpu": "1", "example.com/gpu": "1"}, "limits": {"example.com/gpu": 1},
                      "claims": [{"name": "gpu"}]},
    }


def _pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "p-uid", "labels": {"app": "train"}},
        "spec": {
            "schedulerName": "dra-extender-scheduler",
            "initContainers": [_container("init")],
            "containers": [_container("main")],
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "tmpl"},
                {"name": "shared", "resourceClaimName": "free"},
            ],
            "priority": 1000,
        },
        "status": {
            "phase": "Pending",
            "nominatedNodeName": "n",
            "startTime": "2026-01-01T00:00:00Z",
            "resourceClaimStatuses": [{"name": "other", "resourceClaimName": "other-claim"}],
            "extendedResourceClaimStatus": {"resourceClaimName": "held"},
        },
    }


def _budget() -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {
            "minAvailable": 1,
            "selector": {
                "matchLabels": {"app": "train"},
                "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["web"]}],
            },
        },
        "status": {"disruptionsAllowed": 0, "disruptedPods": {"old": "2026-01-01T00:00:00Z"}},
    }


def _pod_group() -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "default", "uid": "group-uid"},
        "spec": {
            "schedulingPolicy": {"basic": {}},
            "resourceClaims": [
                {"name": "gpu", "resourceClaimName": "shared"},
                {"name": "nic", "resourceClaimTemplateName": "one"},
            ],
        },
    }


def valid_objects() -> list[dict[str, Any]]:
    """A small cluster holding one rich object of every kind (fresh copies on every call)."""
    return [
        _node(), _device_class(), _slice(), _selector_slice(), _taint_rule(),
        _template(), _claim(), _allocated_claim(), _pod_group(), _pod(), _budget(),
    ]


Path = tuple[str | int, ...]


def paths(obj: Any, prefix: Path = ()) -> Iterator[Path]:
    """Every path into ``obj`` (keys of objects, indexes of lists), parents before children."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        yield (*prefix, key)
        yield from paths(value, (*prefix, key))


def render(path: Path) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def mutants(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(description, mutant) for every wrong value at every path of ``obj``, and every key deleted."""
    for path in paths(obj):
        for label, value in WRONG:
            mutant = copy.deepcopy(obj)
            parent = _at(mutant, path[:-1])
            parent[path[-1]] = copy.deepcopy(value)
            yield f"{render(path)} = {label}", mutant
        if isinstance(path[-1], str):
            mutant = copy.deepcopy(obj)
            del _at(mutant, path[:-1])[path[-1]]
            yield f"{render(path)} deleted", mutant


def _at(obj: Any, path: Path) -> Any:
    for key in path:
        obj = obj[key]
    return obj


def _normal(text: str) -> str:
    """Paths as the model writes them (``a.b[k][0]``) and as the mutants do, made comparable."""
    return re.sub(r"[\[\]]+", ".", text).replace("..", ".")


def names_field(message: str, label: str) -> bool:
    """Whether ``message`` names the mutated field (or, for a replaced object, a field inside it)."""
    path = label.removesuffix(" deleted").split(" = ")[0]
    return re.search(re.escape(_normal(path).strip(".")) + r"(?=[.:\s]|$)", _normal(message)) is not None
