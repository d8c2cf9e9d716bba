"""The objects the scenarios create, and the checks they make on what the API server holds."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from tests.e2e import shipped
from tests.e2e.api import Api, ApiError, Obj, wait_for

__all__ = ["Obj"]

DRIVER = "gpu.example.com"  # the example DeviceClass's driver (manifests/example/deviceclass.yaml)
HEARTBEAT = "2026-01-01T00:00:00Z"


def node(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "e2e": "yes"},
        },
    }


def node_status() -> Obj:
    """What a kubelet reports: Ready, and room for pods."""
    room = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    return {
        "status": {
            "capacity": room,
            "allocatable": room,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "no kubelet: e2e",
                    "lastHeartbeatTime": HEARTBEAT,
                    "lastTransitionTime": HEARTBEAT,
                }
            ],
        }
    }


def resource_slice(node_name: str, devices: int, model: str = "a100") -> Obj:
    """What a DRA driver publishes for a node: one pool named after it, ``devices`` GPUs."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{DRIVER}", "labels": {"e2e": "yes"}},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {"model": {"string": model}, "index": {"int": i}},
                    "capacity": {"memory": {"value": "40Gi"}},
                }
                for i in range(devices)
            ],
        },
    }


def claim(
    name: str, namespace: str, count: int = 1, *, device_class: str = DRIVER, selector: str | None = None
) -> Obj:
    exactly: Obj = {"deviceClassName": device_class, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def template(name: str, namespace: str, count: int) -> Obj:
    """The example ResourceClaimTemplate (manifests/example), asking for ``count`` devices."""
    obj = shipped.example("claim-template.yaml")
    obj["metadata"] = {"name": name, "namespace": namespace}
    obj["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = count
    return obj


def pod(
    name: str,
    namespace: str,
    *,
    template_name: str | None = None,
    claim_name: str | None = None,
    scheduler: str = shipped.SCHEDULER_NAME,
    priority_class: str | None = None,
    labels: dict[str, str] | None = None,
    node_name: str | None = None,
) -> Obj:
    source = {"resourceClaimName": claim_name} if claim_name else {"resourceClaimTemplateName": template_name}
    spec: Obj = {
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "resourceClaims": [{"name": "gpu", **source}],
        "containers": [
            {
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "10m"}, "claims": [{"name": "gpu"}]},
            }
        ],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node_name:  # placed by the scheduler all the same, only on this node
        spec["nodeSelector"] = {"kubernetes.io/hostname": node_name}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {"e2e": "yes"}},
        "spec": spec,
    }


# --- reading the evidence ----------------------------------------------------------------------


def allocated_devices(claim_obj: Obj) -> list[tuple[str, str, str]]:
    allocation = (claim_obj.get("status") or {}).get("allocation") or {}
    return [
        (r["driver"], r["pool"], r["device"]) for r in (allocation.get("devices") or {}).get("results", [])
    ]


def device_owners(api: Api) -> dict[tuple[str, str, str], list[str]]:
    owners: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for c in api.list("ResourceClaim"):
        for device in allocated_devices(c):
            owners[device].append(f"{c['metadata']['namespace']}/{c['metadata']['name']}")
    return owners


def double_allocations(api: Api) -> dict[str, list[str]]:
    """Devices in more than one claim's allocation, anywhere in the cluster."""
    return {"/".join(d): o for d, o in device_owners(api).items() if len(o) > 1}


def pod_claim_names(pod_obj: Obj) -> list[str]:
    """The ResourceClaims a pod uses: named ones, and those the controller made from templates."""
    generated = {
        s["name"]: s.get("resourceClaimName")
        for s in (pod_obj.get("status") or {}).get("resourceClaimStatuses") or []
    }
    out = []
    for entry in pod_obj["spec"].get("resourceClaims") or []:
        name = entry.get("resourceClaimName") or generated.get(entry["name"])
        if name:
            out.append(name)
    return out


def inconsistencies(api: Api, namespace: str) -> list[str]:
    """Bound pods whose claims are not allocated, not reserved for them, or not on their node."""
    claims = {c["metadata"]["name"]: c for c in api.list("ResourceClaim", namespace)}
    bad = []
    for p in api.list("Pod", namespace):
        node_name = p["spec"].get("nodeName")
        if not node_name or (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue  # a finished pod's claims are released by the controller
        names = pod_claim_names(p)
        if len(names) != len(p["spec"].get("resourceClaims") or []):
            bad.append(f"{p['metadata']['name']}: bound without all its claims ({names})")
        for name in names:
            c = claims.get(name)
            status = (c or {}).get("status") or {}
            if c is None:
                bad.append(f"{p['metadata']['name']}: claim {name} missing")
            elif not status.get("allocation"):
                bad.append(f"{p['metadata']['name']}: claim {name} not allocated")
            elif p["metadata"]["uid"] not in [r.get("uid") for r in status.get("reservedFor") or []]:
                bad.append(f"{p['metadata']['name']}: claim {name} not reserved for it")
            elif {pool for _, pool, _ in allocated_devices(c or {})} != {node_name}:
                bad.append(f"{p['metadata']['name']} on {node_name}: devices of {allocated_devices(c or {})}")
    return bad


def bound(api: Api, namespace: str) -> dict[str, str]:
    """Pod name -> node, for the pods of ``namespace`` that are bound."""
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in api.list("Pod", namespace)
        if p["spec"].get("nodeName")
    }


def wait_bound(api: Api, namespace: str, want: int, timeout: float) -> tuple[dict[str, str], float]:
    """Wait until ``want`` pods of ``namespace`` are bound; the bound pods and the seconds it took."""
    start = time.monotonic()
    found = wait_for(
        f"{want} pods of {namespace} bound",
        lambda: (lambda b: b if len(b) >= want else None)(bound(api, namespace)),
        timeout,
    )
    return found, time.monotonic() - start


def held_steady(api: Api, namespace: str, seconds: float) -> dict[str, str]:
    """The bound pods, after checking for ``seconds`` that no more are bound."""
    before = bound(api, namespace)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        now = bound(api, namespace)
        if now != before:
            raise AssertionError(f"more pods bound while none should fit: {sorted(set(now) - set(before))}")
        time.sleep(1.0)
    return before


def failed_scheduling(api: Api, namespace: str, pod_name: str) -> list[str]:
    return [
        e.get("message", "") for e in api.events(namespace, pod_name) if e.get("reason") == "FailedScheduling"
    ]


def free_devices(api: Api, node_names: list[str]) -> dict[str, int]:
    """Per node: devices in its slices that no claim holds."""
    taken = device_owners(api)
    free = {}
    for name in node_names:
        s = api.find("ResourceSlice", f"{name}-{DRIVER}")
        devices = (s or {}).get("spec", {}).get("devices") or []
        free[name] = sum(1 for d in devices if (DRIVER, name, d["name"]) not in taken)
    return free


def ensure_namespace(api: Api, namespace: str) -> None:
    api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    # Pods need the namespace's `default` ServiceAccount, which its controller creates.
    wait_for(
        f"ServiceAccount {namespace}/default", lambda: api.find("ServiceAccount", "default", namespace), 60
    )


def add_node(api: Api, name: str, devices: int, model: str = "a100") -> None:
    """A Node as a kubelet would register it, and its driver's ResourceSlice."""
    try:
        api.create(node(name))
    except ApiError as exc:
        if exc.status != 409:
            raise
    # TaintNodesByCondition tainted it not-ready; no node lifecycle controller runs to lift it.
    api.patch("Node", name, {"spec": {"taints": None}})
    api.patch("Node", name, node_status(), subresource="status")
    if devices:
        api.apply(resource_slice(name, devices, model))


def remove_node(api: Api, name: str) -> None:
    api.delete("ResourceSlice", f"{name}-{DRIVER}")
    api.delete("Node", name)


def finish(api: Api, namespace: str, pod_name: str, phase: str = "Succeeded") -> None:
    """What the kubelet writes when every container has exited."""
    api.patch("Pod", pod_name, {"status": {"phase": phase}}, namespace, subresource="status")


def clear_namespace(api: Api, namespace: str, timeout: float = 120) -> None:
    """Every pod of ``namespace`` deleted at once (no kubelet will confirm a graceful end),
    then every claim, waiting until the controllers have released and removed them."""
    for p in api.list("Pod", namespace):
        api.delete("Pod", p["metadata"]["name"], namespace, grace=0)
    wait_for(f"pods of {namespace} gone", lambda: not api.list("Pod", namespace), timeout)
    for c in api.list("ResourceClaim", namespace):
        api.delete("ResourceClaim", c["metadata"]["name"], namespace)
    wait_for(
        f"claims of {namespace} gone (the controller removes their finalizer once released)",
        lambda: not api.list("ResourceClaim", namespace),
        timeout,
    )


def summary(api: Api, namespace: str) -> dict[str, Any]:
    """For a failure message: who is bound where, and each claim's devices and reservations."""
    return {
        "bound": bound(api, namespace),
        "claims": {
            c["metadata"]["name"]: {
                "devices": [d for _, _, d in allocated_devices(c)],
                "reservedFor": [r.get("name") for r in (c.get("status") or {}).get("reservedFor") or []],
            }
            for c in api.list("ResourceClaim", namespace)
        },
    }
