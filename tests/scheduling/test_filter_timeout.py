"""The per-node filter timeout follows DRASchedulerFilterTimeout, as upstream's Filter does."""

from __future__ import annotations

from typing import Any

from extender.config import parse_feature_gates
from tests.scheduling.cluster import Service, claim, filter_call, gpu_cluster, pod

TIMEOUT = "timed out trying to allocate devices"


def _filter(**config: Any) -> dict[str, Any]:
    svc = Service([*gpu_cluster(nodes=2), claim("c"), pod("p", claims={"c": "c"})], **config)
    return svc.run(lambda client: filter_call(client, svc.pod("p"), svc.node_names()))


def test_with_the_gate_on_a_node_over_its_limit_fails_and_the_default_limit_is_generous() -> None:
    assert _filter()["NodeNames"] == ["node-0", "node-1"]
    # A limit no allocation can meet stands for a node whose search takes too long.
    result = _filter(node_filter_timeout_s=1e-9)
    assert result["NodeNames"] == []
    failed = {**result["FailedNodes"], **result["FailedAndUnresolvableNodes"]}
    assert failed == {"node-0": TIMEOUT, "node-1": TIMEOUT}


def test_with_the_gate_off_only_the_request_budget_applies() -> None:
    off = parse_feature_gates("DRASchedulerFilterTimeout=false")
    assert _filter(node_filter_timeout_s=1e-9, feature_gates=off)["NodeNames"] == ["node-0", "node-1"]
