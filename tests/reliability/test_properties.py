"""Random clusters and random interleavings of everything that can happen around a bind.

Extends tests/scheduling/test_invariants.py (local store, writes visible at once) with what only
a real API server does: the watch echo arrives later than the bind's reply (sometimes after
newer writes), writes fail, replies get lost or arrive after the bind deadline, claims and pods
are deleted mid-bind, drivers withdraw devices and bump the pool generation. The binder is the
in-memory FakeApi; filter and bind are the production code, called directly (no HTTP) so that
many interleavings fit in the budget.

Checked after every batch of concurrent operations (and the no-double-allocation invariant
after every single operation): no device, and no shared counter beyond its capacity, is held by
two claims; every allocation only names devices the driver published when it was written; a
bound pod holds all its claims on its node; no claim is left allocated without a consumer; no
in-flight entry outlives its bind; the cache's in-use set equals what the server holds.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.scheduling.bind import bind_pod
from extender.scheduling.filter import filter_nodes
from tests.reliability.fake_api import FakeApi, Faults
from tests.reliability.figures import record
from tests.scheduling.cluster import DRIVER, Service, claim, claim_spec, device_class, node, pod, request

BIND_TIMEOUT = 0.02
UNITS = 2  # shared counter capacity per node: "big" takes both, each "half" one
SHARED_MEM = 4  # consumable capacity of each node's multi-allocatable device "shared"
EXCLUSIVE = "exclusive"


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
        "seed": st.integers(0, 2**32 - 1),
    }
)


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
        self.svc = Service(objs, bind_timeout_s=BIND_TIMEOUT, inflight_ttl_s=BIND_TIMEOUT * 3)
        rng = random.Random(fault_knobs["seed"])
        self.faults = Faults(
            rng,
            fail=fault_knobs["fail"],
            lost_reply=fault_knobs["lost_reply"],
            slow=fault_knobs["slow"],
            late=fault_knobs["late"],
            slow_seconds=BIND_TIMEOUT * 1.5,
        )
        self.api = FakeApi(self.svc.state, self.faults)
        self.api.seed()
        self.svc.ctx.binder = self.api
        self.rng = rng
        self.generation = dict.fromkeys(self.nodes, 1)
        self.withdrawn: dict[tuple[str, str, str], int] = {}  # device -> step it was withdrawn at
        self.operations = 0
        self.longest_bind = 0.0

    @property
    def ctx(self) -> Any:
        return self.svc.ctx

    async def bind(self, name: str, node_name: str) -> None:
        info = self.svc.state.pod("default", name)
        if info is None:
            return
        started = time.monotonic()
        await bind_pod(self.ctx, "default", name, info.uid, node_name)  # the pod is known: no await since
        self.longest_bind = max(self.longest_bind, time.monotonic() - started)

    async def run(self, op: tuple[Any, ...]) -> None:
        kind, *args = op
        self.operations += 1
        # Some operations start after the bind deadline of the others: they meet their rollbacks
        # and their late-landing writes instead of their in-flight commits.
        await asyncio.sleep(self.rng.choice((0, 0, 0, BIND_TIMEOUT * 1.25)))
        if kind == "schedule":
            info = self.svc.state.pod("default", f"p{args[0]}")
            if info is not None:
                passed = filter_nodes(self.ctx, info, self.nodes).passed
                if passed:
                    await self.bind(info.name, self.rng.choice(passed))
        elif kind == "bind":
            await self.bind(f"p{args[0]}", self.nodes[args[1] % len(self.nodes)])
        elif kind == "delete-pod":
            self.api.delete_pod("default", f"p{args[0]}")
        elif kind == "delete-claim":
            self.api.delete_claim("default", f"c{args[0]}")
        elif kind == "withdraw-device":
            self.withdraw(self.nodes[args[0] % len(self.nodes)], args[1])
        else:
            await asyncio.sleep(self.rng.choice((0, 0.001)))
            self.api.deliver(args[0])
        self.check_no_double_allocation()

    def withdraw(self, node_name: str, index: int) -> None:
        """The driver republishes the node's pool without one device, at the next generation."""
        raw = next(
            dict(r)
            for r in self.svc.state.items("ResourceSlice")
            if r["metadata"]["name"] == f"{node_name}-devs"
        )
        devices = list(raw["spec"]["devices"])
        if not devices:
            return
        gone = devices.pop(index % len(devices))
        self.generation[node_name] += 1
        gen = self.generation[node_name]
        updated = {
            **raw,
            "spec": {**raw["spec"], "devices": devices, "pool": {**raw["spec"]["pool"], "generation": gen}},
        }
        self.svc.state.apply("ResourceSlice", updated)
        self.svc.state.apply("ResourceSlice", counters_slice(node_name, gen))
        self.withdrawn[(DRIVER, node_name, gone["name"])] = self.api.step

    # ----- invariants ---------------------------------------------------------------------

    def server_results(self) -> list[dict[str, Any]]:
        out = []
        for obj in self.api.claims.values():
            allocation = (obj.get("status") or {}).get("allocation")
            if allocation:
                out += allocation["devices"]["results"]
        return out

    @staticmethod
    def device_id(result: dict[str, Any]) -> tuple[str, str, str]:
        return (result["driver"], result["pool"], result["device"])

    def check_no_double_allocation(self) -> None:
        results = self.server_results()
        exclusive = [self.device_id(r) for r in results if not r.get("shareID")]
        doubles = [d for d, n in Counter(exclusive).items() if n > 1]
        # As upstream: a device the driver no longer publishes consumes no counters any more.
        published = [d for d in exclusive if self.svc.state.slices.device(d) is not None]
        units: Counter[str] = Counter()
        for device_id in published:
            units[device_id[1]] += CONSUMES.get(device_id[2], 0)
        over = {pool: n for pool, n in units.items() if n > UNITS}
        mem: Counter[tuple[str, str, str]] = Counter()
        for r in results:
            if r.get("shareID"):
                assert r["device"] == "shared", r
                mem[self.device_id(r)] += int(r["consumedCapacity"]["mem"])
        beyond = {d: n for d, n in mem.items() if n > SHARED_MEM and self.svc.state.slices.device(d)}
        record("double allocations", len(doubles) + len(over) + len(beyond))
        record("invariant checks")
        assert not doubles, f"devices held by two claims: {doubles}"
        assert not over, f"shared counters over capacity: {over}"
        assert not beyond, f"consumable capacity over its limit: {beyond}"

    async def check_settled(self) -> None:
        """After a batch: every bind has returned; deliver the watch backlog and compare."""
        inflight = self.svc.state.inuse.inflight
        if inflight:
            # Only writes that timed out leave entries behind (they may still land), bounded by the TTL.
            now, ttl = time.monotonic(), self.svc.config.inflight_ttl_s
            assert all(e.expires_at <= now + ttl for e in inflight.values())
            await asyncio.sleep(max(0.0, max(e.expires_at for e in inflight.values()) - now))
            self.svc.state.expire_inflight()
            record("in-flight entries expired by their TTL")
        assert not inflight, "in-flight entries outlived their TTL"
        assert self.longest_bind < BIND_TIMEOUT * 3 + 0.5, f"a bind took {self.longest_bind:.3f}s"
        self.api.deliver()
        results = self.server_results()
        for write in self.api.allocations:
            for device in write.devices:
                withdrawn_at = self.withdrawn.get(device)
                assert withdrawn_at is None or write.step <= withdrawn_at, (
                    f"{device} allocated at step {write.step}, after it was withdrawn at {withdrawn_at}"
                )
        for obj in self.api.claims.values():
            status = obj.get("status") or {}
            if status.get("allocation"):
                assert status.get("reservedFor"), f"claim {obj['metadata']['name']} allocated for nobody"
        for obj in self.api.pods.values():
            node_name = obj["spec"].get("nodeName")
            if not node_name:
                continue
            for ref in obj["spec"]["resourceClaims"]:
                claim_obj = self.api.claims.get(("default", ref["resourceClaimName"]))
                if claim_obj is None:
                    continue  # deleted by the user after the bind: nothing left to check
                status = claim_obj.get("status") or {}
                assert obj["metadata"]["uid"] in {r["uid"] for r in status.get("reservedFor") or ()}
                assert {r["pool"] for r in status["allocation"]["devices"]["results"]} == {node_name}
        exclusive = {self.device_id(r) for r in results if not r.get("shareID")}
        shares = {(self.device_id(r), r["shareID"]) for r in results if r.get("shareID")}
        assert self.svc.state.inuse.devices == exclusive, "the cache disagrees with the server"
        assert self.svc.state.inuse.shared == shares, "the cache disagrees with the server on shares"
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
        for step, batch in enumerate(batches):
            harness.api.step = step
            await asyncio.gather(*(harness.run(op) for op in batch))
            await harness.check_settled()
        await asyncio.sleep(BIND_TIMEOUT * 2)  # requests still sitting in the server land now
        await harness.check_settled()

    asyncio.run(scenario())
    record("property examples")
    record("operations", harness.operations)
    record("interleavings (concurrent batches)", sum(len(b) > 1 for b in batches))
    record("faults injected", harness.faults.injected)
