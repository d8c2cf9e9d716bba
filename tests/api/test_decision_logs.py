"""One line per verb call on ``extender.decisions``: pod, verb, node counts, the first reasons,
latency, the allocation a bind chose; nothing built when the level is off."""

from __future__ import annotations

import contextlib
import io
import json
import logging

import pytest

from extender import logs
from extender.api import decisions
from tests.scheduling.cluster import Service, bind_call, claim, filter_call, gpu_cluster, pod

NODES = ["node-0", "node-1"]


@pytest.fixture
def svc() -> Service:
    objs = [*gpu_cluster(nodes=2, per_node=1), claim("c"), claim("d"), pod("p", claims={"g": "c"})]
    objs += [pod("q", claims={"g": "d"}), pod("plain")]
    return Service(objs)


def lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "extender.decisions"]


def test_filter_and_bind_each_log_one_line_with_their_decision(svc, caplog):
    caplog.set_level(logging.INFO, logger="extender.decisions")

    async def call(client):
        await filter_call(client, svc.pod("p"), NODES)
        assert await bind_call(client, svc.pod("p"), "node-1") == ""
        await filter_call(client, svc.pod("q"), NODES)  # node-1's only GPU is now p's

    svc.run(call)
    first, bind, second = lines(caplog)
    assert first.levelno == logging.INFO and first.getMessage() == "filter default/p: 2 of 2 nodes pass"
    assert (first.verb, first.pod, first.nodes, first.passed, first.failed, first.status) == (
        "filter", "default/p", 2, 2, 0, 200)
    assert first.duration_ms > 0 and not hasattr(first, "reasons")
    assert bind.getMessage() == "bind default/p to node-1: bound"
    assert (bind.verb, bind.pod, bind.node, bind.outcome) == ("bind", "default/p", "node-1", "bound")
    assert bind.allocation == {"default/c": {"gpu": ["gpu.example.com/node-1/gpu-0"]}}
    assert not hasattr(bind, "error")
    assert second.passed == 1 and second.failed + second.unresolvable == 1
    (reason,) = second.reasons.items()
    assert reason[0] == "node-1" and "gpu" in reason[1]


def test_a_refused_bind_says_why(svc, caplog):
    caplog.set_level(logging.INFO, logger="extender.decisions")
    svc.ctx.is_leader = lambda: False
    assert "not the leader" in svc.run(lambda c: bind_call(c, svc.pod("p"), "node-0"))
    (line,) = lines(caplog)
    assert line.outcome == "refused" and "not the leader" in line.error
    assert line.getMessage() == "bind default/p to node-0: refused"


def test_bad_requests_log_their_status_and_error(svc, caplog):
    caplog.set_level(logging.INFO, logger="extender.decisions")
    svc.run(lambda c: c.post("/filter", content=b"{not json"))
    (line,) = lines(caplog)
    assert line.status == 400 and line.getMessage().startswith("filter: answered 400: ")
    assert line.error


def test_prioritize_and_pods_without_devices_log_at_debug(svc, caplog):
    async def call(client):
        await filter_call(client, svc.pod("plain"), NODES)
        await client.post("/prioritize", json={"Pod": svc.pod("p"), "NodeNames": NODES})

    caplog.set_level(logging.INFO, logger="extender.decisions")
    svc.run(call)
    assert lines(caplog) == []
    caplog.set_level(logging.DEBUG, logger="extender.decisions")
    svc.run(call)
    plain, prioritize = lines(caplog)
    assert plain.levelno == logging.DEBUG and plain.pod == "default/plain" and plain.passed == 2
    assert prioritize.levelno == logging.DEBUG and prioritize.verb == "prioritize"
    assert prioritize.nodes == 2 and set(prioritize.top) == set(NODES)


def test_nothing_is_gathered_when_the_level_is_off(svc, monkeypatch):
    logging.getLogger("extender.decisions").setLevel(logging.WARNING)
    try:
        assert decisions.start("bind") is None and decisions.start("filter") is None
        gathered = []
        monkeypatch.setattr(
            logs, "recording", lambda fields: gathered.append(fields) or contextlib.nullcontext()
        )
        svc.run(lambda c: filter_call(c, svc.pod("p"), NODES))
        assert gathered == [None]
    finally:
        logging.getLogger("extender.decisions").setLevel(logging.NOTSET)


def test_sample_json_lines_of_a_filter_and_a_bind(svc):
    """What an operator reads with --log-format json (docs/usage.md shows these two lines)."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    out = io.StringIO()
    try:
        logs.configure("info", "json", out, force=True)

        async def call(client):
            await filter_call(client, svc.pod("p"), NODES)
            await bind_call(client, svc.pod("p"), "node-1")

        svc.run(call)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    filter_line, bind_line = (json.loads(line) for line in out.getvalue().splitlines()
                              if '"extender.decisions"' in line)
    assert set(filter_line) == {"ts", "level", "logger", "msg", "pod", "nodes", "passed", "failed",
                                "unresolvable", "verb", "status", "duration_ms"}
    assert set(bind_line) == {"ts", "level", "logger", "msg", "pod", "node", "outcome", "allocation",
                              "verb", "status", "duration_ms"}
