"""Every object of every shipped layout is valid for the official Kubernetes schemas, strictly."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.manifests.loader import EXTRAS, LAYOUTS, MANIFESTS, built

# The oldest release with resource.k8s.io/v1 (DRA GA), and the newest schema kubernetes-validate ships.
VERSIONS = ["1.34.0", kubernetes_validate.latest_version()]
EVERY = LAYOUTS | EXTRAS


def _kubernetes_objects(directory: Path) -> list[dict]:
    # Prometheus Operator objects (manifests/monitoring) have no official schema here; their shape
    # is tested in test_monitoring.py.
    return [doc for doc in built(directory) if not doc["apiVersion"].startswith("monitoring.coreos.com/")]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("directory", EVERY.values(), ids=EVERY.keys())
def test_every_object_is_valid(directory: Path, version: str) -> None:
    objects = _kubernetes_objects(directory)
    assert objects
    for doc in objects:
        kubernetes_validate.validate(doc, version, strict=True)


def test_strict_validation_refuses_an_unknown_field() -> None:
    (deployment,) = [d for d in built(MANIFESTS) if d["kind"] == "Deployment"]
    broken = {**deployment, "spec": {**deployment["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[0], strict=True)


@pytest.mark.parametrize("directory", [MANIFESTS / "base", MANIFESTS / "example"], ids=["base", "example"])
def test_kustomization_lists_exactly_the_files_present(directory: Path) -> None:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    present = {p.name for p in directory.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(present)


CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "DeviceClass", "PriorityClass"}


@pytest.mark.parametrize("directory", EVERY.values(), ids=EVERY.keys())
def test_namespaced_objects_name_their_namespace(directory: Path) -> None:
    """kustomize gets no global namespace (it would move the kube-system binding), so each object says it."""
    for doc in built(directory):
        where = f"{doc['kind']} {doc['metadata']['name']}"
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in doc["metadata"], where
            continue
        allowed = {"default"} if directory.name == "example" else {"dra-system", "kube-system"}
        assert doc["metadata"].get("namespace") in allowed, where
