"""A filter's nodes and a bind's pod pass through each module once: traced with
``sys.setprofile``, no call stack of a filter, a prioritize or a bind enters a module of
``extender`` that it is already inside (A -> B -> A), and the filter's list of node names is
handed from the verb to the pod's verdicts only."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from extender.scheduling.bind import bind_pod
from extender.scheduling.claims import pod_for_request
from extender.scheduling.filter import filter_nodes
from extender.scheduling.score import score_nodes
from tests.scheduling.cluster import claim_spec, gpu_cluster, local_context, pod, request, template


def _modules_on_the_stack(frame: FrameType | None) -> list[str]:
    """The extender modules of ``frame``'s stack, innermost first, a run of one module once."""
    modules: list[str] = []
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.startswith("extender.") and (not modules or modules[-1] != name):
            modules.append(name)
        frame = frame.f_back
    return modules


class _Trace:
    """Every call into an extender module while ``run`` runs: the stacks that re-enter a
    module, and the functions that were handed ``follow`` (by identity) as an argument."""

    def __init__(self, follow: object = None) -> None:
        self.follow = follow
        self.reentering: list[str] = []
        self.handed: list[str] = []

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not frame.f_globals.get("__name__", "").startswith("extender."):
            return
        modules = _modules_on_the_stack(frame)
        if len(modules) != len(set(modules)):
            self.reentering.append(" <- ".join(modules))
        if self.follow is not None and any(v is self.follow for v in frame.f_locals.values()):
            where = f"{frame.f_globals['__name__']}.{frame.f_code.co_name}"
            if where not in self.handed:
                self.handed.append(where)

    def run(self, call: Callable[[], object]) -> None:
        sys.setprofile(self)
        try:
            call()
        finally:
            sys.setprofile(None)


def test_filter_prioritize_and_bind_enter_each_module_once() -> None:
    objects = gpu_cluster(nodes=3, per_node=1)
    objects.append(template("one", claim_spec(request("gpu"))))
    objects += [pod(f"p-{i}", templates={"dev": "one"}) for i in range(2)]
    ctx, _ = local_context(objects)
    for i in range(2):  # every node decided, then every node read from the spec's table
        info = ctx.state.pod("default", f"p-{i}")
        assert info is not None
        asked = pod_for_request(ctx.state, dict(info.raw))
        names = ["node-0", "node-1", "node-2", "node-9"]
        trace = _Trace(follow=names)
        trace.run(lambda: filter_nodes(ctx, asked, names))  # noqa: B023 (run at once)
        trace.run(lambda: score_nodes(ctx, asked, ["node-0", "node-1", "node-2"]))  # noqa: B023
        assert trace.reentering == []
        assert [h.removeprefix("extender.scheduling.") for h in trace.handed] == [
            "filter.filter_nodes",
            "filter._filter",
            "verdicts.pod.decide",
            "verdicts.pod._settle",
            "verdicts.pod._sorted",
        ]
    info = ctx.state.pod("default", "p-0")
    assert info is not None
    trace = _Trace()
    error: list[str] = []
    trace.run(lambda: error.append(asyncio.run(bind_pod(ctx, "default", "p-0", info.uid, "node-0"))))
    assert error == [""]
    assert trace.reentering == []
