from __future__ import annotations

import orjson
import pytest

from loadtest import wire
from loadtest.wire import ProtocolError

CANDIDATES = ["n1", "n2", "n3"]


def test_filter_request_uses_go_field_names_and_drops_type_meta() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}
    body = orjson.loads(wire.extender_args(orjson.dumps(wire.informer_pod(pod)), CANDIDATES))
    assert body == {"Pod": {"metadata": {"name": "p"}, "spec": {}}, "Nodes": None, "NodeNames": CANDIDATES}


def test_binding_args() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"}}
    assert orjson.loads(wire.binding_args(pod, "n2")) == {
        "PodName": "p",
        "PodNamespace": "ns",
        "PodUID": "u-1",
        "Node": "n2",
    }


def test_filter_reply_fields_are_case_insensitive() -> None:
    reply = {"nodenames": ["n2"], "failedNodes": {"n1": "busy"}, "FAILEDANDUNRESOLVABLENODES": {"n3": "none"}}
    assert wire.filter_result(reply, CANDIDATES) == (["n2"], {"n1": "busy", "n3": "none"})


def test_filter_reply_falls_back_to_nodes_then_to_nothing() -> None:
    reply = {"NodeNames": None, "Nodes": {"items": [{"metadata": {"name": "n3"}}]}}
    assert wire.filter_result(reply, CANDIDATES)[0] == ["n3"]
    assert wire.filter_result({}, CANDIDATES)[0] == []


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ({"NodeNames": ["n1"], "Error": "cache not synced"}, "cache not synced"),
        ({"NodeNames": ["n1", "elsewhere"]}, "not in the input list"),
        ({"NodeNames": "n1"}, "not a list"),
        (["n1"], "not an object"),
    ],
)
def test_filter_failures(reply: object, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        wire.filter_result(reply, CANDIDATES)


def test_prioritize_ignores_hosts_not_asked_about() -> None:
    reply = [{"Host": "n1", "Score": 3}, {"host": "n2", "score": 10}, {"Host": "zz", "Score": 10}]
    assert wire.prioritize_result(reply, ["n1", "n2"]) == {"n1": 3, "n2": 10}


@pytest.mark.parametrize("reply", [{"Host": "n1", "Score": 1}, [{"Host": "n1", "Score": "high"}], ["n1"]])
def test_prioritize_failures(reply: object) -> None:
    with pytest.raises(ProtocolError):
        wire.prioritize_result(reply, ["n1"])


def test_bind_error_field_fails() -> None:
    wire.bind_result({"Error": ""})
    wire.bind_result({})
    with pytest.raises(ProtocolError, match="claim allocated elsewhere"):
        wire.bind_result({"error": "claim allocated elsewhere"})


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [(500, b"{}", "HTTP 500"), (200, b"", "empty"), (200, b"{nope", "not JSON")],
)
def test_non_200_empty_or_broken_bodies_are_errors(status: int, body: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        wire.decode(status, body)
