"""The three paths of ArgsDecoder read every body alike: on random requests, each fast path
either leaves the body to the next or reads exactly what the general path reads, and a
malformed body is refused (a BadRequest, a 400) whichever path meets it.

The fast paths are tried alone, on a fresh decoder and on one that has seen nodes before (the
spliced path finds those in place), and the whole chain is held to the general path too.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.api.args_decoder import ArgsDecoder
from extender.api.wire import BadRequest, ExtenderArgs

# Text that would fool a reader looking for the body's fixed bytes, among plain words.
TRICKY = st.sampled_from([
    ',{"metadata":', ',"Nodes":{"metadata":{},"items":[', ']},"NodeNames":null}', '{"Pod":', "\\", '"',
    "\u00e9", "\u2028", "\U0001f600", "",
])
TEXT = st.one_of(st.text(max_size=8), TRICKY)
NAME = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=6)
# Objects anywhere in a node or pod, some holding the bytes that begin a node.
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | TEXT,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.one_of(TEXT, st.just("metadata")), inner, max_size=3),
    max_leaves=8,
)
QUANTITY = st.sampled_from(["8", "2", "0", "1500m", "16Gi"])


@st.composite
def nodes(draw: st.DrawFn, name: str) -> dict[str, Any]:
    version = draw(st.sampled_from("179"))
    metadata: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "resourceVersion": version}
    if draw(st.booleans()):
        metadata["labels"] = draw(st.dictionaries(TEXT, TEXT, max_size=3))
    # Mostly longer than the text cache's prefix (256 bytes), as real nodes are (about 6 KB):
    # only such texts are found in place.
    metadata["annotations"] = {"pad": "x" * draw(st.integers(0, 400)), "note": draw(TEXT)}
    node: dict[str, Any] = {"metadata": metadata}
    if draw(st.booleans()):
        node["spec"] = {"podCIDR": "10.0.0.0/24", "extra": draw(JSON)}
    if draw(st.booleans()):
        status: dict[str, Any] = {"allocatable": draw(st.dictionaries(
            st.sampled_from(["cpu", "memory", "example.com/gpu"]), QUANTITY, max_size=3))}
        if draw(st.booleans()):
            features = st.lists(st.sampled_from(["FeatureA", "FeatureB"]), unique=True)
            status["declaredFeatures"] = draw(features)
        conditions = st.lists(st.fixed_dictionaries({"type": TEXT, "status": TEXT}), max_size=2)
        status["conditions"] = draw(conditions)
        node["status"] = status
    if draw(st.booleans()):
        node["x"] = draw(JSON)
    return node


@st.composite
def requests(draw: st.DrawFn) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    pod: dict[str, Any] = {"metadata": {"name": draw(NAME), "namespace": "ns", "uid": "u"}}
    if draw(st.booleans()):
        pod["spec"] = {"schedulerName": draw(TEXT), "x": draw(JSON)}
    names = draw(st.lists(NAME, min_size=0, max_size=5))
    items = [draw(nodes(name)) for name in names]
    if draw(st.integers(0, 4)) == 0:
        # The bytes that follow the pod, and begin each node, deeper inside the pod.
        pod["spec"] = {"a": 1, "Nodes": {"metadata": {}, "items": items[:2]}, "NodeNames": None}
    return pod, items


def go_body(pod: dict[str, Any], items: list[dict[str, Any]]) -> bytes:
    """As kube-scheduler writes ExtenderArgs with full Nodes."""
    return orjson.dumps({"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None})


def respelled(pod: dict[str, Any], items: list[dict[str, Any]], how: str) -> bytes:
    if how == "names":
        return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": [n["metadata"]["name"] for n in items]})
    if how == "both":  # NodeNames wins
        names = [n["metadata"]["name"] for n in items]
        return orjson.dumps({"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": names})
    if how == "lower":
        return orjson.dumps({"pod": pod, "nodes": {"items": items}})
    if how == "indented":
        return orjson.dumps({"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None},
                            option=orjson.OPT_INDENT_2)
    return orjson.dumps({"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None, "X": 1})


Outcome = tuple[Any, ...] | str


def outcome(decoder: ArgsDecoder, body: bytes, paths: tuple[str, ...]) -> Outcome | None:
    """What the paths make of the body: the request as read (with its pod parsed, or that
    parse's refusal), the refusal's message, or None when they leave it to another path."""
    try:
        args = decoder.extender_args(body, paths=paths)
    except BadRequest as exc:
        return None if "none of the paths" in str(exc) else f"400: {exc}"
    return _read(decoder, args)


def _read(decoder: ArgsDecoder, args: ExtenderArgs) -> tuple[Any, ...]:
    try:
        pod: Any = decoder.pod_info(args)
    except BadRequest as exc:
        pod = f"400: {exc}"
    return (args.pod, args.node_names, args.nodes, args.node_bytes, pod)


def general(body: bytes) -> Outcome:
    read = outcome(ArgsDecoder(), body, ("general",))
    assert read is not None, "the general path reads every body"
    return read


def assert_paths_agree(body: bytes, warm: ArgsDecoder) -> Outcome:
    expected = general(body)
    for path in ("spliced", "typed"):
        for decoder in (ArgsDecoder(), warm):
            read = outcome(decoder, body, (path,))
            assert read is None or read == expected, (path, body)
    assert outcome(ArgsDecoder(), body, ArgsDecoder.PATHS) == expected
    assert outcome(warm, body, ArgsDecoder.PATHS) == expected
    return expected


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(requests(), st.sampled_from(["go", "names", "both", "lower", "indented", "extra"]), st.randoms())
def test_the_paths_read_every_valid_request_alike(request: Any, spelling: str, rng: Any) -> None:
    pod, items = request
    body = go_body(pod, items) if spelling == "go" else respelled(pod, items, spelling)
    warm = ArgsDecoder()
    # The warm decoder has seen some of the nodes (and the pod) in an earlier request.
    seen = [item for item in items if rng.random() < 0.6]
    warm.pod_info(warm.extender_args(go_body(pod, seen or items[:1])))
    expected = assert_paths_agree(body, warm)
    assert isinstance(expected, tuple), expected  # valid: read, not refused
    if items and spelling == "go":
        # Read again (every node found in place now), and after a heartbeat of one node.
        assert_paths_agree(body, warm)
        beat = [dict(item) for item in items]
        beat[rng.randrange(len(beat))]["heartbeat"] = rng.random()
        assert_paths_agree(go_body(pod, beat), warm)


MUTATIONS = ["truncate", "insert", "delete", "swap"]
# Bytes that change the structure, and where structure is (a node's start, a value's end).
BYTES = st.one_of(st.sampled_from([b" ", b",", b"{", b"}", b"[", b"]", b'"', b"\\", b"\xff", b"0", b":"]),
                  st.binary(min_size=1, max_size=1))
MARKERS = [b',{"metadata":', b"},", b"}]", b'":', b'{"Pod":']


@st.composite
def mutation(draw: st.DrawFn) -> tuple[str, int | bytes, int, bytes]:
    at: int | bytes = draw(st.one_of(st.integers(0, 10**9), st.sampled_from(MARKERS)))
    return draw(st.sampled_from(MUTATIONS)), at, draw(st.integers(0, 3)), draw(BYTES)


def _position(body: bytes, at: int | bytes, offset: int) -> int:
    if isinstance(at, bytes):
        found = body.find(at)
        return max(0, min(len(body), (found if found >= 0 else len(body) // 2) + offset))
    return at % max(1, len(body))


@SETTINGS
@given(requests(), st.lists(mutation(), min_size=1, max_size=3))
def test_the_paths_refuse_every_malformed_request_alike(request: Any, mutations: list[Any]) -> None:
    pod, items = request
    body = go_body(pod, items)
    warm = ArgsDecoder()
    warm.extender_args(body)  # every node seen: the spliced path finds them in place
    for how, marker, offset, byte in mutations:
        at = _position(body, marker, offset)
        if how == "truncate":
            body = body[:at]
        elif how == "insert":
            body = body[:at] + byte + body[at:]
        elif how == "delete":
            body = body[:at] + body[at + 1 :]
        else:
            body = body[:at] + byte + body[at + 1 :]
    # Valid or not, every path reads it as the general path does, or leaves it.
    assert_paths_agree(body, warm)


@SETTINGS
@given(requests(), st.sampled_from(MUTATIONS), st.integers(0, 1), BYTES)
def test_the_bytes_between_seen_nodes_are_checked(request: Any, how: str, offset: int, byte: bytes) -> None:
    """Where a seen node ends, the spliced path reads on without scanning: a changed separator
    must still be refused (or read) as the general path does."""
    pod, items = request
    # Two nodes longer than the text cache's prefix at the end, so both are found in place.
    long = [{"metadata": {"name": name, "annotations": {"pad": "x" * 300}}} for name in ("penult", "last")]
    body = go_body(pod, items + long)
    warm = ArgsDecoder()
    warm.extender_args(body)
    at = body.rfind(b',{"metadata":{"name":"last"') + offset
    body = {
        "truncate": body[:at], "insert": body[:at] + byte + body[at:],
        "delete": body[:at] + body[at + 1 :], "swap": body[:at] + byte + body[at + 1 :],
    }[how]
    assert_paths_agree(body, warm)


@pytest.mark.parametrize(
    "body",
    [
        b"", b"null", b"[]", b"{", b'{"Pod":',
        b'{"Pod":{"metadata":{"name":"p"}},"Nodes":{"metadata":{},"items":[]},"NodeNames":null}',
        b'{"Pod":{"metadata":{"name":"p"}},"Nodes":{"metadata":{},"items":[{}]},"NodeNames":null}',
        b'{"Pod":5,"Nodes":{"metadata":{},"items":[{"metadata":{"name":"n"}}]},"NodeNames":null}',
        b'{"Pod":{"metadata":{"name":"p"}},"Nodes":{"metadata":{},"items":[{"metadata":{"name":"n"}},{"metadata":'
        b'{"name":"m"}]},"NodeNames":null}',
    ],
)
def test_edge_bodies_are_read_or_refused_alike(body: bytes) -> None:
    warm = ArgsDecoder()
    warm.extender_args(go_body({"metadata": {"name": "p"}}, [{"metadata": {"name": "n"}}]))
    assert_paths_agree(body, warm)
