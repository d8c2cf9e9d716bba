"""Start-up of `dra-extender serve --kube` against the test API server: time to ready and RSS.

    python -m loadtest.kube_startup [--nodes 5000] [--devices-per-node 8] [--pods 20000] [--source TREE]

The `template` workload is loaded once through local mode, whose claim controller makes each
pod's claim and records it in the pod's status, as kube-controller-manager would have. Every
object is then seeded into the in-process test API server (tests/apiserver), and the extender
is started with a kubeconfig for it: ready means every informer has listed its kind.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from extender.local.cluster import load_local
from extender.model.kinds import KIND_NAMES
from extender.state import ClusterState
from loadtest.startup import measure, report
from loadtest.workloads import WorkloadParams, generate, write_state
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer


def cluster_objects(nodes: int, devices_per_node: int, pods: int) -> list[dict[str, Any]]:
    """The workload's objects with generated claims, as a cluster would hold them."""
    workload = generate("template", WorkloadParams(nodes, devices_per_node, pods))
    with tempfile.TemporaryDirectory() as tmp:
        write_state(workload, Path(tmp), fmt="json")
        state = ClusterState()
        load_local(state, Path(tmp))
    objects = []
    for kind in KIND_NAMES:
        for _, raw in state._shelf(kind).held():
            obj = {k: v for k, v in raw.items()}
            obj["metadata"] = {k: v for k, v in raw["metadata"].items() if k != "resourceVersion"}
            objects.append(obj)
    return objects


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.kube_startup", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--devices-per-node", type=int, default=8)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--source", type=Path, default=Path.cwd(), help="source tree to run (default: here)")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    if min(args.nodes, args.devices_per_node, args.repeat) < 1 or args.pods < 0:
        parser.error("--nodes, --devices-per-node and --repeat must be at least 1, --pods at least 0")
    started = time.monotonic()
    objects = cluster_objects(args.nodes, args.devices_per_node, args.pods)
    with ApiServer(history_size=10) as server:
        for obj in objects:
            server.store.seed(BY_KIND[obj["kind"]], obj)
        print(f"seeded {len(objects)} objects in {time.monotonic() - started:.1f} s", file=sys.stderr)
        with tempfile.TemporaryDirectory() as tmp:
            kubeconfig = Path(tmp) / "kubeconfig"
            server.write_kubeconfig(str(kubeconfig))
            serve = ["--kube", "--kubeconfig", str(kubeconfig)]
            runs = []
            for _ in range(args.repeat):
                try:
                    runs.append(measure(serve, args.source, args.timeout))
                except RuntimeError as exc:
                    print(f"error: {exc}", file=sys.stderr)
                    return 2
    label = f"--kube, {args.nodes} nodes x {args.devices_per_node} devices, {args.pods} pods"
    label += f", from {args.source}"
    print(report(label, runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
