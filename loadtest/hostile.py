"""How much one attacker slows everyone else: ``python -m loadtest.hostile``.

Starts the extender (from ``--source``, default this checkout) on a generated local cluster,
measures ``/healthz`` and a normal ``/filter`` back to back for a quiet phase, then again while
an attacker keeps a hostile ``/preempt`` running (a claim with no solution, every node a
candidate) and eight 10 MB bodies of nested arrays in flight. Prints the worst added latency
(attack maximum minus quiet median) of each probe and the growth of the resident set.

With ``--cel NODESxDEVICES`` the attack is issue 28's instead: ``--attackers`` clients each
send, one after another, a ``/filter`` for a claim whose selector is within Kubernetes' cost
limit (cel-go's estimate 985,261 of 1,000,000) and matches nothing, over NODES nodes of
DEVICES distinct devices; every request names a new claim, so no verdict is remembered from
the one before. The probes are ``/healthz`` and a normal ``/filter`` over the same nodes.

With ``--attack`` the attacker is another of issue 28's: large requests within the limits
(``full-nodes``, ``preempt-flood``, ``preempt-names``), a 64 MiB header on the main port or the
probe port (``header``, ``headers-4``, ``header-probe``), bodies that were answered 500
(``bad-bodies``) or a local-mode apply of 10,000 devices (``local-apply``).

Run it on two checkouts back to back to compare; the figures go in docs/reliability.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from loadtest.server import free_port

DRIVER = "gpu.example.com"
MB = 1024 * 1024
NESTED = b"[" * 500 + b"]" * 500 + b","
HOSTILE_BODY = b"[" + NESTED * (10 * MB // len(NESTED)) + b"[]]"


def _nodes(nodes: int, devices: Callable[[int], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The device class, and ``nodes`` nodes each with one slice of ``devices(node index)``."""
    objs: list[dict[str, Any]] = [{
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }]
    for i in range(nodes):
        name = f"node-{i}"
        objs.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        objs.append({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{name}-gpus"},
            "spec": {"driver": DRIVER, "nodeName": name,
                     "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices(i)},
        })
    return objs


def _pod(name: str, claim_name: str) -> dict[str, Any]:
    """A pod of the default namespace using one claim, as "gpu"."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "i"}],
                     "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}]}}


EXTENDED = "example.com/gpu"


def cluster(nodes: int, mapped: bool = False) -> list[dict[str, Any]]:
    """``mapped``: a second class of the same devices serves the extended resource ``EXTENDED``."""
    objs = _nodes(nodes, lambda _: [{"name": f"gpu-{d}"} for d in range(24)])
    if mapped:
        objs.append({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "mapped"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}],
                     "extendedResourceName": EXTENDED},
        })

    def claim(name: str, *counts: int) -> dict[str, Any]:
        requests = [{"name": f"r{i}", "exactly": {"deviceClassName": DRIVER, "count": n}}
                    for i, n in enumerate(counts)]
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"devices": {"requests": requests}}}

    # 12 + 13 devices of 24: no solution, and a search space beyond any budget.
    objs += [claim("hostile", 12, 13), _pod("attacker", "hostile")]
    objs += [claim("modest", 1), _pod("normal", "modest")]
    return objs


def numbers(n: int) -> str:
    return "[" + ",".join(str(i) for i in range(n)) + "]"


def expensive_selector(variant: int) -> str:
    """Within the API server's cost estimate, false on every device; ``variant`` makes each
    expression distinct (so each is compiled and evaluated anew) at the same cost."""
    return f"{numbers(350)}.exists(a, {numbers(350)}.exists(b, a + b < -{variant + 1}))"


CEL_VARIANTS = 200


def cel_cluster(nodes: int, devices: int) -> list[dict[str, Any]]:
    """Nodes of distinct devices (a serial number each), the attacker's claims and a normal pod."""
    objs = _nodes(nodes, lambda i: [{"name": f"gpu-{d}", "attributes": {"serial": {"int": i * devices + d}}}
                                    for d in range(devices)])

    def claim(name: str, selectors: list[dict[str, Any]]) -> dict[str, Any]:
        request = {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "selectors": selectors}}
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"devices": {"requests": [request]}}}

    for v in range(CEL_VARIANTS):
        objs += [claim(f"hostile-{v}", [{"cel": {"expression": expensive_selector(v)}}]),
                 _pod(f"attacker-{v}", f"hostile-{v}")]
    objs += [claim("modest", []), _pod("normal", "modest")]
    return objs


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def probe_loop(client: httpx.AsyncClient, request: Any, until: float) -> list[float]:
    latencies = []
    while time.monotonic() < until:
        started = time.perf_counter()
        response = await request(client)
        latencies.append(time.perf_counter() - started)
        assert response.status_code == 200, response.text
        await asyncio.sleep(0.02)
    return latencies


async def attack(url: str, pods: dict[str, Any], candidates: list[str], until: float) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    longest = [0.0]
    victims = {"Pods": [{"UID": "nobody"}], "NumPDBViolations": 0}
    preempt = {"Pod": pods["attacker"], "NodeNameToMetaVictims": dict.fromkeys(candidates, victims)}

    async def hostile_preempt() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            while time.monotonic() < until:
                started = time.monotonic()
                response = await client.post("/preempt", json=preempt)
                key = f"preempt {response.status_code}"
                seen[key] = seen.get(key, 0) + 1
                longest[0] = max(longest[0], time.monotonic() - started)

    async def big_body() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            while time.monotonic() < until:
                try:
                    response = await client.post("/filter", content=HOSTILE_BODY)
                    key = f"10 MB body {response.status_code}"
                except httpx.HTTPError as exc:
                    key = f"10 MB body {type(exc).__name__}"
                seen[key] = seen.get(key, 0) + 1

    await asyncio.gather(*([hostile_preempt()] if candidates else []), *(big_body() for _ in range(8)))
    if candidates:
        seen["preempt longest s"] = round(longest[0], 1)
    return seen


async def cel_attack(url: str, pods: dict[str, Any], nodes: list[str], attackers: int,
                     until: float) -> dict[str, Any]:
    """``attackers`` clients sending hostile filters one after another, each a new claim."""
    variants = iter(range(CEL_VARIANTS))
    durations: list[float] = []
    answers: dict[str, int] = {}

    async def attacker() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=300) as client:
            while time.monotonic() < until:
                body = {"Pod": pods[f"attacker-{next(variants)}"], "NodeNames": nodes}
                started = time.monotonic()
                response = await client.post("/filter", json=body)
                durations.append(time.monotonic() - started)
                result = response.json()
                reasons = {**result.get("FailedNodes", {}), **result.get("FailedAndUnresolvableNodes", {})}
                for reason in reasons.values():
                    key = "timed out" if "timed out" in reason else reason[-60:]
                    answers[key] = answers.get(key, 0) + 1
                answers["fits"] = answers.get("fits", 0) + len(result.get("NodeNames") or [])

    await asyncio.gather(*(attacker() for _ in range(attackers)))
    return {"hostile filters": len(durations), "longest hostile filter s": round(max(durations), 1),
            "node answers": answers}


# ----- large requests within the limits (issue 28, item 6) ------------------------------------


JSON = {"Content-Type": "application/json"}


def minimal_node(i: int) -> dict[str, Any]:
    """A full Node as small as it gets: many of them fit under the body and element limits."""
    return {"metadata": {"name": f"big-{i}", "uid": f"uid-{i}"},
            "status": {"allocatable": {"cpu": "8", "memory": "1Gi"}}}


async def full_nodes_attack(url: str, pods: dict[str, Any], until: float, nodes: int = 40_000,
                            at_once: int = 4) -> dict[str, Any]:
    """``at_once`` filters at a time, each carrying ``nodes`` full Node objects."""
    body = json.dumps({"Pod": pods["normal"], "Nodes": {"items": [minimal_node(i) for i in range(nodes)]}})
    return await _repeat(url, until, at_once, f"filter of {nodes} full nodes",
                         lambda c: c.post("/filter", content=body, headers=JSON))


async def preempt_flood_attack(url: str, pods: dict[str, Any], until: float, candidates: list[str],
                               at_once: int = 20) -> dict[str, Any]:
    """``at_once`` hostile preempts (a claim with no solution) at a time."""
    victims = {"Pods": [{"UID": "nobody"}], "NumPDBViolations": 0}
    body = {"Pod": pods["attacker"], "NodeNameToMetaVictims": dict.fromkeys(candidates, victims)}
    return await _repeat(url, until, at_once, f"{at_once} hostile preempts",
                         lambda c: c.post("/preempt", json=body))


async def preempt_names_attack(url: str, pods: dict[str, Any], until: float, names: int = 50_000
                               ) -> dict[str, Any]:
    """One preempt at a time over ``names`` node names (none of them a node of the cluster)."""
    victims = {"Pods": [{"UID": "nobody"}], "NumPDBViolations": 0}
    body = {"Pod": pods["attacker"], "NodeNameToMetaVictims": {f"ghost-{i}": victims for i in range(names)}}
    text = json.dumps(body)
    return await _repeat(url, until, 1, f"preempt of {names} names",
                         lambda c: c.post("/preempt", content=text, headers=JSON))


HEADER_BYTES = 64 * MB


async def header_attack(url: str, until: float, at_once: int) -> dict[str, Any]:
    """``at_once`` connections at a time, each sending one request whose header is 64 MiB
    (``url``: the main port or the probe port)."""
    host, _, port = url.removeprefix("http://").partition(":")
    filler = b"a" * MB  # sent MiB by MiB: the load generator copies no 64 MiB buffer of its own

    async def send(_: httpx.AsyncClient) -> str:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            with contextlib.suppress(OSError):  # closed by the server while still sending
                writer.write(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-filler: ")
                for _ in range(HEADER_BYTES // MB):
                    writer.write(filler)
                    await writer.drain()
                writer.write(b"\r\n\r\n")
                await writer.drain()
            with contextlib.suppress(OSError):
                status = (await asyncio.wait_for(reader.readline(), 60)).split(b" ")[1:2]
                return status[0].decode() if status else "closed"
            return "reset"
        finally:
            writer.close()

    return await _repeat(url, until, at_once, f"64 MiB header x{at_once}", send)


async def bad_bodies_attack(url: str, pods: dict[str, Any], until: float) -> dict[str, Any]:
    """Three clients: a filter and a prioritize whose Pod holds bytes that are not UTF-8, and a
    filter of a full Pod without ``metadata.uid`` asking for a DRA-backed extended resource."""
    nodes = {"NodeNames": [f"node-{i}" for i in range(NODES)]}
    not_utf8 = json.dumps({"Pod": pods["normal"], **nodes}).encode().replace(b'"normal"', b'"norm\xffal"', 1)
    uidless = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "newcomer", "namespace": "default"},
               "spec": {"containers": [{"name": "c", "image": "i",
                                        "resources": {"requests": {EXTENDED: "1"}}}]}}
    uidless_body = json.dumps({"Pod": uidless, **nodes})
    sends = [("filter, not UTF-8", "/filter", not_utf8), ("prioritize, not UTF-8", "/prioritize", not_utf8),
             ("filter, no uid", "/filter", uidless_body)]
    results = await asyncio.gather(*(
        _repeat(url, until, 1, what, lambda c, p=path, b=body: c.post(p, content=b, headers=JSON))
        for what, path, body in sends))
    return {key: value for result in results for key, value in result.items()}


async def local_apply_attack(url: str, until: float, devices: int = 10_000) -> dict[str, Any]:
    """One ``/local/apply`` at a time of a ResourceSlice of ``devices`` devices (the API allows 128)."""
    body = json.dumps({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "huge"},
        "spec": {"driver": DRIVER, "nodeName": "huge", "pool": {"name": "huge", "generation": 1,
                                                                  "resourceSliceCount": 1},
                 "devices": [{"name": f"g{i}"} for i in range(devices)]},
    })
    return await _repeat(url, until, 1, f"apply of {devices} devices",
                         lambda c: c.post("/local/apply", content=body, headers=JSON))


async def _repeat(url: str, until: float, at_once: int, what: str, send: Any) -> dict[str, Any]:
    """``at_once`` clients sending ``send(client)`` back to back until ``until``: answers by
    status (``send`` returns the response, or the status as text when it speaks raw HTTP)."""
    seen: dict[str, Any] = {}
    longest = [0.0]

    async def one() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            while time.monotonic() < until:
                started = time.monotonic()
                try:
                    answer = await send(client)
                    key = f"{what} {answer if isinstance(answer, str) else answer.status_code}"
                except httpx.HTTPError as exc:
                    key = f"{what} {type(exc).__name__}"
                seen[key] = seen.get(key, 0) + 1
                longest[0] = max(longest[0], time.monotonic() - started)

    await asyncio.gather(*(one() for _ in range(at_once)))
    seen[f"{what} longest s"] = round(longest[0], 2)
    return seen


ATTACKS = ("default", "full-nodes", "preempt-flood", "preempt-names", "header", "headers-4", "header-probe",
           "bad-bodies", "local-apply")


async def measure(
    url: str,
    pid: int,
    seconds: float,
    candidates: int,
    cel: tuple[int, int] | None = None,
    attackers: int = 1,
    kind: str = "default",
    probe_url: str = "",
) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        pods = (await client.get("/debug/pods")).json()["items"]
        by_name = {p["metadata"]["name"]: p for p in pods}
        nodes = [f"node-{i}" for i in range(NODES if cel is None else cel[0])]
        filter_body = {"Pod": by_name["normal"], "NodeNames": nodes}

        async def healthz(c: httpx.AsyncClient) -> httpx.Response:
            return await c.get("/healthz")

        async def normal_filter(c: httpx.AsyncClient) -> httpx.Response:
            return await c.post("/filter", json=filter_body)

        quiet_until = time.monotonic() + seconds
        quiet = await asyncio.gather(probe_loop(client, healthz, quiet_until),
                                     probe_loop(client, normal_filter, quiet_until))
        rss_before = rss_bytes(pid)
        peak = rss_before
        loud_until = time.monotonic() + seconds

        async def sample_rss() -> None:
            nonlocal peak
            while time.monotonic() < loud_until + 1:
                peak = max(peak, rss_bytes(pid))
                await asyncio.sleep(0.05)

        if cel is not None:
            attacking = cel_attack(url, by_name, nodes, attackers, loud_until)
        elif kind == "full-nodes":
            attacking = full_nodes_attack(url, by_name, loud_until)
        elif kind == "preempt-flood":
            attacking = preempt_flood_attack(url, by_name, loud_until, nodes[:candidates])
        elif kind == "preempt-names":
            attacking = preempt_names_attack(url, by_name, loud_until)
        elif kind in ("header", "headers-4", "header-probe"):
            attacking = header_attack(probe_url if kind == "header-probe" else url, loud_until,
                                      4 if kind == "headers-4" else 1)
        elif kind == "bad-bodies":
            attacking = bad_bodies_attack(url, by_name, loud_until)
        elif kind == "local-apply":
            attacking = local_apply_attack(url, loud_until)
        else:
            attacking = attack(url, by_name, nodes[:candidates], loud_until)
        attack_task = asyncio.ensure_future(attacking)
        sampler = asyncio.ensure_future(sample_rss())
        await asyncio.sleep(0.5)  # the attack is under way
        loud = await asyncio.gather(probe_loop(client, healthz, loud_until),
                                    probe_loop(client, normal_filter, loud_until))
        seen = await attack_task
        await sampler
    out: dict[str, Any] = {
        "attack requests": seen,
        "rss before MB": round(rss_before / MB, 1),
        "rss peak MB": round(peak / MB, 1),
        "rss growth MB": round((peak - rss_before) / MB, 1),
    }
    for name, q, lo in zip(("/healthz", "/filter"), quiet, loud, strict=True):
        median = statistics.median(q)
        if not lo:  # not one probe came back while the attack lasted
            out[name] = {"quiet median ms": round(median * 1000, 1), "probes under attack": 0,
                         "worst added ms": f"> {round(seconds * 1000)}"}
            continue
        out[name] = {"quiet median ms": round(median * 1000, 1), "attack max ms": round(max(lo) * 1000, 1),
                     "worst added ms": round((max(lo) - median) * 1000, 1), "probes under attack": len(lo)}
    return out


NODES = 100


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.hostile", description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=Path.cwd(), help="checkout to run (default: here)")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--candidates", type=int, default=4,
                        help="candidate nodes of the hostile preempt (4: as reported in issue 11; "
                        "0: no preempt)")
    parser.add_argument("--cel", metavar="NODESxDEVICES",
                        help="issue 28 attack instead: a costly selector over NODESxDEVICES (1x128, 50x8)")
    parser.add_argument("--attackers", type=int, default=1, help="concurrent hostile filters (--cel)")
    parser.add_argument("--cel-engine", default="auto", help="the server's --cel-engine")
    parser.add_argument("--attack", choices=ATTACKS, default="default",
                        help="default: a hostile preempt and eight 10 MB bodies; full-nodes: four filters "
                        "of 40,000 full Nodes at a time; preempt-flood: 20 hostile preempts at a time; "
                        "preempt-names: a preempt over 50,000 node names; header, headers-4: one or four "
                        "connections at a time sending a 64 MiB header; header-probe: one, to the probe "
                        "port; bad-bodies: filter and prioritize bodies not UTF-8, a filter of a full Pod "
                        "without uid asking for an extended resource; local-apply: a /local/apply of a "
                        "slice of 10,000 devices")
    args = parser.parse_args()
    cel = None
    if args.cel:
        nodes, _, devices = args.cel.partition("x")
        cel = (int(nodes), int(devices))
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp, "state")
        state.mkdir()
        objs = cluster(NODES, mapped=args.attack == "bad-bodies") if cel is None else cel_cluster(*cel)
        Path(state, "cluster.yaml").write_text(yaml.safe_dump_all(objs))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "PYTHONPATH": str(args.source.resolve())}
        probe_port = free_port()
        cmd = [sys.executable, "-m", "extender", "serve", "--state", str(state), "--port", str(port),
               "--cel-engine", args.cel_engine, "--probe-port", str(probe_port)]
        with Path(tmp, "log").open("wb") as log:
            process = subprocess.Popen(cmd, cwd=args.source, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                        break
                if time.monotonic() > deadline or process.poll() is not None:
                    print(Path(tmp, "log").read_text()[-2000:], file=sys.stderr)
                    return 1
                time.sleep(0.1)
            figures = measure(
                url, process.pid, args.seconds, args.candidates, cel, args.attackers, args.attack,
                f"http://127.0.0.1:{probe_port}",
            )
            print(json.dumps(asyncio.run(figures), indent=2))
        finally:
            process.terminate()
            process.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
