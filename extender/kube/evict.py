"""--preemption=evict: the extender preempts for a pod that only devices keep out, through
the Eviction API, when kube-scheduler does not ask it to.

kube-scheduler before kubernetes PR 135486 calls an extender's ``preempt`` only for nodes where
its own, device-blind dry run found victims; a pod short only of devices "fits" everywhere there,
so no candidate is left and nobody is evicted. Here, every ``interval`` seconds (the leader's job
alone), the pods ``EvictionBook.due`` hands out — filtered out with devices held on some nodes,
no ``preempt`` call for them within the book's grace — get a decision
(``scheduling.evict.choose``: the verb's rules, checked with the allocator). The
preemption is recorded as in flight and its hold starts *before* the first eviction, so nothing
evicts twice and nobody else takes the devices; then each victim is evicted
(``POST pods/<name>/eviction``, policy/v1: the API server checks PodDisruptionBudgets and the pod
terminates gracefully). A refusal (429: a budget) or error stops the rest: the pods already
evicted stay evicted, the hold stays until its timeout, and nothing more is evicted for the pod
meanwhile; when no victim at all was evicted the hold ends at once.

Each preemption is reported: Events on the victims (``Preempted``, worded as kube-scheduler's)
and on the preemptor, ``dra_extender_preemptions_total``, a decision line (``verb: evict``), and
``/debug/explain`` of the preemptor shows the hold.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from extender.kube.client import KubeApiError, RawClient
from extender.kube.events import REASON_PREEMPTING, REASON_PREEMPTION_FAILED, EventRecorder
from extender.logs import decisions, log_line
from extender.model.pods import PodInfo
from extender.model.refs import PodRef
from extender.scheduling.context import SchedulingContext
from extender.scheduling.evict import Choice, choose
from extender.scheduling.preemption.book import EvictionBook
from extender.scheduling.turns import in_turns

log = logging.getLogger(__name__)


class Evictor:
    def __init__(
        self,
        client: RawClient,
        ctx: SchedulingContext,
        book: EvictionBook,
        events: EventRecorder | None = None,
        *,
        interval: float = 0.5,
    ) -> None:
        self._client, self._ctx, self._book, self._events = client, ctx, book, events
        self._interval = interval

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            if self._ctx.leading:
                await self.tick()

    async def tick(self) -> None:
        """One round: end the holds that are over, preempt for the pods due."""
        self._book.expire()
        for pod, nodes in self._book.due():
            try:
                await self.preempt(pod, nodes)
            except Exception:  # one pod's failure must not stop the others' or the loop
                log.exception("preemption for pod %s failed", pod.ref)
                self._ctx.metrics.preemptions.labels("error").inc()

    async def preempt(self, pod: PodInfo, nodes: Sequence[str]) -> str:
        """Preempt for ``pod`` on one of ``nodes`` if evictions make it fit; the outcome."""
        state = self._ctx.state
        before = {name: state.node_version(name) for name in nodes}
        choice = await in_turns(choose, self._ctx, pod, nodes)
        if not isinstance(choice, Choice):
            if choice.reason == "no_victims":
                self._ctx.metrics.preemptions.labels("no_victims").inc()
                self._line(pod, "", (), "no_victims", 0)
            else:
                log.info("no preemption for pod %s: %s", pod.ref, choice.reason)
            if choice.reason.startswith("waits"):
                # What the plan waits for (its claim, say) is on its way to the cache: no filter
                # will record the pod again by itself, so look again next round.
                self._book.wants(pod, list(nodes))
            elif choice.reason == "fits" and self._ctx.retry is not None:
                # A node fits after all (the cache moved since the filter): kube-scheduler is
                # told to try again, as after any change that may let a pod fit.
                self._ctx.retry.retry_now(pod)
            return choice.reason
        # Worked out across pauses: acted on only if what it read is unchanged, else looked at
        # again in the next round.
        if state.node_version(choice.node) != before[choice.node] or not self._current(pod, choice):
            self._book.wants(pod, list(nodes))
            return "changed"
        victims = tuple(PodRef(v.namespace, v.name, v.uid) for v in choice.victims)
        self._book.hold(pod, choice.node, victims)
        results = await asyncio.to_thread(self._evict_all, victims)
        evicted = [v for v, outcome in zip(victims, results, strict=False) if outcome in ("evicted", "gone")]
        if len(evicted) == len(victims):
            outcome = "evicted"
        elif evicted:
            outcome = "partial"
        else:
            outcome = "refused" if results and results[-1] == "refused" else "error"
            self._book.drop(pod.uid, "failed")
        self._ctx.metrics.preemptions.labels(outcome).inc()
        self._line(pod, choice.node, [v.ref for v in choice.victims], outcome, len(evicted),
                   choice.pdb_violations)
        self._report(pod, choice.node, victims, evicted, results)
        return outcome

    def _current(self, pod: PodInfo, choice: Choice) -> bool:
        """The preemptor still waits and every victim is still running on the node."""
        state = self._ctx.state
        now = state.pod(pod.namespace, pod.name)
        if now is None or now.uid != pod.uid or now.node_name or now.deleting or now.nominated_node:
            return False
        if self._book.steps_aside(pod.uid) or self._book.hold_of(pod.uid) is not None:
            return False
        for victim in choice.victims:
            cached = state.pod(victim.namespace, victim.name)
            if cached is None or cached.uid != victim.uid or cached.deleting:
                return False
            if cached.node_name != choice.node:
                return False
        return True

    def _evict_all(self, victims: Sequence[PodRef]) -> list[str]:
        """Evict in order, stopping at the first refusal or error (blocking: run in a thread)."""
        results: list[str] = []
        for victim in victims:
            results.append(self._evict(victim))
            if results[-1] not in ("evicted", "gone"):
                break
        return results

    def _evict(self, victim: PodRef) -> str:
        body = {
            "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": victim.name, "namespace": victim.namespace},
            # Never a pod created again under the same name.
            "deleteOptions": {"preconditions": {"uid": victim.uid}},
        }
        try:
            self._client.request(
                "POST", f"/api/v1/namespaces/{victim.namespace}/pods/{victim.name}/eviction", body=body
            )
        except KubeApiError as exc:
            if exc.status == 404:
                return "gone"
            if exc.status == 429:
                log.info("eviction of pod %s/%s refused: %s", victim.namespace, victim.name, exc.message)
                return "refused"
            log.warning("could not evict pod %s/%s: %s", victim.namespace, victim.name, exc)
            return "error"
        return "evicted"

    def _report(
        self, pod: PodInfo, node: str, victims: Sequence[PodRef], evicted: Sequence[PodRef],
        results: Sequence[str],
    ) -> None:
        if self._events is None:
            return
        preemptor = PodRef(pod.namespace, pod.name, pod.uid)
        for victim in evicted:
            self._events.preempted(victim, preemptor, node)
        if evicted:
            names = ", ".join(f"{v.namespace}/{v.name}" for v in evicted)
            self._events.record(
                preemptor, "Normal", REASON_PREEMPTING,
                f"dra-extender evicted {len(evicted)} of {len(victims)} pod(s) on node {node} to free "
                f"devices for this pod: {names}",
            )
        if len(evicted) < len(victims):
            stopped = victims[len(results) - 1]
            self._events.warn(
                preemptor, REASON_PREEMPTION_FAILED,
                f"dra-extender could not evict pod {stopped.namespace}/{stopped.name} on node {node} "
                f"({results[-1]}); no more pods are evicted for this pod until its hold ends",
            )

    def _line(
        self, pod: PodInfo, node: str, victims: Sequence[str], outcome: str, evicted: int, pdb: int = 0
    ) -> None:
        if not decisions.isEnabledFor(logging.INFO):
            return
        fields = {"verb": "evict", "pod": pod.ref, "priority": pod.priority, "node": node,
                  "victims": list(victims), "evicted": evicted, "pdbViolations": pdb, "outcome": outcome}
        message = (f"evict for {pod.ref}: {evicted} of {len(victims)} victims on {node} ({outcome})"
                   if node else f"evict for {pod.ref}: no eviction on any node makes room")
        log_line(decisions, logging.INFO, message, fields)
