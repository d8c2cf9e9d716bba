"""What evict mode remembers between requests: pods waiting to preempt, the holds of the
preemptions it made, and the pods whose preemption kube-scheduler's ``preempt`` calls handle.

* **Waiting** (``wants``): a filter found no node for the pod, and on some nodes only devices
  held by other claims were missing. The pod waits ``grace`` seconds before the evictor
  (kube/evict.py) looks at it, so that a kube-scheduler that does call ``preempt`` for it —
  in the same scheduling cycle, right after the filter — is seen first.
* **Verb path** (``verb_called``): once a ``preempt`` call arrives for a pod, its preemption
  is kube-scheduler's and evict mode never touches it again. A call that proposes a candidate
  without victims comes only from a kube-scheduler with kubernetes PR 135486 (older ones drop
  such candidates before asking extenders); after one, evict mode steps aside for every pod.
* **Holds** (one per preemptor UID, made when its victims are evicted): the node and the
  victims. While a hold lasts the pod does not preempt again, and what it would be given on
  the node counts as taken for pods of lower or equal priority (``nominated.holds``). A hold
  ends when the preemptor is bound (anywhere), deleted or replaced, nominated elsewhere by
  kube-scheduler, or after ``hold_s`` seconds — each said in the log.

Bounded: past ``limit`` entries the oldest go. Everything here lives in the leader's memory
only; a new leader starts without holds.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from extender.metrics import Metrics
from extender.model.pods import PodInfo
from extender.model.refs import PodRef
from extender.state import ClusterState

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EvictionHold:
    preemptor: PodRef
    node: str
    victims: tuple[PodRef, ...]
    since: float


@dataclass(slots=True)
class _Waiting:
    pod: PodRef
    nodes: tuple[str, ...]  # where only devices held by other claims were missing
    since: float


class EvictionBook:
    def __init__(
        self,
        state: ClusterState,
        *,
        hold_s: float = 120.0,
        grace: float = 2.0,
        limit: int = 10_000,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._state = state
        self.hold_s, self.grace = hold_s, grace
        self._limit = limit
        self._metrics = metrics
        self._clock = clock
        self._waiting: OrderedDict[str, _Waiting] = OrderedDict()
        self._holds: dict[str, EvictionHold] = {}
        self._verb_pods: OrderedDict[str, None] = OrderedDict()
        # A preempt call without victims was seen: kube-scheduler asks for every pod.
        self.verb_asks_always = False

    # -- what the verbs report -------------------------------------------------------------

    def wants(self, pod: PodInfo, nodes: list[str]) -> None:
        """A filter found no node for ``pod``; only devices were missing on ``nodes``."""
        if not nodes or self.steps_aside(pod.uid) or pod.uid in self._holds:
            return
        first = self._waiting.pop(pod.uid, None)
        since = first.since if first is not None else self._clock()
        self._waiting[pod.uid] = _Waiting(PodRef(pod.namespace, pod.name, pod.uid), tuple(nodes), since)
        while len(self._waiting) > self._limit:
            self._waiting.popitem(last=False)

    def fits(self, pod_uid: str) -> None:
        """A filter found a node for the pod: it waits for nothing."""
        self._waiting.pop(pod_uid, None)

    def verb_called(self, pod_uid: str, without_victims: bool) -> None:
        """kube-scheduler called ``preempt`` for the pod (``without_victims``: for a candidate
        it found no victims on, which only kube-scheduler releases with PR 135486 do)."""
        if without_victims and not self.verb_asks_always:
            log.info("preemption: kube-scheduler calls preempt for candidates without victims; "
                     "--preemption=evict steps aside for every pod from now on")
            self.verb_asks_always = True
        self._waiting.pop(pod_uid, None)
        self._verb_pods[pod_uid] = None
        self._verb_pods.move_to_end(pod_uid)
        while len(self._verb_pods) > self._limit:
            self._verb_pods.popitem(last=False)

    def steps_aside(self, pod_uid: str) -> bool:
        return self.verb_asks_always or pod_uid in self._verb_pods

    # -- what the evictor does ---------------------------------------------------------------

    def due(self) -> list[tuple[PodInfo, tuple[str, ...]]]:
        """The pods that waited ``grace`` seconds with no preempt call, each with its nodes;
        forgotten here (a later filter records them again). Pods gone, bound, being deleted,
        nominated by kube-scheduler, or with ``preemptionPolicy: Never`` are dropped."""
        now = self._clock()
        out: list[tuple[PodInfo, tuple[str, ...]]] = []
        for uid, entry in list(self._waiting.items()):
            if now - entry.since < self.grace:
                continue
            del self._waiting[uid]
            pod = self._state.pod(entry.pod.namespace, entry.pod.name)
            if (
                pod is None or pod.uid != uid or pod.node_name or pod.deleting or pod.finished
                or pod.nominated_node or not pod.may_preempt or self.steps_aside(uid) or uid in self._holds
            ):
                continue
            out.append((pod, entry.nodes))
        return out

    def hold(self, preemptor: PodInfo, node: str, victims: tuple[PodRef, ...]) -> EvictionHold:
        """The preemption of ``preemptor`` on ``node`` starts: from now on it is in flight."""
        self._waiting.pop(preemptor.uid, None)
        ref = PodRef(preemptor.namespace, preemptor.name, preemptor.uid)
        held = EvictionHold(ref, node, victims, self._clock())
        self._holds[preemptor.uid] = held
        return held

    def drop(self, pod_uid: str, why: str) -> None:
        held = self._holds.pop(pod_uid, None)
        if held is not None:
            self._end(held, why)

    # -- what holds read ---------------------------------------------------------------------

    def holds(self) -> Iterator[tuple[PodInfo, str]]:
        """The live holds: each preemptor as cached, with its node. Ends those that are over."""
        self.expire()
        for uid, held in self._holds.items():
            pod = self._state.pod(held.preemptor.namespace, held.preemptor.name)
            if pod is not None and pod.uid == uid:
                yield pod, held.node

    def evicting(self) -> frozenset[str]:
        """UIDs of the victims of the live holds: their devices are the preemptors' to take."""
        self.expire()
        return frozenset(victim.uid for held in self._holds.values() for victim in held.victims)

    def hold_of(self, pod_uid: str) -> EvictionHold | None:
        self.expire()
        return self._holds.get(pod_uid)

    def in_flight(self) -> int:
        return len(self._holds)

    def waiting(self, pod_uid: str) -> bool:
        return pod_uid in self._waiting

    def age(self, held: EvictionHold) -> float:
        return self._clock() - held.since

    def expire(self) -> None:
        now = self._clock()
        for uid, held in list(self._holds.items()):
            pod = self._state.pod(held.preemptor.namespace, held.preemptor.name)
            why = ""
            if pod is None or pod.uid != uid or pod.deleting or pod.finished:
                why = "deleted"
            elif pod.node_name:
                why = "bound" if pod.node_name == held.node else "bound_elsewhere"
            elif pod.nominated_node and pod.nominated_node != held.node:
                why = "nominated_elsewhere"
            elif now - held.since >= self.hold_s:
                why = "timeout"
            if why:
                del self._holds[uid]
                self._end(held, why)

    def _end(self, held: EvictionHold, why: str) -> None:
        if self._metrics is not None:
            self._metrics.preemption_holds_ended.labels(why).inc()
        p = held.preemptor
        level = logging.WARNING if why == "timeout" else logging.INFO
        log.log(level, "preemption: the devices held on node %s for pod %s/%s are released (%s%s)",
                held.node, p.namespace, p.name, why,
                f": not used within {self.hold_s:g}s" if why == "timeout" else "")
