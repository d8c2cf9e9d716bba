"""k8s.io/kube-scheduler/extender/v1 on the wire: Go field names out, any casing in.

Bodies are decoded with orjson and checked structurally here, field by field, so that a
malformed request becomes a 400 with a message instead of an exception deeper down. The pod
and node objects inside stay plain dicts; only what scheduling reads is parsed later.

Full Node objects (``nodeCacheCapable: false``) are the exception: 500 of them weigh about
3 MB, and decoding them whole was most of a filter's time. msgspec splits the body into each
node's text in one scan and decodes only what the extender reads of a node it has not seen
(metadata, ``status.allocatable`` and ``status.declaredFeatures``), skipping the rest. A body
exactly as kube-scheduler writes it is not even scanned: each node seen before is found in
place by its cached text, and only a node not seen before is checked, on its own. Each node's
bytes go back unchanged for the passing nodes, in one join (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import msgspec
import orjson
from cachetools import LRUCache

from extender.api.text_cache import TextCache
from extender.model import Node, parse_node
from extender.model.pods import PodInfo, parse_pod


class BadRequest(ValueError):
    """The request body does not follow the extender protocol."""


def decode(body: bytes) -> Any:
    if not body:
        raise BadRequest("empty request body")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from None


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
    """ExtenderArgs as kube-scheduler writes it (Go's field names, no others): the body is
    split down to each node in one scan. Any other body (another casing, another field, a
    value of the wrong type, bad JSON) takes the general path, which says what is wrong."""

    Pod: msgspec.Raw = _NULL
    Nodes: _NodeList | None = None
    # Typed here: msgspec checks the strings in C (a body with anything else in the list takes
    # the general path and its message).
    NodeNames: list[str] | None = None


# Each scan of a 3 MB body costs about 1 ms: the usual body is split in one (_Args); each
# node's parts are then decoded from its own text.
_args_decoder = msgspec.json.Decoder(_Args)
# The general path: top-level fields and the NodeList stay undecoded until read.
_fields_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw] | _NOT_OBJECT)
_items_decoder = msgspec.json.Decoder(list[msgspec.Raw] | dict[str, Any] | str | int | float | bool | None)
_node_decoder = msgspec.json.Decoder(_Node | _NOT_OBJECT)


def _lazy_fields(body: bytes, what: str) -> dict[str, msgspec.Raw]:
    """The object's fields, lower-cased, each still as its JSON text."""
    if not body:
        raise BadRequest("empty request body")
    try:
        fields = _fields_decoder.decode(body)
    except (msgspec.DecodeError, RecursionError):
        decode(body)  # orjson's message, with its line and column, for the same body
        raise
    return fold(fields, what)


def _value(raw: msgspec.Raw | bytes | None) -> Any:
    return None if raw is None else orjson.loads(raw if isinstance(raw, bytes) else bytes(raw))


# Parsed nodes by the text of what the extender reads of them (_Node).
# kube-scheduler sends the same Node objects request after request, so most are parsed once;
# a heartbeat's new conditions do not count. A Node is immutable: sharing one between requests
# is safe. Sized for a big cluster's nodes; an entry is about the size of the node's metadata.
NODE_CACHE_SIZE = 20_000
_parsed_nodes: LRUCache[tuple[bytes, bytes, bytes], Node] = LRUCache(maxsize=NODE_CACHE_SIZE)

# In front of it, parsed nodes by their whole text: a node sent again unchanged, as most are
# (a kubelet with nothing new reports every few minutes), is found without scanning its text
# for the parts read. 32 MiB holds the nodes of a 5,000-node cluster at 6 KB each; nodes past
# it are still found by the parts read, and a text over 1 MiB (no real Node) is not kept.
NODE_TEXT_BYTES = 32 * 1024 * 1024
_nodes_by_text: TextCache[Node] = TextCache(NODE_TEXT_BYTES, largest=1024 * 1024)


def _node(i: int, raw: msgspec.Raw | bytes) -> Node:
    node = _node_decoder.decode(raw)
    if not isinstance(node, _Node):
        raise BadRequest(f"Nodes.items[{i}].metadata.name: required")
    status = node.status
    if status is not None and not isinstance(status, _NodeStatus):
        return _parse(i, node)  # refused, with the field at fault
    read = status or _NodeStatus()
    key = (bytes(node.metadata), bytes(read.allocatable), bytes(read.declaredFeatures))
    parsed = _parsed_nodes.get(key)
    if parsed is None:
        parsed = _parsed_nodes[key] = _parse(i, node)
    return parsed


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


def encode(obj: Any) -> bytes:
    """``obj`` in JSON; bytes are a reply encoded already (``filter_result``'s)."""
    return obj if type(obj) is bytes else orjson.dumps(obj)


def fold(obj: Any, what: str) -> dict[str, Any]:
    """An object's keys lower-cased, like Go's case-insensitive field matching."""
    if not isinstance(obj, Mapping):
        raise BadRequest(f"{what}: expected a JSON object, got {_type(obj)}")
    return {str(k).lower(): v for k, v in obj.items()}


def _type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def _string(fields: Mapping[str, Any], key: str, name: str, required: bool = True) -> str:
    value = fields.get(key)
    if value is None or value == "":
        if required:
            raise BadRequest(f"{name}: required")
        return ""
    if not isinstance(value, str):
        raise BadRequest(f"{name}: expected a string, got {_type(value)}")
    return value


def _pod(fields: Mapping[str, Any]) -> dict[str, Any]:
    pod = fields.get("pod")
    if pod is None:
        raise BadRequest("Pod: required")
    if not isinstance(pod, dict):
        raise BadRequest(f"Pod: expected an object, got {_type(pod)}")
    meta = pod.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise BadRequest("Pod.metadata.name: required")
    return pod


# Parsed request pods by their text. kube-scheduler sends a pod's filter and prioritize (and
# each retry) with the same text, so the second is not decoded or parsed again; parsing it was
# a tenth of the server's work per pod. A PodInfo is immutable: sharing one between requests
# is safe. The budget holds a thousand pods of a few KB; only the last few are asked for again.
POD_TEXT_BYTES = 4 * 1024 * 1024
_pods_by_text: TextCache[PodInfo] = TextCache(POD_TEXT_BYTES, largest=256 * 1024)


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    pod: Mapping[str, Any]
    node_names: list[str]
    # nodeCacheCapable=false: each Node parsed, by name, and its bytes as received, echoed
    # back for the passing nodes.
    nodes: dict[str, Node] | None
    node_bytes: dict[str, bytes] = field(default_factory=dict)
    # The pod's text, and the pod parsed from that same text by an earlier request (None: no
    # such request is remembered; ``pod_info`` parses it).
    pod_text: bytes = b""
    parsed_pod: PodInfo | None = None


def pod_info(args: ExtenderArgs) -> PodInfo:
    """The request's pod parsed (BadRequest if it is malformed), remembered by its text."""
    if args.parsed_pod is not None:
        return args.parsed_pod
    info = request_pod(args.pod)
    if args.pod_text:
        _pods_by_text.put(args.pod_text, info)
    return info


def request_pod(obj: Mapping[str, Any]) -> PodInfo:
    """A request's pod parsed; BadRequest if it is malformed."""
    try:
        return parse_pod(obj)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


# Twice the largest cluster Kubernetes supports (5,000 nodes): a request naming more nodes is a
# bug or an attack. 40,000 new full Nodes held every other request back 2-3.5 s while they
# were parsed, 50,000 preempt candidates 6-8 s; 10,000 cost under a second, and are refused
# with a 400 before any is parsed.
MAX_NODES = 10_000


def _at_most_max_nodes(what: str, count: int) -> None:
    if count > MAX_NODES:
        raise BadRequest(f"{what}: {count} entries, more than the limit of {MAX_NODES}")


def extender_args(body: bytes, known: Mapping[str, Node] = MappingProxyType({})) -> ExtenderArgs:
    """The request; ``known``: the cluster's nodes, whose objects stand for equal nodes of the
    request.

    The body is decoded in parts, and each decoder refuses what is not JSON in its own way:
    orjson with a JSONDecodeError, msgspec with a DecodeError, or, for text that is not UTF-8
    in a value it types as a string, a UnicodeDecodeError. Any of them means the body is not
    JSON, the caller's fault: a 400, never a 500 with a traceback.
    """
    try:
        return _extender_args(body, known)
    except (orjson.JSONDecodeError, msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise _not_json(body, exc) from None
    except RecursionError:  # msgspec builds nested arrays by recursion; orjson stops at 1024
        raise BadRequest("body is not valid JSON: nested too deeply") from None


def _not_json(body: bytes, exc: Exception) -> BadRequest:
    """The 400 for a body one of whose parts did not decode: orjson's message for the whole
    body, whose line and column are the body's (a part's would count from the part's start);
    the part's own message where orjson takes the body whole."""
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError as whole:
        return BadRequest(f"body is not valid JSON: {whole}")
    return BadRequest(f"body is not valid JSON: {exc}")


def _extender_args(body: bytes, known: Mapping[str, Node]) -> ExtenderArgs:
    seen = _seen_nodes(body)
    if seen is not None:
        pod_text, found, parsed = seen
        pod = parsed.raw if parsed is not None else _pod({"pod": _value(pod_text)})
        return _with_seen(pod, found, known, pod_text, parsed)
    pod_raw, names_text, nodes = _split(body)
    # A pod parsed before passed every check made here and in parsing: nothing to redo.
    pod_text = b"" if pod_raw is None else bytes(pod_raw)
    parsed = _pods_by_text.get(pod_text) if pod_text else None
    pod = parsed.raw if parsed is not None else _pod({"pod": _value(pod_text or None)})
    if isinstance(names_text, list):  # the typed split checked it already
        return ExtenderArgs(pod, names_text, None, pod_text=pod_text, parsed_pod=parsed)
    names = _value(names_text)
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise BadRequest("NodeNames: expected an array of strings")
        return ExtenderArgs(pod, list(names), None, pod_text=pod_text, parsed_pod=parsed)
    return _with_nodes(pod, _node_items(nodes), known, pod_text, parsed)


# A full-Node body exactly as kube-scheduler writes it (Go's encoding/json of ExtenderArgs and
# its v1.NodeList: no spaces, this field order, NodeNames null), around the pod and the nodes;
# and how each node after the first begins (a Node from the informer has no kind or apiVersion).
_POD_HEAD = b'{"Pod":'
_NODES_HEAD = b',"Nodes":{"metadata":{},"items":['
_NODES_TAIL = b']},"NodeNames":null}'
_NEXT_NODE = b',{"metadata":'
_value_decoder = msgspec.json.Decoder(msgspec.Raw)


def _seen_nodes(body: bytes) -> tuple[bytes, list[tuple[bytes, Node]], PodInfo | None] | None:
    """The pod's text, each node's text and parsed node, and the pod parsed before (if it was),
    for a body as kube-scheduler writes it; None where only the general split can tell.

    The nodes seen before are found in place, one after the other, each by its cached text (its
    first bytes, then a compare), and the body is not scanned for where they end: that scan was
    most of the cost of a 3 MB body. A node not seen before (a heartbeat, say) ends where the
    next one begins, and is checked on its own. That reads the body as msgspec would: each
    text is a whole JSON value (split by msgspec from an earlier body, or checked here), they
    are separated by commas between fixed bytes, and the pod is checked on its own. The pod's
    text ends at the first ``_NODES_HEAD``: a quote after a comma opens or closes a string, so
    these bytes cannot lie inside one; should they lie deeper inside the pod (or ``_NEXT_NODE``
    inside a node), what comes before them is not a whole value and is refused here. Any doubt
    (another spelling, spaces, a malformed node, an empty list) leaves the body to the general
    split, and its messages."""
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
        run = _nodes_by_text.chain(body, p, end, 0x2C)  # ","
        if run is None:
            return None
        entries, p = run
        found += entries
        if p == end:
            break
        following = body.find(_NEXT_NODE, p, end)
        text = body[p : end if following < 0 else following]
        node = _unseen_node(len(found), text)
        if node is None:
            return None
        found.append((text, node))
        if following < 0:
            break
        p = following + 1
    pod_text = body[len(_POD_HEAD) : head]
    parsed = _pods_by_text.get(pod_text)
    if parsed is None and not _whole_object(pod_text):
        return None
    return pod_text, found, parsed


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


def _unseen_node(i: int, text: bytes) -> Node | None:
    """Node ``i`` of a request, from a text not found in place; None if it is not a well-formed
    Node (the general split says what is wrong with the body)."""
    if not _whole_object(text):
        return None
    node = _nodes_by_text.get(text)
    if node is None:
        try:
            node = _node(i, text)
        except (ValueError, RecursionError):
            return None
        _nodes_by_text.put(text, node)
    return node


def _split(
    body: bytes,
) -> tuple[msgspec.Raw | None, list[str] | msgspec.Raw | None, _NodeList | msgspec.Raw | None]:
    """Pod and NodeNames as JSON text, and Nodes: split (_NodeList) from a body as
    kube-scheduler writes it, else still as JSON text."""
    if body:
        try:
            args = _args_decoder.decode(body)
        except msgspec.DecodeError:
            pass
        else:
            return args.Pod, args.NodeNames, args.Nodes
    fields = _lazy_fields(body, "ExtenderArgs")
    return fields.get("pod"), fields.get("nodenames"), fields.get("nodes")


def _node_items(nodes: _NodeList | msgspec.Raw | None) -> list[msgspec.Raw]:
    if isinstance(nodes, msgspec.Raw):
        if bytes(nodes) == b"null":
            nodes = None
        else:
            return _node_items_of(nodes)
    if nodes is None:
        raise BadRequest("one of NodeNames or Nodes is required")
    return nodes.items or []


def _node_items_of(nodes: msgspec.Raw) -> list[msgspec.Raw]:
    node_list = _fields_decoder.decode(nodes)
    if not isinstance(node_list, dict):
        raise BadRequest(f"Nodes: expected a JSON object, got {_type(node_list)}")
    raw_items = fold(node_list, "Nodes").get("items")
    items = [] if raw_items is None else _items_decoder.decode(raw_items)
    if items is None:
        return []
    if not isinstance(items, list):
        raise BadRequest(f"Nodes.items: expected an array, got {_type(items)}")
    return items


def _with_nodes(
    pod: Mapping[str, Any],
    items: list[msgspec.Raw],
    known: Mapping[str, Node],
    pod_text: bytes,
    parsed: PodInfo | None,
) -> ExtenderArgs:
    _at_most_max_nodes("Nodes.items", len(items))  # before any is parsed, each costs ~0.1 ms
    found = []
    for i, raw in enumerate(items):
        text = bytes(raw)
        node = _nodes_by_text.get(text)
        if node is None:
            node = _node(i, raw)
            _nodes_by_text.put(text, node)
        found.append((text, node))
    return _with_seen(pod, found, known, pod_text, parsed)


def _with_seen(
    pod: Mapping[str, Any],
    found: list[tuple[bytes, Node]],
    known: Mapping[str, Node],
    pod_text: bytes,
    parsed: PodInfo | None,
) -> ExtenderArgs:
    """The request of ``found``: each node's text and the node parsed from it."""
    by_name: dict[str, Node] = {}
    raw_by_name: dict[str, bytes] = {}
    cluster = known.get
    for text, node in found:
        same = cluster(node.name)
        if same is not None and same is not node and same == node:
            # The cluster's own object from now on: a filter whose nodes are all the
            # cluster's is decided as one by name (PodPlan.decide), without a test per node.
            node = same
            _nodes_by_text.put(text, node)
        by_name[node.name] = node
        raw_by_name[node.name] = text
    return ExtenderArgs(pod, list(by_name), by_name, raw_by_name, pod_text, parsed)


def filter_result(
    args: ExtenderArgs,
    passed: list[str],
    failed: Mapping[str, str],
    unresolvable: Mapping[str, str],
    error: str,
) -> dict[str, Any] | bytes:
    """ExtenderFilterResult answering in the mode the request used: with full Nodes, encoded
    already, the passing nodes' bytes as they came in."""
    out: dict[str, Any] = {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": dict(failed),
        "FailedAndUnresolvableNodes": dict(unresolvable),
        "Error": error,
    }
    if args.nodes is None:
        out["NodeNames"] = passed
        return out
    del out["Nodes"]
    rest = b"]}," + orjson.dumps(out)[1:]  # the fields after Nodes, in orjson's order and spelling
    if not passed:
        return _NODES_REPLY + rest
    # One join, one copy of the 3 MB of nodes into a reply of the exact size: through orjson,
    # the reply grew by reallocations that copied it again (a tenth of the server's CPU).
    node_bytes = args.node_bytes
    parts = [b","] * (2 * len(passed) + 1)
    parts[1::2] = [node_bytes[name] for name in passed]
    parts[0], parts[-1] = _NODES_REPLY, rest
    return b"".join(parts)


_NODES_REPLY = b'{"Nodes":{"metadata":{},"items":['


def host_priorities(scores: Mapping[str, int]) -> list[dict[str, Any]]:
    return [{"Host": host, "Score": score} for host, score in scores.items()]


@dataclass(frozen=True, slots=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def binding_args(body: bytes) -> BindingArgs:
    fields = fold(decode(body), "ExtenderBindingArgs")
    return BindingArgs(
        pod_name=_string(fields, "podname", "PodName"),
        pod_namespace=_string(fields, "podnamespace", "PodNamespace", required=False) or "default",
        pod_uid=_string(fields, "poduid", "PodUID", required=False),
        node=_string(fields, "node", "Node"),
    )


@dataclass(frozen=True, slots=True)
class Victims:
    uids: list[str]
    pdb_violations: int


@dataclass(frozen=True, slots=True)
class PreemptionArgs:
    pod: dict[str, Any]
    victims: dict[str, Victims]


def _victims(node: str, value: Any, meta: bool) -> Victims:
    fields = fold(value, f"victims of node {node}")
    pods = fields.get("pods") or []
    if not isinstance(pods, list):
        raise BadRequest(f"victims of node {node}: Pods: expected an array")
    uids = []
    for i, pod in enumerate(pods):
        if meta:
            uid = fold(pod, f"victims of node {node}: Pods[{i}]").get("uid")
        else:
            meta_obj = pod.get("metadata") if isinstance(pod, dict) else None
            uid = meta_obj.get("uid") if isinstance(meta_obj, dict) else None
        if not isinstance(uid, str) or not uid:
            raise BadRequest(f"victims of node {node}: Pods[{i}]: UID required")
        uids.append(uid)
    pdb = fields.get("numpdbviolations") or 0
    if isinstance(pdb, bool) or not isinstance(pdb, int):
        raise BadRequest(f"victims of node {node}: NumPDBViolations: expected an integer")
    return Victims(uids, pdb)


def preemption_args(body: bytes) -> PreemptionArgs:
    fields = fold(decode(body), "ExtenderPreemptionArgs")
    pod = _pod(fields)
    meta_map, full_map = fields.get("nodenametometavictims"), fields.get("nodenametovictims")
    meta = meta_map is not None
    source = meta_map if meta else full_map
    if source is None:
        raise BadRequest("one of NodeNameToMetaVictims or NodeNameToVictims is required")
    if not isinstance(source, dict):
        raise BadRequest(f"NodeNameTo{'Meta' if meta else ''}Victims: expected an object")
    _at_most_max_nodes(f"NodeNameTo{'Meta' if meta else ''}Victims", len(source))
    return PreemptionArgs(pod, {node: _victims(node, v, meta) for node, v in source.items()})


def preemption_result(kept: Mapping[str, Victims]) -> dict[str, Any]:
    return {
        "NodeNameToMetaVictims": {
            node: {"Pods": [{"UID": uid} for uid in v.uids], "NumPDBViolations": v.pdb_violations}
            for node, v in kept.items()
        }
    }
