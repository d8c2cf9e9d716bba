"""filter → prioritize → bind through the HTTP app on small local clusters."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from extender.local.claim_controller import generated_claim_name
from extender.model.pods import parse_pod
from extender.scheduling.binder import BindingUncertain
from extender.scheduling.claims import PodWaits, resolve
from extender.state import ClusterState
from tests.scheduling.cluster import (
    DRIVER,
    Service,
    allocated_devices,
    bind_call,
    claim,
    claim_spec,
    device_class,
    filter_call,
    gpu,
    gpu_cluster,
    gpus,
    node,
    node_slice,
    pod,
    request,
    schedule,
    template,
)


def test_template_claim_is_allocated_and_reserved_on_bind():
    svc = Service([*gpu_cluster(nodes=2, per_node=1), template("one"), pod("p", templates={"gpu": "one"})])
    p = svc.pod("p")
    node_name, error = svc.run(lambda c: schedule(c, p, svc.node_names()))
    assert error == ""
    claim_name = p["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    written = svc.claims()[claim_name]
    results = written["status"]["allocation"]["devices"]["results"]
    assert [(r["request"], r["pool"]) for r in results] == [("gpu", node_name)]
    assert written["status"]["reservedFor"] == [
        {"resource": "pods", "name": "p", "uid": p["metadata"]["uid"]}
    ]
    assert "resource.kubernetes.io/delete-protection" in written["metadata"]["finalizers"]
    assert written["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0][
        "values"
    ] == [node_name]
    assert svc.state.pod("default", "p").node_name == node_name


def test_full_node_fails_with_reason_and_in_use_devices_make_it_resolvable():
    objs = [*gpu_cluster(nodes=1, per_node=1), template("one")]
    objs += [pod("a", templates={"gpu": "one"}), pod("b", templates={"gpu": "one"})]
    svc = Service(objs)

    async def flow(client):
        assert (await schedule(client, svc.pod("a"), ["node-0"]))[1] == ""
        return await filter_call(client, svc.pod("b"), ["node-0"])

    result = svc.run(flow)
    assert result["NodeNames"] == []
    reason = result["FailedNodes"]["node-0"]
    assert "request gpu" in reason and "in use" in reason
    assert result["FailedAndUnresolvableNodes"] == {}


def test_node_without_devices_is_unresolvable():
    objs = [*gpu_cluster(nodes=1, per_node=1), node("empty"), claim("c"), pod("p", claims={"c": "c"})]
    svc = Service(objs)
    result = svc.run(lambda c: filter_call(c, svc.pod("p"), ["node-0", "empty"]))
    assert result["NodeNames"] == ["node-0"]
    assert "claim default/c, request gpu" in result["FailedAndUnresolvableNodes"]["empty"]


def test_pod_without_claims_and_foreign_pods_pass_untouched():
    objs = [*gpu_cluster(nodes=1, per_node=0), claim("c")]
    objs += [pod("plain"), pod("foreign", claims={"c": "c"}, scheduler="default-scheduler")]
    svc = Service(objs, scheduler_names=("dra-extender-scheduler",))

    async def flow(client):
        return [
            await filter_call(client, svc.pod(name), ["node-0", "unknown"]) for name in ("plain", "foreign")
        ]

    for result in svc.run(flow):
        assert result["NodeNames"] == ["node-0", "unknown"]
        assert result["FailedNodes"] == {} and result["FailedAndUnresolvableNodes"] == {}


def test_locally_every_pod_is_ours_whatever_its_scheduler_name():
    # The embedded cluster has no other allocator: a pod with claims passed untouched would be
    # bound without its devices.
    objs = [*gpu_cluster(nodes=1, per_node=0), node("empty"), claim("c")]
    objs += [pod("foreign", claims={"c": "c"}, scheduler="default-scheduler")]
    svc = Service(objs)
    result = svc.run(lambda c: filter_call(c, svc.pod("foreign"), ["node-0", "empty"]))
    assert result["NodeNames"] == []
    assert "claim default/c" in result["FailedAndUnresolvableNodes"]["empty"]


def test_missing_claim_and_missing_generated_claim_make_the_pod_wait():
    objs = [*gpu_cluster(nodes=1), pod("named", claims={"c": "nope"}), pod("tmpl", templates={"g": "absent"})]
    svc = Service(objs)

    async def flow(client):
        return [await filter_call(client, svc.pod(name), ["node-0"]) for name in ("named", "tmpl")]

    named, tmpl = svc.run(flow)
    assert "ResourceClaim default/nope not found" in named["FailedAndUnresolvableNodes"]["node-0"]
    assert tmpl["FailedAndUnresolvableNodes"]["node-0"].endswith(
        "ResourceClaim not created yet (pod claim g): ResourceClaimTemplate default/absent not found")


def test_claim_of_another_pod_fails_owner_check():
    objs = [*gpu_cluster(nodes=1), template("one"), pod("owner", templates={"gpu": "one"})]
    svc = Service(objs)
    generated = svc.pod("owner")["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    thief = pod("thief", templates={"gpu": "one"})
    thief["metadata"]["uid"] = "thief-uid"
    thief["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": generated}]}
    result = svc.run(lambda c: filter_call(c, thief, ["node-0"]))
    assert "(Pod is not owner)" in result["FailedAndUnresolvableNodes"]["node-0"]


def test_bad_cel_fails_every_node_with_expression_and_class():
    bad = device_class("broken", "device.attributes[")
    objs = [*gpu_cluster(nodes=2), bad, claim("c", claim_spec(request(device_class_name="broken")))]
    objs.append(pod("p", claims={"c": "c"}))
    svc = Service(objs)
    result = svc.run(lambda c: filter_call(c, svc.pod("p"), ["node-0", "node-1"]))
    assert result["Error"] == "" and result["NodeNames"] == []
    reasons = result["FailedAndUnresolvableNodes"]
    assert set(reasons) == {"node-0", "node-1"}
    assert "broken" in reasons["node-0"] and "device.attributes[" in reasons["node-0"]


def test_missing_class_is_named():
    objs = [
        *gpu_cluster(nodes=1),
        claim("c", claim_spec(request(device_class_name="nope"))),
        pod("p", claims={"c": "c"}),
    ]
    svc = Service(objs)
    result = svc.run(lambda c: filter_call(c, svc.pod("p"), ["node-0"]))
    assert "request gpu: device class nope does not exist" in result["FailedAndUnresolvableNodes"]["node-0"]


def test_shared_claim_is_allocated_once_and_reserved_for_both_pods():
    objs = [*gpu_cluster(nodes=2, per_node=1), claim("shared")]
    objs += [pod("a", claims={"g": "shared"}), pod("b", claims={"g": "shared"})]
    svc = Service(objs)

    async def flow(client):
        first = await schedule(client, svc.pod("a"), svc.node_names())
        # The second pod may only go where the claim's devices are.
        second_filter = await filter_call(client, svc.pod("b"), svc.node_names())
        second = await schedule(client, svc.pod("b"), svc.node_names())
        return first, second_filter, second

    (node_a, err_a), second_filter, (node_b, err_b) = svc.run(flow)
    assert err_a == err_b == ""
    assert node_a == node_b and second_filter["NodeNames"] == [node_a]
    shared = svc.claims()["shared"]["status"]
    assert [r["name"] for r in shared["reservedFor"]] == ["a", "b"]
    assert len(shared["allocation"]["devices"]["results"]) == 1


def test_constraint_claim_gets_two_devices_of_one_root():
    spec = claim_spec(
        request("gpus", count=2),
        constraints=[{"requests": ["gpus"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}],
    )
    # node-0: roots alternate so only pci-0 pairs (gpu-0, gpu-2) work; node-1 has one device.
    objs = [device_class(), node("node-0"), node_slice("node-0", gpus(3, roots=2)), node("node-1")]
    objs += [node_slice("node-1", gpus(1)), template("pair", spec), pod("p", templates={"gpus": "pair"})]
    svc = Service(objs)
    chosen, error = svc.run(lambda c: schedule(c, svc.pod("p"), ["node-0", "node-1"]))
    assert (chosen, error) == ("node-0", "")
    assert sorted(d for _, _, d in allocated_devices(svc.claims().values())) == ["gpu-0", "gpu-2"]


def test_prioritize_prefers_earlier_subrequest_then_packing():
    prioritized = {
        "name": "gpu",
        "firstAvailable": [
            {"name": "big", "deviceClassName": "big"},
            {"name": "any", "deviceClassName": DRIVER},
        ],
    }
    big = device_class("big", 'device.capacity["gpu.example.com"].memory.compareTo(quantity("80Gi")) >= 0')
    small_node = node_slice("small", [{"name": "gpu-0", "capacity": {"memory": {"value": "40Gi"}}}])
    big_node = node_slice("large", [{"name": "gpu-0", "capacity": {"memory": {"value": "80Gi"}}}])
    objs = [device_class(), big, node("small"), node("large"), small_node, big_node]
    objs += [claim("c", claim_spec(prioritized)), pod("p", claims={"c": "c"})]
    svc = Service(objs)

    async def flow(client):
        response = await client.post(
            "/prioritize", json={"Pod": svc.pod("p"), "NodeNames": ["small", "large"]}
        )
        return response.json()

    scores = {h["Host"]: h["Score"] for h in svc.run(flow)}
    assert scores == {"large": 10, "small": 4}


def test_binpack_and_spread_policies_order_nodes_oppositely():
    objs = [
        device_class(),
        node("roomy"),
        node("tight"),
        node_slice("roomy", gpus(4)),
        node_slice("tight", gpus(1)),
    ]
    objs += [claim("c"), pod("p", claims={"c": "c"})]
    scores = {}
    for policy in ("binpack", "spread", "none"):
        svc = Service(objs, score_policy=policy)

        async def flow(client, svc=svc):
            body = {"Pod": svc.pod("p"), "NodeNames": ["roomy", "tight"]}
            return (await client.post("/prioritize", json=body)).json()

        scores[policy] = {h["Host"]: h["Score"] for h in svc.run(flow)}
    assert scores["binpack"] == {"tight": 10, "roomy": 4}
    assert scores["spread"] == {"roomy": 10, "tight": 4}
    assert scores["none"] == {"roomy": 0, "tight": 0}


class SlowBinder:
    """The local binder with network-like latency, so that binds really overlap."""

    def __init__(self, inner, delay):
        self.inner, self.delay = inner, delay

    async def write_claim(self, claim, allocation, pod_ref, deadline=None):
        await asyncio.sleep(self.delay)
        return await self.inner.write_claim(claim, allocation, pod_ref)

    async def bind_pod(self, pod_ref, node_name, deadline=None):
        await asyncio.sleep(self.delay)
        await self.inner.bind_pod(pod_ref, node_name)

    async def release_claim(self, claim, pod_ref, deallocate):
        await self.inner.release_claim(claim, pod_ref, deallocate)


@pytest.mark.parametrize("delay", [0.0, 0.002])
def test_concurrent_binds_never_allocate_a_device_twice(delay):
    """Many pods filter first, then bind concurrently on few devices: stale results must not win."""
    pods = [pod(f"p{i}", templates={"gpu": "one"}) for i in range(12)]
    svc = Service([*gpu_cluster(nodes=2, per_node=2), template("one"), *pods])
    svc.ctx.binder = SlowBinder(svc.ctx.binder, delay)

    async def flow(client):
        names = svc.node_names()
        filters = [await filter_call(client, svc.pod(f"p{i}"), names) for i in range(12)]
        assert all(f["NodeNames"] for f in filters)  # every pod fits when judged alone
        binds = [bind_call(client, svc.pod(f"p{i}"), filters[i]["NodeNames"][i % 2]) for i in range(12)]
        return await asyncio.gather(*binds)

    errors = svc.run(flow)
    assert sum(1 for e in errors if e == "") == 4
    assert all("no longer fits" in e for e in errors if e)
    devices = allocated_devices(svc.claims().values())
    assert len(devices) == 4 and not [d for d, n in Counter(devices).items() if n > 1]
    assert not svc.state.inuse.inflight


def test_bind_is_idempotent_and_refuses_another_node():
    svc = Service([*gpu_cluster(nodes=2, per_node=1), template("one"), pod("p", templates={"gpu": "one"})])

    async def flow(client):
        chosen, error = await schedule(client, svc.pod("p"), svc.node_names())
        assert error == ""
        again = await bind_call(client, svc.pod("p"), chosen)
        other = await bind_call(client, svc.pod("p"), next(n for n in svc.node_names() if n != chosen))
        return again, other

    again, other = svc.run(flow)
    assert again == ""
    assert "already bound" in other
    assert len(allocated_devices(svc.claims().values())) == 1


def test_bind_without_filter_recomputes_and_fails_cleanly_when_nothing_fits():
    objs = [*gpu_cluster(nodes=1, per_node=1), template("one")]
    objs += [pod("a", templates={"gpu": "one"}), pod("b", templates={"gpu": "one"})]
    svc = Service(objs)

    async def flow(client):
        return await bind_call(client, svc.pod("a"), "node-0"), await bind_call(
            client, svc.pod("b"), "node-0"
        )

    first, second = svc.run(flow)
    assert first == ""
    assert "no longer fits on node node-0" in second
    assert svc.state.pod("default", "b").node_name == ""


class FailingPodBinder:
    """Writes claims through the local binder but fails the pod binding with ``error``."""

    def __init__(self, inner, error=None):
        self.inner = inner
        self.error = error or RuntimeError("API server said no")
        self.released = []

    async def write_claim(self, claim, allocation, pod_ref, deadline=None):
        return await self.inner.write_claim(claim, allocation, pod_ref)

    async def bind_pod(self, pod_ref, node_name, deadline=None):
        raise self.error

    async def release_claim(self, claim, pod_ref, deallocate):
        self.released.append((claim.name, deallocate))
        await self.inner.release_claim(claim, pod_ref, deallocate)


def test_failed_binding_rolls_back_claim_writes():
    svc = Service([*gpu_cluster(nodes=1, per_node=1), template("one"), pod("p", templates={"gpu": "one"})])
    binder = FailingPodBinder(svc.ctx.binder)
    svc.ctx.binder = binder
    error = svc.run(lambda c: bind_call(c, svc.pod("p"), "node-0"))
    assert "API server said no" in error
    assert len(binder.released) == 1 and binder.released[0][1] is True
    (written,) = svc.claims().values()
    assert "allocation" not in written.get("status", {}) and "reservedFor" not in written.get("status", {})
    assert not svc.state.inuse.devices and not svc.state.inuse.inflight


def test_a_binding_of_unknown_fate_keeps_the_claims_reserved_for_the_retry():
    svc = Service([*gpu_cluster(nodes=1, per_node=1), template("one"), pod("p", templates={"gpu": "one"})])
    binder = FailingPodBinder(svc.ctx.binder, BindingUncertain("no answer, and re-reading the pod failed"))
    svc.ctx.binder = binder
    error = svc.run(lambda c: bind_call(c, svc.pod("p"), "node-0"))
    assert "re-reading the pod failed; its claims stay reserved for the retry" in error
    assert binder.released == []
    (written,) = svc.claims().values()
    assert written["status"]["allocation"] and written["status"]["reservedFor"][0]["name"] == "p"


def test_preempt_keeps_only_nodes_where_victims_free_devices():
    objs = [*gpu_cluster(nodes=2, per_node=1), template("one")]
    objs += [pod(n, templates={"gpu": "one"}) for n in ("v0", "v1", "newcomer")]
    svc = Service(objs)

    async def flow(client):
        assert await bind_call(client, svc.pod("v0"), "node-0") == ""
        assert await bind_call(client, svc.pod("v1"), "node-1") == ""
        body = {
            "Pod": svc.pod("newcomer"),
            "NodeNameToMetaVictims": {
                "node-0": {"Pods": [{"UID": svc.pod("v0")["metadata"]["uid"]}], "NumPDBViolations": 0},
                "node-1": {"Pods": [{"UID": "someone-else"}], "NumPDBViolations": 1},
            },
        }
        return (await client.post("/preempt", json=body)).json()

    result = svc.run(flow)
    assert list(result["NodeNameToMetaVictims"]) == ["node-0"]
    assert result["NodeNameToMetaVictims"]["node-0"]["Pods"] == [{"UID": svc.pod("v0")["metadata"]["uid"]}]


def test_abandoned_inflight_entries_expire():
    from extender.model import parse_allocation
    from extender.state import InFlight

    svc = Service([*gpu_cluster(nodes=1, per_node=1), template("one"), pod("p", templates={"gpu": "one"})])
    allocation = parse_allocation(
        {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "node-0", "device": "gpu-0"}]}}
    )
    svc.state.add_inflight(InFlight("ghost", "ghost-pod", allocation, expires_at=0.0))
    assert (DRIVER, "node-0", "gpu-0") in svc.state.inuse.devices
    chosen, error = svc.run(lambda c: schedule(c, svc.pod("p"), ["node-0"]))
    assert (chosen, error) == ("node-0", "")


def test_interleaved_filter_and_bind_of_many_pods_stay_consistent():
    pods = [pod(f"p{i}", templates={"gpu": "one"}) for i in range(20)]
    svc = Service([*gpu_cluster(nodes=2, per_node=3), template("one"), *pods])
    svc.ctx.binder = SlowBinder(svc.ctx.binder, 0.001)

    async def flow(client):
        return await asyncio.gather(
            *(schedule(client, svc.pod(f"p{i}"), svc.node_names()) for i in range(20))
        )

    outcomes = svc.run(flow)
    bound = [node_name for node_name, error in outcomes if not error]
    assert len(bound) == 6
    devices = allocated_devices(svc.claims().values())
    assert len(devices) == len(set(devices)) == 6
    reserved = [
        c["status"]["reservedFor"][0]["name"]
        for c in svc.claims().values()
        if c.get("status", {}).get("allocation")
    ]
    assert sorted(reserved) == sorted(f"p{i}" for i, (n, e) in enumerate(outcomes) if not e)


def test_shared_claim_refuses_a_257th_consumer():
    objs = [*gpu_cluster(nodes=1, per_node=1), claim("shared"), pod("extra", claims={"g": "shared"})]
    svc = Service(objs)
    raw = dict(svc.state.claim("default", "shared").raw)
    raw["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": DRIVER, "pool": "node-0", "device": "gpu-0"}]
            }
        },
        "reservedFor": [{"resource": "pods", "name": f"p{i}", "uid": f"u{i}"} for i in range(256)],
    }
    svc.cluster.write("ResourceClaim", raw)
    result = svc.run(lambda c: filter_call(c, svc.pod("extra"), ["node-0"]))
    assert "256 consumers" in result["FailedAndUnresolvableNodes"]["node-0"]


def test_prioritized_list_needs_its_feature_gate():
    from extender.config import parse_feature_gates

    spec = claim_spec({"name": "gpu", "firstAvailable": [{"name": "a", "deviceClassName": DRIVER}]})
    objs = [*gpu_cluster(nodes=1), claim("c", spec), pod("p", claims={"c": "c"})]
    svc = Service(objs, feature_gates=parse_feature_gates("DRAPrioritizedList=false"))
    result = svc.run(lambda c: filter_call(c, svc.pod("p"), ["node-0"]))
    assert "DRAPrioritizedList feature is disabled" in result["FailedAndUnresolvableNodes"]["node-0"]


def test_claim_being_deleted_makes_the_pod_wait():
    objs = [*gpu_cluster(nodes=1), claim("c"), pod("p", claims={"c": "c"})]
    svc = Service(objs)
    raw = dict(svc.state.claim("default", "c").raw)
    raw["metadata"] = {**raw["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}
    svc.cluster.write("ResourceClaim", raw)
    result = svc.run(lambda c: filter_call(c, svc.pod("p"), ["node-0"]))
    assert 'resourceclaim "c" is being deleted' in result["FailedAndUnresolvableNodes"]["node-0"]


def test_pod_without_claims_is_bound_as_is():
    svc = Service([*gpu_cluster(nodes=1), pod("plain")])
    assert svc.run(lambda c: bind_call(c, svc.pod("plain"), "node-0")) == ""
    assert svc.state.pod("default", "plain").node_name == "node-0"
    assert not svc.state.inuse.devices


def _gated_cluster():
    device = {**gpu("gpu-0"), "bindingConditions": ["attached"], "bindingFailureConditions": ["broken"]}
    return [
        device_class(),
        node("node-0"),
        node_slice("node-0", [device]),
        claim("c"),
        pod("p", claims={"c": "c"}),
    ]


def _set_device_condition(svc, condition):
    raw = dict(svc.state.claim("default", "c").raw)
    device = {"driver": DRIVER, "pool": "node-0", "device": "gpu-0"}
    raw["status"] = {
        **raw["status"],
        "devices": [{**device, "conditions": [{"type": condition, "status": "True"}]}],
    }
    svc.cluster.write("ResourceClaim", raw)


def test_binding_conditions_hold_the_pod_until_the_device_is_ready():
    svc = Service(_gated_cluster())
    first = svc.run(lambda c: bind_call(c, svc.pod("p"), "node-0"))
    assert "waiting for binding conditions" in first and "attached" in first
    assert svc.ctx.metrics.bind_outcomes.labels("waiting")._value.get() == 1
    status = svc.claims()["c"]["status"]
    assert status["allocation"]["devices"]["results"][0]["bindingConditions"] == ["attached"]
    assert status["allocation"]["allocationTimestamp"] and status["reservedFor"][0]["name"] == "p"
    assert svc.state.pod("default", "p").node_name == ""
    _set_device_condition(svc, "attached")
    assert svc.run(lambda c: bind_call(c, svc.pod("p"), "node-0")) == ""
    assert svc.state.pod("default", "p").node_name == "node-0"


def test_binding_failure_condition_deallocates_for_a_fresh_attempt():
    svc = Service(_gated_cluster())
    assert "waiting" in svc.run(lambda c: bind_call(c, svc.pod("p"), "node-0"))
    _set_device_condition(svc, "broken")
    error = svc.run(lambda c: bind_call(c, svc.pod("p"), "node-0"))
    assert "binding failed" in error and "broken" in error
    status = svc.claims()["c"].get("status", {})
    assert "allocation" not in status and "reservedFor" not in status
    assert not svc.state.inuse.devices


def test_binding_failure_of_a_shared_claim_deallocates_only_with_its_last_pod():
    """A failed binding releases everything reserved for the pod, but clears an allocation only
    when no other pod holds the claim: q, still waiting with it, finds the failure at its own retry."""
    svc = Service([*_gated_cluster(), pod("q", claims={"c": "c"})])
    assert "waiting" in svc.run(lambda c: bind_call(c, svc.pod("p"), "node-0"))
    assert "waiting" in svc.run(lambda c: bind_call(c, svc.pod("q"), "node-0"))
    _set_device_condition(svc, "broken")
    assert "binding failed" in svc.run(lambda c: bind_call(c, svc.pod("p"), "node-0"))
    status = svc.claims()["c"]["status"]
    assert [r["name"] for r in status["reservedFor"]] == ["q"] and status["allocation"]
    assert "binding failed" in svc.run(lambda c: bind_call(c, svc.pod("q"), "node-0"))
    status = svc.claims()["c"].get("status", {})
    assert "allocation" not in status and "reservedFor" not in status
    assert not svc.state.inuse.devices


def test_scoring_steers_the_next_pod_away_from_a_node_the_previous_one_will_fill():
    objs = [
        device_class(),
        node("last-one"),
        node("roomy"),
        node_slice("last-one", gpus(1)),
        node_slice("roomy", gpus(3)),
    ]
    objs += [template("one"), pod("a", templates={"gpu": "one"}), pod("b", templates={"gpu": "one"})]
    svc = Service(objs)
    names = ["last-one", "roomy"]

    async def prioritize(client, name):
        response = await client.post("/prioritize", json={"Pod": svc.pod(name), "NodeNames": names})
        return {h["Host"]: h["Score"] for h in response.json()}

    async def flow(client):
        for name in ("a", "b"):
            assert (await filter_call(client, svc.pod(name), names))["NodeNames"] == names
        first = await prioritize(client, "a")
        second = await prioritize(client, "b")  # a's bind has not arrived yet
        assert await bind_call(client, svc.pod("a"), "last-one") == ""
        return first, second, await bind_call(client, svc.pod("b"), max(second, key=second.get))

    first, second, error = svc.run(flow)
    assert first == {"last-one": 10, "roomy": 4}  # binpack: fill the fuller node
    assert second == {"last-one": 4, "roomy": 10}  # ... but not twice with its last device
    assert error == "" and not svc.ctx.memory.placements()


def test_pod_sharing_a_claim_waits_while_another_pod_is_placed_with_it():
    objs = [*gpu_cluster(nodes=2, per_node=1), claim("shared")]
    objs += [pod("a", claims={"g": "shared"}), pod("b", claims={"g": "shared"})]
    svc = Service(objs)
    names = svc.node_names()

    async def flow(client):
        await client.post("/prioritize", json={"Pod": svc.pod("a"), "NodeNames": names})
        waiting = await filter_call(client, svc.pod("b"), names)
        chosen = svc.ctx.memory.placements()[svc.pod("a")["metadata"]["uid"]].node
        assert await bind_call(client, svc.pod("a"), chosen) == ""
        return waiting, chosen, await filter_call(client, svc.pod("b"), names)

    waiting, chosen, after = svc.run(flow)
    assert waiting["NodeNames"] == []
    assert all(
        "in the process of being allocated" in r for r in waiting["FailedAndUnresolvableNodes"].values()
    )
    assert after["NodeNames"] == [chosen]


def test_a_sole_feasible_node_counts_as_the_expected_placement():
    objs = [*gpu_cluster(nodes=1, per_node=1), claim("shared")]
    objs += [pod("a", claims={"g": "shared"}), pod("b", claims={"g": "shared"})]
    svc = Service(objs)

    async def flow(client):
        first = await filter_call(client, svc.pod("a"), ["node-0"])  # no prioritize follows
        return first, await filter_call(client, svc.pod("b"), ["node-0"])

    first, second = svc.run(flow)
    assert first["NodeNames"] == ["node-0"]
    assert "in the process of being allocated" in second["FailedAndUnresolvableNodes"]["node-0"]


def test_a_bind_of_an_unknown_pod_or_a_stale_uid_is_refused_in_a_200_reply():
    # kube-scheduler drops the body of any non-200 extender answer: only an Error in a 200 reply
    # reaches its log and the pod's events.
    svc = Service([*gpu_cluster(nodes=1, per_node=1), claim("c"), pod("p", claims={"c": "c"})])
    ghost = {"metadata": {"name": "ghost", "namespace": "default", "uid": "ghost-uid"}}
    stale = {"metadata": {**svc.pod("p")["metadata"], "uid": "not-it"}}

    async def flow(client):
        return await bind_call(client, ghost, "node-0"), await bind_call(client, stale, "node-0")

    unknown, wrong_uid = svc.run(flow)
    assert unknown == "pod default/ghost is not known to the extender"
    assert wrong_uid == f"pod default/p has UID {svc.pod('p')['metadata']['uid']}, not not-it"
    assert svc.state.pod("default", "p").node_name == ""
    assert "status" not in svc.claims()["c"]


def test_a_bind_of_a_pod_of_another_scheduler_is_refused():
    objs = [*gpu_cluster(nodes=1, per_node=1), claim("c")]
    objs += [pod("foreign", claims={"c": "c"}, scheduler="default-scheduler")]
    objs += [pod("plain", scheduler="default-scheduler")]
    svc = Service(objs, scheduler_names=("dra-extender-scheduler", "dra-scheduler"))

    async def flow(client):
        return [await bind_call(client, svc.pod(name), "node-0") for name in ("foreign", "plain")]

    for name, error in zip(("foreign", "plain"), svc.run(flow), strict=True):
        assert error == (
            f"pod default/{name} has schedulerName default-scheduler; this extender binds only pods "
            "of dra-extender-scheduler, dra-scheduler"
        )
        assert svc.state.pod("default", name).node_name == ""
    assert "status" not in svc.claims()["c"]


def _pod_with_one_claim_twice(how):
    """Pod "p" whose two spec.resourceClaims entries resolve to one claim."""
    if how == "direct twice":
        return [claim("c"), pod("p", claims={"a": "c", "b": "c"})], "c"
    # The claim the resourceclaim controller generates for entry "t", also named directly.
    uid = "p-uid"
    generated = generated_claim_name("p", uid, "t")
    obj = pod("p", templates={"t": "one"}, claims={"d": generated})
    obj["metadata"]["uid"] = uid
    return [template("one"), obj], generated


@pytest.mark.parametrize("how", ["direct twice", "template and direct"])
@pytest.mark.parametrize("per_node", [1, 2])
def test_a_claim_referenced_twice_by_a_pod_is_allocated_once_and_reserved_once(how, per_node):
    objs, claim_name = _pod_with_one_claim_twice(how)
    svc = Service([*gpu_cluster(nodes=2, per_node=per_node), *objs])
    node_name, error = svc.run(lambda c: schedule(c, svc.pod("p"), svc.node_names()))
    assert error == "" and node_name is not None
    written = svc.claims()[claim_name]["status"]
    assert [r["name"] for r in written["reservedFor"]] == ["p"]
    assert [r["pool"] for r in written["allocation"]["devices"]["results"]] == [node_name]
    assert svc.state.pod("default", "p").node_name == node_name
    assert allocated_devices(svc.claims().values()) == [(DRIVER, node_name, "gpu-0")]
    assert not svc.state.inuse.inflight


def test_a_pod_waiting_for_its_generated_claim_names_the_template_only_when_it_is_missing():
    # Without the claim controller: the pod's claim status is not written either way.
    state = ClusterState()
    state.apply("ResourceClaimTemplate", template("here", namespace="team"))
    for name, why in [("here", ""), ("gone", ": ResourceClaimTemplate team/gone not found")]:
        obj = pod("p", templates={"g": name})
        obj["metadata"]["namespace"] = "team"
        with pytest.raises(PodWaits) as waits:
            resolve(state, parse_pod(obj))
        assert str(waits.value) == f'pod "team/p": ResourceClaim not created yet (pod claim g){why}', name
