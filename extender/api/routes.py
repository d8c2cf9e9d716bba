"""The HTTP surface: decode, call scheduling, encode. No business logic lives here.

Bodies are read under their limits (``bodies``) and decoded by ``wire`` (filter and prioritize
bodies by the app's ``args_decoder.ArgsDecoder``); every protocol violation becomes a 4xx with
a message. Scheduling outcomes are always HTTP 200 (``Error`` for filter/bind), as
kube-scheduler expects. Allocation work runs ``in_turns``: a long request lets the others run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from extender import logs
from extender.api import decisions, wire
from extender.api.args_decoder import ArgsDecoder
from extender.api.bodies import Bodies, received_chunks
from extender.api.local_routes import add_local_routes
from extender.api.replies import JSON, failed, json_reply, problem
from extender.api.snapshot import snapshot
from extender.api.wire import BadRequest
from extender.metrics import CONTENT_TYPE, Metrics
from extender.model.pods import PodInfo
from extender.scheduling.bind import UnknownPod, bind_pod
from extender.scheduling.claims import held_or_given
from extender.scheduling.context import SchedulingContext
from extender.scheduling.explain import explain
from extender.scheduling.extended_resources.needs import ExtendedNeeds
from extender.scheduling.filter import filter_nodes, report_no_fit
from extender.scheduling.preempt import preempt
from extender.scheduling.score import score_nodes
from extender.scheduling.turns import in_turns

if TYPE_CHECKING:
    from extender.local.cluster import LocalCluster


Handler = Callable[[bytes], Awaitable[Any]]

# Far above any real node (kubelet runs ~250 pods), far below what would keep the single event
# loop busy for seconds: beyond it a list is a bug or an attack, and gets a 400 instead of a
# long stall for every other caller. The node count's limit is wire.MAX_NODES, checked there
# before any node is parsed.
MAX_NODES = wire.MAX_NODES
MAX_VICTIMS_PER_NODE = 5_000


class ExtenderApp(FastAPI):
    """FastAPI, with a shortcut to the scheduler's verbs past its middleware and routing.

    Every route is registered once, in FastAPI's router, which serves the route table, the 405
    for another method and every other path. A verb's endpoint is a plain ASGI app
    (:class:`_Verb`), and a POST to a verb's path is handed to that same endpoint directly,
    found in a table read off the router: kube-scheduler calls filter, prioritize and bind
    for every pod, and what the shortcut skips does nothing for them (Starlette's error and
    exception middleware, FastAPI's exit-stack middleware and the route matching; the endpoint
    answers every exception itself). Measured in-process on the smallest verbs (a prioritize
    of ten names and a refused bind), the shortcut saves 23-30 us of 83-92 us of CPU a
    request, a quarter to a third, on a loaded shared machine
    (``nice python -m loadtest.bench_routing``, whose rounds show the noise).
    """

    @cached_property
    def _verb_endpoints(self) -> dict[str, _Verb]:
        """The verbs' endpoints by path, as the router holds them (read on the first request,
        when every route is in place)."""
        return {
            route.path: route.app
            for route in self.router.routes
            if isinstance(route, Route) and isinstance(route.app, _Verb)
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = self._verb_endpoints.get(scope["path"])
            if endpoint is not None:
                scope["app"] = self
                await endpoint(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def _bounded(what: str, count: int, limit: int) -> None:
    if count > limit:
        raise BadRequest(f"{what}: {count} entries, more than the limit of {limit}")


def create_app(
    ctx: SchedulingContext,
    cluster: LocalCluster | None = None,
    background: Sequence[Callable[[], Awaitable[None]]] = (),
    debug: bool = True,
    waiting: Callable[[], str | None] | None = None,
) -> FastAPI:
    """The service. ``cluster`` enables the /local endpoints; ``background`` runs for the app's life.

    ``debug`` serves /debug/*: they show every claim and pod, and explain runs the allocator on
    demand, so a cluster deployment leaves them off unless asked for. ``waiting`` says what the
    start still waits for before the cache can even begin to fill (None: nothing), which /readyz
    then names instead of the unsynced cache.
    """

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        tasks = [asyncio.ensure_future(job()) for job in background]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await ctx.close()

    app = ExtenderApp(
        title="dra-extender", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    state, metrics = ctx.state, ctx.metrics
    bodies = Bodies(ctx.config.body_limits, ctx.config.max_json_elements)
    metrics.watch_service(
        state.counts, lambda: len(state.inuse.inflight), lambda: state.synced, ctx.reports_leader
    )
    metrics.watch_cel(ctx.cel.stats)
    verbs = _Verbs(ctx)
    for name, handler in verbs.handlers().items():
        # A plain ASGI endpoint (see ExtenderApp): the route gives it its name and the 405s.
        endpoint = _Verb(name, handler, bodies, metrics)
        app.router.routes.append(Route(f"/{name}", endpoint, methods=["POST"], name=name))
    _probe_routes(app, ctx, waiting)
    if debug:
        _debug_routes(app, ctx)
    if cluster is not None:
        add_local_routes(app, cluster, bodies)
    return app


class _Verbs:
    """The scheduler's four verbs over one app's scheduling context: each takes the request
    body and returns the reply to encode. The decoder, and what it remembers of the nodes and
    pods it has read, belongs to the app."""

    def __init__(self, ctx: SchedulingContext) -> None:
        self.ctx, self.state = ctx, ctx.state
        self.decoder = ArgsDecoder()

    def handlers(self) -> dict[str, Handler]:
        return {
            "filter": self.filter, "prioritize": self.prioritize, "bind": self.bind, "preempt": self.preempt,
        }

    def _extender_args(self, body: bytes) -> tuple[wire.ExtenderArgs, PodInfo]:
        args = self.decoder.extender_args(body, self.state.nodes)
        _bounded("NodeNames" if args.nodes is None else "Nodes.items", len(args.node_names), MAX_NODES)
        # After the structural checks: a malformed body is a 400 first.
        return args, self._request_pod(self.decoder.pod_info(args))

    def _request_pod(self, given: PodInfo) -> PodInfo:
        ctx, state = self.ctx, self.state
        info = held_or_given(state, given)
        if "spec" not in given.raw and state.pod(info.namespace, info.name) is not info:
            # Only a name, and not one we know: scheduling it as a pod without claims would be a guess.
            raise UnknownPod(f"pod {info.ref} is not known to the extender and the request has no spec")
        if not info.uid and info.extended_requests and ctx.config.handles(info):
            needs = ExtendedNeeds.of(info, state.classes)
            if needs is not None:
                # The claim made for them is owned by, and known by, the pod's UID: without one
                # the request lacks what scheduling needs (kube-scheduler always sends it).
                raise BadRequest(
                    f"Pod.metadata.uid: required: pod {info.ref} asks for extended resources "
                    f"that DRA provides ({', '.join(sorted(needs.classes))}), and the claim made "
                    "for them names its pod by UID"
                )
        return info

    async def filter(self, body: bytes) -> Any:
        args, pod = self._extender_args(body)
        # args.nodes: parsed by the decoder, which keeps each node's bytes for the reply.
        out = await in_turns(filter_nodes, self.ctx, pod, args.node_names, args.nodes)
        report_no_fit(self.ctx, pod, out)
        decisions.filtered(pod, len(args.node_names), out)
        return wire.filter_result(args, out.passed, out.failed, out.unresolvable, out.error)

    async def prioritize(self, body: bytes) -> Any:
        args, pod = self._extender_args(body)
        scores = await in_turns(score_nodes, self.ctx, pod, args.node_names)
        decisions.prioritized(pod, scores)
        return wire.host_priorities(scores)

    async def bind(self, body: bytes) -> Any:
        args = wire.binding_args(body)
        logs.note(pod=f"{args.pod_namespace}/{args.pod_name}", node=args.node)
        error = await bind_pod(self.ctx, args.pod_namespace, args.pod_name, args.pod_uid, args.node)
        if error:
            logs.note(error=error)
        return {"Error": error}

    async def preempt(self, body: bytes) -> Any:
        args = wire.preemption_args(body)
        _bounded("NodeNameToMetaVictims", len(args.victims), MAX_NODES)
        for node, victims in args.victims.items():
            _bounded(f"victims of node {node}", len(victims.uids), MAX_VICTIMS_PER_NODE)
        pod = self._request_pod(wire.request_pod(args.pod))
        given = {n: (v.uids, v.pdb_violations) for n, v in args.victims.items()}
        chosen = await in_turns(preempt, self.ctx, pod, given)
        decisions.preempted(pod, len(args.victims), chosen)
        return wire.preemption_result(
            {n: wire.Victims(list(v.uids), v.pdb_violations) for n, v in chosen.items()}
        )


def _probe_routes(app: FastAPI, ctx: SchedulingContext, waiting: Callable[[], str | None] | None) -> None:
    """/healthz, /readyz and /metrics (the probe port serves only these, see ``server``)."""
    state, metrics = ctx.state, ctx.metrics

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response("ok", media_type="text/plain")

    @app.get("/readyz")
    async def readyz() -> Response:
        if waiting is not None and (reason := waiting()):
            return Response(reason, status_code=503, media_type="text/plain")
        if not state.synced:
            return Response("cluster state not synced yet", status_code=503, media_type="text/plain")
        if not ctx.leading:
            # Keeps the Service pointed at the leader; the standby's cache stays warm.
            return Response("standby: not the leader", status_code=503, media_type="text/plain")
        return Response("ok", media_type="text/plain")

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)


_JSON_TYPE = (b"content-type", JSON.encode())


class _Verb:
    """One verb, as an ASGI app: the body read under its limits, the handler's answer in JSON,
    and the request counted and logged. Starlette's Request and Response objects, their
    header parsing and building, and the body reader's context manager cost about 20 us a
    request, a tenth of a refused bind; the answer's headers are built here as Response
    built them (tests/api/test_routes.py holds the messages to that)."""

    def __init__(self, name: str, handler: Handler, bodies: Bodies, metrics: Metrics) -> None:
        self.name, self.handler, self.bodies, self.metrics = name, handler, bodies, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = self.name
        started = time.perf_counter()
        fields = decisions.start(name)
        with logs.recording(fields):
            try:
                body, slot = await self.bodies.collect(
                    _content_length(scope["headers"]), received_chunks(receive), name
                )
                try:
                    reply = wire.encode(await self.handler(body))
                finally:
                    if slot is not None:
                        slot.release()
                status, headers = 200, [(b"content-length", b"%d" % len(reply)), _JSON_TYPE]
            except Exception as exc:
                if isinstance(exc, UnknownPod):
                    response = problem(404, f"{name}: {exc.args[0]}")
                    logs.note(error=exc.args[0])
                else:
                    response = failed(name, exc)
                    logs.note(error=str(exc))
                status, headers, reply = response.status_code, response.raw_headers, bytes(response.body)
        seconds = time.perf_counter() - started
        self.metrics.request(name, status, seconds)
        if fields is not None:
            decisions.finish(name, fields, status, seconds)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": reply})


def _content_length(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    for key, value in headers:
        if key == b"content-length":
            return value
    return None


def _debug_routes(app: FastAPI, ctx: SchedulingContext) -> None:
    """Read-only views of the cache and the allocator, for people debugging a placement."""
    state = ctx.state

    @app.get("/debug/config")
    async def debug_config() -> Response:
        return json_reply(ctx.config.describe())

    def debug_list(path: str, kind: str) -> None:
        async def listing() -> Response:
            return json_reply({"items": state.items(kind)})

        app.add_api_route(path, listing, methods=["GET"], name=f"debug-{kind}")

    debug_list("/debug/claims", "ResourceClaim")
    debug_list("/debug/pods", "Pod")
    debug_list("/debug/slices", "ResourceSlice")

    @app.get("/debug/snapshot")
    async def debug_snapshot() -> Response:
        return json_reply(snapshot(state))

    @app.get("/debug/explain")
    async def debug_explain(pod: str = "") -> Response:
        namespace, sep, name = pod.partition("/")
        if not sep or not namespace or not name:
            return problem(400, "query parameter pod=NAMESPACE/NAME is required")
        info = state.pod(namespace, name)
        if info is None:
            return problem(404, f"pod {pod} is not known to the extender")
        return json_reply(await in_turns(explain, ctx, info))

