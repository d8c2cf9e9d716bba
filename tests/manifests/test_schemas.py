"""Every shipped manifest is valid for the official Kubernetes schemas, and kustomize lists them all."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.manifests.loader import MANIFESTS, documents

# The oldest release with resource.k8s.io/v1 (DRA GA), and the newest schema kubernetes-validate ships.
VERSIONS = ["1.34.0", kubernetes_validate.latest_version()]


# Prometheus Operator objects (manifests/monitoring) have no official schema here; their shape is
# tested in test_monitoring.py.
KUBERNETES = [
    (path, doc) for path, doc in documents() if not doc["apiVersion"].startswith("monitoring.coreos.com/")
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("path", "doc"), KUBERNETES, ids=lambda v: v.name if isinstance(v, Path) else None)
def test_manifest_is_valid(path: Path, doc: dict, version: str) -> None:
    kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("directory", [MANIFESTS, MANIFESTS / "example"], ids=["manifests", "example"])
def test_kustomization_lists_exactly_the_files_present(directory: Path) -> None:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    present = {p.name for p in directory.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(present)


CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "DeviceClass"}


def test_namespaced_objects_name_their_namespace() -> None:
    """kustomize gets no global namespace (it would move the kube-system binding), so each object says it."""
    for path, doc in documents():
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in doc["metadata"], f"{doc['kind']} in {path.name}"
            continue
        allowed = {"default"} if "example" in path.parts else {"dra-system", "kube-system"}
        assert doc["metadata"].get("namespace") in allowed, f"{doc['kind']} in {path.name}"
