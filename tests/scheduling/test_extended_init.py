"""Init containers and sidecars sharing the extended-resource claim's requests.

Upstream (kubernetes/kubernetes ``pkg/scheduler/framework/plugins/dynamicresources/
extendeddynamicresources.go``, ``createRequestsAndMappings``): init containers that are not
sidecars run one after another, so only the largest of their requests is made and the others
map to it; an init container first uses the requests of the long-lived containers (sidecars and
regular containers) after it, and asks only for what those leave short. The cases below are
those of upstream's ``Test_createRequestsAndMappings_requests`` and ``..._mappings`` tables
(extendeddynamicresources_test.go), with the same container names as its pod builder gives.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.model.extended import EXTENDED_RESOURCE_CLAIM_ANNOTATION
from extender.model.pods import parse_pod
from extender.scheduling.extended_resources.claim import in_memory_claim, mappings_of, requests_and_mappings
from tests.scheduling.cluster import (
    DRIVER,
    Service,
    allocated_devices,
    claim,
    device_class,
    filter_call,
    gpus,
    node,
    node_slice,
    schedule,
)

R = "example.com/gpu"
R1 = "example.com/gpu1"
RI = "example.com/gpuinit"
IMPLICIT = "deviceclass.resource.kubernetes.io/class-init"
CLASSES = {R: "class", R1: "class1", RI: "class-init", IMPLICIT: "class-init"}

Spec = tuple[str, dict[str, str]]  # ("con" | "init" | "sidecar", requests)


def con(**requests: str) -> Spec:
    return ("con", _names(requests))


def init(**requests: str) -> Spec:
    return ("init", _names(requests))


def sidecar(**requests: str) -> Spec:
    return ("sidecar", _names(requests))


def _names(requests: dict[str, str]) -> dict[str, str]:
    aliases = {"r": R, "r1": R1, "ri": RI, "implicit": IMPLICIT}
    return {aliases.get(k, k): v for k, v in requests.items()}


def pod_obj(name: str, *containers: Spec) -> dict[str, Any]:
    """Containers named as upstream's test pod builder names them: ``con<i>`` for regular ones,
    ``init-con<i>`` / ``sidecar-con<i>`` by their index among the init containers."""
    inits: list[dict[str, Any]] = []
    regular: list[dict[str, Any]] = []
    for kind, requests in containers:
        item: dict[str, Any] = {"image": "img", "resources": {"requests": dict(requests)}}
        if kind == "con":
            item["name"] = f"con{len(regular)}"
            regular.append(item)
        else:
            item["name"] = f"{kind}-con{len(inits)}"
            if kind == "sidecar":
                item["restartPolicy"] = "Always"
            inits.append(item)
    spec: dict[str, Any] = {"schedulerName": "dra-extender-scheduler", "containers": regular}
    if inits:
        spec["initContainers"] = inits
    meta = {"name": name, "namespace": "default"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def parsed(*containers: Spec) -> Any:
    obj = pod_obj("p", *containers)
    obj["metadata"]["uid"] = "u"
    return parse_pod(obj)


def test_only_an_init_container_restarting_always_is_a_sidecar():
    obj = pod_obj("p", init(r="1"), sidecar(r="1"), con(r="1"))
    obj["spec"]["containers"][0]["restartPolicy"] = "Always"  # not an init container: no sidecar
    obj["spec"]["initContainers"][0]["restartPolicy"] = "OnFailure"
    assert [(c.name, c.init, c.sidecar) for c in parse_pod(obj).containers] == [
        ("init-con0", True, False), ("sidecar-con1", True, True), ("con0", False, False)
    ]


def test_restart_policy_of_the_wrong_type_is_a_clear_error():
    obj = pod_obj("p", sidecar(r="1"))
    obj["spec"]["initContainers"][0]["restartPolicy"] = ["Always"]
    with pytest.raises(ValueError, match=r"spec.initContainers\[0\].restartPolicy: must be a string"):
        parse_pod(obj)


POD1 = (con(r="1", r1="2"),)
POD2 = (con(r="1"), con(r1="2"))
POD_INIT = (con(r="1"), init(ri="2"))
POD_INIT2 = (con(r="1"), init(ri="1"), init(ri="2"))
POD_INIT3 = (con(r="1"), init(ri="1"), sidecar(ri="1"), init(ri="2"))
POD1_INIT_IMPLICIT = (init(ri="1", implicit="2"),)
POD_INIT_IMPLICIT = (con(r="1"), init(ri="1"), init(implicit="2"))


@pytest.mark.parametrize(
    ("containers", "via_dra", "want"),
    [
        pytest.param(POD1, (), [], id="nil"),
        pytest.param(POD1, (R,), [("container-0-request-0", "class", 1)], id="one resource match"),
        pytest.param(
            POD1, (R, R1), [("container-0-request-0", "class", 1), ("container-0-request-1", "class1", 2)],
            id="two resources match",
        ),
        pytest.param(
            POD2, (R, R1), [("container-0-request-0", "class", 1), ("container-1-request-0", "class1", 2)],
            id="two containers match",
        ),
        pytest.param(
            POD_INIT, (R, RI),
            [("container-0-request-0", "class-init", 2), ("container-1-request-0", "class", 1)],
            id="one init container, one regular container",
        ),
        pytest.param(
            POD_INIT2, (R, RI),
            [("container-1-request-0", "class-init", 2), ("container-2-request-0", "class", 1)],
            id="two init containers, one regular container",
        ),
        pytest.param(
            POD_INIT3, (R, RI),
            [("container-1-request-0", "class-init", 1), ("container-2-request-0", "class-init", 2),
             ("container-3-request-0", "class", 1)],
            id="three init containers, one sidecar, one regular container",
        ),
    ],
)
def test_requests_as_upstream_makes_them(containers, via_dra, want):
    requests, _ = requests_and_mappings(parsed(*containers), via_dra, CLASSES)
    assert [(r["name"], r["exactly"]["deviceClassName"], r["exactly"]["count"]) for r in requests] == want
    assert all(r["exactly"]["allocationMode"] == "ExactCount" for r in requests)


@pytest.mark.parametrize(
    ("containers", "via_dra", "want"),
    [
        pytest.param(
            POD1, (R, R1), [("con0", R, "container-0-request-0"), ("con0", R1, "container-0-request-1")],
            id="one container, two requests",
        ),
        pytest.param(
            # The implicit name sorts first among the container's requests, and first among resources.
            POD1_INIT_IMPLICIT, (R, RI, IMPLICIT),
            [("init-con0", IMPLICIT, "container-0-request-0"), ("init-con0", RI, "container-0-request-1")],
            id="one container, one explicit and one implicit request",
        ),
        pytest.param(
            POD2, (R, R1), [("con0", R, "container-0-request-0"), ("con1", R1, "container-1-request-0")],
            id="two containers, two requests",
        ),
        pytest.param(
            POD_INIT, (R, RI),
            [("con0", R, "container-1-request-0"), ("init-con0", RI, "container-0-request-0")],
            id="one init container, one regular container, one request",
        ),
        pytest.param(
            POD_INIT2, (R, RI),
            [("con0", R, "container-2-request-0"), ("init-con0", RI, "container-1-request-0"),
             ("init-con1", RI, "container-1-request-0")],
            id="three containers (two are init container), two requests",
        ),
        pytest.param(
            # Two names of one class are still two resources: no sharing across them.
            POD_INIT_IMPLICIT, (R, RI, IMPLICIT),
            [("init-con1", IMPLICIT, "container-1-request-0"), ("con0", R, "container-2-request-0"),
             ("init-con0", RI, "container-0-request-0")],
            id="three containers (two are init container), both explicit and implicit resources",
        ),
        pytest.param(
            POD_INIT3, (R, RI),
            [("con0", R, "container-3-request-0"), ("sidecar-con1", RI, "container-1-request-0"),
             ("init-con0", RI, "container-1-request-0"), ("init-con2", RI, "container-2-request-0")],
            id="four containers (two are init container, one sidecar), three requests",
        ),
    ],
)
def test_mappings_as_upstream_makes_them(containers, via_dra, want):
    """Resource by resource (sorted); long-lived containers first, then the init ones."""
    _, mappings = requests_and_mappings(parsed(*containers), via_dra, CLASSES)
    assert [(m["containerName"], m["resourceName"], m["requestName"]) for m in mappings] == want


def test_init_container_uses_later_long_lived_requests_and_asks_only_for_the_rest():
    # init-con0 needs 3: the sidecar's 1 and con0's 1 after it, plus 1 of its own.
    pod = parsed(init(r="3"), sidecar(r="1"), con(r="1"))
    requests, mappings = requests_and_mappings(pod, (R,), CLASSES)
    assert [(r["name"], r["exactly"]["count"]) for r in requests] == [
        ("container-0-request-0", 1), ("container-1-request-0", 1), ("container-2-request-0", 1)
    ]
    assert [(m["containerName"], m["requestName"]) for m in mappings] == [
        ("sidecar-con1", "container-1-request-0"),
        ("con0", "container-2-request-0"),
        ("init-con0", "container-1-request-0"),
        ("init-con0", "container-2-request-0"),
        ("init-con0", "container-0-request-0"),
    ]


def test_a_sidecar_before_an_init_container_is_not_reused_by_it():
    # The sidecar started first, so it still holds its device while init-con1 runs.
    pod = parsed(sidecar(r="1"), init(r="1"))
    requests, mappings = requests_and_mappings(pod, (R,), CLASSES)
    assert [(r["name"], r["exactly"]["count"]) for r in requests] == [
        ("container-0-request-0", 1), ("container-1-request-0", 1)
    ]
    assert [(m["containerName"], m["requestName"]) for m in mappings] == [
        ("sidecar-con0", "container-0-request-0"), ("init-con1", "container-1-request-0")
    ]


def test_init_requests_are_compared_by_what_they_still_ask_for_and_the_first_largest_wins():
    # init-con0 asks 3 but gets 2 from the sidecar, so asks 1 of its own; init-con2 asks 2.
    # Equal remainders (init-con3 also 2) keep the first one.
    pod = parsed(init(r="3"), sidecar(r="2"), init(r="2"), init(r="2"))
    requests, mappings = requests_and_mappings(pod, (R,), CLASSES)
    assert [(r["name"], r["exactly"]["count"]) for r in requests] == [
        ("container-1-request-0", 2), ("container-2-request-0", 2)
    ]
    assert [(m["containerName"], m["requestName"]) for m in mappings] == [
        ("sidecar-con1", "container-1-request-0"),
        ("init-con0", "container-1-request-0"),
        ("init-con0", "container-2-request-0"),
        ("init-con2", "container-2-request-0"),
        ("init-con3", "container-2-request-0"),
    ]


def test_mappings_of_a_claim_read_back_with_shared_requests():
    pod = parsed(*POD_INIT3)
    extended = in_memory_claim(pod, (R, RI), CLASSES)
    assert mappings_of(pod, extended.claim) == list(extended.mappings)


def test_mappings_of_a_claim_with_requests_the_pod_would_not_make_is_an_error():
    # One request per container, as before init containers shared: not what the pod makes.
    pod = parsed(*POD_INIT2)
    old = in_memory_claim(parsed(con(ri="1"), con(ri="2"), con(r="1")), (R, RI), CLASSES)
    assert [r.name for r in old.claim.requests] == [
        "container-0-request-0", "container-1-request-0", "container-2-request-0"
    ]
    with pytest.raises(ValueError, match="requests container-0-request-0, container-1-request-0, "
                                         "container-2-request-0 are not those pod default/p makes"):
        mappings_of(pod, old.claim)


# Through filter and bind on a local cluster.


def classes_and_node(devices: int) -> list[dict[str, Any]]:
    """Two classes over the same devices, so the node's count is what all requests share."""
    gpu_class, init_class = device_class("class"), device_class("class-init")
    gpu_class["spec"]["extendedResourceName"] = R
    init_class["spec"]["extendedResourceName"] = RI
    return [gpu_class, init_class, node("n"), node_slice("n", gpus(devices))]


def requests_of(written: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [(r["name"], r["exactly"]["deviceClassName"], r["exactly"]["count"])
            for r in written["spec"]["devices"]["requests"]]


def mappings_in_status(svc: Service, name: str) -> list[tuple[str, str, str]]:
    status = svc.pod(name)["status"]["extendedResourceClaimStatus"]
    return [(m["containerName"], m["resourceName"], m["requestName"]) for m in status["requestMappings"]]


def test_two_init_containers_share_one_request_and_fit_three_devices():
    svc = Service([*classes_and_node(3), pod_obj("p", *POD_INIT2)])
    assert svc.run(lambda c: schedule(c, svc.pod("p"), ["n"])) == ("n", "")
    [(name, written)] = svc.claims().items()
    assert requests_of(written) == [
        ("container-1-request-0", "class-init", 2), ("container-2-request-0", "class", 1)
    ]
    assert len(set(allocated_devices([written]))) == 3
    assert svc.pod("p")["status"]["extendedResourceClaimStatus"]["resourceClaimName"] == name
    assert mappings_in_status(svc, "p") == [
        ("con0", R, "container-2-request-0"),
        ("init-con0", RI, "container-1-request-0"),
        ("init-con1", RI, "container-1-request-0"),
    ]


def test_three_init_containers_and_a_sidecar_fit_four_devices():
    svc = Service([*classes_and_node(4), pod_obj("p", *POD_INIT3)])
    assert svc.run(lambda c: schedule(c, svc.pod("p"), ["n"])) == ("n", "")
    [written] = svc.claims().values()
    assert requests_of(written) == [
        ("container-1-request-0", "class-init", 1),
        ("container-2-request-0", "class-init", 2),
        ("container-3-request-0", "class", 1),
    ]
    assert len(set(allocated_devices([written]))) == 4
    assert mappings_in_status(svc, "p") == [
        ("con0", R, "container-3-request-0"),
        ("sidecar-con1", RI, "container-1-request-0"),
        ("init-con0", RI, "container-1-request-0"),
        ("init-con2", RI, "container-2-request-0"),
    ]


def test_three_devices_are_too_few_for_the_sidecar_pod():
    svc = Service([*classes_and_node(3), pod_obj("p", *POD_INIT3)])
    result = svc.run(lambda c: filter_call(c, svc.pod("p"), ["n"]))
    assert result["NodeNames"] == []
    assert svc.claims() == {}


def test_adopted_claim_with_shared_requests_gets_upstreams_mappings_in_the_status():
    svc = Service([*classes_and_node(3), pod_obj("p", *POD_INIT2)])
    p = svc.pod("p")
    uid = p["metadata"]["uid"]
    earlier = claim("p-extended-resources-xyz12", {"devices": {"requests": [
        {"name": "container-1-request-0", "exactly": {"deviceClassName": "class-init", "count": 2}},
        {"name": "container-2-request-0", "exactly": {"deviceClassName": "class", "count": 1}},
    ]}})
    earlier["metadata"]["annotations"] = {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}
    earlier["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": uid, "controller": True}
    ]
    earlier["status"] = {
        "allocation": {"devices": {"results": [
            {"request": "container-1-request-0", "driver": DRIVER, "pool": "n", "device": "gpu-0"},
            {"request": "container-1-request-0", "driver": DRIVER, "pool": "n", "device": "gpu-1"},
            {"request": "container-2-request-0", "driver": DRIVER, "pool": "n", "device": "gpu-2"},
        ]}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": uid}],
    }
    svc.cluster.apply(earlier)

    assert svc.run(lambda c: schedule(c, p, ["n"])) == ("n", "")
    assert list(svc.claims()) == ["p-extended-resources-xyz12"]
    assert mappings_in_status(svc, "p") == [
        ("con0", R, "container-2-request-0"),
        ("init-con0", RI, "container-1-request-0"),
        ("init-con1", RI, "container-1-request-0"),
    ]
