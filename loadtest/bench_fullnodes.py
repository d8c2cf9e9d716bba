"""Filter with full Node objects (``nodeCacheCapable: false``) against a real `dra-extender serve`.

    python -m loadtest.bench_fullnodes [--nodes 500] [--requests 200] [--source TREE]

kube-scheduler without ``nodeCacheCapable`` sends every candidate as its whole Node object and
reads the passing ones back. Each node here is padded to what a real one weighs (about 7.5 KB:
labels, annotations, conditions, addresses, images, nodeInfo), and every request carries all
of them. Pods are the `template` workload's; filter only, so the cluster stays as generated.
Reports client-side latency percentiles and the server's CPU per request.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from loadtest import wire
from loadtest.http import KeepAlivePool
from loadtest.k8s import Obj
from loadtest.server import cpu_seconds
from loadtest.startup import running
from loadtest.workloads import WorkloadParams, generate, write_state


def realistic_node(node: Obj, index: int) -> Obj:
    """``node`` with the fields a kubelet-reported Node carries, about 7.5 KB as JSON."""
    name = node["metadata"]["name"]
    meta = node["metadata"]
    labels = {
        **meta["labels"],
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "a2-highgpu-8g", "nvidia.com/gpu.present": "true",
        "topology.kubernetes.io/region": "europe-west4",
    }
    conditions = [
        {"type": t, "status": "False" if t != "Ready" else "True", "reason": f"Kubelet{t}",
         "message": f"kubelet reports {t}", "lastHeartbeatTime": "2026-11-26T07:00:00Z",
         "lastTransitionTime": "2026-11-20T07:00:00Z"}
        for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
    ]
    images = [
        {"names": [f"registry.example.com/team-{i}/image-{i}@sha256:{(index * 31 + i) % 10**12:064d}",
                   f"registry.example.com/team-{i}/image-{i}:v1.{i}.0"],
         "sizeBytes": 100_000_000 + i * 7_919}
        for i in range(20)
    ]
    return {
        "metadata": {
            "name": name,
            "uid": f"00000000-0000-4000-8000-{index:012d}",
            "resourceVersion": str(100_000 + index),
            "creationTimestamp": "2026-11-20T07:00:00Z",
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "csi.volume.kubernetes.io/nodeid": orjson.dumps({"pd.csi.storage.gke.io": name}).decode(),
            },
        },
        "spec": {"podCIDR": f"10.{index // 256}.{index % 256}.0/24", "providerID": f"gce://project/zone/{name}"},
        "status": {
            "capacity": {"cpu": "96", "memory": "1342Gi", "pods": "110", "ephemeral-storage": "500Gi"},
            "allocatable": node["status"]["allocatable"],
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": f"10.0.{index // 256}.{index % 256}"},
                          {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": f"{index:032x}", "systemUUID": f"{index:032x}",
                         "bootID": f"{index:032x}", "kernelVersion": "6.1.0-27-cloud-amd64",
                         "osImage": "Debian GNU/Linux 12 (bookworm)",
                         "containerRuntimeVersion": "containerd://1.7.22", "kubeletVersion": "v1.35.0",
                         "kubeProxyVersion": "v1.35.0", "operatingSystem": "linux", "architecture": "amd64"},
            "images": images,
        },
    }


def full_args(pod_json: bytes, nodes_json: bytes) -> bytes:
    return b'{"Pod":' + pod_json + b',"Nodes":{"metadata":{},"items":' + nodes_json + b'},"NodeNames":null}'


async def _filters(url: str, bodies: list[bytes], names: list[str]) -> list[float]:
    pool = KeepAlivePool(url, timeout=30.0)
    try:
        # The first filter compiles the selector: not measured.
        wire.filter_result(wire.decode(*await pool.post("/filter", bodies[0])), names)
        latencies = []
        for body in bodies:
            started = time.perf_counter()
            status, reply = await pool.post("/filter", body)
            latencies.append(time.perf_counter() - started)
            wire.filter_result(wire.decode(status, reply), names)
        return latencies
    finally:
        pool.close()


def run(nodes: int, requests: int, source: Path, engine: str) -> dict[str, Any]:
    workload = generate("template", WorkloadParams(nodes=nodes, devices_per_node=8, pods=requests))
    full = [realistic_node(n, i) for i, n in enumerate(o for o in workload.objects if o["kind"] == "Node")]
    nodes_json = orjson.dumps(full)
    # The cluster holds the same nodes as the requests carry, as an informer-fed scheduler's do.
    by_name = {n["metadata"]["name"]: {"apiVersion": "v1", "kind": "Node", **n} for n in full}
    workload.objects[:] = [by_name.get(o["metadata"]["name"], o) if o["kind"] == "Node" else o
                           for o in workload.objects]
    with tempfile.TemporaryDirectory() as tmp:
        write_state(workload, Path(tmp))  # YAML: what every commit reads, for A/B runs
        serve = ["--state", tmp, "--cel-engine", engine]
        with running(serve, source, timeout=600.0) as (process, url):
            # The server logs a line per filter to a pipe: read, or it stalls once the pipe is full.
            if process.stderr is not None:
                threading.Thread(target=process.stderr.read, daemon=True).start()
            bodies = [full_args(orjson.dumps(wire.informer_pod(p)), nodes_json) for p in workload.pods]
            cpu_before = cpu_seconds(process.pid) or 0.0
            latencies = asyncio.run(_filters(url, bodies[:requests], [n["metadata"]["name"] for n in full]))
            cpu = (cpu_seconds(process.pid) or 0.0) - cpu_before
    latencies.sort()
    return {
        "node_bytes": len(nodes_json) / len(full),
        "p50_ms": statistics.median(latencies) * 1000,
        "p90_ms": latencies[int(0.9 * (len(latencies) - 1))] * 1000,
        "server_cpu_ms": cpu / len(latencies) * 1000,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.bench_fullnodes", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--source", type=Path, default=Path.cwd(), help="source tree to run (default: here)")
    parser.add_argument("--cel-engine", default="python", help="the server's --cel-engine (default python)")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.requests < 1:
        parser.error("--nodes and --requests must be at least 1")
    try:
        r = run(args.nodes, args.requests, args.source, args.cel_engine)
    except (RuntimeError, OSError, wire.ProtocolError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{args.nodes} full nodes ({r['node_bytes'] / 1000:.1f} KB each), {args.requests} filters from "
        f"{args.source}: p50 {r['p50_ms']:.1f} ms, p90 {r['p90_ms']:.1f} ms, "
        f"server CPU {r['server_cpu_ms']:.1f} ms per filter"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
