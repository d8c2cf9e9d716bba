"""``dra-extender simulate``: its answers are what the service then does for the same pods.

Each case runs simulate, then drives the HTTP service (local mode, tests/scheduling/cluster.py)
as kube-scheduler would for the same pods in the same order (filter → prioritize → bind; on no
fit /preempt, evict, nominate, retry) and compares placements, devices and victims.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from extender import cli
from extender.config import Config
from extender.local.manifests import demo_files, read_manifests
from extender.model.pods import parse_pod
from extender.tools.simulate import pick_node, simulate
from tests.scheduling.cluster import Service, bind_call, claim_spec, filter_call, request, template

DRIVER = "gpu.example.com"


def pod_object(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": name, "namespace": "default"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def job(name: str, template_name: str = "four-gpus", priority: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "img"}],
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template_name}],
    }
    if priority is not None:
        spec["priority"] = priority
    return pod_object(name, spec)


def plain(name: str) -> dict[str, Any]:
    return pod_object(name, {"containers": [{"name": "main", "image": "img"}]})


FOUR = template("four-gpus", claim_spec(request("gpus", count=4)))
# The demo has two nodes of 4 GPUs: the 1-GPU pod (highest priority) goes first, the pair next,
# one 4-GPU job fits the other node, the rest stay pending; the plain pod goes anywhere.
BATCH = [FOUR, job("job-0"), job("job-1"), job("small", "one-gpu", priority=5), job("pair", "gpu-pair", 1),
         plain("web"), job("job-2")]


def write_pods(path: Path, objs: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all(objs), encoding="utf-8")
    return path


def demo_objects() -> list[dict[str, Any]]:
    return [doc for _, doc in read_manifests(demo_files())]


def devices_of(svc: Service, name: str) -> list[tuple[str, str, str]]:
    info = svc.state.pod("default", name)
    assert info is not None
    return sorted(
        (r.driver, r.pool, r.device)
        for c in svc.state.claims.values()
        if c.allocation is not None and any(ref.uid == info.uid for ref in c.reserved_for)
        for r in c.allocation.devices
    )


async def kube_scheduler(client: httpx.AsyncClient, svc: Service, name: str) -> tuple[str | None, list[str]]:
    """One scheduling cycle of ``name`` as kube-scheduler runs it with this extender: the node it
    ends on (None: pending) and the pods it preempted."""
    nodes = svc.node_names()
    result = await filter_call(client, svc.pod(name), nodes)
    preempted: list[str] = []
    if not result["NodeNames"] and result["FailedNodes"]:
        body = {"Pod": svc.pod(name), "NodeNameToMetaVictims": {n: {"Pods": [], "NumPDBViolations": 0}
                                                                for n in result["FailedNodes"]}}
        chosen = (await client.post("/preempt", json=body)).json()["NodeNameToMetaVictims"]
        if chosen:
            by_uid = {p.uid: p for p in svc.state.pods.values()}
            victims = {n: [by_uid[v["UID"]] for v in m["Pods"]] for n, m in chosen.items()}
            # No PDBs here: the node whose most important victim matters least (upstream's
            # pickOneNodeForPreemption, second rule); these cases never tie on it.
            node = min(victims, key=lambda n: max(p.priority for p in victims[n]))
            for victim in victims[node]:
                assert svc.cluster.delete("Pod", victim.namespace, victim.name)
                preempted.append(victim.ref)
            nominated = svc.pod(name)
            nominated["status"]["nominatedNodeName"] = node
            svc.cluster.apply(nominated)
            result = await filter_call(client, svc.pod(name), [node])
    passed = result["NodeNames"]
    if not passed:
        return None, preempted
    chosen_node = passed[0]
    if len(passed) > 1:
        scores = (await client.post("/prioritize", json={"Pod": svc.pod(name), "NodeNames": passed})).json()
        chosen_node = max(scores, key=lambda h: h["Score"])["Host"]
    assert await bind_call(client, svc.pod(name), chosen_node) == ""
    return chosen_node, preempted


def service_placements(base: list[dict[str, Any]], batch: list[dict[str, Any]]) -> dict[str, Any]:
    """What the service does with ``batch`` on a cluster of ``base``: per pod, node, devices, victims."""
    svc = Service([*base, *(o for o in batch if o["kind"] != "Pod")])
    pods = [o for o in batch if o["kind"] == "Pod"]
    for obj in pods:
        svc.cluster.apply(obj)
    # kube-scheduler's queue: priority first, then arrival.
    order = sorted((o["metadata"]["name"] for o in pods), key=lambda n: -parse_pod(svc.pod(n)).priority)

    async def run(client: httpx.AsyncClient) -> dict[str, Any]:
        out = {}
        for name in order:
            node, preempted = await kube_scheduler(client, svc, name)
            out[name] = (node, devices_of(svc, name) if node else [], preempted)
        return out

    placements: dict[str, Any] = svc.run(run)
    return placements


def simulated(config: Config, batch: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for p in simulate(config, ((f"object {i}", o) for i, o in enumerate(batch))):
        devices = sorted((d["driver"], d["pool"], d["device"]) for d in p.devices)
        out[p.pod.removeprefix("default/")] = (p.node, devices, p.preempted)
    return out


def test_the_demo_batch_lands_where_the_service_then_puts_it():
    expected = service_placements(demo_objects(), BATCH)
    got = simulated(Config(), BATCH)
    assert got == expected
    assert list(got) == ["small", "pair", "job-0", "job-1", "web", "job-2"]  # queue order
    # The batch does not fit: one 4-GPU job of three.
    assert sum(1 for name in ("job-0", "job-1", "job-2") if got[name][0]) == 1
    assert got["web"][0] is not None and got["web"][1] == []


def test_the_table_names_each_pod_its_node_devices_and_the_reason_it_waits(tmp_path, capsys):
    pods = write_pods(tmp_path / "pods.yaml", BATCH)
    assert cli.main(["simulate", "--pods", str(pods)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["POD", "PRIORITY", "NODE", "DEVICES", "PREEMPTED", "REASON"]
    rows = {line.split()[0]: line.split(maxsplit=5) for line in lines[1:7]}
    assert list(rows) == [f"default/{n}" for n in ("small", "pair", "job-0", "job-1", "web", "job-2")]
    expected = service_placements(demo_objects(), BATCH)
    for name, (node, devices, _) in expected.items():
        row = rows[f"default/{name}"]
        assert row[2] == (node or "-")
        assert row[3] == (",".join(f"{pool}/{dev}" for _, pool, dev in devices) or "-")
        if node is None:
            assert row[5].startswith("0/3 nodes are available: ") and "request gpus" in row[5]
    assert lines[-1] == "4 of 6 pods scheduled, 2 pending, 0 preempted"


def test_json_gives_each_pod_and_a_summary(tmp_path, capsys):
    pods = write_pods(tmp_path / "pods.yaml", BATCH)
    assert cli.main(["simulate", "--pods", str(pods), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"pods", "summary"}
    assert out["summary"] == {"pods": 6, "scheduled": 4, "pending": 2, "preempted": 0}
    small = out["pods"][0]
    assert set(small) == {"pod", "priority", "node", "devices", "preempted", "reason"}
    assert small["pod"] == "default/small" and small["priority"] == 5 and small["reason"] == ""
    [device] = small["devices"]
    assert set(device) == {"claim", "request", "driver", "pool", "device"}
    assert device["driver"] == DRIVER and device["pool"] == small["node"] and device["request"] == "gpu"
    pending = [p for p in out["pods"] if p["node"] is None]
    assert len(pending) == 2 and all(p["devices"] == [] and p["reason"] for p in pending)


def busy_cluster() -> list[dict[str, Any]]:
    """The demo with both GPU nodes full: node-a's four 1-GPU pods at priorities 10..40, node-b's
    at 50..80, all bound through the service; returned as /debug/snapshot gives it."""
    low = [job(f"low-{i}", "one-gpu", priority=10 * (i + 1)) for i in range(8)]
    svc = Service([*demo_objects(), *low])

    async def fill(client: httpx.AsyncClient) -> list[dict[str, Any]]:
        for i in range(8):
            assert await bind_call(client, svc.pod(f"low-{i}"), "node-a" if i < 4 else "node-b") == ""
        response = await client.get("/debug/snapshot")
        assert response.status_code == 200
        items: list[dict[str, Any]] = response.json()["items"]
        return items

    objects: list[dict[str, Any]] = svc.run(fill)
    return objects


def test_a_preempting_batch_evicts_whom_the_service_would_and_takes_their_gpus(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    snapshot = busy_cluster()
    (state / "cluster.yaml").write_text(json.dumps({"kind": "List", "items": snapshot}), encoding="utf-8")
    batch = [template("two-gpus", claim_spec(request("gpus", count=2))), job("urgent", "two-gpus", 1000),
             job("meek", "one-gpu", 1), job("never", "two-gpus", 500)]
    batch[-1]["spec"]["preemptionPolicy"] = "Never"
    expected = service_placements(snapshot, batch[:3])  # the service's drive has no preemptionPolicy
    placements = simulate(Config(state_dir=state), ((f"object {i}", o) for i, o in enumerate(batch)))
    got = {p.pod: p for p in placements}
    urgent = got["default/urgent"]
    # node-a's two least important pods go (its highest victim, 20, is below node-b's 60).
    assert urgent.preempted == ["default/low-1", "default/low-0"]
    assert (urgent.node, sorted((d["driver"], d["pool"], d["device"]) for d in urgent.devices),
            urgent.preempted) == expected["urgent"]
    # The lower-priority pods find no room and may not, or cannot, preempt.
    assert got["default/never"].node is None and got["default/never"].preempted == []
    assert got["default/meek"].node is None and got["default/meek"].preempted == []
    assert expected["meek"] == (None, [], [])
    assert "0/3 nodes are available" in got["default/meek"].reason


def test_include_pending_queues_the_states_unbound_pods_before_the_files_as_they_arrived():
    got = simulate(Config(), [("o0", FOUR), ("o1", job("train"))], include_pending=True)
    demo = ["trainer-0", "trainer-1", "pair-0", "flex-0", "viewer-a", "viewer-b", "web-0"]
    assert [p.pod for p in got] == [f"default/{n}" for n in [*demo, "train"]]
    # The demo's pods take GPUs on both nodes: the 4-GPU job no longer fits.
    assert got[-1].node is None and "request gpus" in got[-1].reason
    assert simulate(Config(), [("o0", FOUR), ("o1", job("train"))])[0].node is not None


def test_a_pod_queued_behind_higher_priority_ones_does_not_preempt_them():
    batch = [FOUR, job("early", priority=0), job("late-a", priority=100), job("late-b", priority=100),
             job("late-c", priority=100)]
    # The three later pods outrank the early one: in queue order they come first, so the early
    # one finds both nodes taken and cannot preempt pods of higher priority.
    got = {p.pod: p for p in simulate(Config(), ((f"o{i}", o) for i, o in enumerate(batch)))}
    assert [got[f"default/late-{x}"].node is not None for x in "abc"] == [True, True, False]
    assert got["default/early"].node is None and got["default/early"].preempted == []


def test_nothing_is_written(tmp_path, monkeypatch, capsys):
    state = tmp_path / "state"
    state.mkdir()
    snapshot = {"kind": "List", "items": busy_cluster()}
    (state / "cluster.yaml").write_text(json.dumps(snapshot), encoding="utf-8")
    pods = write_pods(tmp_path / "pods.yaml", [FOUR, job("urgent", priority=1000)])
    monkeypatch.chdir(tmp_path)

    def files() -> dict[str, tuple[bytes, int]]:
        return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.rglob("*") if p.is_file()}

    before = files()
    assert cli.main(["simulate", "--state", str(state), "--pods", str(pods)]) == 0
    assert "default/low-3,default/low-2,default/low-1,default/low-0" in capsys.readouterr().out
    assert files() == before


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ([FOUR], "the pods file holds no Pod"),
        ([job("trainer-0", "one-gpu")], "pod default/trainer-0 is already in the cluster"),
        ([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {"containers": 3}}], "x"),
    ],
)
def test_a_bad_pods_file_is_refused_with_its_reason(tmp_path, capsys, content, message):
    pods = write_pods(tmp_path / "pods.yaml", content)
    assert cli.main(["simulate", "--pods", str(pods)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dra-extender simulate: ") and message in err and "Traceback" not in err


def started(name: str, priority: int, start: str = "") -> Any:
    obj = job(name, priority=priority)
    if start:
        obj["status"] = {"startTime": start}
    return parse_pod({**obj, "metadata": {**obj["metadata"], "uid": name}})


def test_pick_node_follows_kube_schedulers_order():
    # 1. fewest PDB violations wins over everything else.
    assert pick_node({"a": [started("x", 1)], "b": [started("y", 100)]}, {"a": 1, "b": 0}) == "b"
    # 2. then the lowest highest-priority victim.
    assert pick_node({"a": [started("x", 50), started("z", 1)], "b": [started("y", 40)]}, {}) == "b"
    # 3. then the lowest sum of priorities, negative ones counted as such.
    assert pick_node({"a": [started("x", 5), started("z", -3)], "b": [started("y", 5), started("w", -2)]},
                     {}) == "a"
    assert pick_node({"a": [started("x", -1), started("z", -1)], "b": [started("y", -1)]}, {}) == "b"
    # 4. then the fewest victims (a victim at the lowest priority adds nothing to the sum).
    lowest = -(2**31)
    assert pick_node({"a": [started("x", 0), started("z", lowest)], "b": [started("y", 0)]}, {}) == "b"
    # 5. then the latest-started top victim.
    early, late = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"
    assert pick_node({"a": [started("x", 5, early)], "b": [started("y", 5, late)]}, {}) == "b"
    assert pick_node({"a": [started("x", 5)], "b": [started("y", 5, late)]}, {}) == "a"  # not started: now
    # 6. then the first by name; a node without victims is no candidate.
    assert pick_node({"b": [started("x", 5, early)], "a": [started("y", 5, early)], "c": []}, {}) == "a"
    assert pick_node({}, {}) == ""


def test_the_walkthroughs_pods_file_gives_the_table_docs_usage_shows(capsys):
    # docs/usage.md runs `simulate --pods docs/examples/jobs.yaml` on the demo and shows its answer.
    root = Path(__file__).resolve().parents[2]
    usage = (root / "docs/usage.md").read_text(encoding="utf-8")
    command = "dra-extender simulate --pods docs/examples/jobs.yaml"
    block = usage.split(command, 1)[1].split("```", 1)[0].splitlines()[1:]
    shown = [line.removeprefix("#").removeprefix(" ").rstrip() for line in block]
    assert cli.main(["simulate", "--pods", str(root / "docs/examples/jobs.yaml")]) == 0
    assert [line.rstrip() for line in capsys.readouterr().out.splitlines()] == shown


@pytest.mark.parametrize("argv", [["--help"], ["serve", "--help"], ["explain", "--help"],
                                  ["simulate", "--help"]])
def test_help_is_plain_text_without_rest_markup(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert "usage: dra-extender" in text
    assert "``" not in text and not re.search(r":[a-z]+:`", text), text
