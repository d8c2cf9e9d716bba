"""The Kubernetes binder writes claims in the v1 shape and binds pods, against the test API server."""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from extender.kube.binder import FENCE_ANNOTATION, KubeBinder
from extender.kube.client import RawClient
from extender.metrics import Metrics
from extender.model import parse_resource_claim
from extender.model.refs import DELETE_PROTECTION_FINALIZER, RESERVED_FOR_MAX, PodRef
from extender.scheduling.binder import BindError, BindingUncertain, WriteUncertain
from tests.apiserver.faults import RandomFaults
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer
from tests.apiserver.store import ApiError
from tests.kube import objects
from tests.kube.conftest import eventually

pytestmark = pytest.mark.anyio

CLAIM, POD = BY_KIND["ResourceClaim"], BY_KIND["Pod"]


def make_pod(server: ApiServer, name: str = "trainer", claim_name: str = "gpu-claim") -> PodRef:
    created = server.store.create(POD, "default", objects.pod(name, claim_name=claim_name))
    return PodRef("default", name, created["metadata"]["uid"])


def make_claim(server: ApiServer, name: str = "gpu-claim", status: dict | None = None) -> dict:
    body = objects.claim(name)
    if status is not None:
        body["metadata"]["finalizers"] = [DELETE_PROTECTION_FINALIZER]
        body["status"] = status
    return server.store.seed(CLAIM, body)


def binder(client: RawClient, **kwargs: object) -> KubeBinder:
    return KubeBinder(client, retry_delay=0.001, **kwargs)  # type: ignore[arg-type]


def writes(server: ApiServer) -> list[tuple[str, str, str | None]]:
    return [(c.verb, c.resource, c.subresource) for c in server.writes()]


async def test_fresh_claim_gets_finalizer_then_one_status_write_then_binding(apiserver: ApiServer,
                                                                            client: RawClient) -> None:
    raw = make_claim(apiserver)
    pod = make_pod(apiserver)
    allocation = objects.allocation("node-a")
    kube = binder(client)
    written = await kube.write_claim(parse_resource_claim(raw), allocation, pod)
    await kube.bind_pod(pod, "node-a")

    stored = apiserver.store.get(CLAIM, "default", "gpu-claim")
    assert written == stored
    assert stored["metadata"]["finalizers"] == [DELETE_PROTECTION_FINALIZER]
    assert stored["status"] == {"allocation": allocation,
                                "reservedFor": [{"resource": "pods", "name": "trainer", "uid": pod.uid}]}
    assert apiserver.store.get(POD, "default", "trainer")["spec"]["nodeName"] == "node-a"
    assert writes(apiserver) == [("update", "resourceclaims", None), ("update", "resourceclaims", "status"),
                                 ("create", "pods", "binding")]
    status_put = next(c for c in apiserver.writes() if c.subresource == "status")
    assert status_put.body["metadata"]["resourceVersion"]  # optimistic concurrency on the status write
    binding = apiserver.writes()[-1].body
    assert binding["metadata"]["uid"] == pod.uid and binding["target"] == {"apiVersion": "v1", "kind": "Node",
                                                                             "name": "node-a"}


async def test_allocated_claim_only_gets_the_reservation(apiserver: ApiServer, client: RawClient) -> None:
    allocation = objects.allocation("node-a")
    other = {"resource": "pods", "name": "first", "uid": "0000-first"}
    raw = make_claim(apiserver, status={"allocation": allocation, "reservedFor": [other]})
    pod = make_pod(apiserver)
    await binder(client).write_claim(parse_resource_claim(raw), None, pod)
    stored = apiserver.store.get(CLAIM, "default", "gpu-claim")
    assert stored["status"]["allocation"] == allocation
    assert stored["status"]["reservedFor"] == [other, {"resource": "pods", "name": "trainer", "uid": pod.uid}]
    assert writes(apiserver) == [("update", "resourceclaims", "status")]


async def test_retry_after_lost_reply_is_idempotent(apiserver: ApiServer, client: RawClient) -> None:
    raw = make_claim(apiserver)
    pod = make_pod(apiserver)
    kube = binder(client)
    claim = parse_resource_claim(raw)
    first = await kube.write_claim(claim, objects.allocation("node-a"), pod)
    again = await kube.write_claim(claim, objects.allocation("node-a"), pod)  # stale view, same decision
    assert again["status"]["reservedFor"] == first["status"]["reservedFor"]
    assert len(again["status"]["reservedFor"]) == 1
    await kube.bind_pod(pod, "node-a")
    await kube.bind_pod(pod, "node-a")  # already bound there: success
    with pytest.raises(BindError, match="already assigned"):
        await kube.bind_pod(pod, "node-b")


async def test_status_conflicts_are_retried(apiserver: ApiServer, client: RawClient) -> None:
    raw = make_claim(apiserver)
    pod = make_pod(apiserver)
    apiserver.faults.fail("update", "resourceclaims", 409, times=2, subresource="status")
    apiserver.faults.fail("create", "pods", 503, times=1, subresource="binding")
    kube = binder(client)
    await kube.write_claim(parse_resource_claim(raw), objects.allocation("node-a"), pod)
    await kube.bind_pod(pod, "node-a")
    assert apiserver.store.get(CLAIM, "default", "gpu-claim")["status"]["reservedFor"][0]["uid"] == pod.uid
    assert writes(apiserver).count(("update", "resourceclaims", "status")) == 3
    assert sum(c.resource == "resourceclaims" and c.verb == "get" for c in apiserver.calls) == 2
    assert apiserver.store.get(POD, "default", "trainer")["spec"]["nodeName"] == "node-a"


async def test_conflicting_writer_that_allocated_elsewhere_fails_the_bind(apiserver: ApiServer,
                                                                          client: RawClient) -> None:
    raw = make_claim(apiserver)
    pod = make_pod(apiserver)
    # Another scheduler wins the race with a different device after our view was taken.
    theirs = apiserver.store.get(CLAIM, "default", "gpu-claim")
    theirs["metadata"]["finalizers"] = [DELETE_PROTECTION_FINALIZER]
    theirs = apiserver.store.update(CLAIM, "default", "gpu-claim", theirs)
    theirs["status"] = {"allocation": objects.allocation("node-b", "gpu-1")}
    apiserver.store.update(CLAIM, "default", "gpu-claim", theirs, "status")
    with pytest.raises(BindError, match="got allocated elsewhere in the meantime"):
        await binder(client).write_claim(parse_resource_claim(raw), objects.allocation("node-a"), pod)
    assert apiserver.store.get(CLAIM, "default", "gpu-claim")["status"]["allocation"] == \
        objects.allocation("node-b", "gpu-1")


async def test_deleted_claim_fails_the_bind(apiserver: ApiServer, client: RawClient) -> None:
    raw = make_claim(apiserver)
    pod = make_pod(apiserver)
    apiserver.store.delete(CLAIM, "default", "gpu-claim")
    with pytest.raises(BindError, match="got deleted in the meantime"):
        await binder(client).write_claim(parse_resource_claim(raw), objects.allocation("node-a"), pod)


async def test_persistent_conflicts_give_up_after_five_attempts(apiserver: ApiServer,
                                                                client: RawClient) -> None:
    raw = make_claim(apiserver, status={"allocation": objects.allocation("node-a")})
    pod = make_pod(apiserver)
    apiserver.faults.fail("update", "resourceclaims", 409, times=100, subresource="status")
    with pytest.raises(BindError, match="after 5 attempts"):
        await binder(client).write_claim(parse_resource_claim(raw), None, pod)
    assert writes(apiserver).count(("update", "resourceclaims", "status")) == 5


async def test_binding_with_a_stale_pod_uid_is_rejected(apiserver: ApiServer, client: RawClient) -> None:
    make_pod(apiserver)
    with pytest.raises(BindError, match="Precondition failed: UID"):
        await binder(client).bind_pod(PodRef("default", "trainer", "not-the-uid"), "node-a")
    assert "nodeName" not in apiserver.store.get(POD, "default", "trainer")["spec"]


async def test_release_removes_only_our_reservation(apiserver: ApiServer, client: RawClient) -> None:
    other = {"resource": "pods", "name": "first", "uid": "0000-first"}
    raw = make_claim(apiserver, status={"allocation": objects.allocation("node-a"), "reservedFor": [other]})
    pod = make_pod(apiserver)
    kube = binder(client)
    written = await kube.write_claim(parse_resource_claim(raw), None, pod)
    await kube.release_claim(parse_resource_claim(written), pod, deallocate=True)
    stored = apiserver.store.get(CLAIM, "default", "gpu-claim")
    assert stored["status"] == {"allocation": objects.allocation("node-a"), "reservedFor": [other]}
    patch = next(c for c in apiserver.writes() if c.verb == "patch")
    assert patch.subresource == "status" and patch.body == {
        "metadata": {"uid": raw["metadata"]["uid"]},
        "status": {"reservedFor": [{"$patch": "delete", "uid": pod.uid}]}}


async def test_release_with_deallocate_clears_an_unused_allocation(apiserver: ApiServer,
                                                                   client: RawClient) -> None:
    raw = make_claim(apiserver)
    pod = make_pod(apiserver)
    kube = binder(client)
    written = await kube.write_claim(parse_resource_claim(raw), objects.allocation("node-a"), pod)
    await kube.release_claim(parse_resource_claim(written), pod, deallocate=False)
    assert apiserver.store.get(CLAIM, "default", "gpu-claim")["status"] == {
        "allocation": objects.allocation("node-a")}
    await kube.release_claim(parse_resource_claim(written), pod, deallocate=True)
    assert "status" not in apiserver.store.get(CLAIM, "default", "gpu-claim")


async def test_release_of_a_vanished_claim_is_a_no_op(apiserver: ApiServer, client: RawClient) -> None:
    raw = make_claim(apiserver)
    pod = make_pod(apiserver)
    apiserver.store.delete(CLAIM, "default", "gpu-claim")
    left = await binder(client).release_claim(parse_resource_claim(raw), pod, deallocate=True)
    assert left is None
    with pytest.raises(ApiError, match="not found"):
        apiserver.store.get(CLAIM, "default", "gpu-claim")


async def test_release_leaves_a_claim_of_the_same_name_made_since_untouched(
    apiserver: ApiServer, client: RawClient
) -> None:
    raw = make_claim(apiserver)
    pod = make_pod(apiserver)
    apiserver.store.delete(CLAIM, "default", "gpu-claim")
    successor = make_claim(apiserver, status={"allocation": objects.allocation("node-b")})
    left = await binder(client).release_claim(parse_resource_claim(raw), pod, deallocate=True)
    assert left is None
    assert apiserver.store.get(CLAIM, "default", "gpu-claim") == successor


async def test_a_standby_does_not_write(apiserver: ApiServer, client: RawClient) -> None:
    raw = make_claim(apiserver)
    pod = make_pod(apiserver)
    kube = binder(client, is_leader=lambda: False)
    with pytest.raises(BindError, match="not the leader"):
        await kube.write_claim(parse_resource_claim(raw), objects.allocation("node-a"), pod)
    with pytest.raises(BindError, match="not the leader"):
        await kube.bind_pod(pod, "node-a")
    assert writes(apiserver) == []


async def test_invalid_allocation_is_rejected_by_the_schema(apiserver: ApiServer, client: RawClient) -> None:
    raw = make_claim(apiserver)
    pod = make_pod(apiserver)
    bad = objects.allocation("node-a")
    bad["devices"]["results"][0]["devcie"] = "typo"
    with pytest.raises(BindError, match="devcie"):
        await binder(client).write_claim(parse_resource_claim(raw), bad, pod)


async def test_timed_out_writes_are_retried_without_duplicates(apiserver: ApiServer) -> None:
    raw = make_claim(apiserver)
    pod = make_pod(apiserver)
    impatient = RawClient(apiserver.api_client(), request_timeout=0.3)
    # The server still applies both delayed writes after the client gave up on them.
    apiserver.faults.delay(0.6, "update", "resourceclaims", subresource="status")
    apiserver.faults.delay(0.6, "create", "pods", subresource="binding")
    kube = binder(impatient)
    await kube.write_claim(parse_resource_claim(raw), objects.allocation("node-a"), pod)
    await kube.bind_pod(pod, "node-a")
    await asyncio.sleep(0.5)  # let the delayed originals land too
    status = apiserver.store.get(CLAIM, "default", "gpu-claim")["status"]
    assert status["reservedFor"] == [{"resource": "pods", "name": "trainer", "uid": pod.uid}]
    assert apiserver.store.get(POD, "default", "trainer")["spec"]["nodeName"] == "node-a"
    assert writes(apiserver).count(("update", "resourceclaims", "status")) >= 2  # the timeout did happen
    assert writes(apiserver).count(("create", "pods", "binding")) >= 2


async def test_a_refusal_after_an_unanswered_attempt_still_reports_the_write_as_uncertain(
    apiserver: ApiServer,
) -> None:
    raw = make_claim(apiserver)
    pod = make_pod(apiserver)
    impatient = RawClient(apiserver.api_client(), request_timeout=0.3)
    # The first status write sits in the server (it may be applied later); the next is refused.
    apiserver.faults.hold("update", "resourceclaims", subresource="status")
    apiserver.faults.fail("update", "resourceclaims", 403, subresource="status")
    uncertain = r"403.* \(a write may still land; its devices stay held\)$"
    with pytest.raises(WriteUncertain, match=uncertain) as raised:
        await binder(impatient).write_claim(parse_resource_claim(raw), objects.allocation("node-a"), pod)
    # The version the held request was conditioned on: the claim as the finalizer write left it.
    held = apiserver.store.get(CLAIM, "default", "gpu-claim")
    assert raised.value.resource_version == int(held["metadata"]["resourceVersion"])
    assert "allocation" not in (held.get("status") or {})


async def binding_landed_reply_held(
    apiserver: ApiServer, client: RawClient
) -> tuple[asyncio.Future[None], threading.Event]:
    """A bind of the pod whose Binding has landed and whose reply is held until the event is set
    (then the connection is cut: the client never hears)."""
    pod = make_pod(apiserver)
    dropped = threading.Event()
    apiserver.faults.lose_reply("create", "pods", subresource="binding", after=dropped)
    binding = asyncio.ensure_future(binder(client).bind_pod(pod, "node-a"))
    await eventually(lambda: apiserver.store.get(POD, "default", "trainer")["spec"].get("nodeName"),
                     what="the Binding to land")
    return binding, dropped


async def test_a_binding_whose_reply_was_lost_is_success_when_the_pod_is_bound_there(
    apiserver: ApiServer, client: RawClient, caplog: pytest.LogCaptureFixture
) -> None:
    binding, dropped = await binding_landed_reply_held(apiserver, client)
    # The retry is refused (not with the 409 of an already bound pod: that case is older and known).
    apiserver.faults.fail("create", "pods", 403, subresource="binding")
    dropped.set()
    with caplog.at_level("INFO", logger="extender.kube.binder"):
        await binding
    assert writes(apiserver) == [("create", "pods", "binding")] * 2
    # The operator learns why a refused Binding still counts as done.
    [said] = [r.getMessage() for r in caplog.records if "reply was lost" in r.getMessage()]
    assert said.startswith("binding pod default/trainer: an earlier attempt whose reply was lost")
    assert "403" in said


async def test_an_unanswered_binding_not_seen_landed_is_uncertain_not_failed(apiserver: ApiServer,
                                                                            client: RawClient) -> None:
    pod = make_pod(apiserver)
    # The API server's own timeout: the Binding may or may not be in, or may land later (here it
    # is not in yet) ... and the retries are refused. Only the pod bound elsewhere, gone, or
    # unchanged past the API server's request timeout proves it cannot land: not for the binder
    # to decide now, and bind must not roll the claims back (issue 28).
    apiserver.faults.fail("create", "pods", 504, subresource="binding")
    apiserver.faults.fail("create", "pods", 403, subresource="binding")
    with pytest.raises(BindingUncertain, match=r"403.*may still land"):
        await binder(client).bind_pod(pod, "node-a")
    assert "nodeName" not in apiserver.store.get(POD, "default", "trainer")["spec"]


async def test_an_unanswered_binding_of_a_pod_bound_elsewhere_has_failed(apiserver: ApiServer,
                                                                        client: RawClient) -> None:
    pod = make_pod(apiserver)
    held = apiserver.store.get(POD, "default", "trainer")
    held["spec"]["nodeName"] = "node-b"  # another scheduler's Binding got there first
    apiserver.store.update(POD, "default", "trainer", held)
    apiserver.faults.fail("create", "pods", 504, subresource="binding")
    with pytest.raises(BindError, match="node-a") as raised:
        await binder(client).bind_pod(pod, "node-a")
    assert not isinstance(raised.value, BindingUncertain)  # a pod is bound once: this cannot land


async def test_an_unanswered_binding_whose_pod_cannot_be_read_is_uncertain_not_failed(
    apiserver: ApiServer, client: RawClient
) -> None:
    # The Binding lands but its reply is lost; the retry is refused and the pod cannot be read:
    # the pod is bound, and bind must not be told the Binding failed (it would roll back).
    binding, dropped = await binding_landed_reply_held(apiserver, client)
    apiserver.faults.fail("create", "pods", 403, subresource="binding")
    apiserver.faults.fail("get", "pods", 503, times=100)
    dropped.set()
    with pytest.raises(BindingUncertain, match="re-reading the pod failed"):
        await binding
    assert apiserver.store.get(POD, "default", "trainer")["spec"]["nodeName"] == "node-a"


async def test_a_retried_write_of_the_same_decision_stamped_later_is_no_conflict(
    apiserver: ApiServer, client: RawClient
) -> None:
    """The first attempt landed, its reply was lost; the retry carries another allocationTimestamp."""
    first = {**objects.allocation("node-a"), "allocationTimestamp": "2026-01-01T00:00:00Z"}
    raw = make_claim(apiserver, status={"allocation": first})
    pod = make_pod(apiserver)
    retried = {**objects.allocation("node-a"), "allocationTimestamp": "2026-01-01T00:00:07Z"}
    written = await binder(client).write_claim(parse_resource_claim(raw), retried, pod)
    assert written["status"]["allocation"] == first
    assert [r["uid"] for r in written["status"]["reservedFor"]] == [pod.uid]


async def test_close_neither_waits_for_a_request_under_way_nor_sends_the_queued_ones(
    apiserver: ApiServer, client: RawClient
) -> None:
    make_claim(apiserver)
    make_pod(apiserver)
    held = apiserver.faults.hold("get", "resourceclaims")
    kube = binder(client, workers=1)
    under_way = asyncio.ensure_future(kube.read_claim("default", "gpu-claim"))
    queued = asyncio.ensure_future(kube.read_pod("default", "trainer"))
    await eventually(lambda: any(c.resource == "resourceclaims" for c in apiserver.calls), what="the read")
    started = asyncio.get_running_loop().time()
    kube.close()
    assert asyncio.get_running_loop().time() - started < 0.5  # the held request is not waited for
    held.set()
    await asyncio.wait([under_way, queued], timeout=5.0)
    assert queued.cancelled()
    assert not any(c.resource == "pods" for c in apiserver.calls)


async def test_a_conflicting_binding_whose_pod_cannot_be_read_again_says_so(
    apiserver: ApiServer, client: RawClient
) -> None:
    pod = make_pod(apiserver)
    apiserver.faults.fail("create", "pods", 409, subresource="binding")
    apiserver.faults.fail("get", "pods", 403)
    expected = r"^binding pod default/trainer failed: .*409.*; re-reading it: .*403"
    with pytest.raises(BindError, match=expected):
        await binder(client).bind_pod(pod, "node-a")


async def test_each_refused_write_names_what_it_was(apiserver: ApiServer, client: RawClient) -> None:
    """The error goes into the bind's reply and the pod's events: it says which step failed."""
    raw = make_claim(apiserver, status={"allocation": objects.allocation("node-a")})
    pod = make_pod(apiserver)
    kube = binder(client)
    claim = parse_resource_claim(raw)
    apiserver.faults.fail("patch", "resourceclaims", 403, subresource="status")
    with pytest.raises(BindError, match=r"^removing pod trainer from claim default/gpu-claim failed: .*403"):
        await kube.release_claim(claim, pod, deallocate=True)
    apiserver.faults.fail("update", "resourceclaims", 403, subresource="status")
    with pytest.raises(BindError, match=r"^deallocating claim default/gpu-claim failed: .*403"):
        await kube.release_claim(claim, pod, deallocate=True)
    apiserver.faults.fail("patch", "pods", 403, subresource="status")
    with pytest.raises(BindError, match=r"^patching the status of pod default/trainer failed: .*403"):
        await kube.patch_pod_status(pod, {"nodeAllocatableResourceClaimStatuses": []})
    apiserver.faults.fail("create", "resourceclaims", 403)
    with pytest.raises(BindError, match=r"^creating the extended-resource claim of pod default/trainer"):
        await kube.create_extended_claim(objects.claim("x"), pod)
    apiserver.store.delete(POD, "default", "trainer")
    with pytest.raises(BindError, match=r"^pod default/trainer no longer exists$"):
        await kube.patch_pod_status(pod, {"nodeAllocatableResourceClaimStatuses": []})


async def test_the_pod_status_patch_is_for_this_pod_only(apiserver: ApiServer, client: RawClient) -> None:
    pod = make_pod(apiserver)
    kube = binder(client)
    footprint = [{"resourceClaimName": "gpu-claim", "containers": ["main"],
                  "mapping": [{"name": "cpu", "quantity": "1"}]}]
    await kube.patch_pod_status(pod, {"nodeAllocatableResourceClaimStatuses": footprint})
    stored = apiserver.store.get(POD, "default", "trainer")
    assert stored["status"]["nodeAllocatableResourceClaimStatuses"] == footprint
    # A pod of the same name made since: the patch names the old UID and is refused.
    with pytest.raises(BindError, match="Precondition failed: UID"):
        await kube.patch_pod_status(PodRef("default", "trainer", "an-older-pod"),
                                    {"nodeAllocatableResourceClaimStatuses": []})
    assert apiserver.store.get(POD, "default", "trainer")["status"] == stored["status"]


async def test_a_deallocation_refused_once_is_tried_again_on_the_claim_as_it_is_now(
    apiserver: ApiServer, client: RawClient
) -> None:
    """Its device status goes with the allocation: the API server keeps no device status for
    devices that are not allocated."""
    raw = make_claim(apiserver)
    pod = make_pod(apiserver)
    kube = binder(client)
    written = await kube.write_claim(parse_resource_claim(raw), objects.allocation("node-a"), pod)
    written["status"]["devices"] = [{"driver": objects.DRIVER, "pool": "node-a", "device": "gpu-0"}]
    written = apiserver.store.update(CLAIM, "default", "gpu-claim", written, "status")
    apiserver.faults.fail("update", "resourceclaims", 409, subresource="status")
    left = await kube.release_claim(parse_resource_claim(written), pod, deallocate=True)
    assert left is not None and "status" not in left
    assert "status" not in apiserver.store.get(CLAIM, "default", "gpu-claim")
    assert [(c.verb, c.subresource) for c in apiserver.calls if c.resource == "resourceclaims"][-3:] == [
        ("update", "status"), ("get", None), ("update", "status")]


async def test_an_unanswered_binding_of_a_pod_being_deleted_has_failed(apiserver: ApiServer,
                                                                     client: RawClient) -> None:
    """A pod being deleted is bound by no Binding any more: nothing of this one can land."""
    pod = make_pod(apiserver)
    held = apiserver.store.get(POD, "default", "trainer")
    held["metadata"]["finalizers"] = ["example.com/keep"]
    apiserver.store.update(POD, "default", "trainer", held)
    apiserver.store.delete(POD, "default", "trainer")  # terminating, held by its finalizer
    apiserver.faults.fail("create", "pods", 504, subresource="binding")
    with pytest.raises(BindError, match="being deleted") as raised:
        await binder(client).bind_pod(pod, "node-a")
    assert not isinstance(raised.value, BindingUncertain)


async def test_a_read_back_that_fails_says_what_it_read(apiserver: ApiServer, client: RawClient) -> None:
    make_claim(apiserver)
    make_pod(apiserver)
    kube = binder(client)
    apiserver.faults.fail("get", "pods", 403)
    with pytest.raises(BindError, match=r"^reading pod default/trainer failed: .*403"):
        await kube.read_pod("default", "trainer")
    apiserver.faults.fail("get", "resourceclaims", 403)
    with pytest.raises(BindError, match=r"^reading claim default/gpu-claim failed: .*403"):
        await kube.read_claim("default", "gpu-claim")
    assert await kube.read_pod("default", "nobody") is None
    assert await kube.read_claim("default", "nothing") is None


async def test_a_fence_moves_the_claim_to_a_newer_version_and_changes_nothing_else(
    apiserver: ApiServer, client: RawClient
) -> None:
    """Every request conditioned on the version read is refused afterwards (settle.py)."""
    raw = make_claim(apiserver)
    kube = binder(client)
    fenced = await kube.fence_claim(raw)
    assert fenced is not None
    stored = apiserver.store.get(CLAIM, "default", "gpu-claim")
    assert fenced == stored
    assert int(stored["metadata"]["resourceVersion"]) > int(raw["metadata"]["resourceVersion"])
    assert "annotations" not in stored["metadata"] and stored["spec"] == raw["spec"]
    marker = next(c for c in apiserver.writes() if c.verb == "update").body
    assert marker["metadata"]["annotations"] == {
        "dra-extender.k8s.io/fenced-resource-version": raw["metadata"]["resourceVersion"]}
    assert writes(apiserver) == [("update", "resourceclaims", None)] * 2
    # The stale write it fences off is refused.
    pod = make_pod(apiserver)
    stale = binder(client, attempts=1)
    with pytest.raises(BindError):
        await stale.write_claim(parse_resource_claim(raw), objects.allocation("node-a"), pod)
    assert "status" not in apiserver.store.get(CLAIM, "default", "gpu-claim")


async def test_a_fence_keeps_other_annotations_and_a_failed_second_update_still_fences(
    apiserver: ApiServer, client: RawClient, caplog: pytest.LogCaptureFixture
) -> None:
    body = objects.claim("gpu-claim")
    body["metadata"]["annotations"] = {"example.com/note": "kept"}
    raw = apiserver.store.seed(CLAIM, body)
    kube = binder(client)
    fenced = await kube.fence_claim(raw)
    assert fenced is not None and fenced["metadata"]["annotations"] == {"example.com/note": "kept"}
    # The marker cannot be taken out again: the first update alone fenced the claim.
    apiserver.faults.at_random(RandomFaults(random.Random(1), fail=1.0), "update", "resourceclaims",
                               when=lambda put: FENCE_ANNOTATION not in put["metadata"]["annotations"])
    with caplog.at_level("INFO", logger="extender.kube.binder"):
        marked = await kube.fence_claim(fenced)
    assert marked is not None and marked["metadata"]["annotations"][FENCE_ANNOTATION]
    [said] = [r.getMessage() for r in caplog.records if "fence marker" in r.getMessage()]
    assert said.startswith("claim default/gpu-claim: removing the fence marker failed (harmless): ")
    assert "500" in said
    assert int(marked["metadata"]["resourceVersion"]) > int(fenced["metadata"]["resourceVersion"])
    assert marked == apiserver.store.get(CLAIM, "default", "gpu-claim")


async def test_a_fence_refused_says_so(apiserver: ApiServer, client: RawClient) -> None:
    raw = make_claim(apiserver)
    apiserver.faults.fail("update", "resourceclaims", 500)
    with pytest.raises(BindError, match=r"^fencing claim default/gpu-claim failed: .*500"):
        await binder(client).fence_claim(raw)
    assert apiserver.store.get(CLAIM, "default", "gpu-claim") == raw


async def test_a_fence_of_a_claim_gone_is_none(apiserver: ApiServer, client: RawClient) -> None:
    raw = make_claim(apiserver)
    apiserver.store.delete(CLAIM, "default", "gpu-claim")
    assert await binder(client).fence_claim(raw) is None


async def test_an_unanswered_binding_ends_at_the_bind_deadline_not_the_request_timeout(
    apiserver: ApiServer, client: RawClient
) -> None:
    # The API server sits on the Binding: the attempt may last only what is left of the bind's
    # deadline, not the client's 5 s request timeout, and nothing is retried past the deadline.
    pod = make_pod(apiserver)
    release = apiserver.faults.hold("create", "pods", subresource="binding")
    started = asyncio.get_running_loop().time()
    deadline = time.monotonic() + 0.3
    uncertain = r"^binding pod default/trainer failed after 1 attempts: .*may still land"
    with pytest.raises(BindingUncertain, match=uncertain):
        await asyncio.wait_for(binder(client).bind_pod(pod, "node-a", deadline), timeout=2.0)
    assert asyncio.get_running_loop().time() - started < 2.0
    assert writes(apiserver) == [("create", "pods", "binding")]  # one attempt, none past the deadline
    # Why the binder cannot call it failed: the held Binding still lands.
    release.set()
    await eventually(lambda: apiserver.store.get(POD, "default", "trainer")["spec"].get("nodeName"),
                     what="the held Binding to land")
    assert apiserver.store.get(POD, "default", "trainer")["spec"]["nodeName"] == "node-a"


class _ReplyAtTheDeadline(RawClient):
    """A client whose first claim update is answered (landed) only once the bind deadline has
    passed, as when the reply comes at the last moment and the thread runs again too late."""

    def __init__(self, api_client: object, deadline: float) -> None:
        super().__init__(api_client, request_timeout=5.0)  # type: ignore[arg-type]
        self._deadline = deadline
        self._late = True

    def request(self, method: str, path: str, **kwargs: object) -> dict:  # type: ignore[override]
        reply = super().request(method, path, **kwargs)  # type: ignore[arg-type]
        if method == "PUT" and self._late:
            self._late = False
            time.sleep(max(0.0, self._deadline - time.monotonic()) + 0.05)
        return reply


async def test_a_claim_write_sends_nothing_once_the_bind_deadline_has_passed(apiserver: ApiServer) -> None:
    # The finalizer update lands, but by the time its reply is read the deadline is gone: the
    # status write must not be sent (it could land after bind gave the devices up).
    raw = make_claim(apiserver)
    pod = make_pod(apiserver)
    deadline = time.monotonic() + 0.3
    kube = binder(_ReplyAtTheDeadline(apiserver.api_client(), deadline))
    too_late = r"PUT /apis/.*/gpu-claim/status: no time left before the bind deadline"
    with pytest.raises(BindError, match=too_late):
        await kube.write_claim(parse_resource_claim(raw), objects.allocation("node-a"), pod, deadline)
    assert writes(apiserver) == [("update", "resourceclaims", None)]
    stored = apiserver.store.get(CLAIM, "default", "gpu-claim")
    assert stored["metadata"]["finalizers"] == [DELETE_PROTECTION_FINALIZER]
    assert "allocation" not in (stored.get("status") or {})


async def test_a_claim_being_deleted_is_not_written(apiserver: ApiServer, client: RawClient) -> None:
    # Deleted with the finalizer still on: it is going away, no pod may be given its devices.
    make_claim(apiserver, status={})
    apiserver.store.delete(CLAIM, "default", "gpu-claim")
    raw = apiserver.store.get(CLAIM, "default", "gpu-claim")
    assert raw["metadata"]["deletionTimestamp"]
    pod = make_pod(apiserver)
    with pytest.raises(BindError, match="got deleted in the meantime"):
        await binder(client).write_claim(parse_resource_claim(raw), objects.allocation("node-a"), pod)
    assert writes(apiserver) == []
    assert "allocation" not in (apiserver.store.get(CLAIM, "default", "gpu-claim").get("status") or {})


async def test_a_claim_with_another_finalizer_keeps_it_and_gets_ours_in_front_of_the_allocation(
    apiserver: ApiServer, client: RawClient
) -> None:
    body = objects.claim("gpu-claim")
    body["metadata"]["finalizers"] = ["example.com/keep-me"]
    raw = apiserver.store.seed(CLAIM, body)
    pod = make_pod(apiserver)
    await binder(client).write_claim(parse_resource_claim(raw), objects.allocation("node-a"), pod)
    stored = apiserver.store.get(CLAIM, "default", "gpu-claim")
    assert stored["metadata"]["finalizers"] == ["example.com/keep-me", DELETE_PROTECTION_FINALIZER]
    assert writes(apiserver) == [("update", "resourceclaims", None), ("update", "resourceclaims", "status")]


async def test_a_claim_already_carrying_our_finalizer_among_others_gets_only_the_status_write(
    apiserver: ApiServer, client: RawClient
) -> None:
    body = objects.claim("gpu-claim")
    body["metadata"]["finalizers"] = ["example.com/keep-me", DELETE_PROTECTION_FINALIZER]
    raw = apiserver.store.seed(CLAIM, body)
    pod = make_pod(apiserver)
    await binder(client).write_claim(parse_resource_claim(raw), objects.allocation("node-a"), pod)
    stored = apiserver.store.get(CLAIM, "default", "gpu-claim")
    assert stored["metadata"]["finalizers"] == ["example.com/keep-me", DELETE_PROTECTION_FINALIZER]
    assert writes(apiserver) == [("update", "resourceclaims", "status")]


async def test_reserving_a_claim_that_lost_its_allocation_fails_saying_so(
    apiserver: ApiServer, client: RawClient
) -> None:
    """Only a reservation was to be written (the claim was allocated when the pod was placed), but
    the claim has been deallocated since: the pod cannot run with it, and nothing is written."""
    raw = make_claim(apiserver)
    pod = make_pod(apiserver)
    with pytest.raises(BindError, match=r"^claim default/gpu-claim is not allocated any more$"):
        await binder(client).write_claim(parse_resource_claim(raw), None, pod)
    assert writes(apiserver) == []


async def test_a_re_read_the_api_server_sits_on_ends_at_the_bind_deadline(
    apiserver: ApiServer, client: RawClient
) -> None:
    """After a conflict the claim is read again; that GET may last only what is left of the bind's
    deadline, not the client's 5 s request timeout."""
    raw = make_claim(apiserver)
    pod = make_pod(apiserver)
    apiserver.faults.fail("update", "resourceclaims", 409)
    release = apiserver.faults.hold("get", "resourceclaims")
    started = asyncio.get_running_loop().time()
    try:
        with pytest.raises(BindError, match=r"^writing claim default/gpu-claim failed after 2 attempts"):
            await asyncio.wait_for(
                binder(client).write_claim(parse_resource_claim(raw), objects.allocation("node-a"), pod,
                                           time.monotonic() + 0.3),
                timeout=3.0,
            )
        assert asyncio.get_running_loop().time() - started < 2.0
    finally:
        release.set()


async def test_a_refused_write_is_a_plain_failure_not_one_of_unknown_fate(
    apiserver: ApiServer, client: RawClient
) -> None:
    """Only a write that went unanswered may still land; one the API server refused holds no device."""
    raw = make_claim(apiserver)
    pod = make_pod(apiserver)
    apiserver.faults.fail("update", "resourceclaims", 403)
    with pytest.raises(BindError) as refused:
        await binder(client).write_claim(parse_resource_claim(raw), objects.allocation("node-a"), pod)
    assert type(refused.value) is BindError and "403" in str(refused.value)


@pytest.mark.parametrize("consumers", [RESERVED_FOR_MAX - 1, RESERVED_FOR_MAX])
async def test_a_claim_takes_consumers_up_to_the_api_maximum(
    apiserver: ApiServer, client: RawClient, consumers: int
) -> None:
    allocation = objects.allocation("node-a")
    others = [{"resource": "pods", "name": f"p{i}", "uid": f"uid-{i}"} for i in range(consumers)]
    raw = make_claim(apiserver, status={"allocation": allocation, "reservedFor": others})
    pod = make_pod(apiserver)
    if consumers < RESERVED_FOR_MAX:
        await binder(client).write_claim(parse_resource_claim(raw), None, pod)
        stored = apiserver.store.get(CLAIM, "default", "gpu-claim")
        assert len(stored["status"]["reservedFor"]) == RESERVED_FOR_MAX
        return
    full = rf"^claim default/gpu-claim already has the maximum of {RESERVED_FOR_MAX} consumers$"
    with pytest.raises(BindError, match=full):
        await binder(client).write_claim(parse_resource_claim(raw), None, pod)
    assert writes(apiserver) == []


async def test_a_write_without_a_deadline_has_the_binders_own_bound(apiserver: ApiServer) -> None:
    """No deadline given: the write may take the binder's attempts times the request timeout, so
    an answer slower than most but within one request timeout is awaited, not given up."""
    raw = make_claim(apiserver)
    pod = make_pod(apiserver)
    apiserver.faults.delay(0.2, "update", "resourceclaims")
    patient = RawClient(apiserver.api_client(), request_timeout=0.5)
    written = await binder(patient).write_claim(parse_resource_claim(raw), objects.allocation("node-a"), pod)
    assert [r["name"] for r in written["status"]["reservedFor"]] == ["trainer"]


async def test_built_from_the_kubernetes_api_client_as_serve_does_it_counts_and_bounds_its_requests(
    apiserver: ApiServer,
) -> None:
    """`dra-extender serve` hands the binder the kubernetes ApiClient: the binder makes its own
    client of it, with the metrics (every request counted) and its request timeout (a request
    the API server sits on ends then)."""
    metrics = Metrics()
    kube = KubeBinder(apiserver.api_client(), metrics=metrics, request_timeout=0.3, retry_delay=0.001)
    raw = make_claim(apiserver)
    pod = make_pod(apiserver)
    await kube.write_claim(parse_resource_claim(raw), objects.allocation("node-a"), pod)
    counted = [metrics.api_requests.labels("update", r, "200")._value.get()
               for r in ("resourceclaims", "resourceclaims/status")]
    assert counted == [1, 1]  # the finalizer, then the status
    release = apiserver.faults.hold("get", "pods")
    started = time.monotonic()
    try:
        with pytest.raises(BindError, match="reading pod default/trainer failed"):
            await asyncio.wait_for(kube.read_pod("default", "trainer"), timeout=3.0)
        assert time.monotonic() - started < 2.0
    finally:
        release.set()
        kube.close()


async def test_the_binder_runs_at_most_its_workers_calls_at_once(client: RawClient) -> None:
    """Blocking API calls run on the binder's own threads, as many at once as it has workers:
    bounded, so a flood of binds cannot start a thread per call."""
    kube = binder(client, workers=2)
    gate, running, most = threading.Event(), [0], [0]
    lock = threading.Lock()

    def blocking() -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        gate.wait(5.0)
        with lock:
            running[0] -= 1

    calls = [asyncio.ensure_future(kube._run(blocking)) for _ in range(4)]
    try:
        await eventually(lambda: running[0] == 2, what="two calls running")
        await asyncio.sleep(0.1)
        assert most[0] == 2
    finally:
        gate.set()
        await asyncio.gather(*calls)
        kube.close()


async def test_as_serve_builds_it_the_binder_pauses_ten_milliseconds_before_its_first_retry(
    apiserver: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bind's claim writes have a few seconds in all: the pause before a retry is kept short."""
    pauses: list[float] = []
    monkeypatch.setattr("extender.kube.binder.time.sleep", pauses.append)
    kube = KubeBinder(apiserver.api_client())
    raw = make_claim(apiserver)
    pod = make_pod(apiserver)
    apiserver.faults.fail("update", "resourceclaims", 409)
    try:
        await kube.write_claim(parse_resource_claim(raw), objects.allocation("node-a"), pod)
    finally:
        kube.close()
    assert len(pauses) == 1 and 0.01 <= pauses[0] <= 0.011
