"""Loading a state directory: documents wait in a compact form and are let go once applied."""

from __future__ import annotations

import weakref
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.local.cluster import LocalCluster, ManifestError, read_manifests
from extender.state import ClusterState
from tests.scheduling.cluster import gpu, node, node_slice


class Doc(dict):
    """A plain dict that can be weakly referenced, to see when the loader lets it go."""


class Probe(ClusterState):
    """Records, at each apply, which of the loaded documents are still alive."""

    def __init__(self, refs: list[weakref.ref[Doc]]) -> None:
        super().__init__()
        self.refs = refs
        self.alive: list[list[bool]] = []

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        self.alive.append([ref() is not None for ref in self.refs])
        super().apply(kind, obj)


def test_documents_are_released_as_they_are_applied():
    refs: list[weakref.ref[Doc]] = []

    def docs():
        # Pods-last order is the loader's: the slice comes after the node although given first.
        for obj in (node_slice("node-0", [gpu("gpu-0")]), node("node-0"), node("node-1")):
            doc = Doc(obj)
            refs.append(weakref.ref(doc))
            yield ("object", doc)

    state = Probe(refs)
    assert LocalCluster(state).load(docs()) == 3
    # Applied in load order: node-0, node-1, then the slice; each earlier document is gone.
    assert state.alive == [[True, True, True], [True, False, True], [True, False, False]]
    assert state.counts()["Node"] == 2 and state.counts()["ResourceSlice"] == 1


def test_documents_wait_in_plain_json_with_repeated_subtrees_shared(tmp_path: Path):
    obj = node_slice("node-0", [gpu(f"gpu-{i}") for i in range(3)])
    obj["metadata"]["creationTimestamp"] = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)  # a YAML timestamp
    (tmp_path / "slices.yaml").write_text(yaml.safe_dump(obj))
    [(origin, doc)] = read_manifests([tmp_path / "slices.yaml"])
    assert origin.endswith("slices.yaml (document 1)")
    assert doc["metadata"]["creationTimestamp"] == "2026-01-02T03:04:05+00:00"  # a string, as in JSON
    first, second, third = doc["spec"]["devices"]
    assert first["attributes"] is second["attributes"] is third["attributes"]
    assert [d["name"] for d in (first, second, third)] == ["gpu-0", "gpu-1", "gpu-2"]


def test_a_document_that_is_not_json_is_still_refused_with_its_origin(tmp_path: Path):
    (tmp_path / "nodes.yaml").write_text("kind: Node\nmetadata: {name: n, labels: {1: a}}\n")
    docs = read_manifests([tmp_path / "nodes.yaml"])
    with pytest.raises(ManifestError, match=r"nodes\.yaml \(document 1\): not representable as JSON"):
        LocalCluster(ClusterState()).load(docs)
