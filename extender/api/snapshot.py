"""``/debug/snapshot``: the cache's objects as one ``kind: List`` a state directory can hold.

``curl …/debug/snapshot > DIR/cluster.yaml`` (JSON is YAML) and ``dra-extender serve --state DIR``
or ``dra-extender simulate --state DIR`` start from the cluster as the extender saw it. Status is
kept: claims' allocations and reservations, pods' nominations and claim statuses, budgets'
allowed disruptions all count. Each object carries the apiVersion local mode loads (the cache may
hold one read at an older version: its fields are the same, see ``model.kinds``), and loses its
managedFields, which nothing reads.
"""

from __future__ import annotations

from typing import Any

from extender.model.kinds import KINDS
from extender.state import ClusterState


def snapshot(state: ClusterState) -> dict[str, Any]:
    items = []
    for kind in KINDS:
        for raw in state.items(kind.name):
            obj = {**raw, "apiVersion": kind.api_version, "kind": kind.name}
            meta = obj.get("metadata")
            if isinstance(meta, dict) and "managedFields" in meta:
                obj["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
            items.append(obj)
    return {"apiVersion": "v1", "kind": "List", "items": items}
