"""`make sandbox`: the end-to-end control plane left running for people to try the extender.

    python -m tests.e2e.sandbox --bin DIR [--version 1.37.2] [--nodes 3] [--gpus 4]

Brings up etcd, kube-apiserver, kube-controller-manager and one shipped pair (kube-scheduler +
dra-extender), publishes ``--nodes`` fake GPU nodes with ``--gpus`` devices each and the example
DeviceClass, prints a kubeconfig, and keeps everything running until Ctrl-C (then stops it all
by PID). No kubelet runs: pods are scheduled and bound, their containers never start.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path

from tests.e2e import objects as o
from tests.e2e import shipped
from tests.e2e.control_plane import ControlPlane, stop_leftovers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.sandbox", description=__doc__.split("\n")[0])
    parser.add_argument("--bin", type=Path, required=True, help="scripts/e2e/build.sh prints it")
    parser.add_argument("--version", default="1.37.2")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--run", type=Path, default=Path(tempfile.gettempdir()) / "dra-extender-sandbox")
    args = parser.parse_args(argv)
    stop_leftovers(args.run)
    shutil.rmtree(args.run, ignore_errors=True)  # a fresh cluster each time
    plane = ControlPlane(args.bin, args.run, args.version)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        plane.start()
        plane.api.apply(shipped.example("deviceclass.yaml"))
        plane.pair().start()
        for i in range(args.nodes):
            o.add_node(plane.api, f"gpu-node-{i}", args.gpus)
        kubeconfig = plane.pki.kubeconfig(args.run / "admin.kubeconfig", plane.server, identity="admin")
        extender = plane.pairs[0]
        print(
            f"\nsandbox: Kubernetes {plane.server_version()} with dra-extender, {args.nodes} nodes x "
            f"{args.gpus} GPUs (DeviceClass gpu.example.com)\n\n"
            f"  export KUBECONFIG={kubeconfig}\n"
            f"  export PATH={args.bin}:$PATH        # kubectl of the same release\n"
            "  kubectl apply -k manifests/example/   # a Deployment whose pods each get a GPU\n"
            "  kubectl get pods -o wide; kubectl get resourceclaims\n\n"
            f"  extender: {extender.extender_url}/debug/claims, metrics {extender.probe_url}/metrics\n"
            f"  logs: {args.run}/logs\n\nCtrl-C stops it.",
            flush=True,
        )
        while not stop.wait(0.5):  # a timeout, so the signal handler runs promptly
            pass
    finally:
        print("sandbox: stopping", flush=True)
        plane.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
