"""loadtest.kube_startup: a real `serve --kube` against the test API server, seeded with a workload."""

from __future__ import annotations

import pytest

from loadtest.kube_startup import cluster_objects, main


def test_the_cluster_has_each_pods_claim_recorded() -> None:
    objects = cluster_objects(nodes=2, devices_per_node=2, pods=3)
    kinds = [o["kind"] for o in objects]
    assert kinds.count("Node") == 2 and kinds.count("Pod") == 3 and kinds.count("ResourceClaim") == 3
    claims = {o["metadata"]["name"] for o in objects if o["kind"] == "ResourceClaim"}
    recorded = {s["resourceClaimName"] for o in objects if o["kind"] == "Pod"
                for s in o["status"]["resourceClaimStatuses"]}
    assert recorded == claims
    assert all("resourceVersion" not in o["metadata"] for o in objects)


def test_a_tiny_cluster_starts_and_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--nodes", "2", "--devices-per-node", "2", "--pods", "3"]) == 0
    assert "--kube, 2 nodes x 2 devices, 3 pods" in capsys.readouterr().out
