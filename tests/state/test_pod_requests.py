"""Pod requests with what devices add (DRANodeAllocatableResources), and the per-node index.

The arithmetic cases follow upstream's component-helpers resource tests (TestPodRequests with
``UseDRANodeAllocatableResourceClaimStatus``, kubernetes/kubernetes 0411cc704533): mapped
quantities and per-pod overhead for the pod's lifetime, per-container overhead where the
referencing container runs, init containers one after the other, sidecars alongside.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from extender.state.pod_requests import NodeRequests, in_units, parse_footprints, pod_requests

GI = 1024**3


def container(name: str, restart: str | None = None, **requests: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "resources": {"requests": requests}}
    if restart:
        out["restartPolicy"] = restart
    return out


def pod(
    containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None, **status: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers}
    if init:
        spec["initContainers"] = init
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": spec, "status": status}


def statuses(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAllocatableResourceClaimStatuses": list(entries)}


def requests_of(obj: dict[str, Any], use_status: bool = False) -> dict[str, Fraction]:
    return pod_requests(obj, parse_footprints(obj["status"], "default/p"), use_status)


def test_no_claims_is_the_containers_sum():
    obj = pod([container("c1", cpu="100m", memory="1Gi"), container("c2", cpu="200m")])
    assert requests_of(obj) == {"cpu": Fraction(3, 10), "memory": GI}


def test_a_mapping_adds_to_the_pod_whatever_container_references_it():
    # Upstream: "Single claim on one container": 100m + 50m CPU, 2 + 1 hugepages.
    obj = pod(
        [container("c1", cpu="100m", memory="1Gi", **{"hugepages-1Gi": "2"})],
        **statuses(
            {
                "resourceClaimName": "claim-1",
                "containers": ["c1"],
                "mapping": [{"name": "cpu", "quantity": "50m"}, {"name": "hugepages-1Gi", "quantity": "1"}],
            }
        ),
    )
    assert requests_of(obj) == {"cpu": Fraction(15, 100), "memory": GI, "hugepages-1Gi": 3}


def test_per_container_overhead_counts_where_the_referencing_container_runs():
    # Two init containers run one after the other; only the one that references the claim pays
    # its per-container overhead, and the larger init peak wins over the regular containers.
    obj = pod(
        [container("main", memory="1Gi")],
        init=[container("init-a", memory="1Gi"), container("init-b", memory="1Gi")],
        **statuses(
            {
                "resourceClaimName": "gpu",
                "containers": ["init-b", "main"],
                "overhead": [{"name": "memory", "perPod": "256Mi", "perContainer": "2Gi"}],
            }
        ),
    )
    # max(init-a 1Gi, init-b 1Gi + 2Gi, main 1Gi + 2Gi) + per pod 256Mi
    assert requests_of(obj)["memory"] == 3 * GI + 256 * 1024**2


def test_a_sidecars_overhead_stays_for_later_init_containers_and_the_regular_ones():
    obj = pod(
        [container("main", cpu="1")],
        init=[container("side", restart="Always", cpu="1"), container("setup", cpu="3")],
        **statuses(
            {
                "resourceClaimName": "c",
                "containers": ["side"],
                "overhead": [{"name": "cpu", "perContainer": "500m"}],
            }
        ),
    )
    # setup runs beside the sidecar: 3 + 1.5 = 4.5; afterwards main + sidecar = 2.5.
    assert requests_of(obj)["cpu"] == Fraction(9, 2)


def test_a_reference_to_an_unknown_container_counts_for_the_whole_pod():
    obj = pod(
        [container("main", memory="1Gi")],
        **statuses(
            {
                "resourceClaimName": "c",
                "containers": ["main", "gone", "gone-too"],
                "overhead": [{"name": "memory", "perContainer": "1Gi"}],
            }
        ),
    )
    assert requests_of(obj)["memory"] == 4 * GI


def test_pod_level_requests_win_and_pod_overhead_adds():
    obj = pod([container("main", cpu="1", memory="1Gi")])
    obj["spec"]["resources"] = {"requests": {"cpu": "3"}}
    obj["spec"]["overhead"] = {"cpu": "250m"}
    assert requests_of(obj) == {"cpu": Fraction(13, 4), "memory": GI}


def test_a_limit_without_a_request_requests_the_limit():
    obj = pod([{"name": "main", "resources": {"limits": {"cpu": "2"}}}])
    assert requests_of(obj) == {"cpu": 2}


def test_a_bound_pod_counts_the_larger_of_its_spec_and_what_kubelet_allocated():
    obj = pod(
        [container("main", cpu="1")],
        containerStatuses=[{"name": "main", "allocatedResources": {"cpu": "2"}}],
    )
    assert requests_of(obj) == {"cpu": 1}
    assert requests_of(obj, use_status=True) == {"cpu": 2}


def test_units_are_milli_cpu_and_whole_bytes_rounded_up():
    assert in_units({"cpu": Fraction(1, 3000), "memory": Fraction(5, 2)}) == {"cpu": 1, "memory": 3}


@pytest.mark.parametrize(
    "status",
    [
        {"nodeAllocatableResourceClaimStatuses": "x"},
        {"nodeAllocatableResourceClaimStatuses": [{"mapping": [{"name": "cpu", "quantity": "lots"}]}]},
        {"nodeAllocatableResourceClaimStatuses": [{"containers": "main"}]},
    ],
)
def test_a_malformed_status_is_refused_with_the_field(status):
    with pytest.raises(ValueError, match=r"status\.nodeAllocatableResourceClaimStatuses"):
        parse_footprints(status, "default/p")


def test_the_node_index_keeps_an_assumed_pod_until_the_watch_shows_it_bound():
    index = NodeRequests()
    key = ("default", "a")
    index.assume(key, "node-0", {"cpu": 3000})
    # The echo of the pod's status write comes before the Binding's: still counted.
    index.put(key, "", False, None)  # Pending
    assert index.requested("node-0") == {"cpu": 3000}
    index.put(key, "node-0", False, {"cpu": 3000})  # Running
    assert index.requested("node-0") == {"cpu": 3000}
    assert index.requested("node-0", excluding=key) == {"cpu": 0}
    index.put(key, "node-0", True, None)  # Succeeded
    assert index.requested("node-0") == {}


def test_the_node_index_drops_an_assumed_pod_that_is_deleted():
    index = NodeRequests()
    index.assume(("default", "a"), "node-0", {"cpu": 1000})
    index.put(("default", "b"), "node-0", False, {"cpu": 500, "memory": 10})  # Running
    index.drop(("default", "a"))
    assert index.requested("node-0") == {"cpu": 500, "memory": 10}


def test_units_of_a_bound_pod_include_its_recorded_footprint():
    obj = pod(
        [container("main", cpu="1")],
        **statuses(
            {"resourceClaimName": "c", "containers": ["main"], "mapping": [{"name": "cpu", "quantity": "2"}]}
        ),
    )
    assert NodeRequests.units_of(obj) == {"cpu": 3000}
