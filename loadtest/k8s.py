"""Builders for the plain Kubernetes objects the workloads are made of.

Objects are dicts shaped like `kubectl get -o yaml` output so that they can be written to a
state directory and sent over the wire unchanged.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

DRIVER = "gpu.example.com"
DEVICE_CLASS = "gpu.example.com"
NAMESPACE = "loadtest"
SCHEDULER_NAME = "dra-extender-scheduler"  # the extender's default --scheduler-name
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
RESOURCE_API = "resource.k8s.io/v1"


def memory_at_least(quantity: str) -> str:
    return f'device.capacity["{DRIVER}"].memory.compareTo(quantity("{quantity}")) >= 0'


def memory_exactly(quantity: str) -> str:
    return f'device.capacity["{DRIVER}"].memory.compareTo(quantity("{quantity}")) == 0'


def node(name: str, zone: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone},
        },
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}},
    }


def device_class() -> Obj:
    return {
        "apiVersion": RESOURCE_API,
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def device(name: str, memory: str, attributes: dict[str, Obj], consumes: list[Obj] | None = None) -> Obj:
    dev: Obj = {"name": name, "attributes": attributes, "capacity": {"memory": {"value": memory}}}
    if consumes:
        dev["consumesCounters"] = consumes
    return dev


def resource_slice(
    name: str,
    node_name: str,
    pool_slices: int,
    devices: list[Obj] | None = None,
    shared_counters: list[Obj] | None = None,
) -> Obj:
    """A node-local slice; the pool is named after the node, as node-local drivers do."""
    spec: Obj = {
        "driver": DRIVER,
        "nodeName": node_name,
        "pool": {"name": node_name, "generation": 1, "resourceSliceCount": pool_slices},
    }
    if devices is not None:
        spec["devices"] = devices
    if shared_counters is not None:
        spec["sharedCounters"] = shared_counters
    return {"apiVersion": RESOURCE_API, "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}


def exact_request(name: str, selector: str | None = None, count: int = 1) -> Obj:
    exactly: Obj = {"deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount", "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"name": name, "exactly": exactly}


def first_available_request(name: str, subrequests: list[tuple[str, str, int]]) -> Obj:
    """`subrequests` are (name, CEL selector, count), in preference order."""
    return {
        "name": name,
        "firstAvailable": [
            {
                "name": sub,
                "deviceClassName": DEVICE_CLASS,
                "allocationMode": "ExactCount",
                "count": count,
                "selectors": [{"cel": {"expression": selector}}],
            }
            for sub, selector, count in subrequests
        ],
    }


def claim_spec(requests: list[Obj], constraints: list[Obj] | None = None) -> Obj:
    devices: Obj = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {"devices": devices}


def claim_template(name: str, spec: Obj) -> Obj:
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"spec": spec},
    }


def claim(name: str, spec: Obj) -> Obj:
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def pod(name: str, uid: str, template: str | None = None, claim_name: str | None = None) -> Obj:
    """A pending pod with one pod claim `gpu`, from a template or an existing claim."""
    if (template is None) == (claim_name is None):
        raise ValueError("a pod claim needs exactly one of template or claim_name")
    source = {"resourceClaimTemplateName": template} if template else {"resourceClaimName": claim_name}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
            "resourceClaims": [{"name": "gpu", **source}],
        },
        "status": {"phase": "Pending"},
    }
