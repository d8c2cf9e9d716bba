"""User-visible reasons: bind failures and "no node fits" reach the pod's event sink."""

from __future__ import annotations

from extender.model.refs import PodRef
from tests.scheduling.cluster import Service, bind_call, claim, filter_call, gpu_cluster, node, pod


class RecordedEvents:
    def __init__(self) -> None:
        self.sent: list[tuple[str, PodRef, str]] = []

    def bind_failed(self, pod: PodRef, message: str) -> bool:
        self.sent.append(("bind_failed", pod, message))
        return True

    def no_node_fits(self, pod: PodRef, message: str) -> bool:
        self.sent.append(("no_node_fits", pod, message))
        return True


def test_no_fitting_node_reports_the_dra_reasons_once_per_filter():
    objs = [*gpu_cluster(nodes=1, per_node=0), node("empty"), claim("c"), pod("p", claims={"c": "c"})]
    objs += [pod("plain")]
    svc = Service(objs)
    events = svc.ctx.events = RecordedEvents()
    p = svc.pod("p")
    result = svc.run(lambda c: filter_call(c, p, ["node-0", "empty"]))
    assert result["NodeNames"] == []
    ((kind, ref, message),) = events.sent
    assert kind == "no_node_fits" and ref == PodRef("default", "p", p["metadata"]["uid"])
    assert "no candidate node can allocate" in message and "claim default/c, request gpu" in message
    # a pod that fits somewhere (here: one without claims) reports nothing
    svc.run(lambda c: filter_call(c, svc.pod("plain"), ["node-0", "empty"]))
    assert len(events.sent) == 1


def test_failed_bind_is_reported_and_a_successful_one_is_not():
    objs = [*gpu_cluster(nodes=1, per_node=1), claim("a"), claim("b")]
    objs += [pod("pa", claims={"c": "a"}), pod("pb", claims={"c": "b"})]
    svc = Service(objs)
    events = svc.ctx.events = RecordedEvents()

    async def flow(client):
        return [await bind_call(client, svc.pod(name), "node-0") for name in ("pa", "pb")]

    first, second = svc.run(flow)
    assert first == "" and second
    ((kind, ref, message),) = events.sent
    assert kind == "bind_failed" and ref.name == "pb" and message == second
