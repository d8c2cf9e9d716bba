"""DRASchedulerFilterTimeout: each allocate call has a limit of its own, within the deadline."""

from __future__ import annotations

import time

from tests.allocator.builders import allocator, claim, dev, failure, node, picked, request, resource_slice

SLICES = [resource_slice(devices=[dev("d0"), dev("d1")])]


def test_each_node_gets_its_own_limit() -> None:
    alloc = allocator(SLICES)
    alloc.node_timeout = 0.2
    first = alloc.allocate(node(), [claim(request())])
    time.sleep(0.3)  # longer than one node's limit: a limit per request would have passed
    assert picked(first) == picked(alloc.allocate(node(), [claim(request())])) == [[("req-0", "d0")]]


def test_a_node_over_its_limit_times_out() -> None:
    alloc = allocator(SLICES)
    alloc.node_timeout = 0.0
    assert "filter operation aborted" in failure(alloc.allocate(node(), [claim(request())]), "timeout").reason


def test_the_request_deadline_still_bounds_a_node() -> None:
    alloc = allocator(SLICES, deadline=time.monotonic() - 1)
    alloc.node_timeout = 10.0
    failure(alloc.allocate(node(), [claim(request())]), "timeout")
