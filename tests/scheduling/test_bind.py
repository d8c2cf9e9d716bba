"""bind's own edges: a node it does not know, a bug inside a bind, rollbacks that fail.

The flows (tests/scheduling/test_flow.py) bind through the app over a local cluster; these tests
do the same, with the local binder wrapped where a write must fail.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from extender.model import Features
from extender.model.refs import PodRef
from extender.scheduling import bind
from extender.scheduling.binder import BindError, BindingUncertain, WriteUncertain
from tests.scheduling.cluster import (
    DRIVER,
    FailingBinding,
    Service,
    bind_call,
    claim,
    filter_call,
    gpu_cluster,
    gpus,
    node,
    node_slice,
    pod,
    template,
)
from tests.scheduling.test_extended_flow import RESOURCE, extended_pod, mapped_class
from tests.scheduling.test_plan import allocated


def one_pod() -> Service:
    return Service([*gpu_cluster(nodes=1, per_node=1), template("one"), pod("p", templates={"gpu": "one"})])


def outcomes(svc: Service, outcome: str) -> float:
    return svc.ctx.metrics.bind_outcomes.labels(outcome)._value.get()


def test_a_bind_to_a_node_the_extender_does_not_know_is_rejected_with_its_name() -> None:
    svc = one_pod()
    error = svc.run(lambda c: bind_call(c, svc.pod("p"), "nowhere"))
    assert error == "node nowhere is not known to the extender"
    assert outcomes(svc, "rejected") == 1
    assert not svc.state.inuse.inflight


def test_a_bug_inside_a_bind_answers_500_counts_an_error_and_frees_the_pods_bind_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    svc = one_pod()

    async def broken(*_: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(bind.BindTransaction, "begin", broken)

    async def flow(client: Any) -> tuple[int, str]:
        meta = svc.pod("p")["metadata"]
        body = {"PodName": "p", "PodNamespace": "default", "PodUID": meta["uid"], "Node": "node-0"}
        status = (await client.post("/bind", json=body)).status_code
        monkeypatch.undo()
        return status, await bind_call(client, svc.pod("p"), "node-0")

    status, retried = svc.run(flow)
    assert status == 500 and outcomes(svc, "error") == 1
    assert retried == ""  # the failed bind let go of the pod: the retry is not "already in progress"


class FailingReleases:
    """Writes through the local binder; the Binding and every release fail."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def write_claim(self, claim: Any, allocation: Any, pod_ref: Any, deadline: Any = None) -> Any:
        return await self.inner.write_claim(claim, allocation, pod_ref)

    async def bind_pod(self, pod_ref: Any, node_name: str, deadline: Any = None) -> None:
        raise RuntimeError("the Binding was refused")

    async def release_claim(self, claim: Any, pod_ref: Any, deallocate: bool) -> Any:
        raise RuntimeError("the release was refused")


def test_a_rollback_whose_release_fails_says_so_and_the_claim_stays_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    svc = one_pod()
    svc.ctx.binder = FailingReleases(svc.ctx.binder)
    with caplog.at_level(logging.ERROR, logger="extender.scheduling.bind"):
        error = svc.run(lambda c: bind_call(c, svc.pod("p"), "node-0"))
    assert "the Binding was refused" in error
    [claim] = svc.claims()
    assert [r.getMessage() for r in caplog.records] == [
        f"rollback of claim default/{claim} failed: the release was refused"]
    # Still allocated in the store: its device stays in use, nobody else gets it.
    assert svc.state.inuse.devices and not svc.state.inuse.inflight


# --- writes of unknown fate: their devices stay held until the settler knows -------------------


class LateWrites:
    """The local binder, with every claim write answered ``late`` seconds after the bind's
    deadline (it goes through all the same), or refused with ``error`` (without going through)."""

    def __init__(self, inner: Any, late: float = 0.0, error: Exception | None = None) -> None:
        self.inner, self.late, self.error = inner, late, error

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def write_claim(self, claim: Any, allocation: Any, pod_ref: Any, deadline: Any = None) -> Any:
        if self.error is not None:
            raise self.error
        await asyncio.sleep(self.late)
        return await self.inner.write_claim(claim, allocation, pod_ref)


def two_pods_one_gpu(**config: Any) -> Service:
    objs = [*gpu_cluster(nodes=1, per_node=1), template("one")]
    objs += [pod("p", templates={"gpu": "one"}), pod("q", templates={"gpu": "one"})]
    return Service(objs, **config)


def claim_of(svc: Service, name: str) -> dict[str, Any]:
    generated = svc.pod(name)["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    return svc.claims()[generated]


def test_a_write_still_running_at_the_deadline_holds_its_device_until_it_lands() -> None:
    svc = two_pods_one_gpu(bind_timeout_s=0.05, inflight_ttl_s=0.06)
    svc.ctx.binder = LateWrites(svc.ctx.binder, late=0.4)

    async def flow(client: Any) -> None:
        error = await bind_call(client, svc.pod("p"), "node-0")
        assert "no answer within 0.05s" in error
        await asyncio.sleep(0.1)  # past the in-flight TTL too
        assert (await filter_call(client, svc.pod("q"), ["node-0"]))["NodeNames"] == []
        await asyncio.sleep(0.6)  # the write has landed: the claim holds the device for p
        assert (await filter_call(client, svc.pod("q"), ["node-0"]))["NodeNames"] == []
        assert not svc.state.inuse.inflight and svc.ctx.settler.unsettled == 0
        assert [r["name"] for r in claim_of(svc, "p")["status"]["reservedFor"]] == ["p"]
        await svc.ctx.close()

    svc.run(flow)


def test_a_write_of_unknown_fate_holds_its_device_until_the_claim_moves_on_without_it() -> None:
    svc = two_pods_one_gpu(fence_after_s=60.0)
    # The claim as the write was based on it: the failure names that version.
    version = int(claim_of(svc, "p")["metadata"]["resourceVersion"])
    svc.ctx.binder = LateWrites(svc.ctx.binder, error=WriteUncertain("no answer", version))

    async def flow(client: Any) -> None:
        assert "no answer" in await bind_call(client, svc.pod("p"), "node-0")
        await asyncio.sleep(0.05)
        svc.state.expire_inflight()
        assert (await filter_call(client, svc.pod("q"), ["node-0"]))["NodeNames"] == []
        assert svc.ctx.settler.unsettled == 1
        await svc.ctx.close()

    svc.run(flow)


# --- a Binding of unknown fate ---------------------------------------------------------------------


def unanswered_binding(inner: Any) -> FailingBinding:
    """Claim writes go through; the Binding goes unanswered (and, in fact, never lands)."""
    return FailingBinding(inner, BindingUncertain("no answer"))


def test_a_binding_that_cannot_land_any_more_has_its_claims_released_and_the_pod_forgotten() -> None:
    svc = two_pods_one_gpu(fence_after_s=0.1)
    svc.ctx.binder = unanswered_binding(svc.ctx.binder)

    async def flow(client: Any) -> None:
        uid = svc.pod("p")["metadata"]["uid"]
        assert "stay reserved" in await bind_call(client, svc.pod("p"), "node-0")
        assert svc.ctx.memory.may_be_bound(uid) and outcomes(svc, "failed") == 1
        for _ in range(200):  # the settler reads the pod back, still unbound past fence_after_s
            if not svc.ctx.memory.may_be_bound(uid):
                break
            await asyncio.sleep(0.02)
        assert not svc.ctx.memory.may_be_bound(uid)
        assert not (claim_of(svc, "p").get("status") or {}).get("reservedFor")
        assert (await filter_call(client, svc.pod("q"), ["node-0"]))["NodeNames"] == ["node-0"]
        # The undo gave the pod's bind slot back: the scheduler's retry of p is not refused.
        assert "in progress" not in await bind_call(client, svc.pod("p"), "node-0")
        await svc.ctx.close()

    svc.run(flow)


def test_the_settlers_undo_leaves_the_claims_to_a_retry_under_way() -> None:
    """The settler found the first Binding unable to land just as kube-scheduler's retry of the
    pod began: the retry has adopted the claims, so the undo must leave them, or the retry binds
    the pod without its devices."""
    svc = two_pods_one_gpu()
    first = unanswered_binding(svc.ctx.binder)
    svc.ctx.binder = first
    undos: list[Any] = []
    svc.ctx.settler.follow_binding = lambda ref, node, undo: undos.append(undo)  # type: ignore[method-assign]

    class HeldBinding(FailingBinding):
        def __init__(self, inner: Any) -> None:
            super().__init__(inner, RuntimeError("not used"))
            self.started, self.go = asyncio.Event(), asyncio.Event()

        async def bind_pod(self, pod_ref: Any, node_name: str, deadline: Any = None) -> None:
            self.started.set()
            await self.go.wait()
            await self.inner.bind_pod(pod_ref, node_name, deadline)

    async def flow(client: Any) -> None:
        assert "stay reserved" in await bind_call(client, svc.pod("p"), "node-0")
        [undo] = undos
        svc.ctx.binder = retry = HeldBinding(first.inner)
        bound = asyncio.create_task(bind_call(client, svc.pod("p"), "node-0"))
        await retry.started.wait()  # the retry has adopted the claims and sent its Binding
        await undo()
        assert [r["name"] for r in claim_of(svc, "p")["status"]["reservedFor"]] == ["p"]
        retry.go.set()
        assert await bound == ""
        assert [r["name"] for r in claim_of(svc, "p")["status"]["reservedFor"]] == ["p"]
        await svc.ctx.close()

    svc.run(flow)


def test_a_retry_that_waits_keeps_what_the_unsettled_binding_before_it_held() -> None:
    """The retry took the first bind's claims over (with the binding gates: its device is no
    longer ready, so it waits, its claims kept for the next try): the first Binding, which can no
    longer land, must not be undone behind its back once the settler gives up on it."""
    device = {**gpus(1)[0], "bindingConditions": ["attached"]}
    svc = Service([*gpu_cluster(nodes=0), node("node-0"), node_slice("node-0", [device]), claim("c"),
                   pod("p", claims={"c": "c"})], fence_after_s=0.1)

    def set_attached(attached: bool) -> None:
        raw = dict(svc.claims()["c"])
        ready = [{"type": "attached", "status": "True"}] if attached else []
        raw["status"] = {**(raw.get("status") or {}),
                         "devices": [{"driver": DRIVER, "pool": "node-0", "device": device["name"],
                                      "conditions": ready}]}
        svc.cluster.write("ResourceClaim", raw)

    def reserved() -> list[str]:
        return [r["name"] for r in (svc.claims()["c"].get("status") or {}).get("reservedFor") or ()]

    set_attached(True)
    plain = svc.ctx.binder
    svc.ctx.binder = unanswered_binding(plain)

    async def flow(client: Any) -> None:
        assert "stay reserved" in await bind_call(client, svc.pod("p"), "node-0")
        svc.ctx.binder = plain
        set_attached(False)
        assert "waiting for binding conditions" in await bind_call(client, svc.pod("p"), "node-0")
        for _ in range(200):  # until nothing is left to settle (past fence_after_s and a read-back)
            if svc.ctx.settler.unsettled == 0:
                break
            await asyncio.sleep(0.02)
        assert svc.ctx.settler.unsettled == 0
        assert reserved() == ["p"] and svc.claims()["c"]["status"]["allocation"]
        await svc.ctx.close()

    svc.run(flow)


# --- rollbacks ---------------------------------------------------------------------------------------


class HangingReleases(FailingReleases):
    async def release_claim(self, claim: Any, pod_ref: Any, deallocate: bool) -> Any:
        await asyncio.Event().wait()


def test_a_rollback_whose_release_hangs_ends_at_the_bind_timeout() -> None:
    svc = Service([*gpu_cluster(nodes=1, per_node=1), template("one"), pod("p", templates={"gpu": "one"})],
                  bind_timeout_s=0.2)
    svc.ctx.binder = HangingReleases(svc.ctx.binder)

    async def flow(client: Any) -> tuple[str, float]:
        started = asyncio.get_running_loop().time()
        error = await asyncio.wait_for(bind_call(client, svc.pod("p"), "node-0"), 5.0)
        return error, asyncio.get_running_loop().time() - started

    error, took = svc.run(flow)
    assert "the Binding was refused" in error and took < 2.0


# --- the extended-resource claims a rollback deletes -----------------------------------------------


class Deletes:
    def __init__(self, deleted: list[dict[str, Any]]) -> None:
        self.deleted = deleted

    async def delete_extended_claims(self, ref: Any) -> list[dict[str, Any]]:
        return self.deleted


def test_deleted_extended_claims_leave_the_cache_and_are_never_adopted_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    svc = one_pod()
    first = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "e1", "namespace": "default", "uid": "uid-e1", "resourceVersion": "1"},
             "spec": {"devices": {"requests": []}}}
    second = {**first, "metadata": {**first["metadata"], "name": "e2", "uid": "uid-e2"}}
    for obj in (first, second):
        svc.state.apply("ResourceClaim", obj)
    svc.ctx.binder = Deletes([{"metadata": "malformed"}, first, second])  # type: ignore[assignment]
    ref = PodRef("default", "p", "uid-p")
    with caplog.at_level(logging.ERROR, logger="extender.scheduling.bind"):
        asyncio.run(bind.delete_extended_claims(svc.ctx, ref))
    assert svc.state.claim("default", "e1") is None and svc.state.claim("default", "e2") is None
    assert svc.ctx.memory.was_deleted("uid-e1") and svc.ctx.memory.was_deleted("uid-e2")
    [said] = [r.getMessage() for r in caplog.records]
    assert said == ("pod default/p: a deleted extended-resource claim is malformed: "
                    "ResourceClaim <unnamed>: metadata: must be an object")


# --- what a bind counts, passes on and remembers ------------------------------------------------


def writes_counted(svc: Service, result: str) -> float:
    return svc.ctx.metrics.claim_writes.labels(result)._value.get()


class Recording:
    """The local binder, recording the deadline each write and Binding was given."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.deadlines = inner, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def write_claim(self, claim: Any, allocation: Any, pod_ref: Any, deadline: Any = None) -> Any:
        self.deadlines.append(("claim", deadline))
        return await self.inner.write_claim(claim, allocation, pod_ref)

    async def bind_pod(self, pod_ref: Any, node_name: str, deadline: Any = None) -> None:
        self.deadlines.append(("binding", deadline))
        await self.inner.bind_pod(pod_ref, node_name)


def test_a_bind_gives_each_write_its_deadline_counts_it_and_remembers_the_pod_bound() -> None:
    import time

    svc = two_pods_one_gpu(bind_timeout_s=7.0)
    binder = Recording(svc.ctx.binder)
    svc.ctx.binder = binder
    started = time.monotonic()
    assert svc.run(lambda c: bind_call(c, svc.pod("p"), "node-0")) == ""
    assert [what for what, _ in binder.deadlines] == ["claim", "binding"]
    for _, deadline in binder.deadlines:
        assert started + 7.0 <= deadline <= time.monotonic() + 7.0
    assert writes_counted(svc, "ok") == 1 and outcomes(svc, "bound") == 1
    assert svc.ctx.memory.may_be_bound(svc.pod("p")["metadata"]["uid"])


def test_claim_writes_are_counted_by_their_end_and_the_bind_as_failed() -> None:
    refused = two_pods_one_gpu()
    refused.ctx.binder = LateWrites(refused.ctx.binder, error=BindError("403 forbidden"))
    assert "403 forbidden" in refused.run(lambda c: bind_call(c, refused.pod("p"), "node-0"))
    assert writes_counted(refused, "error") == 1 and writes_counted(refused, "unknown") == 0
    assert outcomes(refused, "failed") == 1
    unknown = two_pods_one_gpu(fence_after_s=60.0)
    unknown.ctx.binder = LateWrites(unknown.ctx.binder, error=WriteUncertain("no answer", 1))

    async def flow(client: Any) -> str:
        error = await bind_call(client, unknown.pod("p"), "node-0")
        await unknown.ctx.close()
        return error

    assert "no answer" in unknown.run(flow)
    assert writes_counted(unknown, "unknown") == 1 and writes_counted(unknown, "error") == 0
    assert outcomes(unknown, "failed") == 1


class LandsUnanswered(FailingBinding):
    """The Binding lands, but its answer is lost."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner, BindingUncertain("no answer"))

    async def bind_pod(self, pod_ref: Any, node_name: str, deadline: Any = None) -> None:
        await self.inner.bind_pod(pod_ref, node_name)
        raise self.error


def test_a_binding_that_landed_unanswered_keeps_its_claims() -> None:
    svc = two_pods_one_gpu(fence_after_s=0.1)
    svc.ctx.binder = LandsUnanswered(svc.ctx.binder)

    async def flow(client: Any) -> None:
        assert "stay reserved" in await bind_call(client, svc.pod("p"), "node-0")
        for _ in range(50):
            if svc.ctx.settler.unsettled == 0:
                break
            await asyncio.sleep(0.02)
        assert svc.ctx.settler.unsettled == 0
        assert svc.state.pod("default", "p").node_name == "node-0"
        assert [r["name"] for r in claim_of(svc, "p")["status"]["reservedFor"]] == ["p"]  # bound with it
        await svc.ctx.close()

    svc.run(flow)


# --- what an operator reads when a bind cannot proceed or cannot clean up ------------------------


def test_a_bind_during_a_handover_waits_naming_the_pod_and_why() -> None:
    svc = one_pod()
    why = "this replica took over scheduling"
    svc.ctx.handover.blocks_allocation = lambda: why  # type: ignore[method-assign]
    error = svc.run(lambda c: bind_call(c, svc.pod("p"), "node-0"))
    assert error == f"pod default/p: {why}"
    assert outcomes(svc, "rejected") == 1 and not svc.state.inuse.inflight


class CleanupRefused(FailingBinding):
    """The local binder with the Binding refused and the extended-resource claims not deletable."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner, RuntimeError("the Binding was refused"))

    async def delete_extended_claims(self, ref: Any) -> list[dict[str, Any]]:
        raise RuntimeError("the delete was refused")


def test_a_rollback_that_cannot_delete_the_extended_resource_claim_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    svc = Service([mapped_class(), node("n"), node_slice("n", gpus(1)), extended_pod("x", {RESOURCE: "1"})])
    svc.ctx.binder = CleanupRefused(svc.ctx.binder)
    with caplog.at_level(logging.ERROR, logger="extender.scheduling.bind"):
        error = svc.run(lambda c: bind_call(c, svc.pod("x"), "n"))
    assert error.endswith("the Binding was refused")
    assert [r.getMessage() for r in caplog.records] == [
        "rollback: deleting the extended-resource claim of pod default/x failed: the delete was refused"]


# --- a pod with two claims: every write is accounted for, whatever the others' outcome ----------


class RefusesWrites:
    """The local binder; writes of the claims named in ``refused`` are refused, the Binding too."""

    def __init__(self, inner: Any, refused: set[str]) -> None:
        self.inner, self.refused = inner, refused

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def write_claim(self, claim: Any, allocation: Any, pod_ref: Any, deadline: Any = None) -> Any:
        if claim.name in self.refused:
            raise BindError(f"write of {claim.name} refused")
        return await self.inner.write_claim(claim, allocation, pod_ref)

    async def bind_pod(self, pod_ref: Any, node_name: str, deadline: Any = None) -> None:
        raise RuntimeError("the Binding was refused")


def two_claims() -> Service:
    objs = [*gpu_cluster(nodes=1, per_node=2), template("one")]
    return Service([*objs, pod("p", templates={"a": "one", "b": "one"})])


def generated_names(svc: Service) -> list[str]:
    return [s["resourceClaimName"] for s in svc.pod("p")["status"]["resourceClaimStatuses"]]


@pytest.mark.parametrize("refused", [set(), {0}, {1}, {0, 1}], ids=["binding", "first", "second", "both"])
def test_a_failed_bind_of_two_claims_undoes_every_write_and_names_every_refusal(refused: set[int]) -> None:
    svc = two_claims()
    names = generated_names(svc)
    refused_names = [names[i] for i in sorted(refused)]
    svc.ctx.binder = RefusesWrites(svc.ctx.binder, set(refused_names))
    error = svc.run(lambda c: bind_call(c, svc.pod("p"), "node-0"))
    if refused:
        assert error == "; ".join(f"claim default/{n}: write of {n} refused" for n in refused_names)
    else:
        assert error.endswith("the Binding was refused")
    for name in names:  # the claim written is rolled back too: no device stays held for nothing
        assert "allocation" not in svc.claims()[name].get("status", {}), name
    assert not svc.state.inuse.devices and not svc.state.inuse.inflight


def test_a_second_bind_of_the_same_pod_meanwhile_is_refused_naming_it() -> None:
    svc = one_pod()
    assert svc.ctx.memory.begin_bind(svc.pod("p")["metadata"]["uid"])
    error = svc.run(lambda c: bind_call(c, svc.pod("p"), "node-0"))
    assert error == "a bind of pod default/p is already in progress"
    assert outcomes(svc, "refused") == 1


def test_a_reservation_of_unknown_fate_is_released_best_effort() -> None:
    # Only a reservation: it holds no devices, so nothing waits for the settler; the release
    # that follows undoes it if it landed.
    objs = [*gpu_cluster(nodes=1, per_node=1), allocated(claim("c"), "node-0", ["gpu-0"])]
    svc = Service([*objs, pod("p", claims={"gpu": "c"})])
    svc.ctx.binder = LateWrites(svc.ctx.binder, error=WriteUncertain("no answer", 1))
    error = svc.run(lambda c: bind_call(c, svc.pod("p"), "node-0"))
    assert error == "claim default/c: no answer"
    assert writes_counted(svc, "unknown") == 1
    status = svc.claims()["c"]["status"]
    assert status["allocation"] and not status.get("reservedFor")


# --- the allocation's timestamp (PreBind's, with the binding gates) -----------------------------


def allocated_at(svc: Service) -> str | None:
    [claim_obj] = svc.claims().values()
    stamp: str | None = claim_obj["status"]["allocation"].get("allocationTimestamp")
    return stamp


def test_with_the_binding_gates_the_allocation_is_stamped_in_utc(monkeypatch: pytest.MonkeyPatch) -> None:
    # A local time zone far from UTC: the stamp is UTC all the same, in the API's format.
    monkeypatch.setenv("TZ", "Asia/Kathmandu")
    time.tzset()
    try:
        svc = one_pod()
        assert svc.run(lambda c: bind_call(c, svc.pod("p"), "node-0")) == ""
        stamp = allocated_at(svc)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert stamp is not None
    when = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs(datetime.now(UTC) - when) < timedelta(minutes=1)


def test_without_the_binding_gates_the_allocation_is_not_stamped() -> None:
    objs = [*gpu_cluster(nodes=1, per_node=1), template("one"), pod("p", templates={"gpu": "one"})]
    svc = Service(objs, feature_gates=Features.parse("DRADeviceBindingConditions=false", "1.37"))
    assert svc.run(lambda c: bind_call(c, svc.pod("p"), "node-0")) == ""
    assert allocated_at(svc) is None


def test_a_pod_changed_while_its_placement_was_computed_is_not_committed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Only the pod changes (its claims and the node do not): what was computed may be stale all
    # the same, so nothing is committed and the scheduler retries.
    svc = one_pod()
    computed = bind.in_turns

    async def pod_changes_meanwhile(work: Any, *args: Any) -> Any:
        changed = svc.pod("p")
        changed["metadata"] = {**changed["metadata"], "labels": {"changed": "yes"}}
        svc.state.apply("Pod", changed)
        return await computed(work, *args)

    monkeypatch.setattr(bind, "in_turns", pod_changes_meanwhile)
    error = svc.run(lambda c: bind_call(c, svc.pod("p"), "node-0"))
    assert error == ("pod default/p: the claims or the devices of node node-0 changed while its allocation "
                     "was computed; the scheduler retries")
    assert not svc.state.inuse.inflight and not svc.state.inuse.devices


def test_a_created_extended_claim_whose_write_is_still_running_holds_its_device_until_it_ends() -> None:
    # The in-flight entry goes by the in-memory claim's UID, the settler follows the created
    # claim: the device must stay held across the two, past the in-flight TTL.
    objs = [mapped_class(), node("n"), node_slice("n", gpus(1))]
    objs += [extended_pod("x", {RESOURCE: "1"}), extended_pod("y", {RESOURCE: "1"})]
    svc = Service(objs, bind_timeout_s=0.05, inflight_ttl_s=0.06)
    svc.ctx.binder = LateWrites(svc.ctx.binder, late=0.4)

    async def flow(client: Any) -> None:
        assert "no answer within 0.05s" in await bind_call(client, svc.pod("x"), "n")
        await asyncio.sleep(0.1)  # past the in-flight TTL too
        svc.state.expire_inflight()
        assert (await filter_call(client, svc.pod("y"), ["n"]))["NodeNames"] == []
        await asyncio.sleep(0.6)
        # The write has ended: the rollback had deleted the created claim, so it could not land
        # and nothing holds the device any more.
        assert svc.claims() == {} and not svc.state.inuse.inflight and svc.ctx.settler.unsettled == 0
        assert (await filter_call(client, svc.pod("y"), ["n"]))["NodeNames"] == ["n"]
        await svc.ctx.close()

    svc.run(flow)


class UncertainCreatedClaimWrite(CleanupRefused):
    """The extended-resource claim is created; its write ends of unknown fate (based on the
    created version), and the rollback cannot delete it."""

    async def create_extended_claim(self, body: dict[str, Any], pod_ref: Any) -> dict[str, Any]:
        self.created: dict[str, Any] = await self.inner.create_extended_claim(body, pod_ref)
        return self.created

    async def write_claim(self, claim: Any, allocation: Any, pod_ref: Any, deadline: Any = None) -> Any:
        raise WriteUncertain("no answer", int(self.created["metadata"]["resourceVersion"]))


def test_a_created_extended_claim_of_unknown_fate_is_followed_by_its_real_name() -> None:
    """The settler must read back the claim the API server has, not the in-memory one (which no
    read can find, so its write would look impossible and its device free while it may land)."""
    objs = [mapped_class(), node("n"), node_slice("n", gpus(1))]
    objs += [extended_pod("x", {RESOURCE: "1"}), extended_pod("y", {RESOURCE: "1"})]
    svc = Service(objs, fence_after_s=60.0)
    svc.ctx.binder = UncertainCreatedClaimWrite(svc.ctx.binder)

    async def flow(client: Any) -> None:
        assert "no answer" in await bind_call(client, svc.pod("x"), "n")
        await asyncio.sleep(0.05)  # the settler's first read-back
        svc.state.expire_inflight()
        assert (await filter_call(client, svc.pod("y"), ["n"]))["NodeNames"] == []
        assert svc.ctx.settler.unsettled == 1
        await svc.ctx.close()

    svc.run(flow)


class MalformedCreate:
    """The local binder; the API server's reply to the extended-resource claim's create is malformed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def create_extended_claim(self, body: dict[str, Any], pod_ref: Any) -> dict[str, Any]:
        return {"metadata": "malformed"}


def test_a_malformed_reply_to_the_extended_claim_create_fails_the_bind_saying_so() -> None:
    svc = Service([mapped_class(), node("n"), node_slice("n", gpus(1)), extended_pod("x", {RESOURCE: "1"})])
    svc.ctx.binder = MalformedCreate(svc.ctx.binder)
    error = svc.run(lambda c: bind_call(c, svc.pod("x"), "n"))
    assert error.endswith(": the created extended-resource claim is malformed: "
                          "ResourceClaim <unnamed>: metadata: must be an object")
    assert not svc.state.inuse.inflight and not svc.state.inuse.devices


def test_the_writes_get_what_is_left_of_the_bind_timeout_after_a_long_placement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The bind's deadline counts from its start: a placement that took most of the budget leaves
    # the writes only the rest (a replica taking over waits bind_timeout_s, no longer).
    svc = Service([*gpu_cluster(nodes=1, per_node=1), template("one"), pod("p", templates={"gpu": "one"})],
                  bind_timeout_s=1.0)
    svc.ctx.binder = LateWrites(svc.ctx.binder, late=2.0)
    computed = bind.in_turns

    async def slow_placement(work: Any, *args: Any) -> Any:
        await asyncio.sleep(0.8)
        return await computed(work, *args)

    monkeypatch.setattr(bind, "in_turns", slow_placement)

    async def flow(client: Any) -> tuple[str, float]:
        started = asyncio.get_running_loop().time()
        error = await bind_call(client, svc.pod("p"), "node-0")
        took = asyncio.get_running_loop().time() - started
        await svc.ctx.close()
        return error, took

    error, took = svc.run(flow)
    assert "no answer within 1s" in error
    assert 0.95 < took < 1.6  # the whole bind within its budget, not the placement plus a full one
