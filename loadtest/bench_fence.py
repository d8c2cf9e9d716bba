"""What a takeover's fencing costs: ``python -m loadtest.bench_fence 100 1000``.

A replica whose kube-scheduler takes over the Lease fences every unallocated claim before it
writes a new allocation (``Handover`` in ``extender/scheduling/settle.py``, docs/reliability.md,
"Handover"). This seeds N unallocated claims in the in-process test API server
(``tests/apiserver``), runs one takeover without its wait through the production Kubernetes
binder, and prints how long the fencing took and how many writes it made.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from extender.kube.binder import KubeBinder
from extender.kube.client import RawClient
from extender.model.kinds import KIND_NAMES
from extender.scheduling.settle import Handover
from extender.state import ClusterState
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer
from tests.kube import objects


async def fence(claims: int) -> str:
    with ApiServer() as server:
        state = ClusterState()
        for i in range(claims):
            state.apply("ResourceClaim", server.store.seed(BY_KIND["ResourceClaim"], objects.claim(f"c{i}")))
        for kind in KIND_NAMES:
            state.mark_synced(kind)
        binder = KubeBinder(RawClient(server.api_client(), request_timeout=5.0))
        handover = Handover(state, binder, term=lambda: "bench", quiet_s=0.0, give_up_s=60.0)
        before = len(server.writes())
        started = time.perf_counter()
        assert handover.blocks_allocation() is not None  # starts the takeover
        while handover.blocks_allocation() is not None:
            await asyncio.sleep(0.01)
        took = time.perf_counter() - started
        binder.close()
        writes = len(server.writes()) - before
        return (f"{claims} unallocated claims: {handover.fenced} fenced in {took:.2f} s, {writes} writes, "
                f"{took / max(1, claims) * 1000:.1f} ms a claim")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench_fence", description=__doc__)
    parser.add_argument("claims", type=int, nargs="+", help="numbers of unallocated claims to fence")
    for claims in parser.parse_args().claims:
        print(asyncio.run(fence(claims)))


if __name__ == "__main__":
    main()
