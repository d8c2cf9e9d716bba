"""--preemption=evict against the test API server: kube-scheduler (before PR 135486) never calls
preempt for a pod short only of devices, so the extender evicts on its own. The victims go
through the Eviction API, the preemptor's hold keeps the freed devices from a pending pod of
lower priority, and the preemptor's filter passes once the victims' claims are released."""

from __future__ import annotations

import pytest

from extender.kube.client import RawClient
from extender.kube.evict import Evictor
from extender.scheduling.explain import explain
from extender.scheduling.preemption.book import EvictionBook
from extender.scheduling.retry import RetryBook
from tests.apiserver.controller import sync_claims
from tests.apiserver.resources import BY_KIND
from tests.kube.conftest import eventually
from tests.kube.test_preemption import POD, VICTIMS, seed
from tests.reliability.harness import ApiServer, audit, bind, extender, filter_nodes, pod_obj

pytestmark = pytest.mark.anyio

EVENT = BY_KIND["Event"]


def events(server: ApiServer, reason: str) -> list[tuple[str, str]]:
    items, _ = server.store.list(EVENT, "default")
    return [(e["involvedObject"]["name"], e["message"]) for e in items if e["reason"] == reason]


async def test_lower_priority_pods_are_evicted_and_their_devices_held_for_the_preemptor() -> None:
    with ApiServer(bookmark_interval=0.2) as server:
        seed(server, budget_on="v10")
        async with extender(server, preemption="evict") as (http, state, ctx):
            book = EvictionBook(state, hold_s=60, grace=0.0, metrics=ctx.metrics)
            ctx.evictions = book
            ctx.retry = RetryBook(state)
            from extender.kube.events import EventRecorder

            recorder = EventRecorder(RawClient(server.api_client()), instance="test")
            evictor = Evictor(RawClient(server.api_client()), ctx, book, recorder)
            for name in VICTIMS:
                assert await bind(http, server, name, "node-a") == ""
            await eventually(lambda: len(state.inuse.devices) == 4 and state.disruption_budgets,
                             what="claims and budget cached")
            hi_uid = pod_obj(server, "hi")["metadata"]["uid"]
            # filter: every GPU taken; devices alone keep the preemptor out.
            assert (await filter_nodes(http, server, "hi"))["NodeNames"] == []
            await evictor.tick()
            # The two lowest-priority pods the budget allows (v10 is protected: v20, v30).
            gone = {n for n in VICTIMS if pod_obj(server, n)["metadata"].get("deletionTimestamp")}
            assert gone == {"v20", "v30"}
            assert book.hold_of(hi_uid) is not None
            shown = explain(ctx, state.pod("default", "hi"))["evictionPreemption"]  # type: ignore[arg-type]
            assert shown["state"] == "holding" and shown["node"] == "node-a"
            assert sorted(shown["evicted"]) == ["default/v20", "default/v30"]
            assert ctx.metrics.preemptions.labels("evicted")._value.get() == 1
            # One in flight: more filters and rounds evict nothing more.
            assert (await filter_nodes(http, server, "hi"))["NodeNames"] == []
            await evictor.tick()
            assert {n for n in VICTIMS if pod_obj(server, n)["metadata"].get("deletionTimestamp")} == gone
            # The victims terminate (their kubelet), the claim controller releases their claims.
            await eventually(lambda: all(state.pod("default", n).deleting for n in gone),  # type: ignore[union-attr]
                             what="the evictions cached")
            assert (await filter_nodes(http, server, "lo"))["NodeNames"] == []
            for name in gone:
                server.store.delete(POD, "default", name)
            assert sync_claims(server.store) == 2
            await eventually(lambda: len(state.inuse.devices) == 2, what="the deallocations cached")
            # The retry book hands the preemptor out: the release is its event.
            assert "hi" in [p.name for p in ctx.retry.due()]
            # A pending pod of lower priority does not get the freed devices, nor preempts for them.
            late = await filter_nodes(http, server, "lo")
            assert late["NodeNames"] == [] and "node-a" in late["FailedNodes"]
            assert await bind(http, server, "lo", "node-a") != ""
            await evictor.tick()
            assert not pod_obj(server, "v10")["metadata"].get("deletionTimestamp")
            # The preemptor's filter passes on the node; it binds, and the hold ends.
            assert (await filter_nodes(http, server, "hi"))["NodeNames"] == ["node-a"]
            assert await bind(http, server, "hi", "node-a") == ""
            await eventually(lambda: book.hold_of(hi_uid) is None, what="the hold ended by the bind")
            assert ctx.metrics.preemption_holds_ended.labels("bound")._value.get() == 1
            await recorder.flush()
            assert sorted(events(server, "Preempted")) == [
                (n, f"Preempted by pod {hi_uid} on node node-a") for n in sorted(gone)
            ]
            assert [name for name, _ in events(server, "Preempting")] == ["hi"]
            await audit(server, state)


async def test_a_preempt_call_leaves_the_pod_to_the_verb_path() -> None:
    with ApiServer(bookmark_interval=0.2) as server:
        seed(server)
        async with extender(server, preemption="evict") as (http, state, ctx):
            book = EvictionBook(state, grace=0.0)
            ctx.evictions = book
            evictor = Evictor(RawClient(server.api_client()), ctx, book)
            for name in VICTIMS:
                assert await bind(http, server, name, "node-a") == ""
            await eventually(lambda: len(state.inuse.devices) == 4, what="claims cached")
            assert (await filter_nodes(http, server, "hi"))["NodeNames"] == []
            # kube-scheduler with PR 135486 asks right after the filter, with no victims.
            body = {"Pod": pod_obj(server, "hi"),
                    "NodeNameToMetaVictims": {"node-a": {"Pods": [], "NumPDBViolations": 0}}}
            assert (await http.post("/preempt", json=body)).status_code == 200
            await evictor.tick()
            assert not [n for n in VICTIMS if pod_obj(server, n)["metadata"].get("deletionTimestamp")]
            assert book.verb_asks_always
            assert (await filter_nodes(http, server, "hi"))["NodeNames"] == []
            await evictor.tick()
            assert not [n for n in VICTIMS if pod_obj(server, n)["metadata"].get("deletionTimestamp")]
