"""Random interleavings of scheduling and deletion keep the books straight."""

from __future__ import annotations

import asyncio
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.scheduling.cluster import (
    Service,
    allocated_devices,
    bind_call,
    claim_spec,
    gpu_cluster,
    pod,
    request,
    schedule,
    template,
)
from tests.scheduling.test_flow import SlowBinder

operation = st.tuples(
    st.sampled_from(["schedule", "bind-node-0", "bind-node-1", "delete"]), st.integers(0, 5)
)


@settings(max_examples=25, deadline=None)
@given(batches=st.lists(st.lists(operation, min_size=1, max_size=4), min_size=1, max_size=4))
def test_no_device_is_ever_held_twice(batches):
    objs = [*gpu_cluster(nodes=2, per_node=2), template("one"), template("two", claim_spec(request(count=2)))]
    objs += [pod(f"p{i}", templates={"gpu": "one" if i % 2 else "two"}) for i in range(6)]
    svc = Service(objs)
    svc.ctx.binder = SlowBinder(svc.ctx.binder, 0.0005)

    async def run_op(client, kind, i):
        name = f"p{i}"
        info = svc.state.pod("default", name)
        if kind == "delete":
            await client.post("/local/delete", json={"kind": "Pod", "namespace": "default", "name": name})
        elif info is not None and kind == "schedule":
            await schedule(client, dict(info.raw), svc.node_names())
        elif info is not None:
            await bind_call(client, dict(info.raw), kind.removeprefix("bind-"))

    async def flow(client):
        for batch in batches:
            await asyncio.gather(*(run_op(client, kind, i) for kind, i in batch))
            claims = list(svc.claims().values())
            devices = allocated_devices(claims)
            assert not [d for d, n in Counter(devices).items() if n > 1], devices
            assert not svc.state.inuse.inflight
            assert svc.state.inuse.devices == set(devices)
            for info in svc.state.pods.values():
                if info.node_name:  # a bound pod holds every claim it needs, on its node
                    for claim_name in info.claim_statuses.values():
                        status = svc.claims()[claim_name]["status"]
                        assert info.uid in {r["uid"] for r in status["reservedFor"]}
                        pools = {r["pool"] for r in status["allocation"]["devices"]["results"]}
                        assert pools == {info.node_name}

    svc.run(flow)
