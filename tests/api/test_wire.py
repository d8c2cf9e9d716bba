"""The wire format of full Node objects (nodeCacheCapable: false): only what the extender reads is
decoded, and the passing nodes go back as the bytes that came in."""

from __future__ import annotations

import orjson
import pytest

from extender.api import args_decoder, wire
from extender.api.args_decoder import ArgsDecoder
from extender.model import parse_node
from extender.model.pods import parse_pod

# A kubelet-reported node: the extender reads its name, metadata and status.allocatable only.
NODE = (
    b'{"metadata": {"name": "n1", "labels": {"zone": "a"}, "annotations": {"x": "y"}},'
    b' "spec": {"podCIDR": "10.0.0.0/24"},'
    b' "status": {"allocatable": {"cpu": "8", "example.com/gpu": "2"},'
    b' "images": [{"names": ["registry/image:v1"], "sizeBytes": 1.0e3}], "conditions": []}}'
)


# One decoder for the module, as an app has one: what it remembers carries from test to test.
decoder = ArgsDecoder()


def _args(items: bytes) -> bytes:
    return b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": null, "Nodes": {"items": [' + items + b"]}}"


def test_passing_nodes_are_echoed_byte_for_byte():
    args = decoder.extender_args(_args(NODE + b', {"metadata": {"name": "n2"}}'))
    assert args.node_names == ["n1", "n2"]
    reply = wire.encode(wire.filter_result(args, ["n1"], {"n2": "no"}, {}, ""))
    # Untouched, down to the number's spelling and the key order: nothing re-encoded.
    assert b'"items":[' + NODE + b"]" in reply
    assert orjson.loads(reply)["Nodes"]["items"] == [orjson.loads(NODE)]


# status.declaredFeatures is read too (Node Declared Features).
FEATURED = NODE.replace(b'"conditions": []', b'"conditions": [], "declaredFeatures": ["FeatureA"]')


def test_nodes_are_parsed_as_from_the_whole_object():
    args = decoder.extender_args(_args(NODE))
    assert args.nodes == {"n1": parse_node(orjson.loads(NODE))}
    assert args.nodes["n1"].extended_allocatable == {"example.com/gpu": 2}  # status.allocatable was read
    featured = decoder.extender_args(_args(FEATURED)).nodes
    assert featured == {"n1": parse_node(orjson.loads(FEATURED))}
    assert featured["n1"].declared_features == {"FeatureA"}


def test_a_node_whose_declared_features_change_is_parsed_anew():
    before = decoder.extender_args(_args(NODE)).nodes
    after = decoder.extender_args(_args(FEATURED)).nodes
    assert before is not None and after is not None
    assert before["n1"].declared_features == frozenset() and after["n1"].declared_features == {"FeatureA"}


def test_a_node_sent_again_is_parsed_once_and_a_changed_one_anew():
    first = decoder.extender_args(_args(NODE)).nodes
    again = decoder.extender_args(_args(NODE)).nodes
    relabelled = decoder.extender_args(_args(NODE.replace(b'"zone": "a"', b'"zone": "b"'))).nodes
    assert first is not None and again is not None and relabelled is not None
    assert again["n1"] is first["n1"]
    assert relabelled["n1"].labels == {"zone": "b"} and first["n1"].labels == {"zone": "a"}


def test_a_node_sent_again_unchanged_is_not_decoded_again(monkeypatch: pytest.MonkeyPatch):
    first = decoder.extender_args(_args(NODE)).nodes

    def no_decoding(i: int, raw: object) -> None:
        raise AssertionError("decoded again")

    monkeypatch.setattr(decoder, "_node", no_decoding)
    again = decoder.extender_args(_args(NODE)).nodes
    assert first is not None and again is not None and again["n1"] is first["n1"]
    with pytest.raises(AssertionError, match="decoded again"):
        decoder.extender_args(_args(NODE.replace(b'"conditions": []', b'"conditions": [{}]')))


def test_a_heartbeat_is_decoded_but_not_parsed_again():
    first = decoder.extender_args(_args(NODE)).nodes
    ready = NODE.replace(b'"conditions": []', b'"conditions": [{"type": "Ready"}]')
    beat = decoder.extender_args(_args(ready))
    assert first is not None and beat.nodes is not None and beat.nodes["n1"] is first["n1"]
    assert beat.node_bytes["n1"].endswith(b'[{"type": "Ready"}]}}')  # echoed as sent


def test_a_huge_node_is_parsed_but_not_kept_by_its_text():
    huge = NODE.replace(b'"x": "y"', b'"x": "' + b"y" * (2 * 1024 * 1024) + b'"')
    args = decoder.extender_args(_args(huge))
    assert args.nodes is not None and args.nodes["n1"].labels == {"zone": "a"}
    assert huge not in decoder._nodes_by_text


def test_a_node_equal_to_the_cluster_s_is_the_cluster_s_object():
    cluster = {"n1": parse_node(orjson.loads(NODE))}
    nodes = decoder.extender_args(_args(NODE), cluster).nodes
    assert nodes is not None and nodes["n1"] is cluster["n1"]
    relabelled = decoder.extender_args(_args(NODE.replace(b'"zone": "a"', b'"zone": "b"')), cluster).nodes
    assert relabelled is not None and relabelled["n1"] is not cluster["n1"]
    assert relabelled["n1"].labels == {"zone": "b"}
    # Once the cluster's copy changes to it, that one stands for it from then on.
    cluster = {"n1": parse_node(orjson.loads(NODE.replace(b'"zone": "a"', b'"zone": "b"')))}
    again = decoder.extender_args(_args(NODE.replace(b'"zone": "a"', b'"zone": "b"')), cluster).nodes
    assert again is not None and again["n1"] is cluster["n1"]


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (b"5", r"Nodes\.items\[0\]\.metadata\.name: required"),
        (b'{"metadata": []}', r"Nodes\.items\[0\]\.metadata\.name: required"),
        (b'{"metadata": {"name": "n"}}, {"metadata": {"name": 3}}', r"Nodes\.items\[1\]\.metadata\.name"),
    ],
)
def test_malformed_node_items_are_bad_requests(items: bytes, message: str):
    with pytest.raises(wire.BadRequest, match=message):
        decoder.extender_args(_args(items))


def test_a_malformed_node_is_refused_with_the_field_at_fault():
    with pytest.raises(wire.BadRequest, match=r"Node n: status: .*object"):
        decoder.extender_args(_args(b'{"metadata": {"name": "n"}, "status": "up"}'))
    with pytest.raises(wire.BadRequest, match=r"status\.allocatable"):
        decoder.extender_args(_args(b'{"metadata": {"name": "n"}, "status": {"allocatable": []}}'))
    with pytest.raises(wire.BadRequest, match=r"status\.declaredFeatures"):
        decoder.extender_args(_args(b'{"metadata": {"name": "n"}, "status": {"declaredFeatures": "x"}}'))


def test_a_body_as_kube_scheduler_writes_it_is_split_in_one_scan(monkeypatch: pytest.MonkeyPatch):
    def general_path(decoder: ArgsDecoder, body: bytes) -> None:
        raise AssertionError("took the general path")

    monkeypatch.setitem(args_decoder._PATHS, "general", general_path)
    args = decoder.extender_args(_args(NODE))
    assert args.node_names == ["n1"] and args.node_bytes == {"n1": NODE}
    listed = b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": null, "NodeNames": ["a", "b"]}'
    assert decoder.extender_args(listed).node_names == ["a", "b"]


@pytest.mark.parametrize(
    "body",
    [
        b'{"pod": {"metadata": {"name": "p"}}, "nodes": {"items": [' + NODE + b"]}}",
        b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"Items": [' + NODE + b"]}}",
        b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [' + NODE + b']}, "Extra": 1}',
        b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [' + NODE + b'], "continue": ""}}',
        b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"kind": "NodeList", "apiVersion": "v1",'
        b' "metadata": {"resourceVersion": "7"}, "items": [' + NODE + b"]}}",
        b'{"Pod": {"metadata": {"name": "x"}}, "Nodes": null, "Pod": {"metadata": {"name": "p"}},'
        b' "Nodes": {"items": [' + NODE + b"]}}",
    ],
    ids=["lower-case", "Items", "extra field", "extra list field", "list meta", "repeated keys"],
)
def test_other_spellings_of_the_same_request_read_alike(body: bytes):
    expected = decoder.extender_args(_args(NODE))
    args = decoder.extender_args(body)
    assert (args.pod, args.node_names, args.nodes, args.node_bytes) == (
        expected.pod, expected.node_names, expected.nodes, expected.node_bytes,
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [}}', "body is not valid JSON"),
        (b"[1]", "ExtenderArgs: expected a JSON object, got array"),
        (b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": {}}}', "Nodes.items: expected an array"),
        (b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": 3}', "Nodes: expected a JSON object, got number"),
        (b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": []}, "Nodes": null}', "one of NodeNames"),
        (b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [3]}}', r"Nodes\.items\[0\]"),
        (b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{"status": {}}]}}', r"\[0\]\.metadata"),
        (b'{"Pod": 5, "Nodes": {"items": []}}', "Pod: expected an object"),
        (b'{"Nodes": {"items": []}}', "Pod: required"),
    ],
)
def test_malformed_bodies_keep_their_messages(body: bytes, message: str):
    with pytest.raises(wire.BadRequest, match=message):
        decoder.extender_args(body)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "depth limit exceeded"),
        (_args(b'{"metadata": {"name": "n"}, "status": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
         "body is not valid JSON"),
    ],
)
def test_deep_nesting_is_a_bad_request(body: bytes, message: str):
    with pytest.raises(wire.BadRequest, match=message):
        decoder.extender_args(body)


POD = b'{"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": {"schedulerName": "s"}}'


def _listed(pod: bytes) -> bytes:
    return b'{"Pod": ' + pod + b', "NodeNames": ["a"]}'


def test_a_pod_sent_again_is_parsed_once(monkeypatch: pytest.MonkeyPatch):
    parsed: list[object] = []

    def counting(obj: object) -> object:
        parsed.append(obj)
        return parse_pod(obj)

    monkeypatch.setattr(wire, "parse_pod", counting)
    first = decoder.pod_info(decoder.extender_args(_listed(POD)))
    again = decoder.extender_args(_listed(POD))
    assert decoder.pod_info(again) is first and len(parsed) == 1
    assert again.pod == orjson.loads(POD) and again.node_names == ["a"]
    # Through the general path (another casing) and with full Nodes, the same text is found too.
    assert decoder.pod_info(decoder.extender_args(b'{"pod": ' + POD + b', "nodenames": ["a"]}')) is first
    with_nodes = _args(NODE).replace(b'{"metadata": {"name": "p"}}', POD)
    assert decoder.pod_info(decoder.extender_args(with_nodes)) is first
    assert len(parsed) == 1
    changed = decoder.pod_info(decoder.extender_args(_listed(POD.replace(b'"s"', b'"t"'))))
    assert changed.scheduler_name == "t" and first.scheduler_name == "s" and len(parsed) == 2


def test_a_malformed_pod_is_refused_each_time_it_is_sent():
    bad = _listed(b'{"metadata": {"name": "p"}, "spec": []}')
    for _ in range(2):
        args = decoder.extender_args(bad)
        with pytest.raises(wire.BadRequest, match="spec: must be an object"):
            decoder.pod_info(args)


def _kubelet_node(name: str, gpus: str = "2") -> bytes:
    """A Node as the API server serves it, compact as Go writes it and longer than the text
    cache's prefix, with ``status.allocatable`` after the first 256 bytes."""
    return orjson.dumps({
        "metadata": {
            "name": name, "uid": f"uid-{name}", "resourceVersion": "7",
            "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": "a"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "note": "x" * 200},
        },
        "spec": {"podCIDR": "10.0.0.0/24"},
        "status": {
            "allocatable": {"cpu": "8", "example.com/gpu": gpus},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    })


def _go_args(pod: bytes, *nodes: bytes) -> bytes:
    """ExtenderArgs as kube-scheduler's encoding/json writes it: no spaces, Pod, Nodes (its
    NodeList's empty metadata, then items), NodeNames null."""
    items = b",".join(nodes)
    return b'{"Pod":' + pod + b',"Nodes":{"metadata":{},"items":[' + items + b']},"NodeNames":null}'


def _general(pod: bytes, *nodes: bytes) -> bytes:
    """The same request in another spelling, which only the general split reads."""
    return b'{"pod": ' + pod + b', "nodes": {"items": [' + b", ".join(nodes) + b"]}}"


A, B, C = _kubelet_node("a"), _kubelet_node("b"), _kubelet_node("c")
GO_POD = b'{"metadata":{"name":"p","namespace":"ns"}}'


def _read_alike(args: wire.ExtenderArgs, expected: wire.ExtenderArgs) -> None:
    assert (args.pod, args.node_names, args.nodes, args.node_bytes) == (
        expected.pod, expected.node_names, expected.nodes, expected.node_bytes,
    )


def test_a_body_of_nodes_seen_before_is_not_scanned_again(monkeypatch: pytest.MonkeyPatch):
    first = decoder.extender_args(_go_args(GO_POD, A, B))

    def split(decoder: ArgsDecoder, body: bytes) -> None:
        raise AssertionError("scanned again")

    monkeypatch.setitem(args_decoder._PATHS, "typed", split)
    monkeypatch.setitem(args_decoder._PATHS, "general", split)
    again = decoder.extender_args(_go_args(GO_POD, B, A))  # in another order, as kube-scheduler may
    assert first.nodes is not None and again.nodes is not None
    assert again.node_names == ["b", "a"] and again.nodes["a"] is first.nodes["a"]
    assert again.node_bytes == {"a": A, "b": B} and again.pod == orjson.loads(GO_POD)
    assert decoder.pod_info(again).name == "p"
    reply = wire.encode(wire.filter_result(again, ["a", "b"], {}, {}, ""))
    assert b'"items":[' + A + b"," + B + b"]" in reply
    with pytest.raises(AssertionError, match="scanned again"):  # another spelling: scanned
        decoder.extender_args(_general(GO_POD, A, B))


def test_nodes_not_seen_before_are_read_in_place_too(monkeypatch: pytest.MonkeyPatch):
    first = decoder.extender_args(_go_args(GO_POD, A, B))

    def split(decoder: ArgsDecoder, body: bytes) -> None:
        raise AssertionError("scanned")

    monkeypatch.setitem(args_decoder._PATHS, "typed", split)
    monkeypatch.setitem(args_decoder._PATHS, "general", split)
    beat = A.replace(b'"status":"True"', b'"status":"False"')  # a heartbeat: a new text for node a
    d, e = _kubelet_node("d"), _kubelet_node("e", gpus="1")
    again = decoder.extender_args(_go_args(GO_POD, d, beat, B, e))
    assert first.nodes is not None and again.nodes is not None
    assert again.node_names == ["d", "a", "b", "e"]
    assert again.node_bytes == {"d": d, "a": beat, "b": B, "e": e}
    assert again.nodes["a"] is first.nodes["a"]  # the parts read are unchanged: not parsed again
    assert again.nodes["e"].extended_allocatable == {"example.com/gpu": 1}
    # A node holding the bytes that begin the next one, deeper inside: scanned.
    nested = orjson.dumps({"metadata": {"name": "f"}, "x": [{}, {"metadata": {}}], "pad": "y" * 300})
    with pytest.raises(AssertionError, match="scanned"):
        decoder.extender_args(_go_args(GO_POD, A, nested, B))


def test_a_node_that_differs_after_its_first_256_bytes_is_read_anew():
    more = _kubelet_node("a", gpus="4")
    assert more[:256] == A[:256] and more != A
    before = decoder.extender_args(_go_args(GO_POD, A, B))
    after = decoder.extender_args(_go_args(GO_POD, more, B))
    assert before.nodes is not None and after.nodes is not None
    assert after.nodes["a"].extended_allocatable == {"example.com/gpu": 4}
    assert before.nodes["a"].extended_allocatable == {"example.com/gpu": 2}
    assert after.node_bytes["a"] == more and after.nodes["b"] is before.nodes["b"]


@pytest.mark.parametrize(
    ("pod", "nodes"),
    [
        (GO_POD, (A, A, B)),
        (GO_POD, (A, C, B)),
        # The bytes that follow the pod, inside the pod: in a field, and in a string.
        (b'{"metadata":{"name":"p"},"x":{"y":1,"Nodes":{"metadata":{},"items":[' + A + b"]}}}", (A, B)),
        (b'{"metadata":{"name":"p","annotations":{"n":"\\",\\"Nodes\\":{\\"metadata\\":{},\\"items\\":["}}}',
         (A, B)),
        (b' {"metadata":{"name":"p"}} ', (A, B)),
        (GO_POD, (A, b" " + _kubelet_node("g"), B)),
        (GO_POD, (A, orjson.dumps({"metadata": {"name": "h"}, "x": [{}, {"metadata": {}}], "y": "z" * 300}))),
        (GO_POD, (_kubelet_node("i"), _kubelet_node("j"), _kubelet_node("k"))),
        (GO_POD, (A, _kubelet_node("l") + b',{"metadata":{"name":"m"}}', B)),
    ],
    ids=["a node twice", "an unseen node", "the nodes' bytes in the pod", "in a string", "spaces",
         "an unseen node after a space", "the next node's bytes inside one", "all unseen", "a short one"],
)
def test_nodes_seen_before_read_as_through_the_general_split(pod: bytes, nodes: tuple[bytes, ...]):
    decoder.extender_args(_go_args(GO_POD, A, B))
    expected = decoder.extender_args(_general(pod, *nodes))
    _read_alike(decoder.extender_args(_go_args(pod, *nodes)), expected)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (_go_args(b'{"metadata":{"name":"p"}', A), "body is not valid JSON"),
        (_go_args(b'{"metadata":{"name":"p"}}}', A), "body is not valid JSON"),
        (_go_args(b'{"metadata":{"name":"p"},"x":[}', A), "body is not valid JSON"),
        (_go_args(b"5", A), "Pod: expected an object"),
        (_go_args(b"null", A), "Pod: required"),
        (_go_args(b'{"metadata":{}}', A), "Pod.metadata.name: required"),
        (_go_args(GO_POD, A, b"").replace(b",]", b",,]"), "body is not valid JSON"),
        (_go_args(GO_POD, A + b"}"), "body is not valid JSON"),
        (_go_args(GO_POD, A + b'{"metadata":{"name":"b"}}'), "body is not valid JSON"),
        (_go_args(GO_POD, A, b'{"metadata":{"name":"b"}', B), "body is not valid JSON"),
        (_go_args(GO_POD, A, b'{"metadata":{"name":"b"}}}', B), "body is not valid JSON"),
        (_go_args(GO_POD, A, b'{"metadata":{"name":3}}', B), r"Nodes\.items\[1\]\.metadata\.name"),
        (_go_args(GO_POD, A, b'{"metadata":{"name":"b"},"status":"up"}', B), r"Node b: status"),
        (_go_args(GO_POD, b'{"metadata":{"name":3}}', A, b"[1,"), "body is not valid JSON"),
    ],
)
def test_malformed_bodies_around_seen_nodes_keep_their_messages(body: bytes, message: str):
    decoder.extender_args(_go_args(GO_POD, A))
    with pytest.raises(wire.BadRequest, match=message):
        decoder.pod_info(decoder.extender_args(body))


@pytest.mark.parametrize("passed", [[], ["a"], ["b", "a"], ["a", "b", "c"]])
def test_a_full_node_reply_is_what_orjson_writes_of_the_result(passed: list[str]):
    args = decoder.extender_args(_go_args(GO_POD, A, B, C))
    failed = {n: "no room: \u00e9 \"quoted\"\n" for n in "abc" if n not in passed}
    unresolvable = {"z": "gone"}
    expected = orjson.dumps({
        "Nodes": {"metadata": {}, "items": [orjson.Fragment(args.node_bytes[n]) for n in passed]},
        "NodeNames": None, "FailedNodes": failed, "FailedAndUnresolvableNodes": unresolvable,
        "Error": "e\u2028",
    })
    assert wire.encode(wire.filter_result(args, passed, failed, unresolvable, "e\u2028")) == expected


def test_a_node_names_reply_is_what_orjson_writes_of_the_result():
    args = decoder.extender_args(_listed(POD))
    reply = wire.encode(wire.filter_result(args, ["a"], {"b": "no"}, {}, ""))
    assert reply == orjson.dumps({
        "Nodes": None, "NodeNames": ["a"], "FailedNodes": {"b": "no"}, "FailedAndUnresolvableNodes": {},
        "Error": "",
    })


# Bytes that are not UTF-8 (a stray byte, a truncated sequence, an encoded surrogate) or a lone
# surrogate escape make a body that is not JSON, wherever they stand: orjson refuses such a body
# decoded whole, and a body split into parts must be refused alike, not fail deeper down.
NOT_UTF8 = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\\ud800"]


@pytest.mark.parametrize("bad", NOT_UTF8, ids=["stray", "truncated", "surrogate", "escaped surrogate"])
@pytest.mark.parametrize(
    "body",
    [
        _listed(b'{"metadata": {"name": "p%s"}}'),
        _listed(b'{"metadata": {"name": "p"}, "spec": {"containers": [{"image": "i%s"}]}}'),
        b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["a%s"]}',
        b'{"pod": {"metadata": {"name": "p"}}, "nodenames": ["a%s"]}',
        _go_args(b'{"metadata":{"name":"p%s"}}', A),
        _general(b'{"metadata":{"name":"p%s"}}', A),
        _go_args(GO_POD, A.replace(b'"name":"a"', b'"name":"a%s"')),
        _general(GO_POD, A.replace(b'"name":"a"', b'"name":"a%s"')),
        _go_args(GO_POD, A.replace(b'"cpu":"8"', b'"cpu":"8%s"')),
        _go_args(GO_POD, A.replace(b'"kubernetes.io/hostname"', b'"kubernetes.io/host%sname"')),
    ],
    ids=[
        "pod name", "pod field not read", "NodeNames", "nodenames", "pod, Go's spelling",
        "pod, other spelling", "node name, Go's spelling", "node name, other spelling",
        "allocatable", "label key",
    ],
)
def test_text_that_is_not_utf8_is_a_bad_request_wherever_it_stands(body: bytes, bad: bytes):
    assert b"%s" in body
    with pytest.raises(wire.BadRequest, match="body is not valid JSON") as refused:
        decoder.pod_info(decoder.extender_args(body.replace(b"%s", bad)))
    assert "line 1" in str(refused.value)  # where in the body, as orjson says it for a whole body
