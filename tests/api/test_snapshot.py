"""``/debug/snapshot``: the cache as a state directory's ``kind: List``, loadable as it is."""

from __future__ import annotations

from typing import Any

import httpx

from extender.local.cluster import load_local
from extender.state import ClusterState
from tests.scheduling.cluster import Service, bind_call, claim, gpu_cluster, pod, template


def test_a_saved_snapshot_loads_into_the_same_cluster_allocations_and_all(tmp_path):
    objs = [*gpu_cluster(nodes=2, per_node=2), template("one"), claim("shared")]
    objs += [pod("a", templates={"gpu": "one"}), pod("b", claims={"c": "shared"}), pod("waits")]
    svc = Service(objs)
    # What a cluster's cache may hold: an object read at an older API version, managedFields.
    slice_ = dict(svc.state.items("ResourceSlice")[0])
    slice_["apiVersion"] = "resource.k8s.io/v1beta2"
    slice_["metadata"] = {**slice_["metadata"], "managedFields": [{"manager": "kubelet"}]}
    svc.state.apply("ResourceSlice", slice_)

    async def flow(client: httpx.AsyncClient) -> httpx.Response:
        assert await bind_call(client, svc.pod("a"), "node-0") == ""
        assert await bind_call(client, svc.pod("b"), "node-1") == ""
        waits = svc.pod("waits")
        waits["status"]["nominatedNodeName"] = "node-1"
        svc.cluster.apply(waits)
        return await client.get("/debug/snapshot")

    response = svc.run(flow)
    assert response.status_code == 200
    body = response.json()
    assert body["kind"] == "List"
    assert all("managedFields" not in o["metadata"] for o in body["items"])
    # JSON is YAML: saved as it comes, it is a state directory.
    (tmp_path / "cluster.yaml").write_bytes(response.content)
    copy = ClusterState(svc.config.feature_gates)
    load_local(copy, tmp_path)

    def view(state: ClusterState) -> dict[str, Any]:
        return {
            "in use": sorted(state.inuse.devices),
            "claims": {c.key: (c.allocation, sorted(r.uid for r in c.reserved_for))
                       for c in state.claims.values()},
            "pods": {p.ref: (p.uid, p.node_name, p.nominated_node) for p in state.pods.values()},
            "nodes": sorted(state.nodes),
            "slices": len(state.items("ResourceSlice")),
        }

    assert view(copy) == view(svc.state)
    assert len(view(copy)["in use"]) == 2
