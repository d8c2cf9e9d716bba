"""A small in-process extender for exercising the driver without the real service.

It hands out one device per claim, first free device of the node, and speaks the same wire
format as dra-extender (filter / prioritize / bind, /local/apply, /local/delete, /debug/claims,
/metrics). `reuse_devices=True` plants the bug the double-allocation check must catch.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

Obj = dict[str, Any]


class FakeExtender:
    def __init__(self, objects: list[Obj], reuse_devices: bool = False) -> None:
        self.reuse_devices = reuse_devices
        self.devices: dict[str, list[tuple[str, str, str]]] = {}
        for o in objects:
            if o["kind"] == "ResourceSlice":
                spec = o["spec"]
                self.devices.setdefault(spec["nodeName"], []).extend(
                    (spec["driver"], spec["pool"]["name"], d["name"]) for d in spec.get("devices", [])
                )
        self.used: set[tuple[str, str, str]] = set()
        self.claims: dict[str, Obj] = {
            o["metadata"]["name"]: {**o, "status": {}} for o in objects if o["kind"] == "ResourceClaim"
        }
        self.pods: dict[str, Obj] = {}
        self.calls: dict[str, int] = {}
        self.cel_evaluations = 0  # pretend every filter call evaluates one selector per candidate
        for o in objects:
            if o["kind"] == "Pod":
                self._add_pod(o)

    def _add_pod(self, pod: Obj) -> None:
        name = pod["metadata"]["name"]
        self.pods[name] = pod
        source = pod["spec"]["resourceClaims"][0]
        if "resourceClaimTemplateName" in source:
            claim = {"metadata": {"name": f"{name}-gpu", "namespace": pod["metadata"]["namespace"]}}
            self.claims[f"{name}-gpu"] = {**claim, "status": {}, "generated": True}

    def _claim_of(self, pod_name: str) -> Obj:
        source = self.pods[pod_name]["spec"]["resourceClaims"][0]
        return self.claims[source.get("resourceClaimName") or f"{pod_name}-gpu"]

    def _free(self, node: str) -> list[tuple[str, str, str]]:
        return [d for d in self.devices.get(node, []) if self.reuse_devices or d not in self.used]

    def _allocated_node(self, claim: Obj) -> str | None:
        allocation = claim["status"].get("allocation")
        if not allocation:
            return None
        return allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]

    def filter(self, args: Obj) -> Obj:
        claim = self._claim_of(args["Pod"]["metadata"]["name"])
        pinned = self._allocated_node(claim)
        self.cel_evaluations += len(args["NodeNames"])
        passing, failed = [], {}
        for node in args["NodeNames"]:
            if (pinned == node) if pinned else bool(self._free(node)):
                passing.append(node)
            else:
                failed[node] = "no free device"
        return {"NodeNames": passing, "FailedNodes": failed, "FailedAndUnresolvableNodes": {}, "Error": ""}

    def prioritize(self, args: Obj) -> list[Obj]:
        return [{"Host": n, "Score": min(10, len(self._free(n)))} for n in args["NodeNames"]]

    def bind(self, args: Obj) -> Obj:
        pod, node = self.pods[args["PodName"]], args["Node"]
        if pod["metadata"]["uid"] != args["PodUID"]:
            return {"Error": "uid mismatch"}
        claim = self._claim_of(args["PodName"])
        if not claim["status"].get("allocation"):
            free = self._free(node)
            if not free:
                return {"Error": f"no free device on {node}"}
            driver, pool, device = free[0]
            self.used.add(free[0])
            claim["status"]["allocation"] = {
                "devices": {
                    "results": [{"request": "gpu", "driver": driver, "pool": pool, "device": device}]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
            }
        elif self._allocated_node(claim) != node:
            return {"Error": "claim allocated elsewhere"}
        claim["status"].setdefault("reservedFor", []).append(
            {"resource": "pods", "name": args["PodName"], "uid": args["PodUID"]}
        )
        return {"Error": ""}

    def delete(self, body: Obj) -> Obj:
        name = body["name"]
        claim = self._claim_of(name)
        self.pods.pop(name)
        claim["status"]["reservedFor"] = [
            r for r in claim["status"].get("reservedFor", []) if r["name"] != name
        ]
        if not claim["status"]["reservedFor"] and claim["status"].get("allocation"):
            result = claim["status"].pop("allocation")["devices"]["results"][0]
            self.used.discard((result["driver"], result["pool"], result["device"]))
        return {}

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.calls[path] = self.calls.get(path, 0) + 1
        if request.method == "GET" and path == "/metrics":
            text = "# TYPE dra_extender_cel_evaluations_total counter\n"
            text += f"dra_extender_cel_evaluations_total {self.cel_evaluations}\n"
            return httpx.Response(200, text=text)
        if request.method == "GET" and path == "/debug/claims":
            items = [{k: v for k, v in c.items() if k != "generated"} for c in self.claims.values()]
            return httpx.Response(200, json={"items": items})
        body = json.loads(request.content)
        if path == "/local/apply":
            for pod in body:
                self._add_pod(pod)
            return httpx.Response(200, json={})
        handlers = {"/filter": self.filter, "/prioritize": self.prioritize, "/bind": self.bind}
        handlers["/local/delete"] = self.delete
        return httpx.Response(200, json=handlers[path](body))

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)
