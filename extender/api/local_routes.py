"""Local mode's HTTP routes: ``/local/apply`` and ``/local/delete`` change the embedded cluster.

Their one job is translating those two requests into :class:`LocalCluster` calls; the load
generator changes the cluster through them while it schedules. Only a local service has them.
"""

from __future__ import annotations

import asyncio
import time

from fastapi import FastAPI, Request, Response

from extender.api import wire
from extender.api.bodies import Bodies
from extender.api.replies import failed, json_reply, problem
from extender.api.wire import BadRequest
from extender.local.cluster import LocalCluster
from extender.local.store import ManifestError
from extender.model.kinds import KIND_NAMES

# How long one apply holds the event loop before it lets other requests run.
APPLY_TURN_S = 0.01


def add_local_routes(app: FastAPI, cluster: LocalCluster, bodies: Bodies) -> None:
    """Serve the two routes over ``cluster`` from ``app``, reading bodies under the "local" limits."""

    @app.post("/local/apply")
    async def local_apply(request: Request) -> Response:
        try:
            async with bodies.read(request, "local") as raw:
                body = wire.decode(raw)
            objs = body if isinstance(body, list) else [body]
            applied = []
            turn_started = time.perf_counter()
            for i, obj in enumerate(objs):
                if time.perf_counter() - turn_started > APPLY_TURN_S:
                    # A long list takes turns with the other requests: each object is applied
                    # whole (no request sees half of one), as kubectl applies a list one by one.
                    await asyncio.sleep(0)
                    turn_started = time.perf_counter()
                try:
                    written = cluster.apply(obj)
                except (ManifestError, ValueError) as exc:
                    if not isinstance(body, list):
                        raise BadRequest(str(exc)) from None
                    raise BadRequest(f"item {i}: {exc} (the items before it were applied)") from None
                meta = written["metadata"]
                applied.append(
                    {"kind": written["kind"], "namespace": meta.get("namespace"), "name": meta["name"]}
                )
        except Exception as exc:
            return failed("local/apply", exc)
        return json_reply({"applied": applied})

    @app.post("/local/delete")
    async def local_delete(request: Request) -> Response:
        try:
            async with bodies.read(request, "local") as raw:
                fields = wire.fold(wire.decode(raw), "delete request")
            kind = fields.get("kind")
            if kind not in KIND_NAMES:
                raise BadRequest(f"kind: expected one of {', '.join(KIND_NAMES)}")
            found = cluster.delete(kind, fields.get("namespace"), fields.get("name"))
        except ManifestError as exc:
            return problem(400, f"local/delete: {exc}")
        except Exception as exc:
            return failed("local/delete", exc)
        if not found:
            return problem(404, f"{kind} {fields.get('namespace') or ''}/{fields.get('name')} not found")
        return json_reply({"deleted": True})
