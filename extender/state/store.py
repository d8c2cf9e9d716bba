"""The cluster as the extender knows it: typed objects, indexes and devices in use.

Sources (a Kubernetes watch or the local store) feed it plain API dicts through
``apply`` / ``delete`` / ``replace``; every object is parsed once, here, and the hot path
only reads the parsed form. ``node_version`` (a node's version) changes whenever anything
that can alter an allocation decision on that node changes (slices, classes, nodes: the
inventory epoch; devices in use in the pools the node sees); results computed for a node are
reused only while its version is unchanged.

Every kind of the table in ``extender.model.kinds`` has one shelf here: how objects of that
kind are parsed (the table's parser), kept, dropped, counted and shown raw. ``apply``,
``delete``, ``replace``, ``items``, ``raw`` and ``counts`` dispatch through the shelves.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from extender.allocator.alike import GatheredPools
from extender.model import (
    DeviceClass,
    DeviceTaintRule,
    Features,
    Node,
    ResourceClaim,
    ResourceSlice,
    apply_taint_rules,
    kinds,
)
from extender.model.disruption import PodDisruptionBudget
from extender.model.kinds import KIND_NAMES, ObjKey
from extender.model.pods import PodGroup, PodInfo
from extender.model.refs import resource_version
from extender.state.inuse import InFlight, InUse
from extender.state.pod_requests import NodeRequests
from extender.state.slices import SliceIndex

log = logging.getLogger(__name__)


def _rv(obj: Mapping[str, Any]) -> int | None:
    version = (obj.get("metadata") or {}).get("resourceVersion")
    if not isinstance(version, str | int):
        return None
    try:
        return int(version)
    except ValueError:
        return None


def _class_content(dc: DeviceClass) -> tuple[Any, ...]:
    return (dc.selectors, dc.config, dc.extended_resource_name)


class _Parsed(Protocol):
    @property
    def raw(self) -> Mapping[str, Any]: ...


def _raw_of(parsed: _Parsed | None) -> Mapping[str, Any] | None:
    return parsed.raw if parsed is not None else None


@dataclass(frozen=True, slots=True)
class _Shelf:
    """How the cache keeps one kind: each per-kind decision of the store, in one place."""

    apply: Callable[[ObjKey, dict[str, Any]], None]
    delete: Callable[[ObjKey], None]
    raw: Callable[[ObjKey], Mapping[str, Any] | None]  # one object as cached
    held: Callable[[], Iterable[tuple[ObjKey, Mapping[str, Any]]]]  # every object, by key
    count: Callable[[], int]


class ClusterState:
    """The cache. Not thread-safe by design: every call happens on the event loop."""

    def __init__(self, features: Features | None = None) -> None:
        self.nodes: dict[str, Node] = {}
        self.classes: dict[str, DeviceClass] = {}
        # The allocator sees slices with DeviceTaintRule taints applied, as kube-scheduler's
        # ResourceSlice tracker (k8s.io/dynamic-resource-allocation/resourceslice/tracker) does
        # when both taint gates are on; ``_published`` keeps the slices as their drivers wrote
        # them, so a changed rule can be re-applied.
        self.slices = SliceIndex()
        self._published: dict[str, ResourceSlice] = {}
        self.taint_rules: dict[str, DeviceTaintRule] = {}
        self.claims: dict[ObjKey, ResourceClaim] = {}
        self.claims_by_uid: dict[str, ResourceClaim] = {}
        self.templates: dict[ObjKey, Mapping[str, Any]] = {}
        self.pods: dict[ObjKey, PodInfo] = {}
        # The pods nominated to a node and not bound: every plan asks for them (preemption holds),
        # and they are few, so they are kept apart rather than sought among all pods each time.
        # Invalidation: kept in step with ``pods`` by _apply_pod and _delete_pod.
        self.nominated: dict[ObjKey, PodInfo] = {}
        self.pod_groups: dict[ObjKey, PodGroup] = {}
        self.disruption_budgets: dict[ObjKey, PodDisruptionBudget] = {}
        self.inventory_epoch = 0
        # Node versions (``node_versions``) come from one counter, ``_latest``: a node's version
        # is its own, or ``_base`` (the version of the last change that concerns every node: the
        # inventory, a pool without a node) where it has none since. Pools whose devices in use
        # changed give their nodes new versions when a version is next read.
        self._latest = 0
        self._base = 0
        self._base_epoch = 0  # the inventory epoch ``_base`` accounts for
        self._versions: dict[str, int] = {}
        self._synced: set[str] = set()
        # Nodes' gathered pools, shared by the requests' allocators. Invalidation: replaced by a
        # new, empty one when ``inventory_epoch`` has moved (``gathered_pools``), since they depend
        # on the slices and nodes only (and the gates: dropped by use_features); filled once, when
        # every kind has first synced.
        self._gathered: GatheredPools | None = None
        self._gathered_epoch = 0  # the inventory epoch ``_gathered`` was made for
        self._take_features(Features.defaults() if features is None else features)
        # Claims whose cached version was written by us: kube-scheduler's assume cache
        # (pkg/scheduler/util/assumecache), where our write wins over older watch events.
        self._assumed: set[ObjKey] = set()
        # The model's Node keeps only what allocation reads; /debug and Nodes-mode replies need the rest.
        self._node_raw: dict[str, Mapping[str, Any]] = {}
        self._shelves = self._shelves_by_kind()

    def _take_features(self, features: Features) -> None:
        """What depends on the gates, set up empty for ``features``."""
        self.features = features
        self._apply_taint_rules = features.device_taints and features.device_taint_rules
        # What each node's pods request of the resources devices may also use: read only with
        # DRANodeAllocatableResources, so kept only then.
        self.node_requests: NodeRequests | None = (
            NodeRequests() if features.node_allocatable_resources else None
        )
        self.inuse = InUse(features)
        self._gathered = None

    def use_features(self, features: Features) -> None:
        """Take the gates of a release learnt after start (with --kube and no
        --kubernetes-version, once the API server has answered /version late).

        Only while nothing is cached: every object is parsed and indexed once, under the gates
        in force when it arrives, so a cache that holds some cannot change gates.
        """
        if self._synced or any(self.counts().values()):
            raise RuntimeError("the feature gates of a cache that holds objects cannot change")
        self._take_features(features)

    def _shelves_by_kind(self) -> dict[str, _Shelf]:
        shelves = {
            kinds.NODE.name: _Shelf(
                self._apply_node,
                self._delete_node,
                raw=lambda key: self._node_raw.get(key[1]),
                held=lambda: ((("", n), raw) for n, raw in self._node_raw.items()),
                count=lambda: len(self.nodes),
            ),
            kinds.DEVICE_CLASS.name: _Shelf(
                self._apply_class,
                self._delete_class,
                raw=lambda key: _raw_of(self.classes.get(key[1])),
                held=lambda: ((("", n), c.raw) for n, c in self.classes.items()),
                count=lambda: len(self.classes),
            ),
            kinds.RESOURCE_SLICE.name: _Shelf(
                self._apply_slice,
                self._delete_slice,
                raw=lambda key: _raw_of(self.slices.by_name.get(key[1])),
                held=lambda: ((("", n), rs.raw) for n, rs in self.slices.by_name.items()),
                count=lambda: len(self.slices),
            ),
            kinds.DEVICE_TAINT_RULE.name: _Shelf(
                self._apply_taint_rule,
                self._delete_taint_rule,
                raw=lambda key: _raw_of(self.taint_rules.get(key[1])),
                held=lambda: ((("", n), r.raw) for n, r in self.taint_rules.items()),
                count=lambda: len(self.taint_rules),
            ),
            kinds.RESOURCE_CLAIM_TEMPLATE.name: _Shelf(
                self._apply_template,
                self._delete_template,
                raw=self.templates.get,
                held=self.templates.items,
                count=lambda: len(self.templates),
            ),
            kinds.RESOURCE_CLAIM.name: _Shelf(
                lambda key, obj: self._apply_claim(key, obj, assumed=False),
                self._delete_claim,
                raw=lambda key: _raw_of(self.claims.get(key)),
                held=lambda: ((k, c.raw) for k, c in self.claims.items()),
                count=lambda: len(self.claims),
            ),
            kinds.POD_GROUP.name: _Shelf(
                self._apply_pod_group,
                self._delete_pod_group,
                raw=lambda key: _raw_of(self.pod_groups.get(key)),
                held=lambda: ((k, g.raw) for k, g in self.pod_groups.items()),
                count=lambda: len(self.pod_groups),
            ),
            kinds.POD.name: _Shelf(
                self._apply_pod,
                self._delete_pod,
                raw=lambda key: _raw_of(self.pods.get(key)),
                held=lambda: ((k, p.raw) for k, p in self.pods.items()),
                count=lambda: len(self.pods),
            ),
            kinds.POD_DISRUPTION_BUDGET.name: _Shelf(
                self._apply_budget,
                self._delete_budget,
                raw=lambda key: _raw_of(self.disruption_budgets.get(key)),
                held=lambda: ((k, b.raw) for k, b in self.disruption_budgets.items()),
                count=lambda: len(self.disruption_budgets),
            ),
        }
        if set(shelves) != set(KIND_NAMES):
            raise AssertionError(f"the cache has no shelf for {sorted(set(KIND_NAMES) - set(shelves))}")
        return shelves

    def _shelf(self, kind: str) -> _Shelf:
        """The shelf of a kind; ValueError for a kind not in the table."""
        return self._shelves[kinds.kind(kind).name]

    # --- feeding interface (contract shared with the Kubernetes source) -------------------

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        """Add or update one object. Raises ValueError for a malformed object or kind."""
        entry = kinds.kind(kind)
        self._shelves[entry.name].apply(entry.key(obj), obj)

    def delete(self, kind: str, obj: Mapping[str, Any]) -> None:
        entry = kinds.kind(kind)
        self._shelves[entry.name].delete(entry.key(obj))

    def replace(self, kind: str, objs: list[dict[str, Any]]) -> None:
        """A relist: apply every object, then delete what the list no longer has.

        A malformed object does not hold up the others: it keeps the version the cache has (as
        a refused watch update does), and once the relist is done one ValueError names them all.
        """
        entry = kinds.kind(kind)
        shelf = self._shelves[entry.name]
        keep = set()
        refused = []
        for obj in objs:
            try:
                key = entry.key(obj)
                keep.add(key)
                shelf.apply(key, obj)
            except ValueError as exc:
                refused.append(str(exc))
        for key in [key for key, _ in shelf.held() if key not in keep]:
            shelf.delete(key)
        if refused:
            raise ValueError("; ".join(refused))

    # --- per-kind handling ----------------------------------------------------------------

    def _apply_node(self, key: ObjKey, obj: dict[str, Any]) -> None:
        parsed = kinds.NODE.parse(obj)
        self._node_raw[key[1]] = obj
        # Status heartbeats update nodes constantly; only labels and DRA-backable allocatable matter.
        if self.nodes.get(key[1]) != parsed:
            self.nodes[key[1]] = parsed
            self.inventory_epoch += 1

    def _delete_node(self, key: ObjKey) -> None:
        self._node_raw.pop(key[1], None)
        if self.nodes.pop(key[1], None) is not None:
            self.inventory_epoch += 1

    def _apply_class(self, key: ObjKey, obj: dict[str, Any]) -> None:
        parsed = kinds.DEVICE_CLASS.parse(obj)
        held = self.classes.get(key[1])
        self.classes[key[1]] = parsed
        if held is None or _class_content(held) != _class_content(parsed):
            self.inventory_epoch += 1

    def _delete_class(self, key: ObjKey) -> None:
        if self.classes.pop(key[1], None) is not None:
            self.inventory_epoch += 1

    def _apply_slice(self, key: ObjKey, obj: dict[str, Any]) -> None:
        published = kinds.RESOURCE_SLICE.parse(obj)
        self._published[published.name] = published
        self.slices.put(self._tainted(published))
        self.inventory_epoch += 1

    def _delete_slice(self, key: ObjKey) -> None:
        self._published.pop(key[1], None)
        if self.slices.remove(key[1]):
            self.inventory_epoch += 1

    def _apply_taint_rule(self, key: ObjKey, obj: dict[str, Any]) -> None:
        self.taint_rules[key[1]] = kinds.DEVICE_TAINT_RULE.parse(obj)
        self._retaint()

    def _delete_taint_rule(self, key: ObjKey) -> None:
        if self.taint_rules.pop(key[1], None) is not None:
            self._retaint()

    def _apply_template(self, key: ObjKey, obj: dict[str, Any]) -> None:
        self.templates[key] = kinds.RESOURCE_CLAIM_TEMPLATE.parse(obj)

    def _delete_template(self, key: ObjKey) -> None:
        self.templates.pop(key, None)

    def _delete_claim(self, key: ObjKey) -> None:
        claim = self.claims.pop(key, None)
        self._assumed.discard(key)
        if claim is not None:
            self.claims_by_uid.pop(claim.uid, None)
            self.inuse.set_owner(("claim", claim.uid), None)

    def _apply_pod(self, key: ObjKey, obj: dict[str, Any]) -> None:
        self.put_pod(kinds.POD.parse(obj))

    def put_pod(self, pod: PodInfo) -> None:
        """Add or update a pod its writer has parsed already (the local claim controller reads
        every pod it writes): ``pod`` must be what the pod parser makes of ``pod.raw``."""
        key = pod.key
        if self.node_requests is not None:
            units = NodeRequests.units_of(pod.raw) if pod.node_name else None  # may refuse the pod
            self.node_requests.put(key, pod.node_name, pod.finished, units)
        self.pods[key] = pod
        if pod.nominated_node and not pod.node_name:
            self.nominated[key] = pod
        else:
            self.nominated.pop(key, None)

    def _delete_pod(self, key: ObjKey) -> None:
        self.pods.pop(key, None)
        if self.node_requests is not None:
            self.node_requests.drop(key)
        self.nominated.pop(key, None)

    def _apply_pod_group(self, key: ObjKey, obj: dict[str, Any]) -> None:
        self.pod_groups[key] = kinds.POD_GROUP.parse(obj)

    def _delete_pod_group(self, key: ObjKey) -> None:
        self.pod_groups.pop(key, None)

    def _apply_budget(self, key: ObjKey, obj: dict[str, Any]) -> None:
        self.disruption_budgets[key] = kinds.POD_DISRUPTION_BUDGET.parse(obj)

    def _delete_budget(self, key: ObjKey) -> None:
        self.disruption_budgets.pop(key, None)

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
        was_synced = self.synced
        self._synced.add(kinds.kind(kind).name)
        if self.synced and not was_synced:
            # Before the first filter: on a big cluster its first lap gathered every node.
            self.gathered_pools().fill(self.nodes.values())

    @property
    def synced(self) -> bool:
        return self._synced.issuperset(KIND_NAMES)

    # --- claims and the assume cache ------------------------------------------------------

    def assume_claim(self, obj: dict[str, Any]) -> ResourceClaim:
        """Cache a claim we have just written, ahead of the watch echo."""
        key = kinds.RESOURCE_CLAIM.key(obj)
        self._apply_claim(key, obj, assumed=True)
        return self.claims[key]

    def assume_claim_unless_older(self, obj: Mapping[str, Any]) -> None:
        """Cache a claim the API server just returned, unless the cache already holds it or a
        newer version of it (the watch can be ahead of a slow reply)."""
        meta = obj.get("metadata") or {}
        held = self.claim(meta.get("namespace") or "default", meta.get("name") or "")
        if held is not None and (held.raw is obj or resource_version(held.raw) > resource_version(obj)):
            return
        self.assume_claim(dict(obj))

    def _apply_claim(self, key: ObjKey, obj: dict[str, Any], assumed: bool) -> None:
        held = self.claims.get(key)
        if held is not None and key in self._assumed:
            new_rv, held_rv = _rv(obj), _rv(held.raw)
            if new_rv is not None and held_rv is not None and new_rv < held_rv:
                return  # a stale echo must not undo our newer write
        claim = kinds.RESOURCE_CLAIM.parse(obj)
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

    def pin_inflight(self, claim_uid: str) -> None:
        """Keep an in-flight entry past its TTL: a write of unknown fate still names its devices."""
        entry = self.inuse.inflight.get(claim_uid)
        if entry is not None:
            entry.expires_at = math.inf

    def remove_inflight(self, claim_uid: str) -> None:
        self.inuse.remove_inflight(claim_uid)

    def expire_inflight(self) -> list[str]:
        gone = self.inuse.expire()
        if gone:
            log.warning("in-flight allocations expired (abandoned bind?): %s", ", ".join(gone))
        return gone

    # --- reads ----------------------------------------------------------------------------

    def node_version(self, node_name: str) -> int:
        """The node's version: changes whenever an allocation on this node could come out differently."""
        versions, base, _ = self.node_versions()
        return versions.get(node_name, base)

    def node_versions(self) -> tuple[dict[str, int], int, int]:
        """Every node's version at once, for readers that look at many nodes: a node's
        version is ``versions.get(name, base)``. ``versions`` is the state's own (read it,
        never change it) and iterates in the order the versions were given out, so the nodes
        that moved since a reader last looked (at ``latest``, the third figure) are its last
        entries. Valid until the state next changes."""
        inuse = self.inuse
        if self.inventory_epoch != self._base_epoch:
            self._base_epoch = self.inventory_epoch
            self._raise_base()
            inuse.changed_pools.clear()
        elif inuse.changed_pools:
            versions = self._versions
            for pool in inuse.changed_pools:
                nodes = self.slices.nodes_of_pool(pool)
                if nodes is None:
                    self._raise_base()
                    break
                for node in nodes:
                    self._latest += 1
                    versions.pop(node, None)  # to the end: versions stay in the order given out
                    versions[node] = self._latest
            inuse.changed_pools.clear()
        return self._versions, self._base, self._latest

    def gathered_pools(self) -> GatheredPools:
        """Nodes' gathered pools for the current inventory, shared by every request's
        allocator until the inventory next changes (extender/allocator/alike/gathered.py)."""
        if self._gathered is None or self._gathered_epoch != self.inventory_epoch:
            self._gathered = GatheredPools(self.slices, self.features)
            self._gathered_epoch = self.inventory_epoch
        return self._gathered

    def _raise_base(self) -> None:
        self._latest += 1
        self._base = self._latest
        self._versions.clear()  # every version is below the new base

    @property
    def openings(self) -> int:
        """Grows whenever a pod turned away may now fit: the inventory changed (nodes, classes,
        slices, taints) or something in use was given back. Allocations that only take devices
        leave it alone, so it does not move with every bind."""
        return self.inventory_epoch + self.inuse.released

    def claim(self, namespace: str, name: str) -> ResourceClaim | None:
        return self.claims.get((namespace, name))

    def pod(self, namespace: str, name: str) -> PodInfo | None:
        return self.pods.get((namespace, name))

    def pod_group(self, namespace: str, name: str) -> PodGroup | None:
        return self.pod_groups.get((namespace, name))

    def counts(self) -> dict[str, int]:
        return {name: shelf.count() for name, shelf in self._shelves.items()}

    def items(self, kind: str) -> list[Mapping[str, Any]]:
        """The raw objects of one kind as the cache holds them (claims with their status)."""
        return [raw for _, raw in self._shelf(kind).held()]

    def raw(self, kind: str, key: ObjKey) -> Mapping[str, Any] | None:
        """One object as cached, by (namespace, name); None when absent."""
        return self._shelf(kind).raw(key)
