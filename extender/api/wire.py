"""k8s.io/kube-scheduler/extender/v1 on the wire: Go field names out, any casing in.

Bodies are decoded with orjson and checked structurally here, field by field, so that a
malformed request becomes a 400 with a message instead of an exception deeper down. The pod
and node objects inside stay plain dicts; only what scheduling reads is parsed later. The
filter and prioritize bodies (ExtenderArgs), which carry up to 3 MB of nodes, are read by
``args_decoder.ArgsDecoder``; a full-Node filter's reply echoes each passing node's bytes as
they came in, in one join (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from extender.model import Node
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


def encode(obj: Any) -> bytes:
    """``obj`` in JSON; bytes are a reply encoded already (``filter_result``'s)."""
    return obj if type(obj) is bytes else orjson.dumps(obj)


def fold(obj: Any, what: str) -> dict[str, Any]:
    """An object's keys lower-cased, like Go's case-insensitive field matching."""
    if not isinstance(obj, Mapping):
        raise BadRequest(f"{what}: expected a JSON object, got {json_type(obj)}")
    return {str(k).lower(): v for k, v in obj.items()}


def json_type(value: Any) -> str:
    """What JSON calls the type of a decoded value, for messages."""
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
        raise BadRequest(f"{name}: expected a string, got {json_type(value)}")
    return value


def request_pod_object(pod: Any) -> dict[str, Any]:
    """The request's pod (decoded JSON) if it is an object with a name; BadRequest if not."""
    if pod is None:
        raise BadRequest("Pod: required")
    if not isinstance(pod, dict):
        raise BadRequest(f"Pod: expected an object, got {json_type(pod)}")
    meta = pod.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise BadRequest("Pod.metadata.name: required")
    return pod


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    pod: Mapping[str, Any]
    node_names: list[str]
    # nodeCacheCapable=false: each Node parsed, by name, and its bytes as received, echoed
    # back for the passing nodes.
    nodes: dict[str, Node] | None
    node_bytes: dict[str, bytes] = field(default_factory=dict)
    # The pod's text, and the pod parsed from that same text by an earlier request (None: no
    # such request is remembered; ``ArgsDecoder.pod_info`` parses it).
    pod_text: bytes = b""
    parsed_pod: PodInfo | None = None


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


def at_most_max_nodes(what: str, count: int) -> None:
    """A 400 for a list of more than ``MAX_NODES`` nodes, before any of them is parsed."""
    if count > MAX_NODES:
        raise BadRequest(f"{what}: {count} entries, more than the limit of {MAX_NODES}")


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
    pod = request_pod_object(fields.get("pod"))
    meta_map, full_map = fields.get("nodenametometavictims"), fields.get("nodenametovictims")
    meta = meta_map is not None
    source = meta_map if meta else full_map
    if source is None:
        raise BadRequest("one of NodeNameToMetaVictims or NodeNameToVictims is required")
    if not isinstance(source, dict):
        raise BadRequest(f"NodeNameTo{'Meta' if meta else ''}Victims: expected an object")
    at_most_max_nodes(f"NodeNameTo{'Meta' if meta else ''}Victims", len(source))
    return PreemptionArgs(pod, {node: _victims(node, v, meta) for node, v in source.items()})


def preemption_result(kept: Mapping[str, Victims]) -> dict[str, Any]:
    return {
        "NodeNameToMetaVictims": {
            node: {"Pods": [{"UID": uid} for uid in v.uids], "NumPDBViolations": v.pdb_violations}
            for node, v in kept.items()
        }
    }
