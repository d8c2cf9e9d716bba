"""What the scheduler remembers between verbs, and when each memory ends.

One ``SchedulerMemory`` per extender (``SchedulingContext.memory``). Its state changes only
through its methods; the verbs and the plan never touch its maps. Each entry says below what
invalidates it. What it keeps of a decision (``Remembered``, ``SharedVerdict``) is defined in
``verdicts``, below memory; the plan reads memory through the context it is given.

Time moves memory at one point only: ``expire()``, which every verb (filter, prioritize,
bind, preempt, explain) calls first (bind once it knows this replica leads: a standby's bind
touches nothing). It drops expected placements past their TTL and, in ``state``, the
in-flight allocations of abandoned binds (those live with the in-use sets that every
allocation reads, but when they age out is decided here, with the rest). Building a plan or
reading memory expires nothing. The two TTL caches (remembered filter results, deleted
claims) age their entries out themselves on access, each by its own TTL.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from cachetools import TTLCache

from extender.model import DeviceID, ResourceClaim
from extender.scheduling.verdicts import PodResults, SpecVerdicts

MAX_VERDICTS = 200_000
MAX_PODS_REMEMBERED = 20_000
# How long a scored pod's expected placement counts against its node (kube-scheduler usually
# binds within milliseconds; a pod rejected after prioritize simply ages out).
EXPECTED_TTL_S = 5.0
MAY_BE_BOUND_TTL_S = 600.0
DELETED_CLAIM_TTL_S = 300.0
# Far beyond any bind and its rollback (bind_timeout_s each).
ABANDONED_TTL_S = 600.0


@dataclass(frozen=True, slots=True)
class Expected:
    """Where a scored pod will most likely be bound, and the devices it will take there."""

    node: str
    devices: frozenset[DeviceID]
    claims: frozenset[str]  # UIDs of the claims it will allocate there
    expires_at: float


class InFlightTable(Protocol):
    """Where in-flight allocations live (``ClusterState``): memory only says when they age out."""

    def expire_inflight(self) -> list[str]: ...


class SchedulerMemory:
    """Filter results kept for bind, verdicts shared between pods, expected placements,
    binds under way, claims a rollback deleted and allocations a rollback had to leave."""

    def __init__(
        self,
        inflight: InFlightTable,
        result_ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._inflight = inflight
        self._clock = clock
        # pod uid -> node -> filter result. Invalidation: TTL per pod, a node-signature
        # mismatch (checked by the plan), and a successful bind of the pod (``bound``).
        self._results: TTLCache[str, PodResults] = TTLCache(
            maxsize=MAX_PODS_REMEMBERED, ttl=result_ttl_s, timer=clock
        )
        # claim-spec signature -> its shared verdicts by node, shared by pods whose claims ask
        # for the same thing (every pod of one template). Invalidation: a node's version
        # moving (``SpecVerdicts.sync``, by the plan); bounded by dropping everything once they
        # hold MAX_VERDICTS (checked by ``expire``).
        self._verdicts: dict[bytes, SpecVerdicts] = {}
        # pod uid -> its expected placement, between prioritize and bind. kube-scheduler assumes
        # the chosen node at once; the extender only learns it at bind, so without this two pods
        # scored back to back both go for a node's last device. Invalidation: the pod's bind
        # starting, EXPECTED_TTL_S (dropped by ``expire``).
        self._expected: dict[str, Expected] = {}
        # Pods whose bind is running: a concurrent duplicate bind is refused, not interleaved.
        # Invalidation: the bind returning (``end_bind``).
        self._binding: set[str] = set()
        # UIDs of extended-resource claims a bind rollback deleted: a watch event still in
        # transit may bring one back into the cache for a moment, and a retry must not adopt
        # it. Invalidation: DELETED_CLAIM_TTL_S.
        self._deleted_claims: TTLCache[str, bool] = TTLCache(
            maxsize=10_000, ttl=DELETED_CLAIM_TTL_S, timer=clock
        )
        # UIDs of pods a bind bound, or may have bound (its Binding went unanswered): until the
        # watch shows them bound, the cache still says they are not, and their claims must not
        # look like an unbound pod's leftovers. Invalidation: MAY_BE_BOUND_TTL_S, far beyond any
        # watch lag.
        self._bound: TTLCache[str, bool] = TTLCache(
            maxsize=MAX_PODS_REMEMBERED, ttl=MAY_BE_BOUND_TTL_S, timer=clock
        )
        # UIDs of claims whose allocation a bind wrote and then undid while another pod's
        # reservation still held it (a shared claim): the allocation stayed, for that pod, and
        # the last rollback out must clear it, or it is allocated for nobody. Only these: an
        # allocation made before the failed binds (by a bind that succeeded, or by anyone else)
        # is not a rollback's to clear. Invalidation: the allocation cleared or the claim gone
        # (seen by a rollback), a bind of a pod using the claim succeeding, ABANDONED_TTL_S.
        self._abandoned: TTLCache[str, bool] = TTLCache(
            maxsize=MAX_PODS_REMEMBERED, ttl=ABANDONED_TTL_S, timer=clock
        )

    # --- time ------------------------------------------------------------------------------

    def expire(self) -> None:
        """Drop what has aged out: expected placements and abandoned in-flight allocations.

        Called by every verb before anything else (see the module docstring).
        """
        self._inflight.expire_inflight()
        if sum(map(len, self._verdicts.values())) >= MAX_VERDICTS:
            for table in self._verdicts.values():
                table.clear()  # in place: a pod's results may name one
            self._verdicts.clear()
        if self._expected:
            now = self._clock()
            for uid in [uid for uid, e in self._expected.items() if e.expires_at <= now]:
                del self._expected[uid]

    # --- filter results, for bind ------------------------------------------------------------

    def results_for(self, pod_uid: str) -> PodResults:
        """The pod's filter results, created on first use (one TTL-cache access per request)."""
        results = self._results.get(pod_uid)
        if results is None:
            results = self._results[pod_uid] = PodResults()
        return results

    # --- verdicts shared between pods ---------------------------------------------------------

    def shared_verdicts(self, spec: bytes) -> SpecVerdicts:
        """The verdicts shared for a claim spec, created empty on first use."""
        table = self._verdicts.get(spec)
        if table is None:
            table = self._verdicts[spec] = SpecVerdicts()
        return table

    # --- expected placements ------------------------------------------------------------------

    def expect(self, pod_uid: str, node: str, devices: frozenset[DeviceID], claims: frozenset[str]) -> None:
        """Record where the pod will most likely be bound, for EXPECTED_TTL_S."""
        self._expected[pod_uid] = Expected(node, devices, claims, self._clock() + EXPECTED_TTL_S)

    def placements(self) -> Mapping[str, Expected]:
        """Expected placements by pod UID (read-only; those past their TTL go at the next ``expire``)."""
        return MappingProxyType(self._expected)

    def placed_with(self, claims: Iterable[ResourceClaim], pod_uid: str) -> tuple[ResourceClaim, str] | None:
        """The first of ``claims`` another pod is expected to allocate, and that pod's node."""
        if not self._expected:
            return None
        claims = tuple(claims)
        for uid, expected in self._expected.items():
            if uid == pod_uid:
                continue
            for claim in claims:
                if claim.uid in expected.claims:
                    return claim, expected.node
        return None

    def devices_expected_elsewhere(self, pod_uid: str) -> dict[str, set[DeviceID]]:
        """Devices that other scored-but-unbound pods are expected to take, per node."""
        per_node: dict[str, set[DeviceID]] = {}
        for uid, expected in self._expected.items():
            if uid != pod_uid:
                per_node.setdefault(expected.node, set()).update(expected.devices)
        return per_node

    # --- binds --------------------------------------------------------------------------------

    def begin_bind(self, pod_uid: str) -> bool:
        """Start the pod's bind: its expected placement ends (the bind now decides and holds
        the devices). False, changing nothing else, when a bind of the pod is already running."""
        self._expected.pop(pod_uid, None)
        if pod_uid in self._binding:
            return False
        self._binding.add(pod_uid)
        return True

    def end_bind(self, pod_uid: str) -> None:
        self._binding.discard(pod_uid)

    def binding(self, pod_uid: str) -> bool:
        """Whether a bind of the pod is running."""
        return pod_uid in self._binding

    def bound(self, pod_uid: str) -> None:
        """The pod is bound: its filter results are of no further use."""
        self._results.pop(pod_uid, None)
        self._bound[pod_uid] = True

    def binding_unknown(self, pod_uid: str) -> None:
        """The pod's Binding went unanswered: it may be bound."""
        self._bound[pod_uid] = True

    def not_bound(self, pod_uid: str) -> None:
        """The pod's unanswered Binding was proven unable to land, and its bind undone."""
        self._bound.pop(pod_uid, None)

    def may_be_bound(self, pod_uid: str) -> bool:
        """Whether a bind of ours bound the pod, or may have, lately (whatever the cache says)."""
        return pod_uid in self._bound

    def claim_deleted(self, claim_uid: str) -> None:
        """A rollback deleted this extended-resource claim: it must not be adopted again."""
        self._deleted_claims[claim_uid] = True

    def was_deleted(self, claim_uid: str) -> bool:
        return claim_uid in self._deleted_claims

    # --- allocations undone while shared ----------------------------------------------------

    def allocation_abandoned(self, claim_uid: str) -> None:
        """A rollback is undoing the allocation it wrote to this claim. Recorded before its
        release is sent: a concurrent rollback of another pod that ends up last out must know."""
        self._abandoned[claim_uid] = True

    def abandoned(self, claim_uid: str) -> bool:
        """Whether a rollback left this claim's allocation to whoever releases it last."""
        return claim_uid in self._abandoned

    def allocation_settled(self, claim_uid: str) -> None:
        """The claim's allocation is no rollback's to clear any more: cleared, the claim gone,
        or in use by a bound pod."""
        self._abandoned.pop(claim_uid, None)
