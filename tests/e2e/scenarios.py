"""The end-to-end scenarios: each asserts on the objects in the real API server.

A scenario gets a namespace and nodes of its own (named after it), returns one line of
evidence, and raises ``AssertionError`` with what it saw when the cluster disagrees. After
each one the runner checks the cluster-wide invariants (no device in two claims, every bound
pod's claims allocated, reserved for it and on its node) and removes what it created.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from tests.e2e import objects as o
from tests.e2e.api import Api, ApiError, wait_for
from tests.e2e.control_plane import ControlPlane, Pair


@dataclass
class Scene:
    """What a scenario works with: the control plane, its namespace, its nodes."""

    name: str
    plane: ControlPlane
    pair: Pair
    nodes: list[str] = field(default_factory=list)

    @property
    def api(self) -> Api:
        return self.plane.api

    @property
    def ns(self) -> str:
        return f"e2e-{self.name}"

    def add_nodes(self, count: int, devices: int, model: str = "a100", prefix: str = "") -> list[str]:
        added = [f"{self.name}-{prefix}n{len(self.nodes) + i}" for i in range(count)]
        for name in added:
            o.add_node(self.api, name, devices, model)
        self.nodes.extend(added)
        return added

    def templates(self) -> None:
        for count in (1, 2):
            self.api.apply(o.template(f"gpu-{count}", self.ns, count))

    def pods(self, prefix: str, count: int, template: str = "gpu-1", **kwargs: object) -> list[str]:
        made = [f"{prefix}-{i}" for i in range(count)]
        for name in made:
            self.api.create(o.pod(name, self.ns, template_name=template, **kwargs))  # type: ignore[arg-type]
        return made

    def pods_over_time(self, prefix: str, count: int, seconds: float) -> threading.Thread:
        """Create ``count`` one-device pods spread over ``seconds``, in the background; a create
        refused while the API server is away is tried again until it lands."""

        def create_all() -> None:
            for name in (f"{prefix}-{i}" for i in range(count)):
                body = o.pod(name, self.ns, template_name="gpu-1")

                def create(body: o.Obj = body) -> bool:
                    return self._create_once(body)

                wait_for(f"pod {name} created", create, 120, interval=0.5)
                time.sleep(seconds / count)

        thread = threading.Thread(target=create_all, daemon=True)
        thread.start()
        return thread

    def _create_once(self, body: o.Obj) -> bool:
        try:
            self.api.create(body)
        except ApiError as exc:
            if exc.status == 409:
                return True  # created by an attempt whose answer was lost
            if exc.status == 0 or exc.status >= 500:
                return False
            raise
        return True

    def cleanup(self) -> None:
        o.clear_namespace(self.api, self.ns)
        for name in self.nodes:
            o.remove_node(self.api, name)


Scenario = Callable[[Scene], str]


def _no_double(scene: Scene) -> None:
    double = o.double_allocations(scene.api)
    assert not double, f"devices in two claims: {double}"


def _sound(scene: Scene) -> None:
    """No device in two claims; every bound pod's claims allocated, reserved for it, on its node."""
    _no_double(scene)
    bad = o.inconsistencies(scene.api, scene.ns)
    assert not bad, bad


def template_claim(scene: Scene) -> str:
    """A pod from a ResourceClaimTemplate: the real controller makes the claim, the real
    scheduler binds through the extender, the API server accepts allocation + reservedFor."""
    scene.add_nodes(1, 2)
    scene.templates()
    start = time.monotonic()
    (name,) = scene.pods("pod", 1)
    o.wait_bound(scene.api, scene.ns, 1, 60)
    took = time.monotonic() - start
    p = scene.api.get("Pod", name, scene.ns)
    (claim_name,) = o.pod_claim_names(p)
    c = scene.api.get("ResourceClaim", claim_name, scene.ns)
    annotations = c["metadata"].get("annotations") or {}
    assert annotations.get("resource.kubernetes.io/pod-claim-name") == "gpu", annotations
    owner = (c["metadata"].get("ownerReferences") or [{}])[0]
    assert owner.get("kind") == "Pod" and owner.get("uid") == p["metadata"]["uid"], owner
    _sound(scene)
    managers = sorted(
        {(m["manager"], m.get("subresource", "")) for m in c["metadata"].get("managedFields", [])}
    )
    return (
        f"{name} bound to {p['spec']['nodeName']} in {took:.1f} s; claim {claim_name} (controller-made) "
        f"holds {[d for _, _, d in o.allocated_devices(c)]}, reserved for the pod; writers {managers}"
    )


def saturation(scene: Scene) -> str:
    """More pods than devices, 1- and 2-device claims over several nodes: exactly as many bind
    as fit, no device in two claims, the rest Pending with the extender's reason."""
    nodes = scene.add_nodes(3, 4)
    scene.templates()
    twos = scene.pods("two", 5, template="gpu-2")
    ones = scene.pods("one", 7)
    # 17 devices asked of 12: wait until nothing pending fits anywhere, then hold still.

    def saturated() -> bool:
        b = o.bound(scene.api, scene.ns)
        free = o.free_devices(scene.api, nodes)
        pending_need = [2 if n in twos else 1 for n in twos + ones if n not in b]
        return bool(pending_need) and all(need > max(free.values()) for need in pending_need)

    start = time.monotonic()
    wait_for("the cluster saturated", saturated, 120, interval=1.0)
    took = time.monotonic() - start
    b = o.held_steady(scene.api, scene.ns, 10)
    _sound(scene)
    used = sum(2 if n in twos else 1 for n in b)
    free = o.free_devices(scene.api, nodes)
    assert used + sum(free.values()) == 12, (used, free)
    pending = sorted(set(twos + ones) - set(b))
    def every_pending_pod_told() -> list[list[str]] | None:
        messages = [o.failed_scheduling(scene.api, scene.ns, n) for n in pending]
        return messages if all(messages) else None

    messages = wait_for("FailedScheduling events on every pending pod", every_pending_pod_told, 60)
    sample = messages[0][-1]
    assert "no combination of devices" in sample or "claim" in sample, sample
    return (
        f"{len(b)} of {len(twos) + len(ones)} pods bound using {used} of 12 devices in {took:.1f} s "
        f"(free per node {sorted(free.values())}); {len(pending)} Pending, e.g. {sample!r}"
    )


def release(scene: Scene) -> str:
    """Pods finish (as a kubelet marks them) or are deleted: the real controller releases and
    deletes their claims, and the pending pods are scheduled."""
    scene.add_nodes(2, 2)
    scene.templates()
    names = scene.pods("pod", 6)
    first, _ = o.wait_bound(scene.api, scene.ns, 4, 60)
    o.held_steady(scene.api, scene.ns, 3)
    done, gone = sorted(first)[0], sorted(first)[1]
    claims_of = {n: o.pod_claim_names(scene.api.get("Pod", n, scene.ns)) for n in (done, gone)}
    start = time.monotonic()
    o.finish(scene.api, scene.ns, done)
    scene.api.delete("Pod", gone, scene.ns, grace=0)

    def released() -> bool:
        present = {c["metadata"]["name"] for c in scene.api.list("ResourceClaim", scene.ns)}
        return not any(c in present for c in claims_of[done] + claims_of[gone])

    wait_for("claims of the finished and the deleted pod removed", released, 60)
    claims_gone = time.monotonic() - start
    waiting = sorted(set(names) - set(first))
    wait_for(f"{waiting} bound", lambda: all(n in o.bound(scene.api, scene.ns) for n in waiting), 120)
    all_bound = time.monotonic() - start
    _sound(scene)
    return (
        f"{done} Succeeded and {gone} deleted: their claims removed after {claims_gone:.1f} s, "
        f"the Pending {waiting} bound {all_bound:.1f} s after the release"
    )


def shared_claim(scene: Scene) -> str:
    """One ResourceClaim used by two pods: both on one node, reserved for both."""
    scene.add_nodes(2, 1)
    scene.api.create(o.claim("shared", scene.ns))
    for name in ("a", "b"):
        scene.api.create(o.pod(name, scene.ns, claim_name="shared"))
    b, took = o.wait_bound(scene.api, scene.ns, 2, 60)
    c = scene.api.get("ResourceClaim", "shared", scene.ns)
    reserved = sorted(r["name"] for r in c["status"].get("reservedFor") or [])
    assert len(set(b.values())) == 1, b
    assert reserved == ["a", "b"], reserved
    _sound(scene)
    return f"both pods bound to {set(b.values())} in {took:.1f} s; claim reserved for {reserved}"


def no_match_then_late_slice(scene: Scene) -> str:
    """A selector nothing matches: Pending with a clear reason; then a slice that matches
    appears on a new node, and the pod is scheduled there."""
    scene.add_nodes(1, 2)
    selector = f'device.attributes["{o.DRIVER}"].model == "h100"'
    scene.api.create(o.claim("h100", scene.ns, selector=selector))
    scene.api.create(o.pod("pod", scene.ns, claim_name="h100"))
    messages = wait_for(
        "a FailedScheduling event", lambda: o.failed_scheduling(scene.api, scene.ns, "pod"), 60
    )
    assert "h100" in messages[-1] or "no combination of devices" in messages[-1], messages[-1]
    assert not o.bound(scene.api, scene.ns)
    start = time.monotonic()
    (late,) = scene.add_nodes(1, 1, model="h100", prefix="late-")
    b, _ = o.wait_bound(scene.api, scene.ns, 1, 120)
    took = time.monotonic() - start
    assert b == {"pod": late}, b
    return f"Pending with {messages[-1]!r}; bound to {late} {took:.1f} s after its slice appeared"


def device_class_changed(scene: Scene) -> str:
    """A DeviceClass whose selector matches nothing, changed to one that matches: the pending
    pod is scheduled with the new class."""
    scene.add_nodes(1, 2)
    device_class: o.Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": f"{scene.ns}.example.com"},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": f'device.driver == "{o.DRIVER}" && '
                        f'device.attributes["{o.DRIVER}"].model == "b200"'
                    }
                }
            ]
        },
    }
    scene.api.apply(device_class)
    try:
        scene.api.create(o.claim("c", scene.ns, device_class=device_class["metadata"]["name"]))
        scene.api.create(o.pod("pod", scene.ns, claim_name="c"))
        wait_for("a FailedScheduling event", lambda: o.failed_scheduling(scene.api, scene.ns, "pod"), 60)
        assert not o.bound(scene.api, scene.ns)
        start = time.monotonic()
        device_class["spec"]["selectors"][0]["cel"]["expression"] = f'device.driver == "{o.DRIVER}"'
        device_class["metadata"].pop("resourceVersion", None)
        scene.api.apply(device_class)
        o.wait_bound(scene.api, scene.ns, 1, 120)
        took = time.monotonic() - start
    finally:
        scene.cleanup()
        scene.nodes.clear()
        scene.api.delete("DeviceClass", device_class["metadata"]["name"])
    return f"Pending while the class matched nothing; bound {took:.1f} s after the class changed"


def extender_restart(scene: Scene) -> str:
    """The extender killed (by PID) while pods arrive and are scheduled, and started again."""
    scene.add_nodes(3, 2)
    scene.templates()
    arriving = scene.pods_over_time("pod", 10, seconds=4.0)
    time.sleep(1.5)
    scene.pair.extender.stop(signal.SIGKILL)
    killed_with = len(o.bound(scene.api, scene.ns))
    time.sleep(3.0)
    scene.pair.extender.start()
    arriving.join()
    b, took = o.wait_bound(scene.api, scene.ns, 6, 120)
    b = o.held_steady(scene.api, scene.ns, 8)
    assert len(b) == 6, b
    _sound(scene)
    return (
        f"killed with {killed_with} of 10 arriving pods bound; 3 s later restarted; 6 bound "
        f"({took:.1f} s after the last arrived), 4 Pending, nothing doubled"
    )


def apiserver_outage(scene: Scene) -> str:
    """The API server stopped for 20 s while pods are being scheduled; meanwhile the extender
    is restarted without --kubernetes-version, so it must start and wait for the API server."""
    scene.add_nodes(3, 2)
    scene.templates()
    arriving = scene.pods_over_time("pod", 10, seconds=4.0)
    time.sleep(1.5)
    with_before = len(o.bound(scene.api, scene.ns))
    scene.plane.apiserver.stop()
    stopped = time.monotonic()
    extender = scene.pair.extender
    extender.stop(signal.SIGKILL)
    extender.argv = _without_flag(extender.argv, "--kubernetes-version")
    extender.start()  # waits for /healthz: it must come up with no API server to read the version of
    ready_while_down = httpx.get(f"{scene.pair.probe_url}/readyz").status_code
    time.sleep(max(0.0, 20.0 - (time.monotonic() - stopped)))
    scene.plane.start_apiserver()
    arriving.join()
    wait_for("the extender ready", lambda: httpx.get(f"{scene.pair.probe_url}/readyz").status_code == 200, 60)
    b, took = o.wait_bound(scene.api, scene.ns, 6, 180)
    b = o.held_steady(scene.api, scene.ns, 8)
    assert len(b) == 6, b
    assert ready_while_down == 503, ready_while_down
    _sound(scene)
    return (
        f"{with_before} of 10 arriving pods bound when the API server stopped; the extender restarted "
        f"without --kubernetes-version meanwhile (/healthz 200, /readyz {ready_while_down}); 20 s later "
        f"the API server back; 6 bound {took:.1f} s after, 4 Pending, nothing doubled"
    )


def _without_flag(argv: list[str], flag: str) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == flag:
            skip = True
        else:
            out.append(arg)
    return out


def two_replicas(scene: Scene) -> str:
    """The shipped layout: two kube-scheduler + extender pairs, kube-scheduler's Lease decides;
    the leader pair is killed while pods are being scheduled; the other takes over."""
    leader = scene.pair
    standby = scene.plane.pair()
    standby.start()
    holder = _lease_holder(scene.api)
    scene.add_nodes(4, 2)
    scene.templates()
    arriving = scene.pods_over_time("pod", 12, seconds=4.0)
    time.sleep(1.5)
    killed = time.monotonic()
    leader.stop(signal.SIGKILL)
    with_before = len(o.bound(scene.api, scene.ns))
    arriving.join()
    o.wait_bound(scene.api, scene.ns, 8, 180)
    def moved() -> str | None:
        now = _lease_holder(scene.api)
        return now if now != holder else None

    new_holder = wait_for("a new Lease holder", moved, 60)
    b = o.held_steady(scene.api, scene.ns, 8)
    assert len(b) == 8, b
    _sound(scene)
    scene.plane.pairs.remove(standby)
    scene.pair = standby  # the runner keeps the survivor as the active pair
    leader.start()  # the killed pair comes back as the standby, as a Deployment would restart it
    scene.plane.pairs.insert(0, leader)
    return (
        f"Lease {holder} -> {new_holder}; the leader pair killed with {with_before} of 12 arriving pods "
        f"bound; 8 bound {time.monotonic() - killed:.0f} s after the kill, 4 Pending, nothing doubled"
    )


def _lease_holder(api: Api) -> str:
    lease = api.get("Lease", "dra-extender-scheduler", "dra-system")
    holder: str = lease["spec"].get("holderIdentity") or ""
    return holder


def preemption(scene: Scene) -> str:
    """A high-priority pod needing devices held by low-priority pods, with the shipped
    preemptVerb: records what this kube-scheduler does (it asks an extender only about nodes
    where its own, device-blind dry run found victims)."""
    scene.add_nodes(1, 2)
    scene.templates()
    for name, value in (("e2e-low", 10), ("e2e-high", 1000)):
        scene.api.apply(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
        )
    scene.pods("low", 2, priority_class="e2e-low")
    o.wait_bound(scene.api, scene.ns, 2, 60)
    before = _preempt_calls(scene)
    scene.api.create(o.pod("high", scene.ns, template_name="gpu-2", priority_class="e2e-high"))
    messages = wait_for(
        "a FailedScheduling event on the preemptor",
        lambda: o.failed_scheduling(scene.api, scene.ns, "high"),
        60,
    )
    time.sleep(20.0)
    low_left = sorted(n for n in o.bound(scene.api, scene.ns) if n.startswith("low"))
    high = scene.api.get("Pod", "high", scene.ns)
    nominated = high["status"].get("nominatedNodeName")
    latest = next(
        (c.get("message", "") for c in high["status"].get("conditions") or [] if c["type"] == "PodScheduled"),
        messages[-1],
    )
    calls = _preempt_calls(scene) - before
    events = sorted({e.get("reason", "") for e in scene.api.events(scene.ns, "high")})
    assert low_left == ["low-0", "low-1"] and not high["spec"].get("nodeName"), (low_left, high["spec"])
    return (
        f"kube-scheduler {scene.plane.version} evicted nothing, "
        f"called the preempt verb {calls:.0f} times; "
        f"preemptor Pending (nominated: {nominated or 'none'}, events {events}): {latest!r}"
    )


def preemption_by_eviction(scene: Scene) -> str:
    """The same need with the extender's own preemption (--preemption=evict): the fewest,
    lowest-priority victims are evicted through the Eviction API, a pod its budget protects is
    spared, the preemptor is bound where the victims were, and a lower-priority pod waiting
    meanwhile does not get the freed devices."""
    extender = scene.pair.extender
    normal = list(extender.argv)
    extender.stop()
    extender.argv = [*normal, "--preemption", "evict"]
    extender.start()
    try:
        return _evict_and_bind(scene)
    finally:
        scene.cleanup()
        scene.nodes.clear()
        extender.stop()
        extender.argv = normal
        extender.start()


def _evict_and_bind(scene: Scene) -> str:
    n0, n1 = scene.add_nodes(2, 2)
    scene.templates()
    for name, value in (
        ("e2e-p5", 5),
        ("e2e-p10", 10),
        ("e2e-p20", 20),
        ("e2e-p30", 30),
        ("e2e-p40", 40),
        ("e2e-p1000", 1000),
    ):
        scene.api.apply(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
        )
    # n0: x10 (its budget allows no disruption) and y20; n1: z30 and w40.
    for name, prio, node_name in (
        ("x10", "e2e-p10", n0),
        ("y20", "e2e-p20", n0),
        ("z30", "e2e-p30", n1),
        ("w40", "e2e-p40", n1),
    ):
        scene.api.create(
            o.pod(
                name,
                scene.ns,
                template_name="gpu-1",
                priority_class=prio,
                node_name=node_name,
                labels={"e2e": "yes", "app": name},
            )
        )
    scene.api.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "x10", "namespace": scene.ns},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "x10"}}},
        }
    )
    o.wait_bound(scene.api, scene.ns, 4, 60)
    created = time.monotonic()
    scene.api.create(o.pod("high", scene.ns, template_name="gpu-2", priority_class="e2e-p1000"))
    time.sleep(0.5)
    scene.api.create(o.pod("low", scene.ns, template_name="gpu-1", priority_class="e2e-p5"))
    victims_gone: dict[str, float] = {}

    def bound_high() -> str | None:
        pods = {p["metadata"]["name"]: p for p in scene.api.list("Pod", scene.ns)}
        for name in ("x10", "y20", "z30", "w40"):
            if name not in pods and name not in victims_gone:
                victims_gone[name] = time.monotonic() - created
        node: str | None = pods.get("high", {}).get("spec", {}).get("nodeName")
        return node

    node = wait_for("the preemptor bound", bound_high, 120, interval=0.5)
    bound_after = time.monotonic() - created
    o.held_steady(scene.api, scene.ns, 5)
    left = o.bound(scene.api, scene.ns)
    assert sorted(victims_gone) == ["w40", "z30"], victims_gone
    assert node == n1, node
    assert "low" not in left and {"x10", "y20"} <= set(left), left
    _sound(scene)
    preempted = [
        e.get("message", "")
        for name in victims_gone
        for e in scene.api.events(scene.ns, name)
        if e.get("reason") == "Preempted"
    ]
    assert len(preempted) == 2 and all(m.startswith("Preempted by pod ") for m in preempted), preempted
    timeline = ", ".join(
        f"{n} evicted and gone at +{t:.1f} s" for n, t in sorted(victims_gone.items(), key=lambda kv: kv[1])
    )
    return (
        f"high (priority 1000, 2 GPUs) created at +0 s; {timeline}; bound to {node} at "
        f"+{bound_after:.1f} s; x10 (budget) and y20 kept on {n0}; low (priority 5) still Pending; "
        f"events: {preempted[0]!r}"
    )


def _preempt_calls(scene: Scene) -> float:
    text = httpx.get(f"{scene.pair.probe_url}/metrics").text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("dra_extender_requests_total") and 'verb="preempt"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def throughput(scene: Scene) -> str:
    """25 nodes x 4 devices, 100 one-device pods: from the first create to all bound, with the
    extender, then the same pods with kube-scheduler's in-tree DynamicResources plugin."""
    scene.add_nodes(25, 4)
    scene.templates()
    ours = _timed_batch(scene, "ext", scheduler=None)
    in_tree = scene.plane.in_tree_scheduler("in-tree-dra")
    in_tree.start()
    try:
        theirs = _timed_batch(scene, "itr", scheduler="in-tree-dra")
    finally:
        in_tree.stop()
    return (
        f"100 pods bound in {ours:.1f} s with the extender ({100 / ours:.1f} pods/s), "
        f"{theirs:.1f} s with the in-tree plugin ({100 / theirs:.1f} pods/s): ratio {theirs / ours:.2f}"
    )


def _timed_batch(scene: Scene, prefix: str, scheduler: str | None) -> float:
    kwargs = {"scheduler": scheduler} if scheduler else {}
    # One pod first, untimed: a scheduler that has just started is not what this compares. The
    # extender in particular allocates nothing until its takeover is over (the bind timeout after
    # a start: docs/reliability.md, "Handover"), and kube-scheduler backs off the binds it refused.
    scene.api.create(o.pod(f"{prefix}-warm", scene.ns, template_name="gpu-1", **kwargs))  # type: ignore[arg-type]
    warm = f"{prefix}-warm"
    wait_for(f"{warm} bound", lambda: warm in o.bound(scene.api, scene.ns), 120, interval=0.2)
    o.clear_namespace(scene.api, scene.ns)
    scene.templates()
    start = time.monotonic()
    for i in range(100):
        scene.api.create(o.pod(f"{prefix}-{i}", scene.ns, template_name="gpu-1", **kwargs))  # type: ignore[arg-type]
    wait_for(
        f"100 {prefix} pods bound",
        lambda: len([n for n in o.bound(scene.api, scene.ns) if n.startswith(prefix)]) >= 100,
        600,
        interval=0.2,
    )
    took = time.monotonic() - start
    _sound(scene)
    o.clear_namespace(scene.api, scene.ns)
    scene.templates()
    return took


def placement(scene: Scene) -> str:
    """Big requests after small ones (docs/scheduling-policy.md, "Placement quality"): 4 nodes
    x 4 devices, six 1-device pods one after the other, then two 4-device pods; first with the
    extender (its default score policy, combined by the real kube-scheduler with its own
    scores), then with the in-tree DynamicResources plugin alone. Each pod asks for 4 CPUs, so
    kube-scheduler's LeastAllocated spreads them unless the extender's score says otherwise."""
    scene.add_nodes(4, 4)
    scene.templates()
    scene.api.apply(o.template("gpu-4", scene.ns, 4))
    ours = _small_then_big(scene, "ext", scheduler=None)
    o.clear_namespace(scene.api, scene.ns)
    scene.templates()
    scene.api.apply(o.template("gpu-4", scene.ns, 4))
    in_tree = scene.plane.in_tree_scheduler("in-tree-dra")
    in_tree.start()
    try:
        theirs = _small_then_big(scene, "itr", scheduler="in-tree-dra")
    finally:
        in_tree.stop()
    assert ours[0] == 0, f"the extender left big pods unplaced: small ones on {ours[1]}"
    return (
        f"4-device pods not placed: {ours[0]} of 2 with the extender (1-device pods per node {ours[1]}), "
        f"{theirs[0]} of 2 with the in-tree plugin ({theirs[1]})"
    )


def _small_then_big(scene: Scene, prefix: str, scheduler: str | None) -> tuple[int, list[int]]:
    """Six 1-device pods, each bound before the next is made, then two 4-device pods: how many
    of those found no node, and the 1-device pods per node (most first)."""
    kwargs = {"scheduler": scheduler} if scheduler else {}

    def create(name: str, template: str) -> None:
        body = o.pod(name, scene.ns, template_name=template, **kwargs)  # type: ignore[arg-type]
        body["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "4"}
        scene.api.create(body)

    for i in range(6):
        create(f"{prefix}-small-{i}", "gpu-1")
        name = f"{prefix}-small-{i}"
        wait_for(f"{name} bound", lambda name=name: name in o.bound(scene.api, scene.ns), 60, interval=0.1)
    big = [f"{prefix}-big-{i}" for i in range(2)]
    for name in big:
        create(name, "gpu-4")

    # A first attempt may come before the claim controller made the claim; both schedulers
    # retry as soon as it exists. What is not bound within a few seconds found no node.
    with contextlib.suppress(TimeoutError):
        wait_for(f"{prefix} big pods bound", lambda: set(big) <= set(o.bound(scene.api, scene.ns)), 8,
                 interval=0.2)
    unbound = [n for n in big if n not in o.bound(scene.api, scene.ns)]
    told = all(o.failed_scheduling(scene.api, scene.ns, n) for n in unbound)
    assert told, f"{unbound}: not bound, and no FailedScheduling event"
    unplaced = len(unbound)
    _sound(scene)
    per_node: dict[str, int] = {}
    for name, node_name in o.bound(scene.api, scene.ns).items():
        if "-small-" in name:
            per_node[node_name] = per_node.get(node_name, 0) + 1
    return unplaced, sorted(per_node.values(), reverse=True)


SCENARIOS: dict[str, Scenario] = {
    "template-claim": template_claim,
    "saturation": saturation,
    "release": release,
    "shared-claim": shared_claim,
    "no-match-then-late-slice": no_match_then_late_slice,
    "device-class-changed": device_class_changed,
    "extender-restart": extender_restart,
    "apiserver-outage": apiserver_outage,
    "two-replicas": two_replicas,
    "preemption": preemption,
    "preemption-by-eviction": preemption_by_eviction,
    "throughput": throughput,
    "placement": placement,
}
