"""Everything one pod's decisions need, shared by filter, prioritize, bind and preempt."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from cachetools import TTLCache

from extender.allocator import AllocatedState, Allocator, Features
from extender.config import Config
from extender.metrics import Metrics
from extender.model import AllocationResult, DeviceID
from extender.model.pods import PodInfo
from extender.model.refs import PodRef
from extender.scheduling.binder import Binder
from extender.state import ClusterState

MAX_VERDICTS = 200_000
# How long a scored pod's expected placement counts against its node (kube-scheduler usually
# binds within milliseconds; a pod rejected after prioritize simply ages out).
EXPECTED_TTL_S = 5.0
DELETED_CLAIM_TTL_S = 300.0


@dataclass(frozen=True, slots=True)
class Expected:
    """Where a scored pod will most likely be bound, and the devices it will take there."""

    node: str
    devices: frozenset[DeviceID]
    claims: frozenset[str]  # UIDs of the claims it will allocate there
    expires_at: float


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    fits: bool
    reason: str = ""
    resolvable: bool = False  # preemption might help
    results: tuple[AllocationResult, ...] = ()
    # Derived from ``results`` once (see ``fitting``): verdicts are shared by every pod of a
    # template, and prioritize reads these for each node of each pod.
    devices: frozenset[DeviceID] = frozenset()
    drivers: frozenset[str] = frozenset()
    taken: int = 0  # devices the allocation takes away from others (admin access takes none)

    @classmethod
    def fitting(cls, results: tuple[AllocationResult, ...]) -> NodeVerdict:
        picked = [d for r in results for d in r.devices]
        return cls(
            True,
            results=results,
            devices=frozenset(d.id for d in picked),
            drivers=frozenset(d.driver for d in picked),
            taken=sum(not d.admin_access for d in picked),
        )


class Remembered(NamedTuple):
    """A filter decision kept for bind: valid only while the node's signature is unchanged.

    A tuple rather than a frozen dataclass: one is made per passing node per filter call.
    """

    node_signature: tuple[int, ...]
    claim_uids: tuple[str, ...]
    verdict: NodeVerdict

    @property
    def results(self) -> tuple[AllocationResult, ...]:
        return self.verdict.results


@dataclass(frozen=True, slots=True)
class CachedVerdict:
    """A node's answer for one claim-spec signature (see ``filter.PodPlan``)."""

    node_signature: tuple[int, ...]
    claim_keys: tuple[str, ...]  # "ns/name" of the claims it was computed for (named in reasons)
    verdict: NodeVerdict
    # A rejection's reason with those claim names as numbered slots (see ``filter``): equal
    # across nodes that fail alike, so each pod fills it in once rather than once per node.
    reason_template: str = ""


class PodEvents(Protocol):
    """Where a user-visible reason goes (Kubernetes Events on the pod with --kube)."""

    def bind_failed(self, pod: PodRef, message: str) -> object: ...

    def no_node_fits(self, pod: PodRef, message: str) -> object: ...


@dataclass
class SchedulingContext:
    config: Config
    state: ClusterState
    binder: Binder
    metrics: Metrics
    features: Features = field(init=False)
    # pod uid -> node -> filter result. Invalidation: TTL per pod, a node-signature mismatch,
    # and a successful bind of the pod (which drops its entry).
    remembered: TTLCache[str, dict[str, Remembered]] = field(init=False)
    # (claim-spec signature, node) -> verdict, shared by pods whose claims ask for the same
    # thing (every pod of one template). Invalidation: a node-signature mismatch; bounded by
    # dropping everything at MAX_VERDICTS (a plain dict: this is read once per node and pod).
    verdicts: dict[tuple[bytes, str], CachedVerdict] = field(default_factory=dict)
    # pod uid -> its expected placement, between prioritize and bind. kube-scheduler assumes
    # the chosen node at once; the extender only learns it at bind, so without this two pods
    # scored back to back both go for a node's last device. Invalidation: bind, TTL.
    expected: dict[str, Expected] = field(default_factory=dict)
    # With leader election: only the leader commits binds and reports ready.
    is_leader: Callable[[], bool] | None = None
    # Pods whose bind is running: a concurrent duplicate bind is refused, not interleaved.
    binding: set[str] = field(default_factory=set)
    # With --kube: bind failures and "no node fits" become Events on the pod (rate-limited).
    events: PodEvents | None = None
    # UIDs of extended-resource claims a bind rollback deleted: a watch event still in transit
    # may bring one back into the cache for a moment, and a retry must not adopt it.
    deleted_claims: TTLCache[str, bool] = field(init=False)

    def __post_init__(self) -> None:
        self.features = self.config.feature_gates
        self.remembered = TTLCache(maxsize=20_000, ttl=self.config.result_ttl_s)
        self.deleted_claims = TTLCache(maxsize=10_000, ttl=DELETED_CLAIM_TTL_S)

    def live_expected(self) -> list[tuple[str, Expected]]:
        """Expected placements still in force (expired ones are dropped here)."""
        now = time.monotonic()
        for uid in [uid for uid, e in self.expected.items() if e.expires_at <= now]:
            del self.expected[uid]
        return list(self.expected.items())

    @property
    def leading(self) -> bool:
        return self.is_leader is None or self.is_leader()

    def handles(self, pod: PodInfo) -> bool:
        """Pods of another scheduler pass untouched; a pod without schedulerName counts as ours."""
        names = self.config.handled_scheduler_names
        return names is None or pod.scheduler_name is None or pod.scheduler_name in names

    def allocated_state(self) -> AllocatedState:
        """The live in-use sets (committed + in flight); read-only for the allocator."""
        inuse = self.state.inuse
        return AllocatedState(
            allocated_devices=inuse.devices,
            allocated_shared=inuse.shared,
            aggregated_capacity=inuse.capacity,
        )

    def allocator(self, allocated: AllocatedState | None = None) -> Allocator:
        deadline = time.monotonic() + self.config.filter_timeout_s
        return Allocator(
            self.features,
            self.allocated_state() if allocated is None else allocated,
            self.state.classes,
            self.state.slices,
            deadline=deadline,
        )

    def remembered_for(self, pod_uid: str) -> dict[str, Remembered]:
        """The pod's node -> result map, created on first use (one TTL-cache access per request)."""
        per_node = self.remembered.get(pod_uid)
        if per_node is None:
            per_node = self.remembered[pod_uid] = {}
        return per_node

    def share_verdict(self, key: tuple[bytes, str], verdict: CachedVerdict) -> None:
        if len(self.verdicts) >= MAX_VERDICTS:
            self.verdicts.clear()
        self.verdicts[key] = verdict

    def forget_pod(self, pod_uid: str) -> None:
        self.remembered.pop(pod_uid, None)
