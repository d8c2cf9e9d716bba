"""The embedded API server's storage: admission checks, API defaults, identity, generateName."""

from __future__ import annotations

import time
import uuid

import pytest

from extender.local.store import LocalStore, ManifestError, now_rfc3339, uuid5_url
from extender.state import ClusterState
from tests.local.builders import loaded
from tests.scheduling.cluster import claim, claim_spec, node


def test_api_server_defaults_are_applied():
    toleration = {"key": "k", "effect": "NoSchedule"}
    spec = claim_spec(
        {"name": "a", "exactly": {"deviceClassName": "x", "tolerations": [toleration]}},
        {"name": "b", "firstAvailable": [{"name": "s", "deviceClassName": "x"}]},
        {"name": "c", "exactly": {"deviceClassName": "x", "allocationMode": "All"}},
    )
    local = loaded(claim("c", spec))
    raw = local.state.claim("default", "c").raw
    a, b, c = raw["spec"]["devices"]["requests"]
    assert a["exactly"]["allocationMode"] == "ExactCount" and a["exactly"]["count"] == 1
    assert a["exactly"]["tolerations"][0]["operator"] == "Equal"
    assert b["firstAvailable"][0]["count"] == 1
    assert c["exactly"]["allocationMode"] == "All" and "count" not in c["exactly"]
    meta = raw["metadata"]
    assert meta["uid"] and meta["resourceVersion"].isdigit() and meta["creationTimestamp"].endswith("Z")


def test_every_write_gets_a_newer_resource_version_and_an_update_keeps_the_uid():
    store = LocalStore(ClusterState())
    first = store.create(node("n", zone="a"))
    second = store.create(node("n", zone="b"))
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    store.remove("Node", second)
    again = store.create(node("n"))
    assert again["metadata"]["uid"] != first["metadata"]["uid"]  # a re-creation is a new object
    # Deterministic: another run creating the same objects hands out the same uids.
    assert LocalStore(ClusterState()).create(node("n"))["metadata"]["uid"] == first["metadata"]["uid"]


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([], "expected a Kubernetes object, got list"),
        ({"kind": "Secret", "metadata": {"name": "s"}}, "kind 'Secret' is not supported"),
        ({"kind": "Node", "apiVersion": "v2", "metadata": {"name": "n"}}, "apiVersion 'v2' is not supported"),
        ({"kind": "Node", "metadata": {}}, "name"),
    ],
)
def test_objects_the_api_would_refuse_are_refused(obj, message):
    with pytest.raises(ManifestError, match=message):
        LocalStore(ClusterState()).admit(obj)


def test_generate_name_is_seeded_and_skips_taken_names():
    store = LocalStore(ClusterState())
    name = store.generate_name("ResourceClaim", "default", "p-extended-resources-", "uid-1")
    assert name.startswith("p-extended-resources-") and len(name) == len("p-extended-resources-") + 5
    assert name == store.generate_name("ResourceClaim", "default", "p-extended-resources-", "uid-1")
    store.create(claim(name))
    taken = store.generate_name("ResourceClaim", "default", "p-extended-resources-", "uid-1")
    assert taken != name and taken.startswith("p-extended-resources-")
    assert len(store.generate_name("ResourceClaim", "default", "x" * 70, "uid-1")) == 58 + 5


@pytest.mark.parametrize(
    "name", ["", "dra-extender/Node//node-0/0", "dra-extender/ResourceClaim/ns/é-ü/3", "x" * 300]
)
def test_uids_are_the_uuid5_of_the_object_and_its_incarnation(name: str):
    assert uuid5_url(name) == str(uuid.uuid5(uuid.NAMESPACE_URL, name))
    local = loaded(node("node-0"), claim("c", namespace="team"))
    uid = local.state.raw("Node", ("", "node-0"))["metadata"]["uid"]
    assert uid == str(uuid.uuid5(uuid.NAMESPACE_URL, "dra-extender/Node//node-0/0"))
    assert local.state.claim("team", "c").uid == str(
        uuid.uuid5(uuid.NAMESPACE_URL, "dra-extender/ResourceClaim/team/c/0")
    )


def test_creation_timestamps_are_the_current_second(monkeypatch):
    clock = [1_800_000_000.2]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    assert now_rfc3339() == "2027-01-15T08:00:00Z"
    clock[0] = 1_800_000_000.9
    assert now_rfc3339() == "2027-01-15T08:00:00Z"
    clock[0] = 1_800_000_061.0
    assert now_rfc3339() == "2027-01-15T08:01:01Z"
    stamped = loaded(node("n")).state.raw("Node", ("", "n"))
    assert stamped["metadata"]["creationTimestamp"] == "2027-01-15T08:01:01Z"
