"""The kube-scheduler side of the extender wire protocol (extender-protocol.md §1-§2).

Requests use the Go field names exactly as kube-scheduler sends them; replies are read the way
Go's decoder reads them, with case-insensitive field names.
"""

from __future__ import annotations

from typing import Any

import orjson

Obj = dict[str, Any]


class ProtocolError(Exception):
    """A reply that kube-scheduler would treat as a failed call."""


def informer_pod(pod: Obj) -> Obj:
    """The pod as the scheduler's informer cache holds it: without apiVersion and kind."""
    return {k: v for k, v in pod.items() if k not in ("apiVersion", "kind")}


def extender_args(pod_json: bytes, node_names: list[str]) -> bytes:
    """ExtenderArgs for nodeCacheCapable: `Nodes` is null and `NodeNames` carries the candidates."""
    return b'{"Pod":' + pod_json + b',"Nodes":null,"NodeNames":' + orjson.dumps(node_names) + b"}"


def binding_args(pod: Obj, node: str) -> bytes:
    meta = pod["metadata"]
    return orjson.dumps(
        {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
    )


def _field(obj: Obj, name: str) -> Any:
    if name in obj:  # the usual case: the extender answers with the Go names
        return obj[name]
    wanted = name.lower()
    for key, value in obj.items():
        if key.lower() == wanted:
            return value
    return None


def decode(status: int, body: bytes) -> Any:
    if status != 200:
        raise ProtocolError(f"HTTP {status}: {body[:200]!r}")
    if not body:
        raise ProtocolError("empty reply body")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise ProtocolError(f"reply is not JSON: {e}") from None


def filter_result(reply: Any, candidates: list[str]) -> tuple[list[str], dict[str, str]]:
    """Passing node names and rejection messages of an ExtenderFilterResult.

    Mirrors the scheduler: `Error` fails the call, `NodeNames` null falls back to `Nodes`, and a
    passing node that was not a candidate fails the call.
    """
    if not isinstance(reply, dict):
        raise ProtocolError(f"filter reply is not an object: {type(reply).__name__}")
    error = _field(reply, "Error")
    if error:
        raise ProtocolError(f"filter error: {error}")
    names = _field(reply, "NodeNames")
    if names is None:
        nodes = _field(reply, "Nodes") or {}
        names = [item["metadata"]["name"] for item in (nodes.get("items") or [])]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ProtocolError("filter NodeNames is not a list of names")
    unknown = set(names) - set(candidates)
    if unknown:
        raise ProtocolError(f"filter claims nodes not in the input list: {sorted(unknown)[:5]}")
    reasons: dict[str, str] = {}
    for key in ("FailedNodes", "FailedAndUnresolvableNodes"):
        reasons.update(_field(reply, key) or {})
    return names, reasons


def prioritize_result(reply: Any, hosts: list[str]) -> dict[str, int]:
    """Scores per asked host; hosts the scheduler did not ask about are ignored, as upstream does."""
    if not isinstance(reply, list):
        raise ProtocolError(f"prioritize reply is not a list: {type(reply).__name__}")
    asked = set(hosts)
    scores: dict[str, int] = {}
    for entry in reply:
        if not isinstance(entry, dict):
            raise ProtocolError("prioritize entry is not an object")
        host, score = _field(entry, "Host"), _field(entry, "Score")
        if not isinstance(score, int):
            raise ProtocolError(f"prioritize score for {host} is not an integer: {score!r}")
        if host in asked:
            scores[host] = score
    return scores


def bind_result(reply: Any) -> None:
    if not isinstance(reply, dict):
        raise ProtocolError(f"bind reply is not an object: {type(reply).__name__}")
    error = _field(reply, "Error")
    if error:
        raise ProtocolError(f"bind error: {error}")
