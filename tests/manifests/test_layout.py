"""The one-pod layout upgrades cleanly: every replica is Ready, so a rolling update completes.

A rolling update with maxUnavailable 0 removes an old pod only once a new one is Ready, and the
new one starts as a standby. So the standby's readiness must not wait for leadership: here two
replicas of the shipped extender container run against one test API server and both must
report ready on the port kubelet probes. kube-scheduler's own /readyz does not depend on its
lease either (cmd/kube-scheduler/app/server.go starts and syncs informers before leader
election), so the pod's readiness is the extender's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from extender.api.server import servers
from extender.cli import _parser, build_app, config_from_args
from tests.api.threaded import free_port, listening
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer
from tests.kube import objects
from tests.manifests.loader import LAYOUTS, MANIFESTS, built, container, find

Objects = tuple[dict[str, Any], ...]


def deployment(objects: Objects) -> dict[str, Any]:
    return find(objects, "Deployment", "dra-extender")


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_rolling_update_keeps_two_and_surges_one(layout: Any) -> None:
    objects = built(layout)
    spec = deployment(objects)["spec"]
    assert spec["replicas"] == 2
    rolling = {"maxSurge": 1, "maxUnavailable": 0}
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": rolling}
    pod = spec["template"]["spec"]
    assert "readinessGates" not in pod  # Ready means: both containers' probes pass
    assert {c["name"] for c in pod["containers"]} == {"kube-scheduler", "extender"}
    scheduler = container(objects, "kube-scheduler")
    assert scheduler["readinessProbe"]["httpGet"]["path"] == "/readyz"
    extender = container(objects, "extender")
    args = _parser().parse_args(extender["args"])
    probe = extender["readinessProbe"]["httpGet"]
    named = {p["name"]: p["containerPort"] for p in extender["ports"]}
    assert probe["path"] == "/readyz" and named[probe["port"]] == args.probe_port
    assert extender["livenessProbe"]["httpGet"]["port"] == probe["port"]
    # One active pod: kube-scheduler's lease decides, the extender does not elect a leader of its own.
    assert not args.leader_elect


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_budget_priority_and_resources(layout: Any) -> None:
    objects = built(layout)
    spec = deployment(objects)["spec"]
    budget = find(objects, "PodDisruptionBudget", "dra-extender")["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert budget["selector"]["matchLabels"].items() <= labels.items()
    assert budget["maxUnavailable"] == 1 < spec["replicas"]  # a drain never takes both
    pod = spec["template"]["spec"]
    priority = find(objects, "PriorityClass", pod["priorityClassName"])
    assert priority["value"] >= 1_000_000_000 and not priority.get("globalDefault", False)
    for c in pod["containers"]:
        assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"], c["name"]
        assert c["resources"]["limits"]["memory"], c["name"]


def test_network_policy_lets_in_only_the_probe_port() -> None:
    objects = built(MANIFESTS)
    policy = find(objects, "NetworkPolicy", "dra-extender")["spec"]
    labels = deployment(objects)["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    probe_port = _parser().parse_args(container(objects, "extender")["args"]).probe_port
    assert rule["ports"] == [{"protocol": "TCP", "port": probe_port}]
    service = find(objects, "Service", "dra-extender-metrics")["spec"]
    assert [p["port"] for p in service["ports"]] == [probe_port]


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = str(tmp_path_factory.mktemp("kube") / "kubeconfig")
    with ApiServer(bookmark_interval=0.2) as server:
        store = server.store
        store.seed(BY_KIND["DeviceClass"], objects.device_class())
        store.seed(BY_KIND["Node"], objects.node("node-a"))
        store.seed(BY_KIND["ResourceSlice"], objects.resource_slice("node-a"))
        server.write_kubeconfig(path)
        yield path


def test_two_replicas_are_both_ready(kubeconfig: str) -> None:
    shipped = container(built(MANIFESTS), "extender")["args"]
    probe_ports = []
    with ExitStack() as stack:
        for _ in range(2):
            port, probe_port = free_port(), free_port()
            args = [str(port) if prev == "--port" else str(probe_port) if prev == "--probe-port" else arg
                    for prev, arg in zip(["", *shipped], shipped, strict=False)]
            parsed = _parser().parse_args([*args, "--kubeconfig", kubeconfig])
            config = config_from_args(parsed)
            app = build_app(config, parsed.enable_debug_endpoints)
            stack.enter_context(listening(servers(app, config.host, config.port, probe_port=probe_port,
                                                  log_level="warning")))
            probe_ports.append(probe_port)
        deadline = time.monotonic() + 20
        with httpx.Client(timeout=5) as client:
            for probe_port in probe_ports:
                while (answer := client.get(f"http://127.0.0.1:{probe_port}/readyz")).status_code != 200:
                    assert time.monotonic() < deadline, f"a replica stays unready: {answer.text}"
                    time.sleep(0.05)
