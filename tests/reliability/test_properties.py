"""Random clusters and random interleavings of everything that can happen around a bind.

Extends tests/scheduling/test_invariants.py (local store, writes visible at once) with what only
a real API server does: the watch echo arrives later than the bind's reply (sometimes after
newer writes), writes are refused, replies get lost or arrive after the bind deadline, requests
sit in the server past it and land afterwards, the API server times a write out (504) and
carries it out later all the same, claims and pods are deleted mid-bind, drivers
withdraw devices and bump the pool generation. The extender is the production one against the
test API server (tests/apiserver): KubeBinder writes over HTTP, KubeSource lists and watches.
Filter and bind are called directly (no extender HTTP) so that many interleavings fit in the
budget. The server draws the faults; its resourceclaim-controller part (tests/apiserver/
controller.py) reacts to deletions.

Checked after every batch of concurrent operations (and the no-double-allocation invariant
after every single operation): no device, and no shared counter beyond its capacity, is held by
two claims; every allocation only names devices the driver published when it was written; a
bound pod holds all its claims on its node; no claim is left allocated without a consumer; no
in-flight entry outlives its bind; the cache's in-use set equals what the server holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.cel.environment import Environment
from extender.config import Config
from extender.kube.binder import KubeBinder
from extender.kube.client import RawClient
from extender.kube.source import Backoff, KubeSource
from extender.metrics import Metrics
from extender.scheduling.bind import bind_pod
from extender.scheduling.context import SchedulingContext
from extender.scheduling.filter import filter_nodes
from extender.state import ClusterState
from tests.apiserver.controller import sync_claims
from tests.apiserver.faults import RandomFaults
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer
from tests.apiserver.store import ApiError
from tests.reliability.figures import record
from tests.scheduling.cluster import DRIVER, claim, claim_spec, device_class, node, pod, request

T = TypeVar("T")

BIND_TIMEOUT = 0.025
# Faulted requests are held this long: past the bind deadline, so the bind has given up first.
HOLD = BIND_TIMEOUT * 1.5
# A write the API server timed out (504) lands this much later: after the bind has ended and
# while later operations run, so that a device freed too early would be handed out again.
LANDING = 0.3
# Far beyond a batch, even one that a loaded machine stretches to seconds: no entry may leave by
# its TTL here, only by its bind or once its write's fate is known, as a cluster's TTL outlasts
# its slowest write and watch lag. (An entry expiring while its bind stalled would free devices
# a write may still take; one that leaks would hide behind a TTL that runs out mid-batch.)
INFLIGHT_TTL = 30.0
# The bound on any wait for what must come (a write's end, a watch's delivery): a liveness check,
# sized for a machine busy with other work, not a speed test.
PATIENCE = 100.0
# A bind waits at most its deadlines (the claim writes, the Binding, the rollback), whatever the
# server does; over that, this long for the rest (threads taking up its calls, say) while the
# event loop runs.
BIND_SLACK = 0.5
UNITS = 2  # shared counter capacity per node: "big" takes both, each "half" one
SHARED_MEM = 4  # consumable capacity of each node's multi-allocatable device "shared"
EXCLUSIVE = "exclusive"
CLAIM, POD, SLICE = BY_KIND["ResourceClaim"], BY_KIND["Pod"], BY_KIND["ResourceSlice"]


def devices_slice(node_name: str, plain: int, generation: int = 1) -> dict[str, Any]:
    def consumes(units: int) -> list[dict[str, Any]]:
        return [{"counterSet": "cs", "counters": {"units": {"value": str(units)}}}]

    devices: list[dict[str, Any]] = [{"name": f"gpu-{i}"} for i in range(plain)]
    devices.append(
        {"name": "shared", "allowMultipleAllocations": True, "capacity": {"mem": {"value": str(SHARED_MEM)}}}
    )
    devices += [
        {"name": "big", "consumesCounters": consumes(2)},
        {"name": "half-0", "consumesCounters": consumes(1)},
        {"name": "half-1", "consumesCounters": consumes(1)},
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-devs"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "devices": devices,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 2},
        },
    }


def counters_slice(node_name: str, generation: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-counters"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 2},
            "sharedCounters": [{"name": "cs", "counters": {"units": {"value": str(UNITS)}}}],
        },
    }


CONSUMES = {"big": 2, "half-0": 1, "half-1": 1}

cluster_shape = st.fixed_dictionaries(
    {
        "plain": st.lists(st.integers(0, 2), min_size=1, max_size=3),  # plain devices per node
        "claims": st.lists(st.integers(1, 2), min_size=1, max_size=5),  # devices per claim
        "shares": st.lists(st.integers(1, 3), max_size=3),  # "mem" per claim on a shared device
        "pods": st.lists(st.integers(0, 4), min_size=1, max_size=6),  # claim index per pod
    }
)
operation = st.one_of(
    st.tuples(st.just("schedule"), st.integers(0, 5)),
    st.tuples(st.just("bind"), st.integers(0, 5), st.integers(0, 2)),
    st.tuples(st.just("delete-pod"), st.integers(0, 5)),
    st.tuples(st.just("delete-claim"), st.integers(0, 4)),
    st.tuples(st.just("withdraw-device"), st.integers(0, 2), st.integers(0, 4)),
    st.tuples(st.just("echo"), st.integers(1, 4)),
)
faults_shape = st.fixed_dictionaries(
    {
        "fail": st.sampled_from([0.0, 0.1, 0.3]),
        "lost_reply": st.sampled_from([0.0, 0.1]),
        "slow": st.sampled_from([0.0, 0.1]),
        "late": st.sampled_from([0.0, 0.2]),
        # Answered 504 at once and carried out HOLD later: a write whose fate is unknown long
        # before the bind deadline, its retry then refused (403) or overtaken.
        "time_out": st.sampled_from([0.0, 0.3]),
        "seed": st.integers(0, 2**32 - 1),
    }
)


class CountingBinder(KubeBinder):
    """The production binder, counting the calls still at work in its threads: a call whose bind
    gave up keeps going until its requests return, and may still write.

    A call counts from its submission to the pool until its thread ends it or it is cancelled
    before a thread took it up (a bind deadline passing while it queued, which a loaded machine
    makes common): a cancelled call never runs, and counting it would wait for it forever."""

    def __init__(self, client: RawClient) -> None:
        super().__init__(client, retry_delay=0.001)
        self.running = 0
        self._count_lock = threading.Lock()

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        # KubeBinder._run's run_in_executor, with the pool's own future at hand to count on.
        with self._count_lock:
            self.running += 1
        call = self._pool.submit(fn, *args)
        call.add_done_callback(self._ended)
        return await asyncio.wrap_future(call)

    def _ended(self, _: object) -> None:
        with self._count_lock:
            self.running -= 1


def sets_an_allocation(body: Any) -> bool:
    """A claim status write that allocates or reserves (not a rollback's): faults strike only these,
    as rollbacks are retried until they land."""
    return isinstance(body, dict) and bool((body.get("status") or {}).get("allocation"))


async def until(condition: Callable[[], object], what: str, timeout: float = PATIENCE) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        await asyncio.sleep(0.001)


class Stalls:
    """When the event loop could not run: this process starved of the CPU by a loaded machine, or
    the loop busy with work (the bind's own included). A bind is judged by how long it waited
    while the loop ran, which its deadlines bound, not by the wall time a busy machine stretches
    (binds of 0.7 and 1.2 s were seen on 2 loaded cores). How long work holds the loop is
    tests/api/test_stalls.py's concern."""

    TICK = 0.005

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []  # (from, to): the loop overslept a tick

    async def watch(self) -> None:
        while True:
            start = time.monotonic()
            await asyncio.sleep(self.TICK)
            end = time.monotonic()
            if end - start > self.TICK:
                self.spans.append((start + self.TICK, end))

    def within(self, start: float, end: float) -> float:
        """How long the loop stood still between ``start`` and ``end``."""
        return sum(max(0.0, min(end, b) - max(start, a)) for a, b in self.spans if b > start)


class Harness:
    def __init__(self, shape: dict[str, Any], fault_knobs: dict[str, Any]) -> None:
        self.nodes = [f"node-{i}" for i in range(len(shape["plain"]))]
        objs: list[dict[str, Any]] = [
            device_class(EXCLUSIVE, f'device.driver == "{DRIVER}" && !device.allowMultipleAllocations'),
            device_class("shared", f'device.driver == "{DRIVER}" && device.allowMultipleAllocations'),
        ]
        for name, plain in zip(self.nodes, shape["plain"], strict=True):
            objs += [node(name), devices_slice(name, plain), counters_slice(name)]
        objs += [
            claim(f"c{j}", claim_spec(request(count=n, device_class_name=EXCLUSIVE)))
            for j, n in enumerate(shape["claims"])
        ]
        objs += [
            claim(
                f"s{k}",
                claim_spec(request(device_class_name="shared", capacity={"requests": {"mem": str(mem)}})),
            )
            for k, mem in enumerate(shape["shares"])
        ]
        names = [f"c{j}" for j in range(len(shape["claims"]))] + [
            f"s{k}" for k in range(len(shape["shares"]))
        ]
        objs += [pod(f"p{i}", claims={"gpu": names[c % len(names)]}) for i, c in enumerate(shape["pods"])]
        self.server = ApiServer(history_size=100_000).start()
        self.store = self.server.store
        for obj in objs:
            self.store.seed(BY_KIND[obj["kind"]], obj)
        self.config = replace(Config(kube=True), bind_timeout_s=BIND_TIMEOUT, inflight_ttl_s=INFLIGHT_TTL)
        self.state = ClusterState(self.config.feature_gates)
        client = RawClient(self.server.api_client(), request_timeout=5.0)
        self.binder = CountingBinder(client)
        self.ctx = SchedulingContext(self.config, self.state, self.binder, Metrics(), Environment.create())
        self.source = KubeSource(client, self.state, backoff=Backoff(initial=0.01, cap=0.05))
        self.rng = random.Random(fault_knobs["seed"])
        faults = RandomFaults(
            random.Random(self.rng.random()),
            fail=fault_knobs["fail"],
            lost_reply=fault_knobs["lost_reply"],
            slow=fault_knobs["slow"],
            late=fault_knobs["late"],
            time_out=fault_knobs["time_out"],
            landing=LANDING,
            hold=HOLD,
            code=403,  # refused: no retry makes it through
        )
        self.server.faults.at_random(faults, "update", "resourceclaims", "status", when=sets_an_allocation)
        self.server.faults.at_random(faults, "create", "pods", "binding")
        # The echo of every claim and pod write waits for an "echo" operation or the end of the batch.
        self.server.lag_watches("resourceclaims", "pods")
        self.generation = dict.fromkeys(self.nodes, 1)
        self.withdrawn: dict[tuple[str, str, str], int] = {}  # device -> step it was withdrawn at
        self.allocations: list[tuple[int, tuple[tuple[str, str, str], ...]]] = []  # (step, devices) written
        self._allocated: dict[str, Any] = {}  # claim uid -> its allocation as last written
        self._scanned_rv = self.store.resource_version
        self.step = 0
        self.operations = 0
        self.longest_bind = 0.0  # the longest time a bind waited while the event loop ran
        self.stalls = Stalls()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self.source.run()), asyncio.create_task(self.stalls.watch())]
        await until(lambda: self.state.synced, "the extender's first list")

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.binder.close()
        self.server.stop()

    async def bind(self, name: str, node_name: str) -> None:
        info = self.state.pod("default", name)
        if info is None:
            return
        started = time.monotonic()
        await bind_pod(self.ctx, "default", name, info.uid, node_name)  # the pod is known: no await since
        ended = time.monotonic()
        self.longest_bind = max(self.longest_bind, ended - started - self.stalls.within(started, ended))

    async def run(self, op: tuple[Any, ...]) -> None:
        kind, *args = op
        self.operations += 1
        # Some operations start after the bind deadline of the others: they meet their rollbacks
        # and their late-landing writes instead of their in-flight commits.
        await asyncio.sleep(self.rng.choice((0, 0, 0, BIND_TIMEOUT * 1.25)))
        if kind == "schedule":
            info = self.state.pod("default", f"p{args[0]}")
            if info is not None:
                passed = filter_nodes(self.ctx, info, self.nodes).passed
                if passed:
                    await self.bind(info.name, self.rng.choice(passed))
        elif kind == "bind":
            await self.bind(f"p{args[0]}", self.nodes[args[1] % len(self.nodes)])
        elif kind == "delete-pod":
            self.delete(POD, f"p{args[0]}")
        elif kind == "delete-claim":
            self.delete(CLAIM, f"c{args[0]}")
        elif kind == "withdraw-device":
            self.withdraw(self.nodes[args[0] % len(self.nodes)], args[1])
        else:
            await asyncio.sleep(self.rng.choice((0, 0.001)))
            self.server.release_watch_events(args[0])
        self.check_no_double_allocation()

    def delete(self, rtype: Any, name: str) -> None:
        """A user deletes the object; the resourceclaim controller reacts at once."""
        with contextlib.suppress(ApiError):  # already gone
            self.store.delete(rtype, "default", name)
        sync_claims(self.store)

    def withdraw(self, node_name: str, index: int) -> None:
        """The driver republishes the node's pool without one device, at the next generation."""
        with self.store.cond:
            raw = self.store.get(SLICE, "", f"{node_name}-devs")
            devices = raw["spec"]["devices"]
            if not devices:
                return
            gone = devices.pop(index % len(devices))
            self.generation[node_name] += 1
            counters = self.store.get(SLICE, "", f"{node_name}-counters")
            for obj in (raw, counters):
                obj["spec"]["pool"]["generation"] = self.generation[node_name]
                self.store.update(SLICE, "", obj["metadata"]["name"], obj)
        self.withdrawn[(DRIVER, node_name, gone["name"])] = self.step

    # ----- invariants ---------------------------------------------------------------------

    def server_claims(self) -> list[dict[str, Any]]:
        return self.store.list(CLAIM, None)[0]

    def server_results(self) -> list[dict[str, Any]]:
        out = []
        for obj in self.server_claims():
            allocation = (obj.get("status") or {}).get("allocation")
            if allocation:
                out += allocation["devices"]["results"]
        return out

    def published(self) -> set[tuple[str, str, str]]:
        """The devices the driver publishes now (the server's slices)."""
        return {
            (DRIVER, s["spec"]["pool"]["name"], d["name"])
            for s in self.store.list(SLICE, None)[0]
            for d in s["spec"].get("devices") or ()
        }

    @staticmethod
    def device_id(result: dict[str, Any]) -> tuple[str, str, str]:
        return (result["driver"], result["pool"], result["device"])

    def check_no_double_allocation(self) -> None:
        results = self.server_results()
        exclusive = [self.device_id(r) for r in results if not r.get("shareID")]
        doubles = [d for d, n in Counter(exclusive).items() if n > 1]
        # As upstream: a device the driver no longer publishes consumes no counters any more.
        published = self.published()
        units: Counter[str] = Counter()
        for device_id in exclusive:
            if device_id in published:
                units[device_id[1]] += CONSUMES.get(device_id[2], 0)
        over = {pool: n for pool, n in units.items() if n > UNITS}
        mem: Counter[tuple[str, str, str]] = Counter()
        for r in results:
            if r.get("shareID"):
                assert r["device"] == "shared", r
                mem[self.device_id(r)] += int(r["consumedCapacity"]["mem"])
        beyond = {d: n for d, n in mem.items() if n > SHARED_MEM and d in published}
        record("double allocations", len(doubles) + len(over) + len(beyond))
        record("invariant checks")
        assert not doubles, f"devices held by two claims: {doubles}"
        assert not over, f"shared counters over capacity: {over}"
        assert not beyond, f"consumable capacity over its limit: {beyond}"

    def cache_agrees(self) -> bool:
        """The extender's cache holds every claim, pod and slice at the server's resourceVersion."""
        for rtype in (CLAIM, POD, SLICE):
            def versions(objs: Any) -> dict[tuple[str, str], str]:
                return {(o["metadata"].get("namespace", ""), o["metadata"]["name"]):
                        o["metadata"]["resourceVersion"] for o in objs}

            if versions(self.store.list(rtype, None)[0]) != versions(self.state.items(rtype.kind)):
                return False
        return True

    def log_allocations(self) -> None:
        """Note each allocation the server took since the last look, with the step it landed in."""
        for event in self.store.events_of(frozenset({"resourceclaims"}), self._scanned_rv):
            self._scanned_rv = event.rv
            uid = event.obj["metadata"]["uid"]
            allocation = (event.obj.get("status") or {}).get("allocation")
            if allocation is not None and allocation != self._allocated.get(uid):
                devices = tuple(self.device_id(r) for r in allocation["devices"]["results"])
                self.allocations.append((self.step, devices))
            self._allocated[uid] = allocation

    async def check_settled(self) -> None:
        """After a batch: every write has landed or failed; deliver the watch backlog and compare."""
        await until(lambda: self.binder.running == 0, "the binder's timed-out calls to finish")
        sync_claims(self.store)  # the controller notices reservations of pods deleted meanwhile
        # A write of unknown fate holds its devices until the settler knows it landed or can no
        # longer land (never by a TTL alone); with every held request released by now, each
        # one settles once the watch has delivered what the server did.
        unsettled = self.ctx.settler.unsettled

        def settled() -> bool:
            self.server.release_watch_events()
            return self.ctx.settler.unsettled == 0

        await until(settled, "every write of unknown fate to be settled")
        if unsettled:
            record("writes of unknown fate settled", unsettled)
        self.log_allocations()
        self.server.release_watch_events()
        await until(self.cache_agrees, "the watch to deliver everything")
        assert not self.state.inuse.inflight, "in-flight entries outlived their writes"
        assert self.longest_bind < BIND_TIMEOUT * 3 + BIND_SLACK, (
            f"a bind waited {self.longest_bind:.3f}s while the event loop ran"
        )
        results = self.server_results()
        for step, devices in self.allocations:
            for device in devices:
                withdrawn_at = self.withdrawn.get(device)
                assert withdrawn_at is None or step <= withdrawn_at, (
                    f"{device} allocated at step {step}, after it was withdrawn at {withdrawn_at}"
                )
        claims = {c["metadata"]["name"]: c for c in self.server_claims()}
        for obj in claims.values():
            status = obj.get("status") or {}
            if status.get("allocation"):
                assert status.get("reservedFor"), f"claim {obj['metadata']['name']} allocated for nobody"
        for obj in self.store.list(POD, None)[0]:
            node_name = obj["spec"].get("nodeName")
            if not node_name:
                continue
            for ref in obj["spec"]["resourceClaims"]:
                claim_obj = claims.get(ref["resourceClaimName"])
                if claim_obj is None:
                    continue  # gone, which the finalizer allows only once no pod reserves it
                status = claim_obj.get("status") or {}
                assert obj["metadata"]["uid"] in {r["uid"] for r in status.get("reservedFor") or ()}
                assert {r["pool"] for r in status["allocation"]["devices"]["results"]} == {node_name}
        exclusive = {self.device_id(r) for r in results if not r.get("shareID")}
        shares = {(self.device_id(r), r["shareID"]) for r in results if r.get("shareID")}
        assert self.state.inuse.devices == exclusive, "the cache disagrees with the server"
        assert self.state.inuse.shared == shares, "the cache disagrees with the server on shares"
        record("capacity shares checked", len(shares))
        record("counter-consuming devices checked", sum(d[2] in CONSUMES for d in exclusive))


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    shape=cluster_shape,
    fault_knobs=faults_shape,
    batches=st.lists(st.lists(operation, min_size=1, max_size=5), min_size=1, max_size=6),
)
def test_no_device_is_handed_out_twice_under_any_interleaving(
    shape: dict[str, Any], fault_knobs: dict[str, Any], batches: list[list[tuple[Any, ...]]]
) -> None:
    harness = Harness(shape, fault_knobs)

    async def scenario() -> None:
        await harness.start()
        try:
            for step, batch in enumerate(batches):
                harness.step = step
                await asyncio.gather(*(harness.run(op) for op in batch))
                await harness.check_settled()
        finally:
            await harness.stop()

    asyncio.run(scenario())
    record("property examples")
    record("operations", harness.operations)
    record("interleavings (concurrent batches)", sum(len(b) > 1 for b in batches))
    record("faults injected", harness.server.faults.fired)


Binding = asyncio.Task[str]


class SharedClaim:
    """p0 and p1 both use claim s0 on node-0: p0's bind allocates and reserves it, p1's (once p0's
    write is cached) only reserves it; each Binding is held until the test lets it go."""

    def __init__(self) -> None:
        self.harness = Harness(
            {"plain": [1], "claims": [1], "shares": [1], "pods": [1, 1]},
            {"fail": 0.0, "lost_reply": 0.0, "slow": 0.0, "late": 0.0, "time_out": 0.0, "seed": 0},
        )
        # Deadlines no loaded machine reaches (within the in-flight TTL): the test holds the
        # Bindings, they do not time out.
        self.harness.ctx.config = replace(self.harness.ctx.config, bind_timeout_s=INFLIGHT_TTL / 3)
        self.faults = self.harness.server.faults
        self.memory = self.harness.ctx.memory

    def status(self) -> dict[str, Any]:
        return self.harness.store.get(CLAIM, "default", "s0").get("status") or {}

    def reserved(self) -> list[str]:
        return [r["name"] for r in self.status().get("reservedFor") or ()]

    def abandoned(self) -> bool:
        return self.memory.abandoned(self.harness.store.get(CLAIM, "default", "s0")["metadata"]["uid"])

    async def both_reserved(self) -> tuple[threading.Event, threading.Event, Binding, Binding]:
        """Both binds under way, s0 reserved for both: p0's and p1's held Bindings, their binds."""
        faults, state = self.faults, self.harness.state
        first, second = faults.hold("create", "pods", "binding"), faults.hold("create", "pods", "binding")
        p0 = asyncio.create_task(self._bind("p0"))

        def cached_reservations() -> list[str]:
            claim_obj = state.claim("default", "s0")
            return [] if claim_obj is None else [r.name for r in claim_obj.reserved_for]

        await until(lambda: cached_reservations() == ["p0"], "p0's claim write")
        p1 = asyncio.create_task(self._bind("p1"))
        await until(lambda: self.reserved() == ["p0", "p1"] or p1.done(), "p1's reservation")
        assert not p1.done(), p1.result()
        return first, second, p0, p1

    def refuse_next_binding(self) -> None:
        self.faults.fail("create", "pods", 403, subresource="binding")

    async def _bind(self, name: str) -> str:
        info = self.harness.state.pod("default", name)
        assert info is not None
        return await bind_pod(self.harness.ctx, "default", name, info.uid, "node-0")


def test_two_pods_rolling_back_a_shared_claim_leave_it_allocated_for_nobody_never() -> None:
    """The interleaving behind "claim s2 allocated for nobody" (seen once under load): p0's bind
    allocates s0 and reserves it, p1's bind (s0 already allocated) only reserves it, then both
    Bindings are refused, p0's first. p0's rollback must keep the allocation (p1 still holds
    it); p1's, the last one out, must clear it: a claim allocated for nobody keeps its devices
    from every other claim although no pod will run with them."""
    shared = SharedClaim()

    async def scenario() -> None:
        await shared.harness.start()
        try:
            first, second, p0, p1 = await shared.both_reserved()
            shared.refuse_next_binding()
            first.set()
            assert "403" in await p0
            assert shared.reserved() == ["p1"] and shared.status().get("allocation"), "p1 still uses s0"
            shared.refuse_next_binding()
            second.set()
            assert "403" in await p1
            assert not shared.status(), f"s0 left as {shared.status()}"
            assert not shared.abandoned(), "cleared: no rollback has it left to clear"
            await shared.harness.check_settled()
        finally:
            await shared.harness.stop()

    asyncio.run(scenario())


@pytest.mark.parametrize("p1_bound", ["before p0's rollback", "during p0's rollback"])
def test_an_allocation_left_by_a_rollback_is_the_bound_pods_that_holds_it(p1_bound: str) -> None:
    """The other side of that rule: when p1, which only reserved s0, is bound, the allocation
    p0's rollback had to leave is p1's, and no later rollback is left to clear it (the claim
    controller does when the last pod using it ends), whichever of p1's commit and p0's rollback
    comes first."""
    shared = SharedClaim()

    async def scenario() -> None:
        await shared.harness.start()
        try:
            first, second, p0, p1 = await shared.both_reserved()
            if p1_bound == "before p0's rollback":
                second.set()
                assert await p1 == ""
                shared.refuse_next_binding()  # the held one, p0's
                first.set()
                assert "403" in await p0
            else:
                shared.refuse_next_binding()
                first.set()
                assert "403" in await p0
                assert shared.abandoned(), "p1 not bound yet: s0 is left to it"
                second.set()
                assert await p1 == ""
            assert shared.reserved() == ["p1"] and shared.status().get("allocation")
            assert not shared.abandoned()
            await shared.harness.check_settled()
        finally:
            await shared.harness.stop()

    asyncio.run(scenario())


def test_the_binder_count_ends_for_a_call_cancelled_before_a_thread_took_it() -> None:
    """The flake "timed out waiting for the binder's timed-out calls to finish" (seen under
    load): a bind deadline that passes while a call waits for a thread cancels it; it never
    runs, and the count must not wait for it."""
    server = ApiServer().start()
    binder = CountingBinder(RawClient(server.api_client(), request_timeout=5.0))
    gate = threading.Event()

    async def scenario() -> None:
        busy = [asyncio.ensure_future(binder._run(gate.wait)) for _ in range(16)]  # its 16 threads taken
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(binder._run(time.sleep, 0), 0.01)  # queued past its deadline
        gate.set()
        await asyncio.gather(*busy)
        await until(lambda: binder.running == 0, "the count to end", timeout=5.0)

    try:
        asyncio.run(scenario())
    finally:
        binder.close()
        server.stop()
