"""Answers shared between nodes alike (``ShapeMemo``) are the answers the search gives.

The randomized clusters run every node through one allocator with the memo and one without,
in the same order, then through a second allocator with the memo that reads the first one's
gathered pools (a later request), and every outcome must be the same: the results' API form (share IDs,
fresh per allocation, are compared as present or not), "does not fit" with its reason, or the
error's class and text. The clusters mix what the key is about: nodes copied from a template
and nodes alike but for one device (one attribute, taint, binding condition or counter
amount), all gates on or some off, pools named after nodes or not, slices by nodeName,
nodeSelector, allNodes and per-device node selection, taints, shared counters, consumable
capacity, binding conditions, admin access, devices already allocated, constraints,
firstAvailable and All mode, and node selectors of two terms, which a result cannot record.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from extender.allocator import (
    AllocatedState,
    Allocator,
    Failure,
    Features,
    SliceList,
)
from extender.allocator.alike import AlikeResults, GatheredPools, takes_of
from extender.cel.environment import Environment
from extender.model import DeviceClass, Node, ResourceClaim, ResourceSlice
from tests.allocator.builders import (
    ALL_GATES,
    claim,
    device_class,
    node,
    parse_node,
    parse_resource_slice,
    picked,
    request,
    resource_slice,
)

DRIVER = "driver-a"
Outcome = tuple[Any, ...]


GATES = [*ALL_GATES, "DRADeviceCompatibilityGroups"]


def _allocator(
    slices: list[ResourceSlice],
    classes: list[DeviceClass],
    state: AllocatedState,
    share: bool,
    cel: Environment,
    deadline: float | None = None,
    gates: list[str] = GATES,
) -> Allocator:
    return Allocator(
        Features.from_gate_names(gates),
        state,
        {c.name: c for c in classes},
        SliceList(slices),
        cel,
        deadline,
        share_shapes=share,
    )


def _api(value: Any) -> Any:
    """The API form with each share ID replaced by a marker: both runs draw fresh ones."""
    if isinstance(value, dict):
        return {k: ("<share>" if k == "shareID" else _api(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_api(v) for v in value]
    return value


def _outcome(alloc: Allocator, target: Node, claims: list[ResourceClaim]) -> Outcome:
    results = alloc.allocate(target, claims)
    if isinstance(results, Failure):
        if results.kind == "nofit":
            return ("none", results.reason)
        return ("error", results.kind, results.reason)
    takes = takes_of(results)  # read before the results: a node alike's are not built yet
    return ("done", [_api(r.to_api()) for r in results], takes.devices, takes.drivers, takes.taken)


# -- random clusters ----------------------------------------------------------------------


def _device(rng: random.Random, name: str, counter_set: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "attributes": {
            "root": {"string": rng.choice(["r0", "r1"])},
            "size": {"int": rng.choice([1, 2, 3])},
        },
    }
    if rng.random() < 0.3:
        memory: dict[str, Any] = {"value": rng.choice(["8Gi", "16Gi"])}
        if rng.random() < 0.5:
            memory["requestPolicy"] = {"default": "4Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}
        body["capacity"] = {"memory": memory}
        if rng.random() < 0.4:
            body["allowMultipleAllocations"] = True
    if rng.random() < 0.15:
        body["taints"] = [{"key": "bad", "value": rng.choice(["x", "y"]), "effect": "NoSchedule"}]
    if rng.random() < 0.1:
        body["bindingConditions"] = ["ready"]
        body["bindingFailureConditions"] = ["broken"]
    if counter_set is not None and rng.random() < 0.7:
        body["consumesCounters"] = [
            {"counterSet": counter_set, "counters": {"slots": {"value": str(rng.choice([1, 2]))}}}
        ]
    return body


def _devices(rng: random.Random, count: int, prefix: str, counter_set: str | None) -> list[dict[str, Any]]:
    return [_device(rng, f"{prefix}gpu-{i}", counter_set) for i in range(count)]


def _tweak(rng: random.Random, device: dict[str, Any]) -> dict[str, Any]:
    """The device with one thing the search may read changed."""
    out = dict(device)
    what = rng.choice(["size", "taint", "binding", "counters", "new"])
    if what == "size":
        out["attributes"] = dict(out["attributes"], size={"int": out["attributes"]["size"]["int"] % 3 + 1})
    elif what == "taint":
        out["taints"] = [] if "taints" in out else [{"key": "bad", "value": "x", "effect": "NoSchedule"}]
    elif what == "binding":
        out["bindingConditions"] = [] if out.get("bindingConditions") else ["ready"]
    elif what == "counters" and "consumesCounters" in out:
        amount = out["consumesCounters"][0]["counters"]["slots"]["value"]
        out["consumesCounters"] = [
            {"counterSet": "set", "counters": {"slots": {"value": "1" if amount == "2" else "2"}}}
        ]
    else:
        out = _device(rng, "gpu-x", "set" if "consumesCounters" in out else None)
    return out


def _pool_slices(
    name: str, node_name: str, pool: str, devices: list[dict[str, Any]]
) -> list[ResourceSlice]:
    """The slice of ``devices``, with the counter set they draw from in a slice of its own."""
    if not any("consumesCounters" in d for d in devices):
        return [resource_slice(name, devices, pool=pool, node_name=node_name)]
    counters = _counter_slice(f"{name}-counters", node_name, pool, slots=3)
    return [resource_slice(name, devices, pool=pool, node_name=node_name, count=2), counters]


def _counter_slice(name: str, node_name: str, pool: str, slots: int) -> ResourceSlice:
    """The second slice of a two-slice pool: counter set "set" of ``slots`` slots."""
    return parse_resource_slice({
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 2},
            "nodeName": node_name,
            "sharedCounters": [{"name": "set", "counters": {"slots": {"value": str(slots)}}}],
        },
    })


def _cluster(rng: random.Random) -> tuple[list[Node], list[ResourceSlice]]:
    nodes = [node(f"n{i}", zone=rng.choice(["a", "b"])) for i in range(rng.randint(4, 9))]
    template = _devices(rng, rng.randint(1, 4), "", "set" if rng.random() < 0.3 else None)
    slices: list[ResourceSlice] = []
    pool_style = rng.choice(["node", "prefixed", "mixed"])
    for i, n in enumerate(nodes):
        roll = rng.random()
        if roll < 0.5:
            devices = [dict(d) for d in template]  # a copy of the template node
        elif roll < 0.7:
            devices = [dict(d) for d in template]
            at = rng.randrange(len(devices))
            devices[at] = _tweak(rng, devices[at])  # alike but for one device
        else:
            counters = "set" if rng.random() < 0.4 else None
            devices = _devices(rng, rng.randint(0, 4), rng.choice(["", f"{n.name}-"]), counters)
        if rng.random() < 0.2:
            devices = [dict(d, name=f"{n.name}-{d['name']}") for d in devices]
        pool = {"node": n.name, "prefixed": f"pool-{n.name}", "mixed": rng.choice([n.name, f"z-{n.name}"])}[
            pool_style
        ]
        if len(devices) > 1 and rng.random() < 0.25:
            # The same devices in two pools, each with counters of its own.
            half = rng.randint(1, len(devices) - 1)
            slices += _pool_slices(f"{n.name}-devs", n.name, pool, devices[:half])
            slices += _pool_slices(f"{n.name}-more", n.name, f"{pool}-more", devices[half:])
        else:
            slices += _pool_slices(f"{n.name}-devs", n.name, pool, devices)
        if i % 3 == 2 and rng.random() < 0.5:
            # A second pool on the node: sorted by name, before or after the first.
            second = [_device(rng, "nic-0", None)]
            pool = rng.choice(["a", "zz"]) + n.name
            slices.append(resource_slice(f"{n.name}-nics", second, pool=pool, node_name=n.name))
    if rng.random() < 0.4:
        zone = rng.choice(["a", "b"])
        selector = {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": [zone]}
        ]}]}
        if rng.random() < 0.3:  # two terms: usable, but an allocation result cannot record it
            anywhere_zoned = {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}
            selector["nodeSelectorTerms"].append(anywhere_zoned)
        zonal = _devices(rng, 2, "zonal-", None)
        slices.append(resource_slice("zonal", zonal, pool=f"zone-{zone}", nodeSelector=selector))
    if rng.random() < 0.3:
        slices.append(resource_slice("everywhere", _devices(rng, 2, "net-", None), pool="net", allNodes=True))
    if rng.random() < 0.4:
        per_device = []
        for d in _devices(rng, 3, "pd-", None):
            which = rng.random()
            if which < 0.4:
                d["nodeName"] = rng.choice(nodes).name
            elif which < 0.7:
                d["allNodes"] = True
            else:
                d["nodeSelector"] = {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "zone", "operator": "In", "values": [rng.choice(["a", "b"])]}
                ]}]}
            per_device.append(d)
        slices.append(
            resource_slice("per-device", per_device, pool="pd", perDeviceNodeSelection=True)
        )
    return nodes, slices


def _request(rng: random.Random, name: str) -> dict[str, Any]:
    kind = rng.random()
    extra: dict[str, Any] = {}
    if rng.random() < 0.5:
        extra["selectors"] = [
            {"cel": {"expression": f'device.attributes["{DRIVER}"].size >= {rng.choice([1, 2, 3])}'}}
        ]
    if rng.random() < 0.3:
        extra["tolerations"] = [{"key": "bad", "operator": "Exists", "effect": "NoSchedule"}]
    if rng.random() < 0.15:
        extra["capacity"] = {"requests": {"memory": rng.choice(["2Gi", "4Gi"])}}
    if kind < 0.1:
        return request(name, allocationMode="All", **extra)
    if kind < 0.2:
        return request(name, adminAccess=True, **extra)
    if kind < 0.35:
        subs = [
            {"name": "big", "deviceClassName": "class-a", "count": 2, **extra},
            {"name": "small", "deviceClassName": "class-a"},
        ]
        return {"name": name, "firstAvailable": subs}
    return request(name, count=rng.choice([1, 1, 2]), **extra)


def _claims(rng: random.Random) -> list[ResourceClaim]:
    claims = []
    for c in range(rng.choice([1, 1, 2])):
        requests = [_request(rng, f"r{i}") for i in range(rng.choice([1, 1, 2]))]
        constraints = []
        if rng.random() < 0.3:
            attribute = f"{DRIVER}/root"
            constraints.append(rng.choice([{"matchAttribute": attribute}, {"distinctAttribute": attribute}]))
        claims.append(claim(*requests, name=f"claim-{c}", constraints=constraints))
    return claims


def _state(rng: random.Random, slices: list[ResourceSlice]) -> AllocatedState:
    state = AllocatedState()
    for s in slices:
        for d in s.devices:
            roll = rng.random()
            if roll < 0.08:
                state.allocated_devices.add(d.id)
            elif roll < 0.12 and d.allow_multiple_allocations:
                state.allocated_shared.add((d.id, "share-1"))
                state.aggregated_capacity[d.id] = {"memory": d.capacities["memory"].value}
    return state


def _compare(seed: int) -> int:
    """Every node with and without the memo; the number of memo hits."""
    rng = random.Random(seed)
    nodes, slices = _cluster(rng)
    classes = [device_class("class-a")]
    state = _state(rng, slices) if rng.random() < 0.5 else AllocatedState()
    claims = _claims(rng)
    order = nodes + rng.sample(nodes, len(nodes))  # each node once, then again in another order
    gates = GATES if rng.random() < 0.5 else [g for g in GATES if rng.random() < 0.8]
    cel = Environment.create()
    plain = _allocator(slices, classes, state, False, cel, gates=gates)
    # Two requests over one inventory: the second reads the pools and shapes the first gathered.
    source, features = SliceList(slices), Features.from_gate_names(gates)
    gathered = GatheredPools(source, features)
    by_class = {c.name: c for c in classes}
    hits = 0
    for _ in range(2):
        shared = Allocator(features, state, by_class, source, cel, gathered=gathered)
        for target in order:
            assert _outcome(shared, target, claims) == _outcome(plain, target, claims), (seed, target.name)
        assert shared.shapes is not None
        hits += shared.shapes.hits
    return hits


@pytest.mark.parametrize("chunk", range(8))
def test_random_clusters_get_the_same_answers_with_and_without_the_memo(chunk: int) -> None:
    hits = sum(_compare(seed) for seed in range(chunk * 60, chunk * 60 + 60))
    assert hits > 0  # the comparison is about shared answers, not only about fallbacks


# -- targeted cases ------------------------------------------------------------------------


def _template_cluster(count: int, devices: list[dict[str, Any]]) -> tuple[list[Node], list[ResourceSlice]]:
    nodes = [node(f"node-{i}") for i in range(count)]
    slices = [resource_slice(f"{n.name}-gpus", devices, pool=n.name, node_name=n.name) for n in nodes]
    return nodes, slices


def _gpus(*sizes: int) -> list[dict[str, Any]]:
    return [{"name": f"gpu-{i}", "attributes": {"size": {"int": s}}} for i, s in enumerate(sizes)]


SIZE_2 = {"cel": {"expression": f'device.attributes["{DRIVER}"].size >= 2'}}


def test_template_nodes_share_one_search_and_get_their_own_pool_and_node() -> None:
    nodes, slices = _template_cluster(5, _gpus(1, 2, 2))
    alloc = _allocator(slices, [device_class()], AllocatedState(), True, Environment.create())
    claims = [claim(request("gpu", selectors=[SIZE_2]))]
    for n in nodes:
        results = alloc.allocate(n, claims)
        assert not isinstance(results, Failure)
        api = results[0].to_api()
        assert api["devices"]["results"] == [
            {"request": "gpu", "driver": DRIVER, "pool": n.name, "device": "gpu-1"}
        ]
        assert api["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [n.name]
    assert alloc.shapes is not None and alloc.shapes.hits == 4


def test_a_node_alike_gets_results_built_when_first_read() -> None:
    nodes, slices = _template_cluster(2, _gpus(2, 2))
    alloc = _allocator(slices, [device_class()], AllocatedState(), True, Environment.create())
    claims = [claim(request("gpu", count=2, adminAccess=True))]
    searched = alloc.allocate(nodes[0], claims)
    alike = alloc.allocate(nodes[1], claims)
    assert isinstance(alike, AlikeResults) and not isinstance(searched, AlikeResults)
    assert not isinstance(searched, Failure) and alike.takes == (
        frozenset({(DRIVER, "node-1", "gpu-0"), (DRIVER, "node-1", "gpu-1")}),
        frozenset({DRIVER}),
        0,  # admin access takes nothing from others
        False,
    )
    assert takes_of(searched).devices == {(DRIVER, "node-0", "gpu-0"), (DRIVER, "node-0", "gpu-1")}
    assert [d.pool for d in alike[0].devices] == ["node-1", "node-1"]
    assert alike == tuple(alike) and len(alike) == 1 and alike[:1] == tuple(alike)


@pytest.mark.parametrize(
    ("sizes", "picks", "hits"),
    [
        # The search stops at gpu-1: what follows it is never read, so it may differ.
        (((1, 2, 1), (1, 2, 3, 3)), ("gpu-1", "gpu-1"), 1),
        # A node that differs where the search looked is searched.
        (((2, 1), (1, 2)), ("gpu-0", "gpu-1"), 0),
    ],
    ids=["alike-before-the-pick", "differs-where-looked"],
)
def test_a_node_shares_the_answer_only_where_alike_up_to_the_pick(
    sizes: tuple[tuple[int, ...], tuple[int, ...]], picks: tuple[str, str], hits: int
) -> None:
    nodes = [node("node-0"), node("node-1")]
    slices = [
        resource_slice(f"s{i}", _gpus(*sizes[i]), pool=f"node-{i}", node_name=f"node-{i}") for i in (0, 1)
    ]
    alloc = _allocator(slices, [device_class()], AllocatedState(), True, Environment.create())
    claims = [claim(request("gpu", selectors=[SIZE_2]))]
    assert [picked(alloc.allocate(n, claims)) for n in nodes] == [[[("gpu", pick)]] for pick in picks]
    assert alloc.shapes is not None and alloc.shapes.hits == hits


def test_a_node_with_an_allocated_device_is_searched() -> None:
    nodes, slices = _template_cluster(2, _gpus(2, 2))
    state = AllocatedState(allocated_devices={(DRIVER, "node-1", "gpu-0")})
    alloc = _allocator(slices, [device_class()], state, True, Environment.create())
    claims = [claim(request("gpu"))]
    assert picked(alloc.allocate(nodes[0], claims)) == [[("gpu", "gpu-0")]]
    assert picked(alloc.allocate(nodes[1], claims)) == [[("gpu", "gpu-1")]]
    assert alloc.shapes is not None and alloc.shapes.hits == 0


def test_answers_with_shares_are_not_shared() -> None:
    devices = [{"name": "gpu-0", "allowMultipleAllocations": True, "capacity": {"memory": {"value": "8Gi"}}}]
    nodes, slices = _template_cluster(3, devices)
    alloc = _allocator(slices, [device_class()], AllocatedState(), True, Environment.create())
    claims = [claim(request("gpu", capacity={"requests": {"memory": "2Gi"}}))]
    shares = set()
    for n in nodes:
        results = alloc.allocate(n, claims)
        assert not isinstance(results, Failure)
        shares.add(results[0].devices[0].share_id)
    assert len(shares) == 3 and None not in shares
    assert alloc.shapes is not None and alloc.shapes.hits == 0


def test_failures_are_not_shared() -> None:
    nodes, slices = _template_cluster(3, _gpus(1))
    alloc = _allocator(slices, [device_class()], AllocatedState(), True, Environment.create())
    claims = [claim(request("gpu", selectors=[SIZE_2]))]
    for n in nodes:
        assert alloc.allocate(n, claims).kind == "nofit"
    assert alloc.shapes is not None and alloc.shapes.hits == 0


def test_other_claims_do_not_get_the_answer() -> None:
    nodes, slices = _template_cluster(2, _gpus(2, 2))
    alloc = _allocator(slices, [device_class()], AllocatedState(), True, Environment.create())
    assert picked(alloc.allocate(nodes[0], [claim(request("gpu"))])) == [[("gpu", "gpu-0")]]
    assert picked(alloc.allocate(nodes[1], [claim(request("gpu", count=2))])) == [
        [("gpu", "gpu-0"), ("gpu", "gpu-1")]
    ]
    assert alloc.shapes is not None and alloc.shapes.hits == 0


def test_a_spent_budget_still_stops_a_shared_answer() -> None:
    nodes, slices = _template_cluster(2, _gpus(2))
    cel = Environment.create()
    alloc = _allocator(slices, [device_class()], AllocatedState(), True, cel, deadline=float("inf"))
    claims = [claim(request("gpu"))]
    assert not isinstance(alloc.allocate(nodes[0], claims), Failure)
    alloc.deadline = 0.0
    assert alloc.allocate(nodes[1], claims).kind == "timeout"


# -- each part of the key, on nodes that differ only there ----------------------------------


def _same_answers(
    nodes: list[Node], slices: list[ResourceSlice], claims: list[ResourceClaim], gates: list[str] = GATES
) -> list[Outcome]:
    """The outcomes node by node, checked equal with and without the memo."""
    cel = Environment.create()
    shared = _allocator(slices, [device_class()], AllocatedState(), True, cel, gates=gates)
    plain = _allocator(slices, [device_class()], AllocatedState(), False, cel, gates=gates)
    outcomes = [_outcome(shared, n, claims) for n in nodes]
    assert outcomes == [_outcome(plain, n, claims) for n in nodes]
    return outcomes


def _consuming(name: str, slots: int) -> dict[str, Any]:
    uses = {"counterSet": "set", "counters": {"slots": {"value": str(slots)}}}
    return {"name": name, "consumesCounters": [uses]}


def _counted_pool(
    node_name: str, pool: str, devices: list[dict[str, Any]], slots: int = 3
) -> list[ResourceSlice]:
    counters = _counter_slice(f"{pool}-counters", node_name, pool, slots)
    return [resource_slice(f"{pool}-devices", devices, pool=pool, node_name=node_name, count=2), counters]


TWO = [claim(request("gpu", count=2))]


def test_what_devices_consume_is_part_of_the_shape() -> None:
    slices = [
        *_counted_pool("node-0", "p0", [_consuming("gpu-0", 1), _consuming("gpu-1", 1)]),
        *_counted_pool("node-1", "p1", [_consuming("gpu-0", 2), _consuming("gpu-1", 2)]),
    ]
    outcomes = _same_answers([node("node-0"), node("node-1")], slices, TWO)
    assert [o[0] for o in outcomes] == ["done", "none"]


def test_the_pool_counter_sets_are_part_of_the_shape() -> None:
    devices = [_consuming("gpu-0", 2), _consuming("gpu-1", 2)]
    slices = [*_counted_pool("node-0", "p0", devices, slots=4), *_counted_pool("node-1", "p1", devices)]
    outcomes = _same_answers([node("node-0"), node("node-1")], slices, TWO)
    assert [o[0] for o in outcomes] == ["done", "none"]


def test_which_pool_a_device_is_in_is_part_of_the_shape() -> None:
    # Two pools alike on both nodes; the devices split over them on node-0 (each has its own
    # counters), both in the first one on node-1 (they exhaust its counters together).
    slices = [
        *_counted_pool("node-0", "a-node-0", [_consuming("gpu-0", 2)]),
        *_counted_pool("node-0", "b-node-0", [_consuming("gpu-1", 2)]),
        *_counted_pool("node-1", "a-node-1", [_consuming("gpu-0", 2), _consuming("gpu-1", 2)]),
        *_counted_pool("node-1", "b-node-1", []),
    ]
    outcomes = _same_answers([node("node-0"), node("node-1")], slices, TWO)
    assert [o[0] for o in outcomes] == ["done", "none"]


def test_declared_optional_node_operations_are_part_of_the_shape() -> None:
    status = {"declaredFeatures": ["DRAOptionalNodeOperations"]}
    declaring = parse_node({"metadata": {"name": "node-0"}, "status": status})
    skipping = {"skipNodeOperations": ["Prepare"]}
    slices = [
        resource_slice(f"s{i}", _gpus(2), pool=f"node-{i}", node_name=f"node-{i}", **skipping)
        for i in range(2)
    ]
    gates = [*GATES, "DRAOptionalNodeOperations"]
    outcomes = _same_answers([declaring, node("node-1")], slices, [claim(request("gpu"))], gates)
    assert [o[0] for o in outcomes] == ["done", "none"]


def test_an_incomplete_pool_is_part_of_the_shape() -> None:
    # Both nodes: a pool with a device, then one without devices; on node-1 that one is still
    # being published, which an All request must see.
    slices = [
        resource_slice("a0", _gpus(2), pool="a-node-0", node_name="node-0"),
        resource_slice("b0", [], pool="b-node-0", node_name="node-0"),
        resource_slice("a1", _gpus(2), pool="a-node-1", node_name="node-1"),
        resource_slice("b1", [], pool="b-node-1", node_name="node-1", count=2),
    ]
    everything = [claim(request("gpu", allocationMode="All"))]
    outcomes = _same_answers([node("node-0"), node("node-1")], slices, everything)
    assert outcomes[0][0] == "done" and outcomes[1][:2] == ("error", "fatal")


def test_a_node_alike_whose_slice_selector_cannot_be_recorded_fails_as_the_search_does() -> None:
    # node-0's GPU comes from a slice bound to it by name; node-1's from a slice whose node
    # selector has two terms, which an allocation result cannot record (upstream refuses it).
    two_terms = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]},
            {"matchExpressions": [{"key": "never", "operator": "Exists"}]},
        ]
    }
    slices = [
        resource_slice("s0", _gpus(2), pool="node-0", node_name="node-0"),
        resource_slice("s1", _gpus(2), pool="node-1", nodeSelector=two_terms),
    ]
    claims = [claim(request("gpu"))]
    for share in (False, True):
        alloc = _allocator(slices, [device_class()], AllocatedState(), share, Environment.create())
        assert picked(alloc.allocate(node("node-0"), claims)) == [[("gpu", "gpu-0")]]
        fatal = alloc.allocate(node("node-1"), claims)
        assert isinstance(fatal, Failure) and fatal.kind == "fatal"
        assert "unsupported ResourceSlice.NodeSelector with 2 terms" in fatal.reason
