"""Bad requests get a 4xx with a message on every verb; hostile cluster data gets a reason, not a crash."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.api.routes import MAX_NODES, MAX_VICTIMS_PER_NODE
from extender.cli import _parser, config_from_args
from extender.config import BODY_LIMITS, ConfigError
from tests.reliability.figures import record
from tests.scheduling.cluster import (
    Service,
    claim,
    claim_spec,
    device_class,
    gpu,
    gpu_cluster,
    node,
    node_slice,
    pod,
    request,
    template,
)

VERBS = ("/filter", "/prioritize", "/bind", "/preempt")


@pytest.fixture(scope="module")
def svc() -> Service:
    return Service([*gpu_cluster(nodes=2), claim("c"), pod("p", claims={"gpu": "c"})])


def valid_body(svc: Service, verb: str) -> dict[str, Any]:
    meta = svc.pod("p")["metadata"]
    if verb == "/bind":
        return {"PodName": "p", "PodNamespace": "default", "PodUID": meta["uid"], "Node": "node-0"}
    body: dict[str, Any] = {
        "Pod": {"metadata": {"name": "p", "namespace": "default"}},
        "NodeNames": ["node-0"],
    }
    if verb == "/preempt":
        body = {"Pod": body["Pod"], "NodeNameToMetaVictims": {"node-0": {"Pods": [], "NumPDBViolations": 0}}}
    return body


def post(svc: Service, verb: str, content: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    async def call(client: httpx.AsyncClient) -> httpx.Response:
        # A hang is a failure too: nothing here may take more than a few seconds.
        return await asyncio.wait_for(client.post(verb, content=content, headers=headers), 10)

    response = svc.run(call)
    record("bad inputs tried")
    record("5xx seen", int(response.status_code >= 500))
    return response


def assert_refused(response: httpx.Response, status: int, fragment: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert fragment in error, error


CASES: list[tuple[str, str, Any, int, str]] = []
for verb in VERBS:
    name = verb.strip("/")
    CASES += [
        (verb, "empty", b"", 400, "empty request body"),
        (verb, "truncated JSON", b'{"Pod": {', 400, "not valid JSON"),
        (verb, "not UTF-8", b"\xff\xfe{}", 400, "not valid JSON"),
        (verb, "array instead of object", b"[1, 2]", 400, "expected a JSON object"),
        (verb, "number instead of object", b"42", 400, "expected a JSON object"),
        (verb, "NaN literal", b'{"Pod": NaN}', 400, "not valid JSON"),
        (verb, "deeply nested", b"[" * 100_000 + b"]" * 100_000, 400, name),
    ]
for verb in ("/filter", "/prioritize", "/preempt"):
    CASES += [
        (verb, "missing Pod", {"NodeNames": ["node-0"]}, 400, "Pod: required"),
        (verb, "Pod of the wrong type", {"Pod": "p", "NodeNames": []}, 400, "Pod: expected an object"),
        (
            verb,
            "pod name of the wrong type",
            {"Pod": {"metadata": {"name": 7}}, "NodeNames": []},
            400,
            "Pod.metadata.name",
        ),
        (
            verb,
            "unknown pod with no spec",
            {"Pod": {"metadata": {"name": "ghost"}}, "NodeNames": ["node-0"], "NodeNameToMetaVictims": {}},
            404,
            "ghost is not known",
        ),
    ]
for verb in ("/filter", "/prioritize", "/preempt"):
    # Text that is not UTF-8 inside the pod, in the spelling kube-scheduler writes and another.
    go = b'{"Pod":{"metadata":{"name":"p\xff"}},' + (
        b'"NodeNameToMetaVictims":{}}' if verb == "/preempt"
        else b'"Nodes":{"metadata":{},"items":[{"metadata":{"name":"node-0"}}]},"NodeNames":null}'
    )
    CASES += [
        (verb, "not UTF-8 in the Pod", go, 400, "not valid JSON"),
        (
            verb,
            "not UTF-8 in the Pod's spec",
            b'{"pod": {"metadata": {"name": "p"}, "spec": {"containers": [{"image": "\xc3"}]}},'
            b' "nodeNames": ["node-0"], "nodeNameToMetaVictims": {}}',
            400,
            "not valid JSON",
        ),
        (
            verb,
            "lone surrogate in the Pod",
            b'{"Pod": {"metadata": {"name": "p\\ud800"}}, "NodeNames": [], "NodeNameToMetaVictims": {}}',
            400,
            "not valid JSON",
        ),
    ]
for verb in ("/filter", "/prioritize"):
    CASES += [
        (
            verb,
            "not UTF-8 in NodeNames",
            b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["\xff"]}',
            400,
            "not valid JSON",
        ),
        (
            verb,
            "not UTF-8 in a node",
            b'{"Pod": {"metadata": {"name": "p"}},'
            b' "Nodes": {"items": [{"metadata": {"name": "\xed\xa0\x80"}}]}}',
            400,
            "not valid JSON",
        ),
        (
            verb,
            "NodeNames of the wrong type",
            {"Pod": {"metadata": {"name": "p"}}, "NodeNames": {"a": 1}},
            400,
            "NodeNames",
        ),
        (
            verb,
            "absurd NodeNames",
            {"Pod": {"metadata": {"name": "p"}}, "NodeNames": [f"n{i}" for i in range(MAX_NODES + 1)]},
            400,
            "limit",
        ),
        (verb, "no node list", {"Pod": {"metadata": {"name": "p"}}}, 400, "one of NodeNames or Nodes"),
    ]
CASES += [
    ("/bind", "missing PodName", {"Node": "node-0"}, 400, "PodName: required"),
    ("/bind", "missing Node", {"PodName": "p"}, 400, "Node: required"),
    ("/bind", "Node of the wrong type", {"PodName": "p", "Node": ["node-0"]}, 400, "Node: expected a string"),
    ("/bind", "PodUID of the wrong type", {"PodName": "p", "Node": "node-0", "PodUID": 3}, 400, "PodUID"),
    (
        "/preempt",
        "victims of the wrong type",
        {"Pod": {"metadata": {"name": "p"}}, "NodeNameToMetaVictims": []},
        400,
        "expected an object",
    ),
    (
        "/preempt",
        "absurd victim list",
        {
            "Pod": {"metadata": {"name": "p"}},
            "NodeNameToMetaVictims": {
                "node-0": {"Pods": [{"UID": f"u{i}"} for i in range(MAX_VICTIMS_PER_NODE + 1)]}
            },
        },
        400,
        "limit",
    ),
    (
        "/preempt",
        "PDB count of the wrong type",
        {
            "Pod": {"metadata": {"name": "p"}},
            "NodeNameToMetaVictims": {"node-0": {"Pods": [], "NumPDBViolations": "many"}},
        },
        400,
        "NumPDBViolations",
    ),
]


@pytest.mark.parametrize(
    ("verb", "what", "body", "status", "fragment"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_every_verb_refuses_bad_requests_with_a_4xx_and_a_message(
    svc: Service, verb: str, what: str, body: Any, status: int, fragment: str
) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    assert_refused(post(svc, verb, content), status, fragment)


@pytest.mark.parametrize("verb", VERBS)
def test_oversized_bodies_are_refused_declared_or_streamed(verb: str) -> None:
    small = Service(gpu_cluster(nodes=1), body_limits=dict.fromkeys(BODY_LIMITS, 1_000))
    assert_refused(post(small, verb, b" " * 1_001), 400, "limit of 1000 bytes")

    async def stream(client: httpx.AsyncClient) -> httpx.Response:
        async def chunks() -> Any:
            for _ in range(10):
                yield b" " * 200

        return await client.post(verb, content=chunks())  # chunked: no Content-Length to trust

    assert_refused(small.run(stream), 400, "exceeds the limit")
    record("bad inputs tried")


def test_body_limits_are_per_route_by_default_and_a_flag() -> None:
    def limits(*flags: str) -> dict[str, int]:
        return dict(config_from_args(_parser().parse_args(["serve", *flags])).body_limits)

    assert limits() == BODY_LIMITS and limits()["bind"] == 64 * 1024
    assert limits("--max-body-bytes", "5") == dict.fromkeys(BODY_LIMITS, 5)
    assert limits("--max-body-bytes", "filter=2Mi,bind=1Ki") == {
        **BODY_LIMITS, "filter": 2 * 1024 * 1024, "bind": 1024
    }
    for bad in ("0", "filter=", "bond=5", "5MB"):
        with pytest.raises(ConfigError):
            limits("--max-body-bytes", bad)


@pytest.mark.parametrize("verb", ["/filter", "/prioritize", "/preempt"])
def test_a_full_pod_without_uid_asking_for_an_extended_resource_is_a_400(verb: str) -> None:
    """The claim made for a pod's extended resources is owned by the pod's UID: without one,
    the request lacks what the extender needs, which is the caller's fault, not a bug."""
    mapped = device_class()
    mapped["spec"]["extendedResourceName"] = "example.com/gpu"
    service = Service([mapped, node("node-0"), node_slice("node-0", [gpu("gpu-0")])])
    unknown = pod("newcomer")  # not in the cluster: the request's pod is all there is
    unknown["spec"]["containers"][0]["resources"] = {"requests": {"example.com/gpu": "1"}}
    body: dict[str, Any] = {"Pod": unknown, "NodeNames": ["node-0"]}
    if verb == "/preempt":
        body = {"Pod": unknown, "NodeNameToMetaVictims": {"node-0": {"Pods": [], "NumPDBViolations": 0}}}
    response = post(service, verb, json.dumps(body).encode())
    assert_refused(response, 400, "Pod.metadata.uid: required")
    assert "default/newcomer" in response.json()["error"] and "example.com/gpu" in response.json()["error"]
    # With its UID, the same pod is served; without one, a resource no class maps needs none.
    unknown["metadata"]["uid"] = "uid-newcomer"
    assert post(service, verb, json.dumps(body).encode()).status_code == 200
    del unknown["metadata"]["uid"]
    unknown["spec"]["containers"][0]["resources"] = {"requests": {"vendor.example.com/fpga": "1"}}
    assert post(service, verb, json.dumps(body).encode()).status_code == 200


def test_wrong_methods_and_paths_are_4xx(svc: Service) -> None:
    async def calls(client: httpx.AsyncClient) -> list[int]:
        return [
            (await client.get("/filter")).status_code,
            (await client.put("/bind", json={})).status_code,
            (await client.post("/nope", json={})).status_code,
        ]

    assert svc.run(calls) == [405, 405, 404]


def mutations(valid: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Bodies near a valid one: a field dropped, a value replaced, junk added, or anything at all."""
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
    values = st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
        max_leaves=12,
    )
    keys = list(valid)
    dropped = st.sampled_from(keys).map(lambda k: {x: v for x, v in valid.items() if x != k})
    replaced = st.tuples(st.sampled_from(keys), values).map(lambda kv: {**valid, kv[0]: kv[1]})
    extra = st.tuples(st.text(max_size=10), values).map(lambda kv: {**valid, kv[0]: kv[1]})
    return dropped | replaced | extra | values


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), verb=st.sampled_from(VERBS))
def test_fuzzed_bodies_get_a_definite_answer_and_never_a_5xx(
    svc: Service, data: st.DataObject, verb: str
) -> None:
    body = data.draw(mutations(valid_body(svc, verb)))
    response = post(svc, verb, json.dumps(body).encode())
    # A bind is refused in a 200 reply (kube-scheduler drops other bodies); 404 is a name-only pod.
    assert response.status_code in ((200, 400) if verb == "/bind" else (200, 400, 404)), response.text
    if response.status_code != 200:
        assert response.json()["error"]
    elif verb == "/bind":
        # a fuzzed bind that went through really bound the pod: undo it so the next example can bind
        assert response.json()["Error"] or svc.state.pod("default", "p").node_name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(verb=st.sampled_from(VERBS), raw=st.binary(max_size=200))
def test_random_bytes_never_get_a_5xx(svc: Service, verb: str, raw: bytes) -> None:
    response = post(svc, verb, raw)
    assert response.status_code in (200, 400, 404), response.text


def full_pod() -> dict[str, Any]:
    """A pod as kube-scheduler sends it, with every field the extender reads set: claims from a
    claim and a template, extended resources in an init and a regular container, statuses."""
    obj = pod("full", claims={"direct": "c"}, templates={"made": "one"})
    obj["metadata"].update(uid="uid-full", labels={"app": "x"}, annotations={"a": "b"})
    obj["spec"].update(
        priority=5,
        nodeName="",
        schedulingGroup={"podGroupName": "g"},
        initContainers=[
            {"name": "init", "restartPolicy": "Always", "resources": {"limits": {"example.com/gpu": "1"}}}
        ],
    )
    obj["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1", "example.com/gpu": "1"}}
    obj["status"] = {
        "phase": "Pending",
        "nominatedNodeName": "node-0",
        "startTime": "2024-01-01T00:00:00Z",
        "resourceClaimStatuses": [{"name": "made", "resourceClaimName": "full-made-abcde"}],
        "extendedResourceClaimStatus": {"resourceClaimName": "", "requestMappings": []},
    }
    return obj


def full_node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": {"zone": "a"}},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "8", "memory": "1Gi"},
            "declaredFeatures": ["F"],
            "images": [{"names": ["img"], "sizeBytes": 1}],
        },
    }


def paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``obj`` (the object itself excluded)."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    out = []
    for key, value in items:
        out += [(*prefix, key), *paths(value, (*prefix, key))]
    return out


def replaced(obj: Any, path: tuple[Any, ...], value: Any, drop: bool) -> Any:
    """``obj`` with the value at ``path`` replaced by ``value`` (or, in an object, dropped)."""
    copy = json.loads(json.dumps(obj))
    inner = copy
    for key in path[:-1]:
        inner = inner[key]
    if drop and isinstance(inner, dict):
        del inner[path[-1]]
    else:
        inner[path[-1]] = value
    return copy


@pytest.fixture(scope="module")
def rich() -> Service:
    mapped = device_class()
    mapped["spec"]["extendedResourceName"] = "example.com/gpu"
    return Service(
        [mapped, *gpu_cluster(nodes=2)[1:], claim("c"), template("one"), pod("p", claims={"gpu": "c"})]
    )


WRONG = [None, True, 0, -1, 2**64, 1.5, "", "x", [], ["x"], [{}], {}, {"x": 1}, {"": None}]
NOT_UTF8_BYTES = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"]


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), verb=st.sampled_from(["/filter", "/prioritize", "/preempt"]), go=st.booleans())
def test_a_full_pod_or_node_with_any_field_wrong_or_any_byte_bad_never_gets_a_5xx(
    rich: Service, data: st.DataObject, verb: str, go: bool
) -> None:
    """Near misses of what kube-scheduler sends: one field of the pod, of a node, or of the
    request replaced by a value of another type (or dropped), then maybe one byte sequence that
    is not UTF-8 put anywhere; in Go's spelling (the path that splits without decoding) or not."""
    body: dict[str, Any] = {"Pod": full_pod()}
    if verb == "/preempt":
        body["NodeNameToMetaVictims"] = {"node-0": {"Pods": [{"UID": "u"}], "NumPDBViolations": 0}}
    elif go:
        items = [full_node("node-0"), full_node("node-1")]
        body.update(Nodes={"metadata": {}, "items": items}, NodeNames=None)
    else:
        body["NodeNames"] = ["node-0", "node-1"]
    path = data.draw(st.sampled_from(paths(body)))
    body = replaced(body, path, data.draw(st.sampled_from(WRONG)), data.draw(st.booleans()))
    raw = json.dumps(body, separators=(",", ":")).encode()
    if data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(raw)))
        raw = raw[:at] + data.draw(st.sampled_from(NOT_UTF8_BYTES)) + raw[at:]
    response = post(rich, verb, raw)
    assert response.status_code in (200, 400, 404), response.text
    if response.status_code != 200:
        assert response.json()["error"]


# ----- hostile cluster data ----------------------------------------------------------------------


def hostile(expression: str | None = None, devices: list[dict[str, Any]] | None = None) -> Service:
    """One node whose claim asks for a device of class ``hostile``."""
    selector = expression or 'device.driver == "gpu.example.com"'
    return Service(
        [
            device_class(),
            device_class("hostile", selector),
            node("node-0"),
            node_slice("node-0", devices or [gpu("gpu-0")]),
            claim("c", claim_spec(request(device_class_name="hostile"))),
            pod("p", claims={"gpu": "c"}),
        ]
    )


def filter_reason(service: Service) -> tuple[list[str], str]:
    body = json.dumps({"Pod": service.pod("p"), "NodeNames": ["node-0"]}).encode()
    response = post(service, "/filter", body)
    assert response.status_code == 200, response.text
    reply = response.json()
    assert not reply["Error"]
    reasons = {**reply["FailedNodes"], **reply["FailedAndUnresolvableNodes"]}
    return reply["NodeNames"], reasons.get("node-0", "")


def big_list(n: int) -> str:
    return "[" + ",".join(str(i) for i in range(n)) + "]"


@pytest.mark.parametrize(
    ("what", "expression", "fragment"),
    [
        (
            "huge",
            " || ".join(f'device.attributes["gpu.example.com"].a{i} == "x"' for i in range(400)),
            "more than the maximum",
        ),
        ("deeply nested", "(" * 300 + "true" + ")" * 300, "CEL compile error"),
        (
            "expensive",
            f"{big_list(300)}.all(x, {big_list(300)}.all(y, {big_list(60)}.all(z, x + y + z >= 0)))",
            "cost limit",
        ),
        ("runtime error", "1 / 0 == 1", "division by zero"),
        ("not a boolean", '"yes"', "CEL"),
    ],
)
def test_hostile_selectors_make_the_claim_unschedulable_with_a_reason(
    what: str, expression: str, fragment: str
) -> None:
    service = hostile()
    # Through the path watch events take in --kube mode (local mode's /local/apply refuses a
    # selector over 10 KiB as the API server does, tests/local/test_validation.py).
    service.state.apply("DeviceClass", device_class("hostile", expression))
    passed, reason = filter_reason(service)
    assert passed == [] and fragment in reason and "class hostile" in reason, reason
    record("hostile cluster objects")


def test_a_slice_with_thousands_of_devices_is_served(svc: Service) -> None:
    many = [gpu(f"gpu-{i}") for i in range(4_000)]
    service = hostile()
    # Beyond the API's 128 devices per slice: only the watch path (--kube) could bring it in.
    service.state.apply("ResourceSlice", node_slice("node-0", many))
    passed, _ = filter_reason(service)
    assert passed == ["node-0"]
    record("hostile cluster objects")


@pytest.mark.parametrize(
    ("attribute", "expression", "fits"),
    [
        ({"string": "x" * 64}, 'device.attributes["gpu.example.com"].a.size() == 64', True),
        ({"int": 2**63 - 1}, 'device.attributes["gpu.example.com"].a + 1 > 0', False),  # overflow is an error
        ({"int": -(2**63)}, 'device.attributes["gpu.example.com"].a < 0', True),
        (
            {"version": "1.2.3-" + "a" * 58},
            'device.attributes["gpu.example.com"].a.isGreaterThan(semver("1.0.0"))',
            True,
        ),
    ],
)
def test_attribute_values_at_their_limits(attribute: dict[str, Any], expression: str, fits: bool) -> None:
    device = {"name": "gpu-0", "attributes": {"a": attribute}}
    passed, reason = filter_reason(hostile(expression, [device]))
    assert (passed == ["node-0"]) == fits, reason
    if not fits:
        assert "CEL runtime error" in reason, reason
    record("hostile cluster objects")


def test_an_out_of_range_integer_from_the_watch_makes_its_selector_fail_with_a_reason() -> None:
    service = hostile('device.attributes["gpu.example.com"].a > 0')
    bad = node_slice("node-0", [{"name": "gpu-0", "attributes": {"a": {"int": 2**64}}}])
    # The path watch events take in --kube mode: the slice is kept as the API server sent it, and
    # a selector reading the attribute fails on that device with a reason (never a crash, never
    # a fit the value does not support).
    service.state.apply("ResourceSlice", bad)
    passed, reason = filter_reason(service)
    assert passed == [], reason
    assert "CEL runtime error" in reason and "outside the int64 range" in reason, reason
    record("hostile cluster objects")
