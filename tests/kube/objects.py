"""Builders for schema-valid API objects used by the end-to-end tests."""

from __future__ import annotations

from typing import Any

DRIVER = "gpu.example.com"


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}}


def device_class(name: str = "gpu", driver: str = DRIVER) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}


def resource_slice(node_name: str, devices: int = 2, driver: str = DRIVER) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-{driver}"},
            "spec": {"driver": driver, "nodeName": node_name,
                     "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}}
                                 for i in range(devices)]}}


def claim(name: str, namespace: str = "default", device_class_name: str = "gpu") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": device_class_name}}]}}}


def claim_template(name: str, namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": claim(name)["spec"]}}


def allocation(node_name: str, device: str = "gpu-0", driver: str = DRIVER) -> dict[str, Any]:
    result = {"request": "gpu", "driver": driver, "pool": node_name, "device": device}
    return {"devices": {"results": [result]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}}


def pod(name: str, namespace: str = "default", claim_name: str | None = None,
        scheduler_name: str = "dra-extender-scheduler", template_name: str | None = None) -> dict[str, Any]:
    """A pod with, optionally, one claim "gpu": ``claim_name``'s, or one made from ``template_name``
    (by the resourceclaim controller: tests.apiserver.controller.sync_pods)."""
    spec: dict[str, Any] = {"schedulerName": scheduler_name,
                            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}
    if claim_name or template_name:
        source = ({"resourceClaimName": claim_name} if claim_name
                  else {"resourceClaimTemplateName": template_name})
        spec["resourceClaims"] = [{"name": "gpu", **source}]
        spec["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": spec}
