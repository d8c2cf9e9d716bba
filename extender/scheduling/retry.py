"""Pods the extender turned away, and when kube-scheduler should try them again.

kube-scheduler puts a pod that only an extender rejected in its unschedulable pool, to be
retried on *any* cluster event it watches (pkg/scheduler/schedule_one.go, the fake
``Extender`` plugin; framework/runtime/framework.go registers it for every event). But with
the DynamicResources plugin disabled, as the extender's profile must have it, kube-scheduler
watches no ResourceClaim, ResourceSlice or DeviceClass: a claim being created, released or
deleted, a driver publishing devices, a class being fixed — none of these is an event for it.
On a quiet cluster the pod then waits for the pool's periodic flush (five minutes).

So the extender remembers whom it turned away and what could change its mind: the state's
``openings`` (the inventory changed, or something in use was given back) and the claims the
pod names (created, changed or deleted). ``due`` hands out the pods for which one of those
moved; the caller (kube/retry.py) then writes to each pod, and that write is the event that
makes kube-scheduler try it again.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from extender.model.pods import PodInfo
from extender.model.refs import PodRef
from extender.state import ClusterState

ClaimKey = tuple[str, str]


@dataclass(slots=True)
class _TurnedAway:
    pod: PodRef
    openings: int  # the state's openings when it was turned away
    claims: dict[ClaimKey, int]  # the claims it names -> their resourceVersion then (-1 = absent)
    # The claim names the cached pod had (None: not cached): the verbs read the cached pod
    # where they have it, and the claim controller's status update may reach the cache after
    # kube-scheduler has already retried on it.
    cached_names: tuple[str, ...] | None
    since: float


class RetryBook:
    """Bounded: past ``limit`` pods the oldest entries go (they still get the periodic flush)."""

    # A pod the cache has not seen (yet) is kept this long: the pod watch may lag behind
    # kube-scheduler's, but a pod deleted meanwhile must not stay forever.
    UNSEEN_FOR_S = 60.0

    def __init__(
        self, state: ClusterState, limit: int = 20_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._state = state
        self._limit = limit
        self._clock = clock
        self._pods: OrderedDict[str, _TurnedAway] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pods)

    def turned_away(self, pod: PodInfo) -> None:
        """``pod`` fits on no node now; remember what it waits for."""
        cached = self._cached_names(pod.namespace, pod.name, pod.uid)
        names = {*_claim_names(pod), *(cached or ())}
        claims = {(pod.namespace, n): self._version((pod.namespace, n)) for n in names if n}
        self._pods.pop(pod.uid, None)
        self._pods[pod.uid] = _TurnedAway(
            PodRef(pod.namespace, pod.name, pod.uid), self._state.openings, claims, cached, self._clock()
        )
        while len(self._pods) > self._limit:
            self._pods.popitem(last=False)

    def retry_now(self, pod: PodInfo) -> None:
        """Hand ``pod`` out at the next ``due``, whatever changed."""
        self.turned_away(pod)
        self._pods[pod.uid].openings = -1

    def fits(self, pod_uid: str) -> None:
        """A node fits ``pod`` again: nothing to wait for."""
        self._pods.pop(pod_uid, None)

    def due(self) -> list[PodRef]:
        """The pods to retry now, forgotten here (a new rejection records them afresh). Pods
        that are gone, replaced, bound or finished are forgotten without a retry."""
        openings, now = self._state.openings, self._clock()
        ready: list[PodRef] = []
        for uid, entry in list(self._pods.items()):
            current = self._state.pod(entry.pod.namespace, entry.pod.name)
            if current is None:
                if now - entry.since > self.UNSEEN_FOR_S:
                    del self._pods[uid]
            elif current.uid != uid or current.node_name or current.finished:
                del self._pods[uid]
            elif (
                entry.openings != openings
                or _claim_names(current) != entry.cached_names
                or any(self._version(key) != version for key, version in entry.claims.items())
            ):
                del self._pods[uid]
                ready.append(entry.pod)
        return ready

    def _cached_names(self, namespace: str, name: str, uid: str) -> tuple[str, ...] | None:
        cached = self._state.pod(namespace, name)
        return None if cached is None or cached.uid != uid else _claim_names(cached)

    def _version(self, key: ClaimKey) -> int:
        claim = self._state.claim(*key)
        return -1 if claim is None else claim.resource_version


def _claim_names(pod: PodInfo) -> tuple[str, ...]:
    """The ResourceClaims ``pod`` names so far ("" where the controller has not made one yet)."""
    return (*(pod.claim_name(c) for c in pod.claims), pod.extended_claim_name)
