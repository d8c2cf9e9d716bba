"""A claim write whose fate turns unknown *before* the bind deadline keeps its device.

The API server answers the first claim write 504 (its own request timeout: the request goes on
inside it), the binder's retry is refused 403, and the bind ends well before its deadline with an
error. The first request can still land; until its fate is known, no other claim may get the GPU.
Treating this like a plain failure (the retry's 403 being the last word) lets the GPU go to pod
b, and then the first write lands too: one GPU in two claims in the API server.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.apiserver.server import ApiServer
from tests.kube.conftest import eventually
from tests.reliability.harness import CLAIM, audit, bind, claim_reserved, extender, pod_obj, schedule
from tests.reliability.test_late_writes import fits, held_twice, one_gpu_two_pods

pytestmark = pytest.mark.anyio

BIND_TIMEOUT = 10.0  # far away: the bind must end on its own, with the write's fate unknown


async def test_a_write_timed_out_by_the_api_server_then_refused_keeps_its_gpu_until_it_lands(
    apiserver: ApiServer,
) -> None:
    one_gpu_two_pods(apiserver)
    async with extender(apiserver, bind_timeout_s=BIND_TIMEOUT) as (http, state, _):
        assert await fits(http, apiserver, "a") == ["node-a"]
        land = threading.Event()
        apiserver.faults.time_out("update", "resourceclaims", subresource="status", after=land)
        apiserver.faults.fail("update", "resourceclaims", 403, subresource="status")
        started = time.monotonic()
        error = await bind(http, apiserver, "a", "node-a")
        assert time.monotonic() - started < BIND_TIMEOUT / 2, "the bind waited for its deadline"
        assert "403" in error and "may still land" in error, error
        # The first request is still inside the API server: b must not get the GPU meanwhile.
        assert await fits(http, apiserver, "b") == []
        node, why = await schedule(http, apiserver, "b")
        assert node is None, f"pod b was bound to the GPU a's write can still take: {why}"
        land.set()
        await eventually(lambda: claim_reserved("ca", apiserver), what="the timed-out write to land")
        reserved = apiserver.store.get(CLAIM, "default", "ca")["status"]["reservedFor"]
        assert [r["uid"] for r in reserved] == [pod_obj(apiserver, "a")["metadata"]["uid"]]
        assert held_twice(apiserver) == []
        assert "allocation" not in (apiserver.store.get(CLAIM, "default", "cb").get("status") or {})
        # The retry of a adopts what landed and binds; b still finds no GPU.
        assert await fits(http, apiserver, "a") == ["node-a"]
        assert await bind(http, apiserver, "a", "node-a") == ""
        assert await fits(http, apiserver, "b") == []
        await audit(apiserver, state)
