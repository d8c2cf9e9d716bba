"""Local mode's routes: /local/apply and /local/delete change the embedded cluster over HTTP."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.test_routes import json_values
from tests.scheduling.cluster import Service, bind_call, claim, gpu_cluster, pod, template


@pytest.fixture
def svc() -> Service:
    objs = [*gpu_cluster(nodes=2, per_node=1), template("one"), claim("c")]
    objs += [pod("p", templates={"gpu": "one"}), pod("q", claims={"c": "c"})]
    return Service(objs)


def test_local_apply_and_delete(svc):
    async def call(client):
        applied = await client.post(
            "/local/apply", json=[template("two"), pod("new", templates={"gpu": "two"})]
        )
        bad = await client.post("/local/apply", json={"kind": "Secret", "metadata": {"name": "s"}})
        bad_claim = await client.post(
            "/local/apply", json={"kind": "ResourceClaim", "metadata": {"name": "x"}, "spec": {"devices": 3}}
        )
        bound = await bind_call(client, svc.pod("new"), "node-0")
        deleted = await client.post(
            "/local/delete", json={"kind": "Pod", "namespace": "default", "name": "new"}
        )
        missing = await client.post(
            "/local/delete", json={"kind": "Pod", "namespace": "default", "name": "new"}
        )
        wrong = await client.post("/local/delete", json={"kind": "Gadget", "name": "x"})
        return applied, bad, bad_claim, bound, deleted, missing, wrong

    applied, bad, bad_claim, bound, deleted, missing, wrong = svc.run(call)
    assert applied.status_code == 200
    assert [a["kind"] for a in applied.json()["applied"]] == ["ResourceClaimTemplate", "Pod"]
    assert bad.status_code == 400 and "Secret" in bad.json()["error"]
    assert bad_claim.status_code == 400 and "ResourceClaim" in bad_claim.json()["error"]
    assert bound == ""
    assert deleted.status_code == 200 and missing.status_code == 404 and wrong.status_code == 400
    assert svc.state.pod("default", "new") is None
    assert not [c for c in svc.state.claims.values() if c.name.startswith("new-gpu-")]
    assert not svc.state.inuse.devices  # the generated claim went away with its pod


kinds = st.sampled_from(
    ["Pod", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice", "DeviceClass", "Node", "X"]
)
objects = st.fixed_dictionaries(
    {"kind": kinds, "metadata": st.fixed_dictionaries({"name": st.sampled_from(["a", "b"])})},
    optional={"spec": json_values, "status": json_values, "apiVersion": json_values},
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=objects | st.lists(objects, max_size=3) | json_values)
def test_local_apply_answers_bad_objects_with_400(svc, body):
    response = svc.run(lambda c: c.post("/local/apply", json=body))
    assert response.status_code in (200, 400, 404), response.text


def _requests(value: object) -> dict:
    return {"kind": "ResourceClaim", "metadata": {"name": "x"}, "spec": {"devices": {"requests": value}}}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"kind": {"a": 1}, "metadata": {"name": "x"}}, "kind {'a': 1} is not supported"),
        ({"kind": [1], "metadata": {"name": "x"}}, "kind [1] is not supported"),
        (_requests(1.5), "ResourceClaim default/x: spec.devices.requests: must be a list, got float"),
        (_requests(True), "ResourceClaim default/x: spec.devices.requests: must be a list, got bool"),
        (_requests(-1), "ResourceClaim default/x: spec.devices.requests: must be a list, got int"),
        ([template("two"), _requests(-1)],
         "item 1: ResourceClaim default/x: spec.devices.requests: must be a list"),
    ],
)
def test_local_apply_names_the_field_of_a_malformed_object_in_a_400(svc, body, message):
    before = svc.state.counts()
    response = svc.run(lambda c: c.post("/local/apply", json=body))
    assert response.status_code == 400 and message in response.json()["error"], response.text
    if not isinstance(body, list):
        assert svc.state.counts() == before
