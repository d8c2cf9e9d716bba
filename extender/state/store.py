"""The cluster as the extender knows it: typed objects, indexes and devices in use.

Sources (a Kubernetes watch or the local store) feed it plain API dicts through
``apply`` / ``delete`` / ``replace``; every object is parsed once, here, and the hot path
only reads the parsed form. ``node_signature`` changes whenever anything that can alter an
allocation decision on that node changes (slices, classes, nodes: the inventory epoch;
devices in use in the node's pools: per-pool versions); results computed for a node are
reused only while its signature is unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from extender.model import (
    DeviceClass,
    DeviceTaintRule,
    Node,
    ResourceClaim,
    ResourceSlice,
    apply_taint_rules,
    parse_device_class,
    parse_device_taint_rule,
    parse_node,
    parse_resource_claim,
    parse_resource_slice,
)
from extender.model.pods import PodInfo, parse_pod
from extender.state.inuse import InFlight, InUse
from extender.state.slices import SliceIndex

log = logging.getLogger(__name__)

KINDS = (
    "Node", "DeviceClass", "ResourceSlice", "DeviceTaintRule",
    "ResourceClaim", "ResourceClaimTemplate", "Pod",
)
NAMESPACED = frozenset({"ResourceClaim", "ResourceClaimTemplate", "Pod"})
ObjKey = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped kinds


def object_key(kind: str, obj: Any) -> ObjKey:
    """(namespace, name) of an API object; ValueError when it cannot be identified."""
    if kind not in KINDS:
        raise ValueError(f"unsupported kind {kind!r}; expected one of {', '.join(KINDS)}")
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ValueError(f"{kind}: metadata.name: required")
    namespace = meta.get("namespace") or ("default" if kind in NAMESPACED else "")
    if not isinstance(namespace, str):
        raise ValueError(f"{kind} {meta['name']}: metadata.namespace: must be a string")
    return (namespace if kind in NAMESPACED else "", meta["name"])


def _rv(obj: Mapping[str, Any]) -> int | None:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion"))
    except (TypeError, ValueError):
        return None


def _class_content(dc: DeviceClass) -> tuple[Any, ...]:
    return (dc.selectors, dc.config, dc.extended_resource_name)


def _parse_template(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    key = object_key("ResourceClaimTemplate", obj)
    spec = obj.get("spec")
    if not isinstance(spec, Mapping) or not isinstance(spec.get("spec"), Mapping):
        raise ValueError(f"ResourceClaimTemplate {key[0]}/{key[1]}: spec.spec: required (the claim spec)")
    return obj


class ClusterState:
    """The cache. Not thread-safe by design: every call happens on the event loop."""

    def __init__(self, feature_gates: Mapping[str, bool] | None = None) -> None:
        gates = feature_gates or {}
        self.nodes: dict[str, Node] = {}
        self.classes: dict[str, DeviceClass] = {}
        # The allocator sees slices with DeviceTaintRule taints applied (dra-allocation.md §9.3),
        # as kube-scheduler's slice tracker does when both taint gates are on; ``_published``
        # keeps the slices as their drivers wrote them, so a changed rule can be re-applied.
        self.slices = SliceIndex()
        self._published: dict[str, ResourceSlice] = {}
        self.taint_rules: dict[str, DeviceTaintRule] = {}
        self._apply_taint_rules = all(gates.get(g, True) for g in ("DRADeviceTaints", "DRADeviceTaintRules"))
        self.claims: dict[ObjKey, ResourceClaim] = {}
        self.claims_by_uid: dict[str, ResourceClaim] = {}
        self.templates: dict[ObjKey, Mapping[str, Any]] = {}
        self.pods: dict[ObjKey, PodInfo] = {}
        self.inuse = InUse(consumable_capacity=gates.get("DRAConsumableCapacity", True))
        self.inventory_epoch = 0
        self._synced: set[str] = set()
        # Claims whose cached version was written by us (assume cache, dra-scheduling.md §4.3).
        self._assumed: set[ObjKey] = set()
        # The model's Node keeps only what allocation reads; /debug and Nodes-mode replies need the rest.
        self._node_raw: dict[str, Mapping[str, Any]] = {}

    # --- feeding interface (contract shared with the Kubernetes source) -------------------

    def apply(self, kind: str, obj: dict) -> None:
        """Add or update one object. Raises ValueError for a malformed object."""
        key = object_key(kind, obj)
        if kind == "ResourceClaim":
            self._apply_claim(key, obj, assumed=False)
        elif kind == "Pod":
            self.pods[key] = parse_pod(obj)
        elif kind == "ResourceSlice":
            published = parse_resource_slice(obj)
            self._published[published.name] = published
            self.slices.put(self._tainted(published))
            self.inventory_epoch += 1
        elif kind == "DeviceTaintRule":
            self.taint_rules[key[1]] = parse_device_taint_rule(obj)
            self._retaint()
        elif kind == "DeviceClass":
            parsed_class = parse_device_class(obj)
            held_class = self.classes.get(key[1])
            self.classes[key[1]] = parsed_class
            if held_class is None or _class_content(held_class) != _class_content(parsed_class):
                self.inventory_epoch += 1
        elif kind == "Node":
            parsed_node = parse_node(obj)
            self._node_raw[key[1]] = obj
            # Status heartbeats update nodes constantly; only labels and DRA-backable allocatable matter.
            if self.nodes.get(key[1]) != parsed_node:
                self.nodes[key[1]] = parsed_node
                self.inventory_epoch += 1
        else:
            self.templates[key] = _parse_template(obj)

    def delete(self, kind: str, obj: dict) -> None:
        key = object_key(kind, obj)
        if kind == "ResourceClaim":
            claim = self.claims.pop(key, None)
            self._assumed.discard(key)
            if claim is not None:
                self.claims_by_uid.pop(claim.uid, None)
                self.inuse.set_owner(("claim", claim.uid), None)
        elif kind == "Pod":
            self.pods.pop(key, None)
        elif kind == "ResourceSlice":
            self._published.pop(key[1], None)
            if self.slices.remove(key[1]):
                self.inventory_epoch += 1
        elif kind == "DeviceTaintRule":
            if self.taint_rules.pop(key[1], None) is not None:
                self._retaint()
        elif kind == "DeviceClass":
            if self.classes.pop(key[1], None) is not None:
                self.inventory_epoch += 1
        elif kind == "Node":
            self._node_raw.pop(key[1], None)
            if self.nodes.pop(key[1], None) is not None:
                self.inventory_epoch += 1
        else:
            self.templates.pop(key, None)

    def replace(self, kind: str, objs: list[dict]) -> None:
        """A relist: apply every object, then delete what the list no longer has."""
        keep = set()
        for obj in objs:
            self.apply(kind, obj)
            keep.add(object_key(kind, obj))
        for key, raw in list(self._raw_by_key(kind).items()):
            if key not in keep:
                self.delete(kind, raw)

    def _tainted(self, published: ResourceSlice) -> ResourceSlice:
        if not self._apply_taint_rules or not self.taint_rules:
            return published
        return apply_taint_rules(published, tuple(self.taint_rules.values()))

    def _retaint(self) -> None:
        """A rule came, changed or went: every slice is seen through the new rule set."""
        if not self._apply_taint_rules:
            return
        for published in self._published.values():
            tainted = self._tainted(published)
            if tainted is not self.slices.by_name.get(published.name):
                self.slices.put(tainted)
        self.inventory_epoch += 1

    def mark_synced(self, kind: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"unsupported kind {kind!r}")
        self._synced.add(kind)

    @property
    def synced(self) -> bool:
        return self._synced.issuperset(KINDS)

    # --- claims and the assume cache ------------------------------------------------------

    def assume_claim(self, obj: dict) -> ResourceClaim:
        """Cache a claim we have just written, ahead of the watch echo."""
        key = object_key("ResourceClaim", obj)
        self._apply_claim(key, obj, assumed=True)
        return self.claims[key]

    def _apply_claim(self, key: ObjKey, obj: dict, assumed: bool) -> None:
        held = self.claims.get(key)
        if held is not None and key in self._assumed:
            new_rv, held_rv = _rv(obj), _rv(held.raw)
            if new_rv is not None and held_rv is not None and new_rv < held_rv:
                return  # a stale echo must not undo our newer write
        claim = parse_resource_claim(obj)
        if held is not None and held.uid != claim.uid:
            self.claims_by_uid.pop(held.uid, None)
            self.inuse.set_owner(("claim", held.uid), None)
        self.claims[key] = claim
        self.claims_by_uid[claim.uid] = claim
        if assumed:
            self._assumed.add(key)
        else:
            self._assumed.discard(key)
        self.inuse.set_owner(("claim", claim.uid), claim.allocation)

    # --- in-flight commits ----------------------------------------------------------------

    def add_inflight(self, entry: InFlight) -> None:
        self.inuse.add_inflight(entry)

    def remove_inflight(self, claim_uid: str) -> None:
        self.inuse.remove_inflight(claim_uid)

    def expire_inflight(self) -> list[str]:
        gone = self.inuse.expire()
        if gone:
            log.warning("in-flight allocations expired (abandoned bind?): %s", ", ".join(gone))
        return gone

    # --- reads ----------------------------------------------------------------------------

    def node_signature(self, node_name: str) -> tuple[int, ...]:
        """Changes whenever an allocation on this node could come out differently."""
        # Called for every candidate node of every request (twice): no generator, the pools
        # memo read directly, and .get skips Counter.__missing__ for never-allocated pools.
        pools = self.slices.pools_by_node.get(node_name)
        if pools is None:
            pools = self.slices.pools_for_node(node_name)
        if len(pools) == 1:
            return (self.inventory_epoch, self.inuse.pool_versions.get(pools[0], 0))
        version = self.inuse.pool_versions.get
        return (self.inventory_epoch, *[version(pool, 0) for pool in pools])

    def claim(self, namespace: str, name: str) -> ResourceClaim | None:
        return self.claims.get((namespace, name))

    def pod(self, namespace: str, name: str) -> PodInfo | None:
        return self.pods.get((namespace, name))

    def counts(self) -> dict[str, int]:
        return {
            "Node": len(self.nodes),
            "DeviceClass": len(self.classes),
            "ResourceSlice": len(self.slices),
            "DeviceTaintRule": len(self.taint_rules),
            "ResourceClaim": len(self.claims),
            "ResourceClaimTemplate": len(self.templates),
            "Pod": len(self.pods),
        }

    def items(self, kind: str) -> list[Mapping[str, Any]]:
        """The raw objects of one kind as the cache holds them (claims with their status)."""
        return list(self._raw_by_key(kind).values())

    def raw(self, kind: str, key: ObjKey) -> Mapping[str, Any] | None:
        """One object as cached, by (namespace, name); None when absent."""
        name = key[1]
        if kind == "Node":
            return self._node_raw.get(name)
        if kind == "DeviceClass":
            found: Any = self.classes.get(name)
        elif kind == "ResourceSlice":
            found = self.slices.by_name.get(name)
        elif kind == "DeviceTaintRule":
            found = self.taint_rules.get(name)
        elif kind == "ResourceClaim":
            found = self.claims.get(key)
        elif kind == "Pod":
            found = self.pods.get(key)
        elif kind == "ResourceClaimTemplate":
            return self.templates.get(key)
        else:
            raise ValueError(f"unsupported kind {kind!r}")
        return found.raw if found is not None else None

    def _raw_by_key(self, kind: str) -> Mapping[ObjKey, Mapping[str, Any]]:
        sources: dict[str, Callable[[], Iterable[tuple[ObjKey, Mapping[str, Any]]]]] = {
            "Node": lambda: ((("", n), raw) for n, raw in self._node_raw.items()),
            "DeviceClass": lambda: ((("", n), c.raw) for n, c in self.classes.items()),
            "ResourceSlice": lambda: ((("", n), rs.raw) for n, rs in self.slices.by_name.items()),
            "DeviceTaintRule": lambda: ((("", n), r.raw) for n, r in self.taint_rules.items()),
            "ResourceClaim": lambda: ((k, c.raw) for k, c in self.claims.items()),
            "ResourceClaimTemplate": lambda: self.templates.items(),
            "Pod": lambda: ((k, p.raw) for k, p in self.pods.items()),
        }
        if kind not in sources:
            raise ValueError(f"unsupported kind {kind!r}")
        return dict(sources[kind]())
