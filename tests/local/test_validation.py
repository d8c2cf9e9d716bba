"""/local/apply refuses what kube-apiserver refuses (DRA's limits, name formats), naming the field.

The limits are those of k8s.io/api resource/v1 and k8s.io/kubernetes pkg/apis/resource/
validation (extender/model/validation). What the API server accepts is accepted here too:
negative capacities and 1e400 are valid quantities there (nothing bounds a capacity's value).
"""

from __future__ import annotations

import asyncio
import tracemalloc
from typing import Any

import orjson
import pytest

from tests.scheduling.cluster import (
    DRIVER,
    Service,
    claim,
    claim_spec,
    device_class,
    gpu,
    node_slice,
    request,
)


@pytest.fixture(scope="module")
def svc() -> Service:
    return Service([device_class()])


def apply(svc: Service, obj: Any) -> tuple[int, str]:
    async def call(client: Any) -> Any:
        return await client.post("/local/apply", json=obj)

    reply = svc.run(call)
    return reply.status_code, reply.json().get("error", "") if reply.status_code != 200 else ""


def sliced(devices: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    obj = node_slice("node-0", devices)
    obj["spec"].update(spec)
    return obj


def taint() -> list[dict[str, Any]]:
    return [{"key": "k", "effect": "NoSchedule"}]


@pytest.mark.parametrize(
    ("what", "obj", "field"),
    [
        ("129 devices", sliced([gpu(f"g{i}") for i in range(129)]), "spec.devices: must have at most 128"),
        (
            "65 devices, one tainted",
            sliced([{**gpu(f"g{i}"), **({"taints": taint()} if i == 0 else {})} for i in range(65)]),
            "spec.devices: must have at most 64",
        ),
        ("a device name with NUL", sliced([gpu("g\x000")]), "spec.devices[0].name"),
        ("a slice name with NUL", {**sliced([gpu("g")]), "metadata": {"name": "s\x00"}}, "metadata.name"),
        ("an upper-case slice name", {**sliced([gpu("g")]), "metadata": {"name": "Slice"}}, "metadata.name"),
        ("two devices of one name", sliced([gpu("g"), gpu("g")]), "spec.devices[1]: duplicate"),
        (
            "33 attributes and capacities",
            sliced([{"name": "g", "attributes": {f"a{i}": {"int": i} for i in range(33)}}]),
            "spec.devices[0]: the total number of attributes and capacities must not exceed 32",
        ),
        (
            "a 65-byte string attribute",
            sliced([{"name": "g", "attributes": {"a": {"string": "x" * 65}}}]),
            "spec.devices[0].attributes[a].string: must be no more than 64 bytes",
        ),
        (
            "a version that is not semver",
            sliced([{"name": "g", "attributes": {"v": {"version": "1.0"}}}]),
            "spec.devices[0].attributes[v].version",
        ),
        (
            "an attribute name that is no C identifier",
            sliced([{"name": "g", "attributes": {"1a": {"int": 1}}}]),
            "spec.devices[0].attributes[1a]",
        ),
        ("a driver with a space", sliced([gpu("g")], driver="gpu example"), "spec.driver"),
        ("a 64-character driver", sliced([gpu("g")], driver="d" * 64), "spec.driver"),
        (
            "a negative generation",
            sliced([gpu("g")], pool={"name": "p", "generation": -1, "resourceSliceCount": 1}),
            "spec.pool.generation",
        ),
        (
            "no slice in the pool",
            sliced([gpu("g")], pool={"name": "p", "generation": 0, "resourceSliceCount": 0}),
            "spec.pool.resourceSliceCount",
        ),
        (
            "9 counter sets",
            sliced([], sharedCounters=[{"name": f"c{i}", "counters": {"u": {"value": "1"}}}
                                       for i in range(9)]),
            "spec.sharedCounters: must have at most 8",
        ),
        (
            "33 requests",
            claim("c", claim_spec(*(request(f"r{i}") for i in range(33)))),
            "spec.devices.requests: must have at most 32",
        ),
        ("a count of 0", claim("c", claim_spec(request(count=0))), "spec.devices.requests[0].exactly.count"),
        (
            "a request name with NUL",
            claim("c", claim_spec(request("r\x00"))),
            "spec.devices.requests[0].name",
        ),
        (
            "a selector over 10 KiB",
            claim("c", claim_spec(request(selectors=[{"cel": {"expression": "true" + " " * 10240}}]))),
            "spec.devices.requests[0].exactly.selectors[0].cel.expression",
        ),
        (
            "a claim in a namespace with NUL",
            claim("c", namespace="ns\x00"),
            "metadata.namespace",
        ),
        (
            "a class with 33 selectors",
            device_class("many", " && ".join(["true"] * 2))
            | {"spec": {"selectors": [{"cel": {"expression": "true"}}] * 33}},
            "spec.selectors: must have at most 32",
        ),
    ],
)
def test_apply_refuses_what_the_api_server_refuses_naming_the_field(
    svc: Service, what: str, obj: dict[str, Any], field: str
) -> None:
    status, error = apply(svc, obj)
    assert status == 400, (what, error)
    assert field in error, (what, error)


@pytest.mark.parametrize(
    ("what", "obj"),
    [
        ("128 devices", sliced([gpu(f"g{i}") for i in range(128)])),
        ("64 devices, one tainted", sliced([{**gpu(f"g{i}"), **({"taints": taint()} if i == 0 else {})}
                                            for i in range(64)])),
        ("32 attributes and capacities", sliced([{"name": "g", "attributes": {f"a{i}": {"int": i}
                                                                               for i in range(31)},
                                                  "capacity": {"memory": {"value": "1"}}}])),
        ("a 64-byte string attribute", sliced([{"name": "g", "attributes": {"a": {"string": "x" * 64}}}])),
        ("a pre-release version", sliced([{"name": "g", "attributes": {"v": {"version": "1.0.0-rc.1+b"}}}])),
        ("an upper-case driver (as a CSI driver name)", sliced([gpu("g")], driver="GPU.Example.com")),
        ("a negative capacity", sliced([gpu("g", memory="-1")])),
        ("a capacity of 1e400", sliced([gpu("g", memory="1e400")])),
        ("32 requests", claim("c", claim_spec(*(request(f"r{i}") for i in range(32))))),
        ("a selector of 10 KiB", claim("c", claim_spec(request(
            selectors=[{"cel": {"expression": "true" + " " * (10240 - 4)}}])))),
    ],
)
def test_apply_accepts_what_the_api_server_accepts(svc: Service, what: str, obj: dict[str, Any]) -> None:
    status, error = apply(svc, obj)
    assert status == 200, (what, error)


def test_a_slice_of_ten_thousand_devices_is_refused_before_it_costs_anything(svc: Service) -> None:
    body = orjson.dumps(node_slice("huge", [gpu(f"g{i}") for i in range(10_000)]))
    tracemalloc.start()
    try:
        orjson.loads(body)
        decoding = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()

        async def call(client: Any) -> Any:
            headers = {"Content-Type": "application/json"}
            return await client.post("/local/apply", content=body, headers=headers)

        reply = svc.run(call)
        applying = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Was 1 s and +183 MB: the whole slice copied, parsed and indexed. Now it is refused on the
    # count, and what is left is reading and decoding the body. Memory, unlike time, does not
    # depend on how loaded the machine is: the bound is relative to decoding the same body.
    assert applying < 3 * decoding + 2**20, (applying, decoding)
    assert reply.status_code == 400, reply.text
    assert "spec.devices: must have at most 128 items, has 10000" in reply.json()["error"]
    assert svc.state.raw("ResourceSlice", ("", "huge-" + DRIVER)) is None


def test_a_long_list_takes_turns_with_other_requests(svc: Service) -> None:
    slices = [node_slice(f"n{k}", [gpu(f"g{i}") for i in range(128)]) for k in range(100)]
    body = orjson.dumps(slices)

    async def call(client: Any) -> tuple[Any, int]:
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                await asyncio.sleep(0)
                ticks += 1

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        before = ticks
        reply = await client.post("/local/apply", content=body, headers={"Content-Type": "application/json"})
        done.set()
        await task
        return reply, ticks - before

    reply, ticks = svc.run(call)
    assert reply.status_code == 200, reply.text
    assert len(reply.json()["applied"]) == 100
    # Each slice of 128 devices takes a millisecond or more to admit, so the apply runs for over
    # 100 ms and lets other work run every 10 ms on the way; the whole list in one go gave it
    # one turn, before parsing.
    assert ticks >= 5, ticks
