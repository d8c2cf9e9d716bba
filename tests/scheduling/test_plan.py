"""The plan, table-driven: cluster objects in, the per-node verdicts (or the pod-level reason) out.

Each case runs ``PodPlan.build`` and the plan's ``verdicts.verdict`` directly on a local
cluster, without HTTP; the flow tests (test_flow.py and friends) cover the same decisions through the verbs.
A node's outcome is written the way filter would sort it:

* ``fits: gpu=node-0/gpu-0`` — the devices allocated there, ``request=pool/device`` per
  device (``+admin`` for admin access), or just ``fits`` when nothing is left to allocate;
* ``resolvable: <reason>`` — ``FailedNodes`` (preemption may help);
* ``unresolvable: <reason>`` — ``FailedAndUnresolvableNodes``.

A pod that must wait (``PodWaits``) or whose claims no node can serve (a "fatal" failure)
has one outcome for the whole pod: ``waits: <reason>`` / ``fatal: <reason>``; a pod the verbs
let pass without a plan (another scheduler's, or one asking for no devices) is ``untouched``.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from extender.config import parse_feature_gates
from extender.model import parse_allocation
from extender.model.pods import PodInfo, parse_pod
from extender.scheduling.claims import PodWaits
from extender.scheduling.context import SchedulingContext
from extender.scheduling.plan import PodPlan
from extender.scheduling.verdicts import NodeVerdict
from extender.state import InFlight
from tests.scheduling.cluster import (
    DRIVER,
    claim,
    claim_spec,
    device_class,
    gpu,
    gpu_cluster,
    gpus,
    local_context,
    node,
    node_slice,
    pod,
    request,
    template,
)

# --- builders ---------------------------------------------------------------------------------


def allocated(
    obj: dict[str, Any],
    node_name: str,
    devices: list[str],
    reserved_for: Sequence[tuple[str, str]] = (),
    request_name: str = "gpu",
    **result: Any,
) -> dict[str, Any]:
    """``obj`` (a claim) allocated on ``node_name`` and reserved for the (name, uid) pods."""
    obj["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": request_name, "driver": DRIVER, "pool": node_name, "device": d, **result}
                    for d in devices
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": name, "uid": uid} for name, uid in reserved_for],
    }
    return obj


# An object made when the test that uses it runs (``made`` makes them): one whose content
# depends on the time must not be made when the cases are collected, or it is as old as the
# run when its test comes (a claim stamped 10 s before collection is past the 600 s binding
# timeout once the suite has run for ten minutes).
Later = Callable[[], dict[str, Any]]


def made(objects: Sequence[dict[str, Any] | Later]) -> list[dict[str, Any]]:
    """``objects``, those made later made now."""
    return [obj() if callable(obj) else obj for obj in objects]


def reporting(obj: dict[str, Any], conditions: dict[str, str], age_s: float = 10.0) -> Later:
    """An allocated claim whose devices report ``conditions`` (type: status), stamped ``age_s``
    before it is made: when its test runs."""
    status = obj["status"]
    status["devices"] = [
        {
            "driver": r["driver"],
            "pool": r["pool"],
            "device": r["device"],
            "conditions": [{"type": t, "status": s} for t, s in conditions.items()],
        }
        for r in status["allocation"]["devices"]["results"]
    ]

    def stamped() -> dict[str, Any]:
        stamp = datetime.now(UTC) - timedelta(seconds=age_s)
        copy = {**obj, "status": {**status, "allocation": dict(status["allocation"])}}
        copy["status"]["allocation"]["allocationTimestamp"] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
        return copy

    return stamped


def with_uid(obj: dict[str, Any], uid: str) -> dict[str, Any]:
    obj["metadata"]["uid"] = uid
    return obj


def wanting(obj: dict[str, Any], resources: dict[str, str]) -> dict[str, Any]:
    """A pod whose main container requests (and is limited to) the given extended resources."""
    obj["spec"]["containers"][0]["resources"] = {"requests": resources, "limits": resources}
    return obj


def extended_class(name: str, resource: str) -> dict[str, Any]:
    obj = device_class(name)
    obj["spec"]["extendedResourceName"] = resource
    return obj


def allocatable(obj: dict[str, Any], **resources: str) -> dict[str, Any]:
    """A node listing ``resources`` (``_`` for ``/``) in its allocatable: a device plugin serves them."""
    obj["status"] = {"allocatable": {k.replace("__", ".").replace("_", "/"): v for k, v in resources.items()}}
    return obj


def declaring(obj: dict[str, Any], *features: str) -> dict[str, Any]:
    """A node whose kubelet declares ``features`` in status.declaredFeatures."""
    obj.setdefault("status", {})["declaredFeatures"] = list(features)
    return obj


def anywhere(obj: dict[str, Any]) -> dict[str, Any]:
    """An allocated claim whose allocation names no node selector (usable on every node)."""
    del obj["status"]["allocation"]["nodeSelector"]
    return obj


def claim_of_owner(ctx: SchedulingContext) -> PodInfo:
    """A request's pod ("thief") naming the claim generated for pod "owner" as its own."""
    owner = ctx.state.pod("default", "owner")
    assert owner is not None
    obj = with_uid(pod("thief", templates={"gpu": "one"}), "thief-uid")
    generated = owner.claim_statuses["gpu"]
    obj["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": generated}]}
    return parse_pod(obj)


def expect_placement(pod_uid: str, node_name: str, claim_uid: str) -> Callable[[SchedulingContext], None]:
    """Another pod was just scored onto ``node_name`` with the claim (memory's expected placement)."""

    def setup(ctx: SchedulingContext) -> None:
        ctx.memory.expect(pod_uid, node_name, frozenset(), frozenset({claim_uid}))

    return setup


def in_flight(claim_name: str, node_name: str, device: str) -> Callable[[SchedulingContext], None]:
    """Another pod's bind is writing the claim right now: its allocation is in flight."""

    def setup(ctx: SchedulingContext) -> None:
        held = ctx.state.claim("default", claim_name)
        assert held is not None
        result = {"request": "gpu", "driver": DRIVER, "pool": node_name, "device": device}
        allocation = parse_allocation({"devices": {"results": [result]}})
        ctx.state.add_inflight(InFlight(held.uid, "another-pod", allocation, expires_at=float("inf")))

    return setup


# --- the table --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Matching:
    """A text with an exact start that contains some parts (where the rest is the engine's wording)."""

    start: str
    parts: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other.startswith(self.start) and all(p in other for p in self.parts)


@dataclass(frozen=True)
class Case:
    name: str
    objects: list[dict[str, Any] | Later]
    nodes: list[str]
    want: dict[str, str] | str | Matching  # per node, or one outcome for the whole pod
    pod: str | Callable[[SchedulingContext], PodInfo] = "p"  # a name in the cluster, or a request's pod
    setup: Callable[[SchedulingContext], None] | None = None
    config: dict[str, Any] = field(default_factory=dict)


ONE_GPU = [device_class(), node("node-0"), node_slice("node-0", gpus(1))]
TWO_NODES = gpu_cluster(nodes=2, per_node=1)
PRIORITIZED = claim_spec(
    {
        "name": "gpu",
        "firstAvailable": [
            {"name": "pair", "deviceClassName": DRIVER, "count": 2},
            {"name": "one", "deviceClassName": DRIVER, "count": 1},
        ],
    }
)
NUMA = 'device.attributes["gpu.example.com"].numa'
DERIVED_NUMA = claim_spec(
    request(derivedAttributes=[{"name": "derived/numa", "expression": NUMA}]),
    constraints=[{"matchAttribute": "derived/numa"}],
)
DERIVED_ROOT = claim_spec(
    request(count=2, derivedAttributes=[{"name": "resource.kubernetes.io/pcieRoot", "expression": '"one"'}]),
    constraints=[{"matchAttribute": "resource.kubernetes.io/pcieRoot"}],
)
RESERVED_FULL = [(f"p{i}", f"u{i}") for i in range(256)]
GATED = {"bindingConditions": ["attached"], "bindingFailureConditions": ["broken"]}
OTHER_NODES = "resource claim default/c is allocated for other nodes"

NOT_AVAILABLE = "resourceclaim not available on the node"
SKIPS_NODE_OPERATIONS = (
    "resource claim default/c allocation requires DRAOptionalNodeOperations feature on the node"
)
TWO_CONDITIONS = ("attached", "powered")
GATED_NODES = [
    device_class(),
    *(
        x
        for n in ("node-0", "node-1")
        for x in (node(n), node_slice(n, [{**gpu(g), **GATED} for g in ("gpu-0", "gpu-1")]))
    ),
]


def gated_claim(
    name: str, node_name: str, conditions: tuple[str, ...] = ("attached",), device: str = "gpu-0"
) -> dict[str, Any]:
    """A claim allocated on ``node_name`` with binding conditions, reserved for pod p."""
    gates = {"bindingConditions": list(conditions), "bindingFailureConditions": ["broken"]}
    return allocated(claim(name), node_name, [device], [("p", "p-uid")], **gates)


def gated_pod(**claims: str) -> dict[str, Any]:
    return with_uid(pod("p", claims=claims), "p-uid")


CASES = [
    Case(
        "fits",
        [*TWO_NODES, claim("c"), pod("p", claims={"c": "c"})],
        ["node-0", "node-1"],
        {"node-0": "fits: gpu=node-0/gpu-0", "node-1": "fits: gpu=node-1/gpu-0"},
    ),
    Case(
        "no devices on the node",
        [*ONE_GPU, node("empty"), claim("c"), pod("p", claims={"c": "c"})],
        ["node-0", "empty"],
        {
            "node-0": "fits: gpu=node-0/gpu-0",
            "empty": "unresolvable: claim default/c, request gpu: "
            "0 of 1 devices available (0 match the selectors, 0 in use)",
        },
    ),
    Case(
        "devices in use by another claim: preemption may help",
        [
            *ONE_GPU,
            allocated(claim("taken"), "node-0", ["gpu-0"], [("holder", "holder-uid")]),
            claim("c"),
            pod("p", claims={"c": "c"}),
        ],
        ["node-0"],
        {
            "node-0": "resolvable: claim default/c, request gpu: "
            "0 of 1 devices available (1 match the selectors, 1 in use)"
        },
    ),
    Case(
        # The class and the selector are named; the expression appears in the engine's own
        # wording (the default C++ engine quotes it under a caret).
        "CEL compile error in a class selector fails the pod on every node",
        [
            *TWO_NODES,
            device_class("broken", "device.attributes["),
            claim("c", claim_spec(request(device_class_name="broken"))),
            pod("p", claims={"c": "c"}),
        ],
        ["node-0", "node-1"],
        Matching("fatal: class broken: selector #0: CEL compile error: ", ("device.attributes[",)),
    ),
    Case(
        "CEL runtime error in a class selector names class, selector and device",
        [
            *TWO_NODES,
            device_class("typo", 'device.attributes["gpu.example.com"].model == "x"'),
            claim("c", claim_spec(request(device_class_name="typo"))),
            pod("p", claims={"c": "c"}),
        ],
        ["node-0", "node-1"],
        "fatal: class typo: selector #0 on device gpu.example.com/node-0/gpu-0: "
        "CEL runtime error: no such key: model",
    ),
    Case(
        # DRADerivedAttributes: the expression fails on the first GPU a constraint reads it for;
        # kube-scheduler's Filter returns Error, the pod's attempt fails (docs/upstream.md).
        "derived attribute that fails on a device fails the pod on every node, named",
        [*TWO_NODES, claim("c", DERIVED_NUMA), pod("p", claims={"c": "c"})],
        ["node-0", "node-1"],
        "fatal: claim default/c, request gpu: evaluate derived attribute derived/numa on device "
        f"gpu.example.com/node-0/gpu-0 failed: no such key: numa (expression: {NUMA})",
        config={"feature_gates": parse_feature_gates("DRADerivedAttributes=true")},
    ),
    Case(
        # Shadowed: by the GPUs' own pcieRoot it would be gpu-0 and gpu-2.
        "a derived attribute shadows the device attribute of its name",
        [
            device_class(),
            node("node-0"),
            node_slice("node-0", gpus(4, roots=2)),
            claim("c", DERIVED_ROOT),
            pod("p", claims={"c": "c"}),
        ],
        ["node-0"],
        {"node-0": "fits: gpu=node-0/gpu-0 gpu=node-0/gpu-1"},
        config={"feature_gates": parse_feature_gates("DRADerivedAttributes=true")},
    ),
    Case(
        "derived attributes need their feature gate",
        [*ONE_GPU, claim("c", DERIVED_NUMA), pod("p", claims={"c": "c"})],
        ["node-0"],
        "fatal: claim default/c, request gpu: cannot handle request with derived attributes, "
        "the feature is disabled",
    ),
    Case(
        "class does not exist",
        [*ONE_GPU, claim("c", claim_spec(request(device_class_name="nope"))), pod("p", claims={"c": "c"})],
        ["node-0"],
        "waits: resource claim default/c, request gpu: device class nope does not exist",
    ),
    Case(
        "claim allocated on another node: only that node",
        [*TWO_NODES, allocated(claim("c"), "node-1", ["gpu-0"]), pod("p", claims={"c": "c"})],
        ["node-0", "node-1"],
        {"node-0": f"unresolvable: {OTHER_NODES}", "node-1": "fits"},
    ),
    Case(
        # Upstream's Filter (kubernetes/kubernetes 4966917a, dynamicresources.go): an allocation
        # whose devices skip node operations needs a node declaring DRAOptionalNodeOperations.
        "allocation skips node operations: only nodes declaring DRAOptionalNodeOperations",
        [
            device_class(),
            declaring(node("node-0"), "DRAOptionalNodeOperations"),
            declaring(node("node-1"), "SomethingElse"),
            node("node-2"),
            node_slice("node-0", gpus(1)),
            anywhere(allocated(claim("c"), "node-0", ["gpu-0"], skipNodeOperations=["*"])),
            pod("p", claims={"c": "c"}),
        ],
        ["node-0", "node-1", "node-2"],
        {
            "node-0": "fits",
            "node-1": f"unresolvable: {NOT_AVAILABLE}: {SKIPS_NODE_OPERATIONS}",
            "node-2": f"unresolvable: {NOT_AVAILABLE}: {SKIPS_NODE_OPERATIONS}",
        },
    ),
    Case(
        "allocation without skipped node operations: declared features do not matter",
        [
            device_class(),
            node("node-0"),
            node_slice("node-0", gpus(1)),
            anywhere(allocated(claim("c"), "node-0", ["gpu-0"])),
            pod("p", claims={"c": "c"}),
        ],
        ["node-0"],
        {"node-0": "fits"},
    ),
    Case(
        "claim reservedFor full (256 consumers)",
        [
            *ONE_GPU,
            allocated(claim("shared"), "node-0", ["gpu-0"], RESERVED_FULL),
            pod("p", claims={"g": "shared"}),
        ],
        ["node-0"],
        "waits: resource claim default/shared is already in use by 256 consumers, the maximum",
    ),
    Case(
        "claim reservedFor full, but already reserved for this pod",
        [
            *ONE_GPU,
            allocated(claim("shared"), "node-0", ["gpu-0"], [*RESERVED_FULL[:255], ("p", "p-uid")]),
            with_uid(pod("p", claims={"g": "shared"}), "p-uid"),
        ],
        ["node-0"],
        {"node-0": "fits"},
    ),
    Case(
        "claim controller has not generated the template's claim yet",
        [*ONE_GPU, pod("p", templates={"gpu": "not-there-yet"})],
        ["node-0"],
        'waits: pod "default/p": ResourceClaim not created yet (pod claim gpu): '
        "ResourceClaimTemplate default/not-there-yet not found",
    ),
    Case(
        "generated claim is owned by another pod",
        [*ONE_GPU, template("one"), pod("owner", templates={"gpu": "one"})],
        ["node-0"],
        # (the generated name's suffix comes from the owner's UID, fixed by the local cluster)
        "waits: ResourceClaim default/owner-gpu-slgrn was not created for Pod default/thief "
        "(Pod is not owner)",
        pod=claim_of_owner,
    ),
    Case(
        "named claim does not exist",
        [*ONE_GPU, pod("p", claims={"c": "nope"})],
        ["node-0"],
        'waits: pod "default/p": ResourceClaim default/nope not found',
    ),
    Case(
        "claim in flight for another pod's bind",
        [*ONE_GPU, claim("c"), pod("p", claims={"c": "c"})],
        ["node-0"],
        "waits: resource claim default/c is in the process of being allocated",
        setup=in_flight("c", "node-0", "gpu-0"),
    ),
    Case(
        "shared claim another pod was just scored with",
        [*ONE_GPU, with_uid(claim("shared"), "shared-uid"), pod("p", claims={"g": "shared"})],
        ["node-0"],
        "waits: resource claim default/shared is in the process of being allocated "
        "(for another pod, on node node-0)",
        setup=expect_placement("other-pod", "node-0", "shared-uid"),
    ),
    Case(
        "extended resource: from DRA, from a device plugin, or nowhere",
        [
            extended_class(DRIVER, "example.com/gpu"),
            node("dra"),
            node_slice("dra", gpus(2)),
            allocatable(node("plugin"), example__com_gpu="4"),
            node("none"),
            wanting(pod("p"), {"example.com/gpu": "2"}),
        ],
        ["dra", "plugin", "none"],
        {
            "dra": "fits: container-0-request-0=dra/gpu-0 container-0-request-0=dra/gpu-1",
            "plugin": "fits",
            "none": "unresolvable: claim default/<extended-resources>, request container-0-request-0: "
            "0 of 2 devices available (0 match the selectors, 0 in use)",
        },
    ),
    Case(
        "extended resource that no class maps and the node does not list",
        [
            extended_class(DRIVER, "example.com/gpu"),
            node("dra"),
            node_slice("dra", gpus(1)),
            wanting(pod("p"), {"example.com/gpu": "1", "example.com/fpga": "1"}),
        ],
        ["dra"],
        {
            "dra": "unresolvable: cannot fit resource example.com/fpga: node dra does not list it "
            "in its allocatable and no device class provides it"
        },
    ),
    Case(
        "prioritized list: the first subrequest that fits",
        [
            device_class(),
            node("two"),
            node_slice("two", gpus(2)),
            node("one"),
            node_slice("one", gpus(1)),
            claim("c", PRIORITIZED),
            pod("p", claims={"c": "c"}),
        ],
        ["two", "one"],
        {"two": "fits: gpu/pair=two/gpu-0 gpu/pair=two/gpu-1", "one": "fits: gpu/one=one/gpu-0"},
    ),
    Case(
        "prioritized list needs its feature gate",
        [*ONE_GPU, claim("c", PRIORITIZED), pod("p", claims={"c": "c"})],
        ["node-0"],
        "waits: resource claim default/c, request gpu: has subrequests, "
        "but the DRAPrioritizedList feature is disabled",
        config={"feature_gates": parse_feature_gates("DRAPrioritizedList=false")},
    ),
    Case(
        "admin access takes a device in use",
        [
            *ONE_GPU,
            allocated(claim("taken"), "node-0", ["gpu-0"], [("holder", "holder-uid")]),
            claim("c", claim_spec(request(adminAccess=True))),
            pod("p", claims={"c": "c"}),
        ],
        ["node-0"],
        {"node-0": "fits: gpu=node-0/gpu-0+admin"},
    ),
    Case(
        "binding conditions: the allocation carries them",
        [
            device_class(),
            node("node-0"),
            node_slice("node-0", [{**gpu("gpu-0"), **GATED}]),
            claim("c"),
            pod("p", claims={"c": "c"}),
        ],
        ["node-0"],
        {"node-0": "fits: gpu=node-0/gpu-0[until attached, unless broken]"},
    ),
    Case(
        # bind answers "waiting for binding conditions" and keeps the claim allocated and reserved;
        # the retry's plan only admits the allocation's node, with nothing left to allocate.
        "binding conditions pending: the pod keeps its allocation's node",
        [
            device_class(),
            *(x for n in ("node-0", "node-1") for x in (node(n), node_slice(n, [{**gpu("gpu-0"), **GATED}]))),
            allocated(claim("c"), "node-0", ["gpu-0"], [("p", "p-uid")], **GATED),
            with_uid(pod("p", claims={"c": "c"}), "p-uid"),
        ],
        ["node-0", "node-1"],
        {"node-0": "fits", "node-1": f"unresolvable: {OTHER_NODES}"},
    ),
    Case(
        # Upstream's Filter: a claim whose binding failed can be used on no node.
        "binding failed: the claim is available on no node",
        [*GATED_NODES, reporting(gated_claim("c", "node-0"), {"broken": "True"}), gated_pod(c="c")],
        ["node-0", "node-1"],
        dict.fromkeys(
            ("node-0", "node-1"),
            f"unresolvable: {NOT_AVAILABLE}: claim default/c binding failed: "
            f"device {DRIVER}/node-0/gpu-0: broken is True",
        ),
    ),
    Case(
        "binding timed out: the claim is available on no node",
        [*GATED_NODES, reporting(gated_claim("c", "node-0"), {"attached": "False"}, 601), gated_pod(c="c")],
        ["node-0", "node-1"],
        dict.fromkeys(
            ("node-0", "node-1"),
            f"unresolvable: {NOT_AVAILABLE}: claim default/c: device binding "
            f"timeout ({DRIVER}/node-0/gpu-0: attached)",
        ),
    ),
    Case(
        "mixed conditions within the timeout: still pending, the pod keeps its allocation's node",
        [
            *GATED_NODES,
            reporting(gated_claim("c", "node-0", TWO_CONDITIONS), {"attached": "True", "broken": "False"}),
            gated_pod(c="c"),
        ],
        ["node-0", "node-1"],
        {"node-0": "fits", "node-1": f"unresolvable: {OTHER_NODES}"},
    ),
    Case(
        "mixed conditions past the timeout: the pending one is named",
        [
            *GATED_NODES,
            reporting(gated_claim("c", "node-0", TWO_CONDITIONS), {"attached": "True"}, age_s=601),
            gated_pod(c="c"),
        ],
        ["node-0"],
        {
            "node-0": f"unresolvable: {NOT_AVAILABLE}: claim default/c: device binding timeout "
            f"({DRIVER}/node-0/gpu-0: powered)"
        },
    ),
    Case(
        "mixed conditions with a failure condition true: failed, whatever else is true",
        [
            *GATED_NODES,
            reporting(gated_claim("c", "node-0"), {"attached": "True", "broken": "True"}),
            gated_pod(c="c"),
        ],
        ["node-0"],
        {
            "node-0": f"unresolvable: {NOT_AVAILABLE}: claim default/c binding failed: "
            f"device {DRIVER}/node-0/gpu-0: broken is True"
        },
    ),
    Case(
        "two claims, one ready and one failed: the failed one is named on every node",
        [
            *GATED_NODES,
            reporting(gated_claim("ok", "node-0"), {"attached": "True"}),
            reporting(gated_claim("bad", "node-0", device="gpu-1"), {"broken": "True"}),
            gated_pod(a="ok", b="bad"),
        ],
        ["node-0", "node-1"],
        dict.fromkeys(
            ("node-0", "node-1"),
            f"unresolvable: {NOT_AVAILABLE}: claim default/bad binding "
            f"failed: device {DRIVER}/node-0/gpu-1: broken is True",
        ),
    ),
    Case(
        "binding failed, but the binding gates are off: conditions mean nothing",
        [*GATED_NODES, reporting(gated_claim("c", "node-0"), {"broken": "True"}), gated_pod(c="c")],
        ["node-0"],
        {"node-0": "fits"},
        config={"feature_gates": parse_feature_gates("DRADeviceBindingConditions=false")},
    ),
    Case(
        "allocated device no longer published: the claim is available on no node",
        [*ONE_GPU, allocated(claim("c"), "node-0", ["gpu-7"], [("p", "p-uid")]), gated_pod(c="c")],
        ["node-0"],
        {
            "node-0": f"unresolvable: {NOT_AVAILABLE}: claim default/c: device {DRIVER}/node-0/gpu-7 "
            "is no longer published"
        },
    ),
    Case("pod without claims", [*ONE_GPU, pod("p")], ["node-0"], "untouched"),
    Case(
        "pod of another scheduler",
        [*ONE_GPU, claim("c"), pod("p", claims={"c": "c"}, scheduler="default-scheduler")],
        ["node-0"],
        "untouched",
        config={"scheduler_names": ("dra-extender-scheduler",)},
    ),
]


# --- running a case -----------------------------------------------------------------------------


def outcome(verdict: NodeVerdict) -> str:
    failure = verdict.failure
    if failure is not None:
        return f"{'resolvable' if failure.resolvable else 'unresolvable'}: {failure.reason}"
    devices = []
    for result in verdict.results:
        for d in result.devices:
            text = f"{d.request}={d.pool}/{d.device}{'+admin' if d.admin_access else ''}"
            if d.binding_conditions or d.binding_failure_conditions:
                until, unless = ", ".join(d.binding_conditions), ", ".join(d.binding_failure_conditions)
                text += f"[until {until}, unless {unless}]"
            devices.append(text)
    return f"fits: {' '.join(devices)}" if devices else "fits"


def run(case: Case) -> dict[str, str] | str:
    """What the verbs would decide for the case's pod, straight from the plan."""
    ctx, _ = local_context(made(case.objects), **case.config)
    if case.setup is not None:
        case.setup(ctx)
    info = case.pod(ctx) if callable(case.pod) else ctx.state.pod("default", case.pod)
    assert info is not None
    if not ctx.config.handles(info) or not info.wants_devices:
        return "untouched"
    ctx.memory.expire()  # as every verb does first
    try:
        plan = PodPlan.build(ctx, info)
    except PodWaits as exc:
        return f"waits: {exc}"
    verdicts = {name: plan.verdicts.verdict(ctx.state.nodes[name]) for name in case.nodes}
    fatal = [v.failure for v in verdicts.values() if v.failure is not None and v.failure.kind == "fatal"]
    if fatal:
        return f"fatal: {fatal[0].reason}"
    return {name: outcome(verdict) for name, verdict in verdicts.items()}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_plan(case: Case) -> None:
    assert run(case) == case.want


def test_a_plan_is_freed_when_its_verb_is_done() -> None:
    """A plan and its verdicts refer to each other without a reference cycle: with the cyclic
    collector off, a plan that filtered a node goes as soon as the last reference to it does
    (a cycle left every verb's plan, allocator and failures to the collector)."""
    ctx, _ = local_context([*gpu_cluster(), template("t"), pod("p", templates={"gpu": "t"})])
    info = ctx.state.pod("default", "p")
    assert info is not None
    gc.disable()
    try:
        plan = PodPlan.build(ctx, info)
        assert plan.verdicts.verdict(ctx.state.nodes["node-0"]).fits
        gone = weakref.ref(plan)
        del plan
        assert gone() is None
    finally:
        gc.enable()
