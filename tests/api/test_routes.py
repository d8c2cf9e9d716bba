"""The HTTP surface: wire format in both node modes, casing, errors, health, debug."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.api import create_app
from extender.cel.environment import Environment
from extender.config import BODY_LIMITS, Config
from extender.local.binder import LocalBinder
from extender.local.cluster import LocalCluster
from extender.metrics import Metrics
from extender.model.kinds import KIND_NAMES
from extender.scheduling.context import SchedulingContext
from extender.state import ClusterState
from tests.scheduling.cluster import (
    Service,
    bind_call,
    claim,
    device_class,
    filter_call,
    gpu_cluster,
    gpus,
    node,
    node_slice,
    pod,
    template,
)


@pytest.fixture
def svc() -> Service:
    objs = [*gpu_cluster(nodes=2, per_node=1), template("one"), claim("c")]
    objs += [pod("p", templates={"gpu": "one"}), pod("q", claims={"c": "c"})]
    return Service(objs)


def test_filter_with_node_names(svc):
    async def call(client):
        body = {"Pod": svc.pod("p"), "Nodes": None, "NodeNames": ["node-1", "node-0"]}
        return (await client.post("/filter", json=body)).json()

    result = svc.run(call)
    assert result == {
        "Nodes": None,
        "NodeNames": ["node-1", "node-0"],
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }


def test_filter_and_prioritize_with_full_node_objects(svc):
    nodes = {
        "metadata": {},
        "items": [{"metadata": {"name": n, "labels": {"x": n}}} for n in ("node-0", "node-1")],
    }

    async def call(client):
        f = (
            await client.post("/filter", json={"Pod": svc.pod("p"), "Nodes": nodes, "NodeNames": None})
        ).json()
        p = (
            await client.post("/prioritize", json={"Pod": svc.pod("p"), "Nodes": nodes, "NodeNames": None})
        ).json()
        return f, p

    filtered, priorities = svc.run(call)
    assert filtered["NodeNames"] is None
    assert filtered["Nodes"] == nodes  # the objects as received, for the passing nodes
    assert sorted(h["Host"] for h in priorities) == ["node-0", "node-1"]
    assert all(0 <= h["Score"] <= 10 for h in priorities)


def test_full_node_objects_as_kube_scheduler_writes_them_are_echoed_byte_for_byte(svc):
    # Go's encoding/json: no spaces, Pod, Nodes, NodeNames null; nodes as the informer holds
    # them, longer than the text cache's prefix. The second filter finds them in place.
    nodes = [
        orjson.dumps({
            "metadata": {"name": n, "uid": f"uid-{n}", "annotations": {"note": "x" * 300}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        })
        for n in ("node-1", "node-0")
    ]
    body = (
        b'{"Pod":' + orjson.dumps(svc.pod("p")) + b',"Nodes":{"metadata":{},"items":['
        + b",".join(nodes) + b']},"NodeNames":null}'
    )

    async def call(client: httpx.AsyncClient) -> list[bytes]:
        return [(await client.post("/filter", content=body)).content for _ in range(2)]

    first, again = svc.run(call)
    assert first == again == (
        b'{"Nodes":{"metadata":{},"items":[' + b",".join(nodes) + b']},"NodeNames":null,'
        b'"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""}'
    )


def test_full_node_objects_decide_where_they_differ_from_the_cluster_s():
    # Devices on every node labelled rack=a: the cluster's node-0 has no labels yet, the
    # scheduler's copy already has the label; node-1 is the cluster's own, unchanged.
    pool = node_slice("rack-a", gpus(1))
    del pool["spec"]["nodeName"]
    pool["spec"]["nodeSelector"] = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["a"]}]}]
    }
    objs = [node("node-0"), node("node-1"), device_class(), pool, claim("c"), pod("p", claims={"g": "c"})]
    svc = Service(objs)

    def items(labels: dict[str, str]) -> dict[str, Any]:
        node_0 = {"metadata": {"name": "node-0", "labels": labels}}
        return {"items": [node_0, {"metadata": {"name": "node-1"}}]}

    async def call(client: httpx.AsyncClient, labels: dict[str, str]) -> dict[str, Any]:
        body = {"Pod": svc.pod("p"), "Nodes": items(labels), "NodeNames": None}
        return (await client.post("/filter", json=body)).json()

    as_cluster = svc.run(lambda c: call(c, {}))
    assert as_cluster["Nodes"] is None or as_cluster["Nodes"]["items"] == []
    rejected = {**as_cluster["FailedNodes"], **as_cluster["FailedAndUnresolvableNodes"]}
    assert set(rejected) == {"node-0", "node-1"}
    labelled = svc.run(lambda c: call(c, {"rack": "a"}))
    assert labelled["Nodes"]["items"] == [items({"rack": "a"})["items"][0]]
    assert as_cluster == svc.run(lambda c: call(c, {}))  # and back, the cluster's own objects again


def test_input_casing_is_free_and_output_is_pascal_case(svc):
    async def call(client):
        body = {"pod": svc.pod("p"), "nodenames": ["node-0"], "NODES": None}
        f = (await client.post("/filter", json=body)).json()
        meta = svc.pod("p")["metadata"]
        bind = {"podname": meta["name"], "PODNAMESPACE": "default", "podUID": meta["uid"], "node": "node-0"}
        b = (await client.post("/bind", json=bind)).json()
        return f, b

    filtered, bound = svc.run(call)
    assert filtered["NodeNames"] == ["node-0"]
    assert bound == {"Error": ""}
    assert svc.state.pod("default", "p").node_name == "node-0"


@pytest.mark.parametrize(
    ("path", "body", "fragment"),
    [
        ("/filter", b"", "empty request body"),
        ("/filter", b"{not json", "not valid JSON"),
        ("/filter", b"[]", "expected a JSON object"),
        ("/filter", b'{"NodeNames": ["a"]}', "Pod: required"),
        ("/filter", b'{"Pod": 7, "NodeNames": ["a"]}', "Pod: expected an object"),
        ("/filter", b'{"Pod": {"metadata": {}}, "NodeNames": ["a"]}', "Pod.metadata.name: required"),
        (
            "/filter",
            b'{"Pod": {"metadata": {"name": "x"}}, "NodeNames": "a"}',
            "NodeNames: expected an array",
        ),
        (
            "/filter",
            b'{"Pod": {"metadata": {"name": "x"}}, "NodeNames": null, "Nodes": null}',
            "one of NodeNames",
        ),
        ("/filter", b'{"Pod": {"metadata": {"name": "x"}}, "Nodes": {"items": [{}]}}', "Nodes.items[0]"),
        (
            "/filter",
            b'{"Pod": {"metadata": {"name": "x"}, "spec": []}, "NodeNames": []}',
            "spec: must be an object",
        ),
        ("/prioritize", b'{"Pod": {"metadata": {"name": "x"}}, "NodeNames": [1]}', "NodeNames"),
        (
            "/filter",
            b'{"Pod": {"metadata": {"name": "x"}}, '
            b'"Nodes": {"items": [{"metadata": {"name": "n", "labels": {"a": 1}}}]}}',
            "labels",
        ),
        ("/bind", b'{"PodName": "x"}', "Node: required"),
        ("/bind", b'{"PodName": "x", "Node": 5}', "Node: expected a string"),
        ("/preempt", b'{"Pod": {"metadata": {"name": "x"}}}', "NodeNameToMetaVictims"),
        (
            "/preempt",
            b'{"Pod": {"metadata": {"name": "x"}}, "NodeNameToMetaVictims": {"n": {"Pods": [{}]}}}',
            "UID",
        ),
    ],
)
def test_malformed_requests_get_400_with_a_message(svc, path, body, fragment):
    response = svc.run(lambda c: c.post(path, content=body))
    assert response.status_code == 400
    assert fragment in response.json()["error"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
envelope_keys = st.sampled_from(
    ["Pod", "pod", "NodeNames", "Nodes", "PodName", "Node", "NodeNameToMetaVictims"]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=st.sampled_from(["/filter", "/prioritize", "/bind", "/preempt"]),
    body=json_values | st.dictionaries(envelope_keys, json_values, max_size=4),
)
def test_arbitrary_json_never_gets_a_server_error(svc, path, body):
    response = svc.run(lambda c: c.post(path, json=body))
    assert response.status_code in (200, 400, 404), response.text
    if response.status_code != 200:
        assert response.json()["error"]


pod_parts = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"name": st.just("x")}, optional={"uid": json_values, "namespace": json_values}
        )
    },
    optional={
        "spec": st.fixed_dictionaries(
            {}, optional={"resourceClaims": json_values, "schedulerName": json_values}
        ),
        "status": st.fixed_dictionaries({}, optional={"resourceClaimStatuses": json_values}),
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(["/filter", "/prioritize", "/preempt"]), pod_obj=pod_parts, names=json_values)
def test_malformed_pods_inside_valid_envelopes_never_get_a_server_error(svc, path, pod_obj, names):
    body = {"Pod": pod_obj, "NodeNames": names, "NodeNameToMetaVictims": {"node-0": {"Pods": []}}}
    response = svc.run(lambda c: c.post(path, json=body))
    assert response.status_code in (200, 400, 404), response.text


def test_oversized_body_is_refused():
    small = Service(gpu_cluster(nodes=1), body_limits=dict.fromkeys(BODY_LIMITS, 100))
    response = small.run(lambda c: c.post("/filter", content=b"x" * 200))
    assert response.status_code == 400
    assert "limit of 100 bytes" in response.json()["error"]

    async def chunks():
        for _ in range(3):
            yield b"x" * 60

    streamed = small.run(lambda c: c.post("/bind", content=chunks()))  # no Content-Length
    assert streamed.status_code == 400 and "exceeds the limit" in streamed.json()["error"]


def test_unsynced_state_refuses_filter_and_is_not_ready():
    state = ClusterState()
    binder = LocalBinder(LocalCluster(state))
    ctx = SchedulingContext(Config(), state, binder, Metrics(), Environment.create())
    app = create_app(ctx)

    async def call():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as client:
            body = {"Pod": pod("x", claims={"c": "c"}), "NodeNames": ["node-0"]}
            before = (
                (await client.get("/readyz")).status_code,
                (await client.post("/filter", json=body)).json(),
            )
            for kind in KIND_NAMES:
                state.mark_synced(kind)
            return before, (await client.get("/readyz")).status_code

    (ready_before, filtered), ready_after = asyncio.run(call())
    assert ready_before == 503 and ready_after == 200
    assert "not synced" in filtered["Error"] and filtered["NodeNames"] == []


def test_health_readiness_metrics_and_debug(svc):
    async def call(client):
        await bind_call(client, svc.pod("p"), "node-0")
        return {
            "healthz": await client.get("/healthz"),
            "readyz": await client.get("/readyz"),
            "metrics": await client.get("/metrics"),
            "claims": await client.get("/debug/claims"),
            "pods": await client.get("/debug/pods"),
            "slices": await client.get("/debug/slices"),
            "config": await client.get("/debug/config"),
            "explain": await client.get("/debug/explain", params={"pod": "default/q"}),
            "explain_bad": await client.get("/debug/explain", params={"pod": "q"}),
            "explain_unknown": await client.get("/debug/explain", params={"pod": "default/nope"}),
        }

    r = svc.run(call)
    assert r["healthz"].status_code == 200 and r["readyz"].status_code == 200
    text = r["metrics"].text
    for name in (
        'dra_extender_request_duration_seconds_count{verb="bind"}',
        'dra_extender_binds_total{outcome="bound"} 1.0',
        'dra_extender_claim_writes_total{outcome="ok"} 1.0',
        'dra_extender_cache_objects{kind="ResourceSlice"} 2.0',
    ):
        assert name in text
    claims = {c["metadata"]["name"]: c for c in r["claims"].json()["items"]}
    assert any(c.get("status", {}).get("allocation") for c in claims.values())
    assert len(r["pods"].json()["items"]) == 2 and len(r["slices"].json()["items"]) == 2
    assert r["config"].json()["featureGates"]["DRAListTypeAttributes"] is False
    explained = r["explain"].json()
    assert explained["pod"] == "default/q" and set(explained["nodes"]) == {"node-0", "node-1"}
    assert (
        explained["nodes"]["node-0"]["fits"] is False and "in use" in explained["nodes"]["node-0"]["reason"]
    )
    assert explained["nodes"]["node-1"]["allocation"] == {
        "default/c": {"gpu": ["gpu.example.com/node-1/gpu-0"]}
    }
    assert r["explain_bad"].status_code == 400 and r["explain_unknown"].status_code == 404
    bound = svc.run(lambda c: c.get("/debug/explain", params={"pod": "default/p"})).json()
    assert [d["published"] for d in bound["claims"][0]["devices"]] == [True]


def test_metrics_show_the_apps_own_cel_counters():
    def objs():
        return [*gpu_cluster(nodes=2, per_node=1), claim("c"), pod("q", claims={"c": "c"})]

    busy, idle = Service(objs()), Service(objs())
    assert busy.ctx.cel is not idle.ctx.cel

    async def filtered(client):
        await filter_call(client, busy.pod("q"), ["node-0", "node-1"])
        return (await client.get("/metrics")).text

    def cel_counters(text: str) -> dict[str, float]:
        lines = (line.split() for line in text.splitlines() if line.startswith("dra_extender_cel_"))
        return {name: float(value) for name, value in lines}

    busy_counters = cel_counters(busy.run(filtered))
    idle_counters = cel_counters(idle.run(lambda c: c.get("/metrics")).text)
    stats = busy.ctx.cel.stats
    # Devices alike share verdicts process-wide, so this app may find some in the memo; the
    # second node, alike, takes the first one's answer without evaluating (allocator ShapeMemo).
    assert stats.compilations >= 1 and stats.evaluations + stats.memo_hits >= 1
    assert busy_counters["dra_extender_cel_compilations_total"] == stats.compilations
    assert busy_counters["dra_extender_cel_evaluations_total"] == stats.evaluations
    # The other app's environment compiled and evaluated nothing, whatever this one did.
    assert idle_counters["dra_extender_cel_compilations_total"] == 0
    assert idle_counters["dra_extender_cel_evaluations_total"] == 0


def test_preempt_in_full_object_mode_answers_meta_victims(svc):
    async def call(client):
        assert await bind_call(client, svc.pod("p"), "node-0") == ""
        victim = svc.pod("p")
        body = {
            "Pod": svc.pod("q"),
            "NodeNameToVictims": {"node-0": {"Pods": [victim], "NumPDBViolations": 2}},
        }
        return (await client.post("/preempt", json=body)).json()

    result = svc.run(call)
    uid = svc.pod("p")["metadata"]["uid"]
    assert result == {"NodeNameToMetaVictims": {"node-0": {"Pods": [{"UID": uid}], "NumPDBViolations": 2}}}


def test_standby_replica_is_not_ready_and_refuses_binds(svc):
    svc.ctx.is_leader = lambda: False

    async def call(client):
        return (await client.get("/readyz")), await bind_call(client, svc.pod("p"), "node-0")

    ready, error = svc.run(call)
    assert ready.status_code == 503 and "not the leader" in ready.text
    assert "not the leader" in error
    assert svc.state.pod("default", "p").node_name == ""



def test_the_verbs_are_answered_ahead_of_routing_and_other_requests_are_routed(svc):
    # The verbs skip FastAPI's middleware and routing (ExtenderApp); everything else, other
    # methods on the verbs' paths included, takes the usual way.
    app = svc.app
    stack = app.build_middleware_stack()
    routed: list[str] = []

    async def recording(scope, receive, send):
        routed.append(f"{scope['method']} {scope['path']}")
        await stack(scope, receive, send)

    app.middleware_stack = recording

    async def flow(client):
        body = {"Pod": svc.pod("p"), "Nodes": None, "NodeNames": ["node-0", "node-1"]}
        filtered = await client.post("/filter", json=body)
        return filtered, await client.get("/filter"), await client.post("/nothing-here", json={})

    filtered, wrong_method, missing = svc.run(flow)
    assert filtered.status_code == 200 and filtered.json()["NodeNames"] == ["node-0", "node-1"]
    assert (wrong_method.status_code, missing.status_code) == (405, 404)
    assert routed == ["GET /filter", "POST /nothing-here"]
    # Each verb is registered once, as a route: the shortcut's table is read off the router.
    verbs = {"/filter", "/prioritize", "/bind", "/preempt"}
    routes = [route for route in app.router.routes if getattr(route, "path", None) in verbs]
    assert sorted(route.path for route in routes) == sorted(verbs)
    assert app._verb_endpoints == {route.path: route.app for route in routes}


def test_error_bodies_have_the_shapes_docs_usage_gives(svc):
    # docs/usage.md, "Other endpoints": the app's own refusals carry "error"; routing's 404 and
    # 405 are FastAPI's, with "detail".
    async def calls(client):
        return [await client.get("/nothing-here"), await client.post("/nothing-here", json={}),
                await client.get("/filter"), await client.delete("/healthz"),
                await client.get("/debug/explain", params={"pod": "default/nobody"}),
                await client.post("/filter", content=b"{")]

    missing, missing_post, get_filter, delete_health, unknown_pod, malformed = svc.run(calls)
    for response in (missing, missing_post):
        assert (response.status_code, response.json()) == (404, {"detail": "Not Found"})
    for response in (get_filter, delete_health):
        assert (response.status_code, response.json()) == (405, {"detail": "Method Not Allowed"})
    assert (unknown_pod.status_code, unknown_pod.json()) == (
        404, {"error": "pod default/nobody is not known to the extender"})
    assert malformed.status_code == 400 and set(malformed.json()) == {"error"}


def _asgi_exchange(svc, path: str, messages: list[dict]) -> list[dict]:
    """What the app sends for a POST to ``path`` whose body arrives as ``messages``."""
    scope = {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(),
             "query_string": b"", "headers": [(b"content-type", b"application/json")],
             "http_version": "1.1", "scheme": "http", "server": ("extender", 80), "client": None,
             "root_path": ""}
    pending, sent = list(messages), []

    async def receive():
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    asyncio.run(svc.app(scope, receive, send))
    return sent


def _json_answer(status: int, body: bytes) -> list[dict]:
    return [
        {"type": "http.response.start", "status": status,
         "headers": [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]},
        {"type": "http.response.body", "body": body},
    ]


def test_a_verb_answers_with_exactly_these_messages(svc):
    # As Starlette's Response sent them before the verbs wrote their own: the headers, their
    # order and spelling, and the body, for an answer, a refusal and a body split in pieces.
    unknown = b'{"PodName": "ghost", "Node": "node-0"}'
    refused = _asgi_exchange(svc, "/bind", [{"type": "http.request", "body": unknown}])
    assert refused == _json_answer(200, b'{"Error":"pod default/ghost is not known to the extender"}')
    pieces = [{"type": "http.request", "body": unknown[:5], "more_body": True},
              {"type": "http.request", "body": unknown[5:], "more_body": False}]
    assert _asgi_exchange(svc, "/bind", pieces) == refused
    bad = _asgi_exchange(svc, "/bind", [{"type": "http.request", "body": b'{"PodName": "x"}'}])
    assert bad == _json_answer(400, b'{"error":"bind: Node: required"}')
    nameless = b'{"Pod": {"metadata": {"name": "nobody"}}, "NodeNames": ["node-0"]}'
    missing = _asgi_exchange(svc, "/filter", [{"type": "http.request", "body": nameless}])
    unknown_pod = b"pod default/nobody is not known to the extender and the request has no spec"
    assert missing == _json_answer(404, b'{"error":"filter: ' + unknown_pod + b'"}')


def test_a_client_gone_mid_body_gets_an_empty_499(svc):
    gone = _asgi_exchange(svc, "/bind", [{"type": "http.request", "body": b'{"Pod', "more_body": True}])
    assert gone == [
        {"type": "http.response.start", "status": 499, "headers": [(b"content-length", b"0")]},
        {"type": "http.response.body", "body": b""},
    ]
