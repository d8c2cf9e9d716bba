"""Pod events: valid core/v1 Events on the test server, deduplicated and rate-limited."""

from __future__ import annotations

import pytest

from extender.kube.client import RawClient
from extender.kube.events import REASON_BIND_FAILED, REASON_NO_NODE_FITS, EventRecorder
from extender.model.refs import PodRef
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer

pytestmark = pytest.mark.anyio

POD = PodRef("ml", "trainer-0", "6f1c0000-0000-0000-0000-000000000001")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def events(server: ApiServer) -> list[dict]:
    items, _ = server.store.list(BY_KIND["Event"], "ml")
    return items


async def test_event_names_the_pod_and_passes_schema_validation(apiserver: ApiServer,
                                                                client: RawClient) -> None:
    recorder = EventRecorder(client, instance="replica-1")
    assert recorder.warn(POD, REASON_BIND_FAILED, "claim ml/gpu got allocated elsewhere in the meantime")
    await recorder.flush()
    (event,) = events(apiserver)
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "ml",
                                       "name": "trainer-0", "uid": POD.uid}
    assert (event["type"], event["reason"]) == ("Warning", REASON_BIND_FAILED)
    assert event["message"] == "claim ml/gpu got allocated elsewhere in the meantime"
    assert event["reportingComponent"] == "dra-extender" and event["reportingInstance"] == "replica-1"


async def test_repeats_are_suppressed_until_the_window_passes(apiserver: ApiServer,
                                                              client: RawClient) -> None:
    clock = FakeClock()
    recorder = EventRecorder(client, instance="r", repeat_after=60, clock=clock)
    assert recorder.warn(POD, REASON_NO_NODE_FITS, "0/3 nodes: no free gpu")
    assert not recorder.warn(POD, REASON_NO_NODE_FITS, "0/3 nodes: no free gpu")
    assert recorder.warn(POD, REASON_NO_NODE_FITS, "0/3 nodes: claim being allocated")  # new message
    clock.now += 61
    assert recorder.warn(POD, REASON_NO_NODE_FITS, "0/3 nodes: no free gpu")
    await recorder.flush()
    assert len(events(apiserver)) == 3


async def test_token_bucket_caps_the_total_rate(apiserver: ApiServer, client: RawClient) -> None:
    clock = FakeClock()
    recorder = EventRecorder(client, instance="r", rate=0.5, burst=3, clock=clock)
    sent = [recorder.warn(PodRef("ml", f"p{i}", f"uid-{i}"), REASON_NO_NODE_FITS, "x") for i in range(5)]
    assert sent == [True, True, True, False, False]
    clock.now += 2  # refills one token
    assert recorder.warn(PodRef("ml", "late", "uid-late"), REASON_NO_NODE_FITS, "x")
    await recorder.flush()
    assert len(events(apiserver)) == 4


async def test_api_failures_are_logged_not_raised(apiserver: ApiServer, client: RawClient,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    apiserver.faults.fail("create", "events", 500)
    recorder = EventRecorder(client, instance="r")
    recorder.warn(POD, REASON_BIND_FAILED, "boom")
    await recorder.flush()
    assert events(apiserver) == []
    assert "could not record event FailedBinding on pod ml/trainer-0" in caplog.text


async def test_long_messages_are_truncated(apiserver: ApiServer, client: RawClient) -> None:
    recorder = EventRecorder(client, instance="r")
    recorder.warn(POD, REASON_NO_NODE_FITS, "n" * 5000)
    await recorder.flush()
    assert len(events(apiserver)[0]["message"]) == 1024
