"""Loading a state directory: each document is let go once the cache has its own copy."""

from __future__ import annotations

import weakref
from typing import Any

from extender.sources.local import LocalCluster
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
