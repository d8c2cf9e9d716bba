"""Claims no node can use are released when filter finds no node (upstream's PostFilter), and
never those the "never" rules protect; through the HTTP app on a local cluster."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from extender.model.extended import EXTENDED_RESOURCE_CLAIM_ANNOTATION
from tests.scheduling.cluster import (
    DRIVER,
    Service,
    bind_call,
    claim,
    device_class,
    filter_call,
    gpu,
    gpus,
    node,
    node_slice,
    pod,
    schedule,
)
from tests.scheduling.test_plan import GATED, allocated, made, reporting, with_uid

UID = "p-uid"
RESOURCE = "example.com/gpu"
NOT_AVAILABLE = "resourceclaim not available on the node"
CANNOT_SCHEDULE = "cannot schedule extended resource claim"


def gated(*names: str) -> list[dict[str, Any]]:
    """Nodes with two devices each that carry binding conditions."""
    objs: list[dict[str, Any]] = [device_class()]
    for name in names:
        objs += [node(name), node_slice(name, [{**gpu(g), **GATED} for g in ("gpu-0", "gpu-1")])]
    return objs


def user_pod(**claims: str) -> dict[str, Any]:
    return with_uid(pod("p", claims=claims), UID)


def extended_pod() -> dict[str, Any]:
    obj = with_uid(pod("p"), UID)
    obj["spec"]["containers"][0]["resources"] = {"requests": {RESOURCE: "1"}}
    return obj


def mapped_class() -> dict[str, Any]:
    obj = device_class()
    obj["spec"]["extendedResourceName"] = RESOURCE
    return obj


def extended_claim(owner_uid: str = UID) -> dict[str, Any]:
    """What an earlier bind created for pod p's extended resource."""
    obj = claim("p-extended-resources-abcde")
    obj["spec"] = {
        "devices": {"requests": [{"name": "container-0-request-0", "exactly": {"deviceClassName": DRIVER}}]}
    }
    obj["metadata"]["annotations"] = {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner_uid, "controller": True}
    ]
    return obj


async def until(what: str, done: Callable[[], bool], timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.005)


async def a_while() -> None:
    """Long enough for a release to have run (the local binder answers at once)."""
    await asyncio.sleep(0.05)


def allocation_of(svc: Service, name: str) -> Any:
    held = svc.state.claim("default", name)
    return None if held is None else (held.raw.get("status") or {}).get("allocation")


def reasons(result: dict[str, Any]) -> set[str]:
    return {*result["FailedNodes"].values(), *result["FailedAndUnresolvableNodes"].values()}


# --- released -------------------------------------------------------------------------------


STALE_USER_CLAIMS = {
    "its node is gone": (
        [
            *gated("node-0"),
            node_slice("gone", gpus(1)),
            allocated(claim("c"), "gone", ["gpu-0"]),
            user_pod(c="c"),
        ],
        "resource claim default/c is allocated for other nodes",
    ),
    "its device vanished from the slices": (
        [*gated("node-0"), allocated(claim("c"), "node-0", ["gpu-7"], [("p", UID)]), user_pod(c="c")],
        f"{NOT_AVAILABLE}: claim default/c: device {DRIVER}/node-0/gpu-7 is no longer published",
    ),
    "its binding failed": (
        [
            *gated("node-0"),
            reporting(allocated(claim("c"), "node-0", ["gpu-0"], [("p", UID)], **GATED), {"broken": "True"}),
            user_pod(c="c"),
        ],
        f"{NOT_AVAILABLE}: claim default/c binding failed: device {DRIVER}/node-0/gpu-0: broken is True",
    ),
    "its binding timed out": (
        [
            *gated("node-0"),
            reporting(allocated(claim("c"), "node-0", ["gpu-0"], [("p", UID)], **GATED), {}, age_s=601),
            user_pod(c="c"),
        ],
        f"{NOT_AVAILABLE}: claim default/c: device binding timeout ({DRIVER}/node-0/gpu-0: attached)",
    ),
}


@pytest.mark.parametrize("case", list(STALE_USER_CLAIMS))
def test_a_claim_no_node_can_use_is_deallocated_and_the_next_attempt_fits(case: str) -> None:
    objs, reason = STALE_USER_CLAIMS[case]
    svc = Service(made(objs))

    async def flow(client):
        first = await filter_call(client, svc.pod("p"), ["node-0"])
        await until("the claim deallocated", lambda: allocation_of(svc, "c") is None)
        second = await filter_call(client, svc.pod("p"), ["node-0"])
        return first, second

    first, second = svc.run(flow)
    assert first["NodeNames"] == [] and reasons(first) == {reason}
    assert "reservedFor" not in svc.claims()["c"]["status"]
    assert second["NodeNames"] == ["node-0"]


def _extended_leftover(status: dict[str, Any] | None) -> dict[str, Any]:
    obj = extended_claim()
    if status is not None:
        obj["status"] = status
    return obj


def _on(node_name: str, reserved_for_uid: str | None) -> dict[str, Any]:
    obj = allocated(
        claim("x"),
        node_name,
        ["gpu-0"],
        [("p", reserved_for_uid)] if reserved_for_uid else [],
        request_name="container-0-request-0",
    )
    return obj["status"]


STALE_EXTENDED_CLAIMS = {
    "not allocated": (None, "it was created by an earlier attempt and is not allocated"),
    "allocated but not reserved for the pod": (
        _on("node-0", None),
        "it was created by an earlier attempt and is not reserved for the pod",
    ),
    "allocated for a node that is gone": (_on("gone", UID), None),
}


@pytest.mark.parametrize("case", list(STALE_EXTENDED_CLAIMS))
def test_an_extended_resource_claim_left_over_is_deleted_and_the_pod_starts_afresh(case: str) -> None:
    status, why = STALE_EXTENDED_CLAIMS[case]
    objs = [mapped_class(), node("node-0"), node_slice("node-0", gpus(1)), node_slice("gone", gpus(1))]
    svc = Service([*objs, extended_pod(), _extended_leftover(status)])

    async def flow(client):
        first = await filter_call(client, svc.pod("p"), ["node-0"])
        await until("the leftover deleted", lambda: "p-extended-resources-abcde" not in svc.claims())
        return first, await schedule(client, svc.pod("p"), ["node-0"])

    first, second = svc.run(flow)
    assert first["NodeNames"] == []
    (reason,) = reasons(first)
    if why is None:
        assert reason == "resource claim default/p-extended-resources-abcde is allocated for other nodes"
    else:
        assert reason == f"{CANNOT_SCHEDULE} default/p-extended-resources-abcde: {why}"
    assert second == ("node-0", "")
    assert [c for c in svc.claims() if c != "p-extended-resources-abcde"]  # a new one, allocated afresh


# --- never ----------------------------------------------------------------------------------


def _kept(svc: Service, name: str = "c") -> dict[str, Any]:
    """Filter p (nothing fits), give a release time to run, and return the claim as it is then."""

    async def flow(client):
        result = await filter_call(client, svc.pod("p"), ["node-0"])
        assert result["NodeNames"] == []
        await a_while()

    svc.run(flow)
    return svc.claims()[name]


def test_never_while_binding_conditions_are_pending_within_the_timeout():
    pending = reporting(
        allocated(claim("c"), "gone", ["gpu-0"], [("p", UID)], **GATED), {"attached": "False"}
    )()
    # Its node is gone, but the driver may still be preparing the device.
    svc = Service(
        [*gated("node-0"), node_slice("gone", [{**gpu("gpu-0"), **GATED}]), pending, user_pod(c="c")]
    )
    assert _kept(svc)["status"]["allocation"] == pending["status"]["allocation"]


def test_never_a_claim_reserved_for_another_pod():
    shared = allocated(claim("c"), "gone", ["gpu-0"], [("q", "q-uid")])
    svc = Service([*gated("node-0"), node_slice("gone", gpus(1)), shared, user_pod(c="c")])
    kept = _kept(svc)["status"]
    assert kept["allocation"] and kept["reservedFor"] == [{"resource": "pods", "name": "q", "uid": "q-uid"}]


def test_never_a_claim_reserved_for_the_pod_and_another():
    shared = allocated(claim("c"), "gone", ["gpu-0"], [("p", UID), ("q", "q-uid")])
    svc = Service([*gated("node-0"), node_slice("gone", gpus(1)), shared, user_pod(c="c")])
    assert len(_kept(svc)["status"]["reservedFor"]) == 2


def test_never_an_extended_resource_claim_whose_binding_is_pending():
    pending = reporting(_extended_leftover(_on("gone", UID)), {"attached": "False"})()
    for result in pending["status"]["allocation"]["devices"]["results"]:
        result.update(GATED)
    objs = [mapped_class(), node("node-0"), node_slice("node-0", gpus(1)), node_slice("gone", gpus(1))]
    svc = Service([*objs, extended_pod(), pending])
    assert _kept(svc, "p-extended-resources-abcde")["status"]["allocation"]


def test_never_an_extended_resource_claim_reserved_for_another_pod():
    other = _extended_leftover(_on("node-0", None))
    other["status"]["reservedFor"] = [{"resource": "pods", "name": "q", "uid": "q-uid"}]
    svc = Service([mapped_class(), node("node-0"), node_slice("node-0", gpus(1)), extended_pod(), other])
    assert _kept(svc, "p-extended-resources-abcde")["status"]["reservedFor"][0]["uid"] == "q-uid"


def test_never_while_a_bind_of_the_pod_runs_but_once_it_ended():
    svc = Service(
        [
            *gated("node-0"),
            node_slice("gone", gpus(1)),
            allocated(claim("c"), "gone", ["gpu-0"]),
            user_pod(c="c"),
        ]
    )
    assert svc.ctx.memory.begin_bind(UID)
    assert _kept(svc)["status"]["allocation"]
    svc.ctx.memory.end_bind(UID)
    assert "allocation" not in _kept(svc)["status"]


def test_never_a_claim_that_changed_since_it_was_judged():
    svc = Service(
        [
            *gated("node-0"),
            node_slice("gone", gpus(1)),
            allocated(claim("c"), "gone", ["gpu-0"]),
            user_pod(c="c"),
        ]
    )
    binder = svc.ctx.binder
    read = binder.read_claim

    async def read_newer(namespace: str, name: str) -> dict[str, Any] | None:
        obj = await read(namespace, name)
        assert obj is not None
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
        return obj

    binder.read_claim = read_newer  # type: ignore[method-assign]
    assert _kept(svc)["status"]["allocation"]
    assert not svc.ctx.releases.running(UID)  # the release ended: the pod may be bound again


def test_a_release_under_way_refuses_the_pods_bind_and_ends_when_the_app_closes():
    svc = Service(
        [
            *gated("node-0"),
            node_slice("gone", gpus(1)),
            allocated(claim("c"), "gone", ["gpu-0"]),
            user_pod(c="c"),
        ]
    )
    reading = asyncio.Event()
    cancelled: list[bool] = []

    async def read_forever(namespace: str, name: str) -> dict[str, Any] | None:
        reading.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return None

    svc.ctx.binder.read_claim = read_forever  # type: ignore[method-assign]

    async def flow(client):
        assert (await filter_call(client, svc.pod("p"), ["node-0"]))["NodeNames"] == []
        await asyncio.wait_for(reading.wait(), 2.0)
        assert svc.ctx.releases.running(UID)
        error = await bind_call(client, svc.pod("p"), "node-0")
        assert "being released" in error
        await svc.ctx.close()  # what the app's shutdown does
        assert not svc.ctx.releases.running(UID)
        assert cancelled == [True]

    svc.run(flow)
    assert svc.claims()["c"]["status"]["allocation"]  # nothing was written


def test_never_anything_of_a_pod_that_is_already_bound():
    bound = user_pod(c="c")
    bound["spec"]["nodeName"] = "node-0"
    svc = Service(
        [
            *gated("node-0"),
            node_slice("gone", gpus(1)),
            allocated(claim("c"), "gone", ["gpu-0"], [("p", UID)]),
            bound,
        ]
    )
    assert _kept(svc)["status"]["allocation"]


@pytest.mark.parametrize("how", ["bound by our bind", "its Binding went unanswered"])
def test_never_anything_of_a_pod_our_bind_bound_before_the_cache_shows_it(how: str):
    # The watch lags: the cache still holds the pod unbound, while a bind of ours bound it (or
    # may have). The property test found filter releasing its claim then, leaving a bound pod
    # without its reservation.
    svc = Service(
        [*gated("node-0"), allocated(claim("c"), "node-0", ["gpu-7"], [("p", UID)]), user_pod(c="c")]
    )
    if how == "bound by our bind":
        svc.ctx.memory.bound(UID)
    else:
        svc.ctx.memory.binding_unknown(UID)
    assert _kept(svc)["status"]["allocation"]
