"""ExtenderArgs from a filter or prioritize body: one entry point, three paths, three caches.

:meth:`ArgsDecoder.extender_args` is the one way a body becomes an :class:`ExtenderArgs`. It
tries three paths in order; each either reads the body whole or leaves it to the next, and the
last, the general one, reads every body or refuses it with a 400 saying what is wrong. The
first two exist for speed alone and must read any body they take exactly as the general path
does (tests/api/test_args_paths.py holds them to that on random requests):

1. ``spliced``: a body exactly as kube-scheduler writes it, whose nodes were mostly seen
   before. Each node seen before is found in place by its cached text, without scanning the
   3 MB body; only a node not seen before is checked, on its own.
2. ``typed``: a body in Go's spelling (field names, no others). msgspec splits it down to
   each node's text in one scan and checks the NodeNames strings in C.
3. ``general``: any other body (another casing, another field, a value of the wrong type, bad
   JSON): decoded field by field, each refusal with the field at fault.

Full Node objects (``nodeCacheCapable: false``) weigh about 3 MB for 500 nodes, and decoding
them whole was most of a filter's time: of a node not seen before, only what the extender
reads (metadata, ``status.allocatable`` and ``status.declaredFeatures``) is decoded. Each
node's bytes go back unchanged for the passing nodes (docs/performance.md).

The caches belong to the decoder, which the app makes (``create_app``) and drops with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import msgspec
import orjson
from cachetools import LRUCache

from extender.api.text_cache import TextCache
from extender.api.wire import (
    MAX_NODES,
    BadRequest,
    ExtenderArgs,
    at_most_max_nodes,
    fold,
    json_type,
    request_pod,
    request_pod_object,
)
from extender.model import Node, parse_node
from extender.model.pods import PodInfo

# Any JSON value but an object, so that a union with one object type still takes every value
# (parsing then says what is wrong with it, as for a body decoded whole).
_NOT_OBJECT = list[Any] | str | int | float | bool | None
_NULL = msgspec.Raw(b"null")


class _NodeStatus(msgspec.Struct):
    allocatable: msgspec.Raw = _NULL
    declaredFeatures: msgspec.Raw = _NULL


class _Node(msgspec.Struct):
    """The parts of a Node the extender reads (see model.nodes.parse_node: metadata,
    status.allocatable and status.declaredFeatures), still as JSON text; the rest (images,
    conditions, spec ...) is skipped."""

    metadata: msgspec.Raw = _NULL
    status: _NodeStatus | _NOT_OBJECT = None


class _NodeList(msgspec.Struct, forbid_unknown_fields=True):
    """v1.NodeList as kube-scheduler writes it; each node is kept as its JSON text."""

    items: list[msgspec.Raw] | None = None
    metadata: msgspec.Raw = _NULL
    kind: msgspec.Raw = _NULL
    apiVersion: msgspec.Raw = _NULL


class _Args(msgspec.Struct, forbid_unknown_fields=True):
    """ExtenderArgs in Go's spelling (its field names, no others)."""

    Pod: msgspec.Raw = _NULL
    Nodes: _NodeList | None = None
    # Typed here: msgspec checks the strings in C (a body with anything else in the list takes
    # the general path and its message).
    NodeNames: list[str] | None = None


# Each scan of a 3 MB body costs about 1 ms: the typed path splits the body in one; each
# node's parts are then decoded from its own text.
_args_decoder = msgspec.json.Decoder(_Args)
# The general path: top-level fields and the NodeList stay undecoded until read.
_fields_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw] | _NOT_OBJECT)
_items_decoder = msgspec.json.Decoder(list[msgspec.Raw] | dict[str, Any] | str | int | float | bool | None)
_node_decoder = msgspec.json.Decoder(_Node | _NOT_OBJECT)
_value_decoder = msgspec.json.Decoder(msgspec.Raw)

# A full-Node body exactly as kube-scheduler writes it (Go's encoding/json of ExtenderArgs and
# its v1.NodeList: no spaces, this field order, NodeNames null), around the pod and the nodes;
# and how each node after the first begins (a Node from the informer has no kind or apiVersion).
_POD_HEAD = b'{"Pod":'
_NODES_HEAD = b',"Nodes":{"metadata":{},"items":['
_NODES_TAIL = b']},"NodeNames":null}'
_NEXT_NODE = b',{"metadata":'

# Sized for a big cluster's nodes; an entry is about the size of the node's metadata.
NODE_CACHE_SIZE = 20_000
# 32 MiB holds the nodes of a 5,000-node cluster at 6 KB each; nodes past it are still found
# by the parts read, and a text over 1 MiB (no real Node) is not kept.
NODE_TEXT_BYTES = 32 * 1024 * 1024
# A thousand pods of a few KB; only the last few are asked for again.
POD_TEXT_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class _Split:
    """What a path read of a body, checked in the order of the general path's messages: the
    pod, then either the node names or each node's text and the node parsed from it."""

    pod: _Pod
    node_names: list[str] | None
    nodes: list[tuple[bytes, Node]] | None


@dataclass(frozen=True, slots=True)
class _Pod:
    """The request's pod: as JSON, its text (b"" when absent) and its parse by an earlier
    request (None: no such request is remembered)."""

    raw: Mapping[str, Any]
    text: bytes
    parsed: PodInfo | None


class ArgsDecoder:
    """Reads ExtenderArgs bodies, remembering the nodes and pods it parsed by their text.

    kube-scheduler sends the same Node objects request after request, and a pod's filter and
    prioritize (and each retry) with the same text: the second time neither is decoded or
    parsed again. Nodes and PodInfos are immutable, so sharing one between requests is safe.
    """

    # The paths in the order they are tried; the last reads every body (see the module's doc).
    PATHS = ("spliced", "typed", "general")

    def __init__(self) -> None:
        # Parsed nodes by the text of what the extender reads of them (_Node): a heartbeat's new
        # conditions do not count.
        self._parsed_nodes: LRUCache[tuple[bytes, bytes, bytes], Node] = LRUCache(maxsize=NODE_CACHE_SIZE)
        # In front of it, parsed nodes by their whole text: a node sent again unchanged, as most
        # are (a kubelet with nothing new reports every few minutes), is found without scanning
        # its text for the parts read.
        self._nodes_by_text: TextCache[Node] = TextCache(NODE_TEXT_BYTES, largest=1024 * 1024)
        # Parsed request pods by their text; parsing one was a tenth of the server's work per pod.
        self._pods_by_text: TextCache[PodInfo] = TextCache(POD_TEXT_BYTES, largest=256 * 1024)

    def extender_args(
        self, body: bytes, known: Mapping[str, Node] = MappingProxyType({}), paths: tuple[str, ...] = PATHS
    ) -> ExtenderArgs:
        """The request; ``known``: the cluster's nodes, whose objects stand for equal nodes of
        the request. ``paths``: the paths that may read it, in order (the tests try each alone).

        The body is decoded in parts, and each decoder refuses what is not JSON in its own way:
        orjson with a JSONDecodeError, msgspec with a DecodeError, or, for text that is not
        UTF-8 in a value it types as a string, a UnicodeDecodeError. Any of them means the body
        is not JSON, the caller's fault: a 400, never a 500 with a traceback.
        """
        try:
            for path in paths:
                split = _PATHS[path](self, body)
                if split is not None:
                    return self._args(split, known)
            raise BadRequest(f"none of the paths {paths} reads the body")
        except (orjson.JSONDecodeError, msgspec.DecodeError, UnicodeDecodeError) as exc:
            raise _not_json(body, exc) from None
        except RecursionError:  # msgspec builds nested arrays by recursion; orjson stops at 1024
            raise BadRequest("body is not valid JSON: nested too deeply") from None

    def pod_info(self, args: ExtenderArgs) -> PodInfo:
        """The request's pod parsed (BadRequest if it is malformed), remembered by its text."""
        if args.parsed_pod is not None:
            return args.parsed_pod
        info = request_pod(args.pod)
        if args.pod_text:
            self._pods_by_text.put(args.pod_text, info)
        return info

    def _pod(self, text: bytes) -> _Pod:
        """The pod of this text; BadRequest if it is not an object with a name."""
        # A pod parsed before passed every check made here and in parsing: nothing to redo.
        parsed = self._pods_by_text.get(text) if text else None
        raw = parsed.raw if parsed is not None else request_pod_object(_value(text or None))
        return _Pod(raw, text, parsed)

    def _args(self, split: _Split, known: Mapping[str, Node]) -> ExtenderArgs:
        pod = split.pod
        if split.nodes is None:
            assert split.node_names is not None
            return ExtenderArgs(pod.raw, split.node_names, None, pod_text=pod.text, parsed_pod=pod.parsed)
        by_name: dict[str, Node] = {}
        raw_by_name: dict[str, bytes] = {}
        cluster = known.get
        for text, node in split.nodes:
            same = cluster(node.name)
            if same is not None and same is not node and same == node:
                # The cluster's own object from now on: a filter whose nodes are all the
                # cluster's is decided as one by name (PodVerdicts.decide), without a test per node.
                node = same
                self._nodes_by_text.put(text, node)
            by_name[node.name] = node
            raw_by_name[node.name] = text
        return ExtenderArgs(pod.raw, list(by_name), by_name, raw_by_name, pod.text, pod.parsed)

    # ----- the paths: each returns None to leave the body to the next ---------------------------

    def _spliced(self, body: bytes) -> _Split | None:
        """A body exactly as kube-scheduler writes it, its nodes found in place.

        The nodes seen before are found one after the other, each by its cached text (its first
        bytes, then a compare), and the body is not scanned for where they end: that scan was
        most of the cost of a 3 MB body. A node not seen before (a heartbeat, say) ends where
        the next one begins, and is checked on its own. That reads the body as msgspec would:
        each text is a whole JSON value (split by msgspec from an earlier body, or checked
        here), they are separated by commas between fixed bytes, and the pod is checked on its
        own. The pod's text ends at the first ``_NODES_HEAD``: a quote after a comma opens or
        closes a string, so these bytes cannot lie inside one; should they lie deeper inside
        the pod (or ``_NEXT_NODE`` inside a node), what comes before them is not a whole value
        and is refused here. Any doubt (another spelling, spaces, a malformed node, an empty
        list) leaves the body to the next path, and its messages."""
        if not (body.startswith(_POD_HEAD) and body.endswith(_NODES_TAIL)):
            return None
        head = body.find(_NODES_HEAD, len(_POD_HEAD))
        if head < 0:
            return None
        p, end = head + len(_NODES_HEAD), len(body) - len(_NODES_TAIL)
        if p >= end:
            return None
        found: list[tuple[bytes, Node]] = []
        while True:
            run = self._nodes_by_text.chain(body, p, end, 0x2C)  # ","
            if run is None:
                return None
            entries, p = run
            found += entries
            if p == end:
                break
            following = body.find(_NEXT_NODE, p, end)
            text = body[p : end if following < 0 else following]
            if len(found) >= MAX_NODES:
                return None  # too many to parse: the next path refuses them before parsing any
            node = self._unseen_node(len(found), text)
            if node is None:
                return None
            found.append((text, node))
            if following < 0:
                break
            p = following + 1
        pod_text = body[len(_POD_HEAD) : head]
        if pod_text not in self._pods_by_text and not _whole_object(pod_text):
            return None
        return _Split(self._pod(pod_text), None, found)

    def _typed(self, body: bytes) -> _Split | None:
        """A body in Go's spelling, split by msgspec in one scan."""
        if not body:
            return None
        try:
            args = _args_decoder.decode(body)
        except msgspec.DecodeError:
            return None
        pod = self._pod(bytes(args.Pod))
        if args.NodeNames is not None:
            return _Split(pod, args.NodeNames, None)
        if args.Nodes is None:
            raise BadRequest("one of NodeNames or Nodes is required")
        return _Split(pod, None, self._nodes(args.Nodes.items or []))

    def _general(self, body: bytes) -> _Split:
        """Any body: its fields lower-cased, like Go's case-insensitive field matching, each
        decoded only when read and refused with the field at fault."""
        if not body:
            raise BadRequest("empty request body")
        try:
            fields = fold(_fields_decoder.decode(body), "ExtenderArgs")
        except (msgspec.DecodeError, RecursionError):
            orjson.loads(body)  # orjson's message, with its line and column, for the same body
            raise
        pod_raw = fields.get("pod")
        pod = self._pod(b"" if pod_raw is None else bytes(pod_raw))
        names = _value(fields.get("nodenames"))
        if names is not None:
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise BadRequest("NodeNames: expected an array of strings")
            return _Split(pod, list(names), None)
        nodes = fields.get("nodes")
        if nodes is None or bytes(nodes) == b"null":
            raise BadRequest("one of NodeNames or Nodes is required")
        return _Split(pod, None, self._nodes(_node_items(nodes)))

    # ----- nodes ------------------------------------------------------------------------------

    def _nodes(self, items: list[msgspec.Raw]) -> list[tuple[bytes, Node]]:
        at_most_max_nodes("Nodes.items", len(items))  # before any is parsed, each costs ~0.1 ms
        found = []
        for i, raw in enumerate(items):
            text = bytes(raw)
            node = self._nodes_by_text.get(text)
            if node is None:
                node = self._node(i, raw)
                self._nodes_by_text.put(text, node)
            found.append((text, node))
        return found

    def _unseen_node(self, i: int, text: bytes) -> Node | None:
        """Node ``i`` of a request, from a text not found in place; None if it is not a
        well-formed Node (the next path says what is wrong with the body)."""
        if not _whole_object(text):
            return None
        node = self._nodes_by_text.get(text)
        if node is None:
            try:
                node = self._node(i, text)
            except (ValueError, RecursionError):
                return None
            self._nodes_by_text.put(text, node)
        return node

    def _node(self, i: int, raw: msgspec.Raw | bytes) -> Node:
        node = _node_decoder.decode(raw)
        if not isinstance(node, _Node):
            raise BadRequest(f"Nodes.items[{i}].metadata.name: required")
        status = node.status
        if status is not None and not isinstance(status, _NodeStatus):
            return _parse(i, node)  # refused, with the field at fault
        read = status or _NodeStatus()
        key = (bytes(node.metadata), bytes(read.allocatable), bytes(read.declaredFeatures))
        parsed = self._parsed_nodes.get(key)
        if parsed is None:
            parsed = self._parsed_nodes[key] = _parse(i, node)
        return parsed


_PATHS: Mapping[str, Callable[[ArgsDecoder, bytes], _Split | None]] = {
    "spliced": ArgsDecoder._spliced, "typed": ArgsDecoder._typed, "general": ArgsDecoder._general,
}


def _value(raw: msgspec.Raw | bytes | None) -> Any:
    return None if raw is None else orjson.loads(raw if isinstance(raw, bytes) else bytes(raw))


def _not_json(body: bytes, exc: Exception) -> BadRequest:
    """The 400 for a body one of whose parts did not decode: orjson's message for the whole
    body, whose line and column are the body's (a part's would count from the part's start);
    the part's own message where orjson takes the body whole."""
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError as whole:
        return BadRequest(f"body is not valid JSON: {whole}")
    return BadRequest(f"body is not valid JSON: {exc}")


def _whole_object(text: bytes) -> bool:
    """Whether ``text`` is one JSON object as msgspec splits it (no spaces around it: a Raw
    holds none)."""
    if text[:1] != b"{" or text[-1:] != b"}":
        return False
    try:
        _value_decoder.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return False
    return True


def _node_items(nodes: msgspec.Raw) -> list[msgspec.Raw]:
    node_list = _fields_decoder.decode(nodes)
    if not isinstance(node_list, dict):
        raise BadRequest(f"Nodes: expected a JSON object, got {json_type(node_list)}")
    raw_items = fold(node_list, "Nodes").get("items")
    items = [] if raw_items is None else _items_decoder.decode(raw_items)
    if items is None:
        return []
    if not isinstance(items, list):
        raise BadRequest(f"Nodes.items: expected an array, got {json_type(items)}")
    return items


def _parse(i: int, node: _Node) -> Node:
    meta = orjson.loads(bytes(node.metadata))
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        raise BadRequest(f"Nodes.items[{i}].metadata.name: required")
    plain: dict[str, Any] = {"metadata": meta}
    status = node.status
    if isinstance(status, _NodeStatus):
        plain["status"] = {
            "allocatable": orjson.loads(bytes(status.allocatable)),
            "declaredFeatures": orjson.loads(bytes(status.declaredFeatures)),
        }
    elif status is not None:
        plain["status"] = status
    try:
        return parse_node(plain)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
