"""--preemption=evict's rules without an API server: ``choose`` (where and whom to evict) and the
``EvictionBook`` (who waits, one preemption in flight, holds that end)."""

from __future__ import annotations

import random
from typing import Any

import httpx
import pytest

from extender.model.pods import PodInfo
from extender.scheduling.evict import Choice, NoChoice, choose
from extender.scheduling.preemption.book import EvictionBook
from tests.scheduling.cluster import (
    Service,
    bind_call,
    claim_spec,
    filter_call,
    gpu_cluster,
    pod,
    request,
    template,
)
from tests.scheduling.test_preemption import full_node, prio


def info(svc: Service, name: str) -> PodInfo:
    found = svc.state.pod("default", name)
    assert found is not None
    return found


def one_node(victims: dict[str, int], wants: int, priority: int, policy: str = "") -> Service:
    """node-0 with 4 GPUs, each held by a single-GPU victim, and the preemptor ``hi``."""
    objs: list[dict[str, Any]] = [*gpu_cluster(nodes=1, per_node=4), template("one")]
    objs.append(template("many", claim_spec(request(count=wants))))
    objs += [prio(pod(n, templates={"gpu": "one"}), p) for n, p in victims.items()]
    hi = prio(pod("hi", templates={"gpu": "many"}), priority)
    if policy:
        hi["spec"]["preemptionPolicy"] = policy
    svc = Service([*objs, hi])

    async def bind_all(client: httpx.AsyncClient) -> None:
        for name in victims:
            assert await bind_call(client, svc.pod(name), "node-0") == ""

    svc.run(bind_all)
    return svc


@pytest.mark.parametrize("seed", range(30))
def test_the_fewest_victims_and_never_one_of_equal_or_higher_priority(seed: int) -> None:
    rng = random.Random(seed)
    priorities = rng.sample(range(100), 4)
    victims = {f"v{i}": p for i, p in enumerate(priorities)}
    # Often equal to a victim's priority: such a pod must never be chosen.
    priority = rng.choice([*priorities, rng.randrange(120)])
    wants = rng.randint(1, 4)
    svc = one_node(victims, wants, priority)
    result = choose(svc.ctx, info(svc, "hi"), ["node-0"])
    lower = sorted((p, n) for n, p in victims.items() if p < priority)
    if len(lower) < wants:
        assert result == NoChoice("no_victims")
        return
    assert isinstance(result, Choice) and result.node == "node-0"
    assert all(v.priority < priority for v in result.victims)
    # Each victim frees one GPU: exactly ``wants`` of them, the least important.
    assert sorted(v.name for v in result.victims) == sorted(n for _, n in lower[:wants])


def test_preemption_policy_never_preempts_nobody() -> None:
    svc = one_node({"v1": 1, "v2": 2, "v3": 3, "v4": 4}, 1, 1000, policy="Never")
    assert choose(svc.ctx, info(svc, "hi"), ["node-0"]) == NoChoice("preemptionPolicy Never")


def test_a_budget_protected_pod_is_spared_when_others_suffice() -> None:
    budget = {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-v10", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "v10"}}},
        "status": {"disruptionsAllowed": 0},
    }
    svc = full_node([budget], v10={"app": "v10"})
    result = choose(svc.ctx, info(svc, "hi"), ["node-0"])
    assert isinstance(result, Choice)
    assert [v.name for v in result.victims] == ["v30", "v20"] and result.pdb_violations == 0


def test_a_budget_that_cannot_be_kept_puts_its_pod_first_in_line() -> None:
    """The eviction the API server may refuse goes first, so a refusal stops the rest."""
    budget = {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-all", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}},
        "status": {"disruptionsAllowed": 0},
    }
    svc = one_node({"v1": 1, "v2": 2, "v3": 3, "v4": 4}, 4, 1000)
    for name in ("v1", "v2", "v3", "v4"):
        obj = svc.pod(name)
        obj["metadata"]["labels"] = {"app": "x"} if name == "v3" else {}
        svc.cluster.apply(obj)
    svc.cluster.apply(budget)
    result = choose(svc.ctx, info(svc, "hi"), ["node-0"])
    assert isinstance(result, Choice) and result.pdb_violations == 1
    assert [v.name for v in result.victims] == ["v3", "v4", "v2", "v1"]


def test_a_node_where_the_pod_fits_means_no_preemption() -> None:
    svc = one_node({"v1": 1, "v2": 2}, 2, 1000)
    assert choose(svc.ctx, info(svc, "hi"), ["node-0"]) == NoChoice("fits")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def book_over(svc: Service, **kwargs: Any) -> tuple[EvictionBook, Clock]:
    clock = Clock()
    return EvictionBook(svc.state, clock=clock, **kwargs), clock


def test_the_book_waits_for_the_grace_and_steps_aside_for_the_verb() -> None:
    svc = full_node()
    book, clock = book_over(svc, grace=2.0)
    hi = info(svc, "hi")
    book.wants(hi, ["node-0"])
    assert book.due() == []
    clock.now = 2.0
    assert book.due() == [(hi, ("node-0",))]
    assert book.due() == []  # handed out once
    book.wants(hi, ["node-0"])
    book.verb_called(hi.uid, without_victims=False)  # kube-scheduler asked: the verb's business
    clock.now = 10.0
    assert book.due() == [] and book.steps_aside(hi.uid) and not book.verb_asks_always
    book.wants(hi, ["node-0"])
    assert not book.waiting(hi.uid)
    lo = info(svc, "lo")
    book.verb_called("someone", without_victims=True)  # a kube-scheduler with PR 135486
    book.wants(lo, ["node-0"])
    assert book.steps_aside(lo.uid) and book.due() == []


def test_one_preemption_in_flight_and_holds_that_end() -> None:
    svc = full_node()
    book, clock = book_over(svc, grace=0.0, hold_s=60.0)
    hi = info(svc, "hi")
    book.hold(hi, "node-0", ())
    book.wants(hi, ["node-0"])  # while it is in flight, nothing more
    assert not book.waiting(hi.uid) and book.due() == [] and book.in_flight() == 1
    assert [(p.name, n) for p, n in book.holds()] == [("hi", "node-0")]
    clock.now = 59.9
    assert book.hold_of(hi.uid) is not None
    clock.now = 60.0
    assert book.hold_of(hi.uid) is None  # timeout
    # Bound elsewhere.
    book.hold(hi, "node-0", ())
    bound = svc.pod("hi")
    bound["spec"]["nodeName"] = "node-1"
    svc.cluster.apply(bound)
    assert book.hold_of(hi.uid) is None and list(book.holds()) == []
    # Deleted.
    lo = info(svc, "lo")
    book.hold(lo, "node-0", ())
    assert svc.cluster.delete("Pod", "default", "lo")
    assert book.hold_of(lo.uid) is None


def test_a_pod_that_cannot_preempt_is_not_due() -> None:
    svc = one_node({"v1": 1}, 1, 1000, policy="Never")
    book, _ = book_over(svc, grace=0.0)
    book.wants(info(svc, "hi"), ["node-0"])
    assert book.due() == []


def test_a_hold_keeps_what_the_first_victim_freed_while_the_others_still_run() -> None:
    """The e2e flake "low bound where the victims were": the claim controller deallocated v1's
    claim before the watch showed v2 deleted. The preemptor needs both GPUs, so over what the
    cache shows it fits nowhere yet; its hold must still count its victims as gone, or a pod of
    lower priority takes the GPU v1 freed and the preemption was for nothing."""
    svc = one_node({"v1": 1, "v2": 1, "v3": 1, "v4": 1}, 2, 1000)
    svc.cluster.apply(prio(pod("lo", templates={"gpu": "one"}), 0))
    book, _ = book_over(svc, grace=0.0, hold_s=60.0)
    svc.ctx.evictions = book
    victims = tuple(info(svc, name).pod_ref for name in ("v1", "v2"))
    book.hold(info(svc, "hi"), "node-0", victims)
    reserved = {c["status"]["reservedFor"][0]["name"]: c for c in svc.claims().values() if c.get("status")}
    freed = reserved["v1"]
    svc.cluster.write("ResourceClaim", {**freed, "status": {}})  # the claim controller, after v1 went
    assert svc.cluster.delete("Pod", "default", "v1")
    result = svc.run(lambda c: filter_call(c, svc.pod("lo"), ["node-0"]))
    assert result["NodeNames"] == [], result
