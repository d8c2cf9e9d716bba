"""A verdict shared between pods of one template names, in each pod's reason, that pod's own
claims: what is shared is the node's answer, never another pod's words."""

from __future__ import annotations

from typing import Any

import pytest

from extender.scheduling.claims import pod_for_request
from extender.scheduling.filter import filter_nodes
from tests.scheduling.cluster import claim_spec, gpu_cluster, local_context, pod, request, template


def _two_requests_on_one_gpu_nodes() -> list[dict[str, Any]]:
    """Each request alone fits a node's one GPU, the two together do not: the allocator's
    reason is the whole claim's ("no combination"), not one request's shortfall."""
    objects = gpu_cluster(nodes=2, per_node=1)
    objects.append(template("pair", claim_spec(request("a"), request("b"))))
    objects += [pod(f"gn-{i}", templates={"dev": "pair"}) for i in range(2)]
    return objects


@pytest.mark.parametrize("nodes", [["node-0", "node-1"], ["node-1"]])
def test_a_shared_rejection_names_the_asking_pods_claim(nodes: list[str]) -> None:
    ctx, _ = local_context(_two_requests_on_one_gpu_nodes())
    reasons = {}
    for name in ("gn-0", "gn-1"):
        info = ctx.state.pod("default", name)
        assert info is not None
        claim_name = info.claim_statuses["dev"]
        result = filter_nodes(ctx, pod_for_request(ctx.state, dict(info.raw)), nodes)
        assert result.passed == []
        rejected = {**result.failed, **result.unresolvable}
        assert set(rejected) == set(nodes)
        for node_name, reason in rejected.items():
            assert f"default/{claim_name}" in reason, (name, node_name, reason)
            other = "gn-1" if name == "gn-0" else "gn-0"
            assert f"/{other}-" not in reason, (name, node_name, reason)
        reasons[name] = rejected
    # The second pod read the first one's verdicts: the same answer, in its own words.
    assert reasons["gn-0"].keys() == reasons["gn-1"].keys()
