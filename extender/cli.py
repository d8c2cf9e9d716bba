"""``dra-extender serve``: flags → Config → state + source + binder → the HTTP app;
``dra-extender explain``: ask a running extender why a pod is placed where it is, or pending."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from extender import __version__, logs
from extender.api import create_app
from extender.api.connections import ConnectionLimits
from extender.api.heap import keep_freed_memory
from extender.api.server import probe_host, serve, servers
from extender.api.tls import AllowedClients, ReloadingTLS, TLSError, TLSFiles
from extender.cel.engine import ENGINE_CHOICES
from extender.cel.environment import Environment
from extender.config import (
    BODY_LIMITS,
    MAX_JSON_ELEMENTS,
    PREEMPTION_MODES,
    SCORE_POLICIES,
    Config,
    ConfigError,
    parse_body_limits,
    parse_gate_overrides,
    parse_release,
)
from extender.local.binder import LocalBinder
from extender.local.cluster import load_local
from extender.local.store import ManifestError
from extender.metrics import Metrics
from extender.model.features import DEFAULT_RELEASE, RELEASES
from extender.scheduling.context import SchedulingContext
from extender.scheduling.retry import RetryBook
from extender.state import ClusterState
from extender.tools import explain as explain_tool
from extender.tools import simulate

if TYPE_CHECKING:
    # The Kubernetes client takes 0.15-0.3 s to import: local mode, the one that must start
    # fast, never needs it, so --kube imports it when it builds its parts.
    import kubernetes
    import uvicorn

    from extender.kube.binder import KubeBinder
    from extender.kube.client import RawClient
    from extender.kube.events import EventRecorder

log = logging.getLogger("extender")


DESCRIPTION = """\
A kube-scheduler extender that allocates devices of Dynamic Resource Allocation
(resource.k8s.io/v1) with the upstream structured allocator's semantics.

  dra-extender serve                 the extender on a built-in demo cluster (no cluster needed)
  dra-extender serve --state DIR     ... on the Kubernetes objects in DIR (*.yaml, *.yml, *.json)
  dra-extender serve --kube          ... on the cluster of the kubeconfig (or in-cluster config)
  dra-extender explain NS/POD        ask a running extender why a pod fits where, or not

Documentation: docs/usage.md, docs/deploy.md and docs/troubleshooting.md in the source tree."""


class _Help(argparse.RawDescriptionHelpFormatter):
    """Each flag's default value in its help line (unless it has none, or says it in words),
    and descriptions kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if "default" in text or default in (None, "", (), False) or default is argparse.SUPPRESS:
            return text
        return f"{text} (default: %(default)s)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dra-extender", description=DESCRIPTION, formatter_class=_Help)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = sub.add_parser(
        "serve",
        help="run the scheduler extender",
        description="Run the scheduler extender.",
        formatter_class=_Help,
    )
    # serve's flags in groups, as --help lists them
    groups = (_cluster_flags, _scheduling_flags, _leader_flags, _tls_flags, _limit_flags, _output_flags)
    for add_group in groups:
        add_group(serve)
    explain_tool.add_parser(sub, _Help)
    simulate.add_parser(sub)
    return parser


def _cluster_flags(serve: argparse.ArgumentParser) -> None:
    flags = serve.add_argument_group(
        "cluster", "Where the cluster's objects come from, and where the extender listens."
    )
    flags.add_argument(
        "--state",
        type=Path,
        help="directory of *.yaml, *.yml and *.json manifests (default: the demo cluster)",
    )
    flags.add_argument("--kube", action="store_true", help="watch a real cluster and write through its API")
    flags.add_argument("--kubeconfig", help="for --kube (default: in-cluster config, then ~/.kube/config)")
    flags.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    flags.add_argument("--port", type=int, default=8888, help="port of the extender's HTTP(S) API")
    flags.add_argument(
        "--feature-gates",
        default="",
        metavar="GATE=BOOL,...",
        help="kube-scheduler syntax, over the defaults of --kubernetes-version; /debug/config shows "
        "what is in force",
    )
    flags.add_argument(
        "--kubernetes-version",
        metavar="MAJOR.MINOR",
        help=f"whose feature-gate defaults apply ({', '.join(RELEASES)}; newer ones get {DEFAULT_RELEASE}'s; "
        f"default: with --kube the API server's, not ready until it has answered /version, locally "
        f"{DEFAULT_RELEASE})",
    )


def _scheduling_flags(serve: argparse.ArgumentParser) -> None:
    flags = serve.add_argument_group(
        "scheduling", "What the extender decides, and for which pods."
    )
    flags.add_argument(
        "--node-filter-timeout",
        type=float,
        default=Config.node_filter_timeout_s,
        metavar="SECONDS",
        help="with DRASchedulerFilterTimeout: give up on one node's allocation after this long, as "
        "the DynamicResources plugin's filterTimeout (0: no limit but the request's)",
    )
    flags.add_argument(
        "--cel-engine",
        choices=ENGINE_CHOICES,
        default="auto",
        help="CEL engine for device selectors (auto: the pure-Python one, the faster; cpp: Google's "
        "C++ runtime)",
    )
    flags.add_argument(
        "--score-policy",
        choices=SCORE_POLICIES,
        default="compact",
        help="how prioritize ranks nodes that fit (docs/scheduling-policy.md)",
    )
    flags.add_argument(
        "--scheduler-name",
        action="append",
        help="schedulerName of pods to handle (repeatable; default: with --kube dra-extender-scheduler and "
        "dra-scheduler, locally every pod)",
    )
    flags.add_argument(
        "--preemption",
        choices=PREEMPTION_MODES,
        default="verb",
        help="verb: device preemption only through kube-scheduler's preempt calls; evict (with --kube): "
        "the extender also evicts lower-priority pods holding the devices of a pod no node fits, "
        "for kube-scheduler releases that do not ask (docs/scheduling-policy.md, preempt)",
    )
    flags.add_argument(
        "--preemption-hold-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="with --preemption=evict: the devices an eviction freed are held for the preemptor this long",
    )


def _leader_flags(serve: argparse.ArgumentParser) -> None:
    flags = serve.add_argument_group(
        "leader election", "Which replica binds."
    )
    flags.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with --kube: only the holder of the Lease binds; standbys report not ready",
    )
    flags.add_argument("--lease-name", default="dra-extender", help="with --leader-elect: the Lease's name")
    flags.add_argument(
        "--lease-namespace",
        default=os.environ.get("POD_NAMESPACE") or "dra-system",
        help="with --leader-elect: the Lease's namespace ($POD_NAMESPACE when set)",
    )
    flags.add_argument(
        "--scheduler-lease",
        default="dra-system/dra-extender-scheduler",
        metavar="NAMESPACE/NAME",
        help="with --kube --no-leader-elect: the Lease of the kube-scheduler in this pod; the "
        "dra_extender_leader metric says whether it holds the Lease (holder <$POD_NAME or "
        "hostname>_<uuid>); '' reports 1",
    )


def _tls_flags(serve: argparse.ArgumentParser) -> None:
    flags = serve.add_argument_group(
        "TLS and probes", "Who may connect, and the plain probe port."
    )
    flags.add_argument(
        "--tls-cert-file", type=Path, help="serve HTTPS with this certificate (PEM; reloaded on change)"
    )
    flags.add_argument("--tls-private-key-file", type=Path, help="the certificate's private key (PEM)")
    flags.add_argument(
        "--client-ca-file",
        type=Path,
        help="with TLS: only clients with a certificate signed by this CA may connect (i.e. kube-scheduler)",
    )
    flags.add_argument(
        "--client-allowed-names",
        type=_names,
        default=(),
        metavar="NAME[,NAME...]",
        help="with --client-ca-file: serve only clients whose certificate has one of these names among "
        "its DNS subjectAltNames (its subject CN if it has no subjectAltName); the others get 403",
    )
    flags.add_argument(
        "--probe-port",
        type=int,
        default=0,
        help="also serve /healthz, /readyz and /metrics (only those) over plain HTTP on this port, "
        "for kubelet probes that cannot present a client certificate (0: off)",
    )


def _limit_flags(serve: argparse.ArgumentParser) -> None:
    flags = serve.add_argument_group(
        "requests and connections", "What a request may cost and how long a connection may wait."
    )
    limits = ConnectionLimits()
    flags.add_argument(
        "--max-body-bytes",
        default="",
        metavar="SIZE|ROUTE=SIZE,...",
        help="request-body limits: one size for every route, or per route "
        f"({', '.join(f'{r}={s >> 10}Ki' for r, s in BODY_LIMITS.items())} by default); "
        "sizes may end in Ki, Mi, Gi",
    )
    flags.add_argument(
        "--max-json-elements",
        type=int,
        default=MAX_JSON_ELEMENTS,
        metavar="N",
        help="refuse a request body with more JSON elements than this, before parsing it",
    )
    flags.add_argument(
        "--header-timeout",
        type=float,
        default=limits.header_timeout,
        metavar="SECONDS",
        help="close a connection that has not sent a request's complete headers this long after it "
        "opened (TLS handshake included) or after the request began",
    )
    flags.add_argument(
        "--body-timeout",
        type=float,
        default=limits.body_timeout,
        metavar="SECONDS",
        help="answer 408 and close when a request body is not complete this long after its headers",
    )
    flags.add_argument(
        "--keepalive-timeout",
        type=float,
        default=limits.keepalive_timeout,
        metavar="SECONDS",
        help="close a kept-alive connection idle this long between requests",
    )
    flags.add_argument(
        "--max-connections",
        type=int,
        default=limits.max_connections,
        metavar="N",
        help="open connections, both ports together; a new one beyond closes the one that has waited "
        "longest for its client's request (fewer if the descriptor limit is lower)",
    )


def _output_flags(serve: argparse.ArgumentParser) -> None:
    flags = serve.add_argument_group(
        "logs and debugging", "What the extender says and shows."
    )
    flags.add_argument(
        "--enable-debug-endpoints",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="serve /debug/* (default: on locally, off with --kube: they expose every claim and pod)",
    )
    flags.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="info: one line per filter, preempt and bind decision; debug: also prioritize",
    )
    flags.add_argument(
        "--log-format",
        default="text",
        choices=logs.FORMATS,
        help="text lines, or one JSON object per line (fields: docs/usage.md)",
    )


def _names(text: str) -> tuple[str, ...]:
    names = tuple(text.split(","))
    if not all(name and name == name.strip() for name in names):
        raise argparse.ArgumentTypeError(f"{text!r}: names separated by commas, none empty, no spaces")
    return names


def config_from_args(args: argparse.Namespace) -> Config:
    """The configuration; with --kube and no --kubernetes-version, the gates wait for the API
    server's version (``_cluster_release``, or ``_LateRelease`` when it does not answer at start)."""
    kwargs: dict[str, Any] = {}
    if args.scheduler_name:
        kwargs["scheduler_names"] = tuple(args.scheduler_name)
    config = Config(
        state_dir=args.state,
        kube=args.kube,
        kubeconfig=args.kubeconfig,
        host=args.host,
        port=args.port,
        feature_gate_overrides=parse_gate_overrides(args.feature_gates),
        node_filter_timeout_s=args.node_filter_timeout,
        cel_engine=args.cel_engine,
        score_policy=args.score_policy,
        body_limits=parse_body_limits(args.max_body_bytes) if args.max_body_bytes else dict(BODY_LIMITS),
        max_json_elements=args.max_json_elements,
        leader_elect=args.leader_elect,
        lease_name=args.lease_name,
        lease_namespace=args.lease_namespace,
        scheduler_lease=args.scheduler_lease,
        client_allowed_names=args.client_allowed_names,
        preemption=args.preemption,
        preemption_hold_s=args.preemption_hold_timeout,
        **kwargs,
    )
    if args.kubernetes_version is not None:
        return config.with_release(parse_release(args.kubernetes_version))
    return config if args.kube else config.with_release(DEFAULT_RELEASE)


# How long the start waits for /version before serving without it (_LateRelease asks again):
# an address that swallows packets delays the start by this much at most, well within the
# liveness probe's patience (manifests/base/deployment.yaml).
FIRST_VERSION_TIMEOUT_S = 5.0


def _cluster_release(config: Config, raw: RawClient) -> tuple[Config, str | None]:
    """With --kube and no --kubernetes-version: the gate defaults of the API server's release,
    and None; when the API server does not answer, ``config`` unchanged and the failure."""
    from extender.kube.client import KubeApiError

    try:
        version = raw.server_version(timeout=FIRST_VERSION_TIMEOUT_S)
    except KubeApiError as exc:
        log.warning(
            "cannot read the API server's version (%s): serving, not ready, and asking again until it "
            "answers; --kubernetes-version names the release instead",
            exc,
        )
        return config, str(exc)
    return _released(config, version), None


def _released(config: Config, version: str) -> Config:
    """``config`` with the gate defaults of the release of the API server's ``version``;
    ConfigError for a release the extender cannot run with."""
    release = parse_release(version)
    newer = "" if version.removeprefix("v").startswith(f"{release}.") else f", newer than {release}"
    log.info("API server %s%s: %s gate defaults", version, newer, release)
    return config.with_release(release)


class _LateRelease:
    """The rest of the start, once an API server that did not answer /version at start does
    (--kube without --kubernetes-version).

    Exiting instead would crash-loop the extender whenever it starts before its API server can
    be reached, where with --kubernetes-version the same extender serves, not ready, and lists
    until the API server answers. So this one serves too: /readyz names what it waits for, the
    verbs answer as before the cache has synced (it has not begun to fill), and once the version
    is known the gates are its release's and the cluster's jobs (watch, leader election) start.
    A release the extender cannot run with stops it then, as it would have at start (exit 2).
    """

    def __init__(
        self,
        ctx: SchedulingContext,
        client: RawClient,
        jobs: Sequence[Callable[[], Awaitable[None]]],
        unanswered: str,
    ) -> None:
        self._ctx, self._client, self._jobs = ctx, client, tuple(jobs)
        self._last_error = unanswered
        self.known = False
        self.failure: str | None = None
        # Set by main: stops the servers when the release is one the extender cannot run with.
        self.on_failure: Callable[[], None] = lambda: None

    def not_ready(self) -> str | None:
        """Why /readyz answers 503 before the cache is even asked for (None: nothing)."""
        if self.failure is not None:
            return f"cannot run with this cluster: {self.failure}"
        if not self.known:
            return f"waiting for the API server's version (last attempt: {self._last_error})"
        return None

    def _failed(self, exc: Exception) -> None:
        self._last_error = str(exc)

    async def run(self) -> None:
        from extender.kube.version import wait_for_version

        version = await wait_for_version(self._client, failed=self._failed)
        try:
            config = _released(self._ctx.config, version)
        except ConfigError as exc:
            self.failure = str(exc)
            log.error("%s: stopping", exc)
            self.on_failure()
            return
        self._ctx.use_release(config)
        self.known = True
        await asyncio.gather(*(job() for job in self._jobs))


def late_release(app: FastAPI) -> _LateRelease | None:
    """The start ``app`` has yet to finish when the API server answers (see _LateRelease)."""
    late: _LateRelease | None = getattr(app.state, "late_release", None)
    return late


def _cel_environment(engine: str) -> Environment:
    """The CEL environment on ``--cel-engine``, warmed up."""
    try:
        cel = Environment.create(engine)
        # Pay the engine's one-time set-up (grammar build, runtime init) now, not on the first
        # filter; an engine that answers the warm-up selector wrongly refuses to serve.
        warm_up_s = cel.warm_up()
    except (ValueError, RuntimeError) as exc:
        raise ConfigError(f"--cel-engine {engine}: {exc}") from None
    # Building the parser leaves some 7,000 objects in reference cycles: freed now, while the
    # heap is small, since serve freezes the heap without a collection (see _build_frozen).
    gc.collect()
    log.info("CEL engine: %s (warm-up %.0f ms)", cel.engine_name, warm_up_s * 1000)
    return cel


@dataclass
class _KubeParts:
    binder: KubeBinder
    background: list[Callable[[], Awaitable[None]]]
    is_leader: Callable[[], bool] | None
    scheduler_leader: Callable[[], bool] | None
    lease_term: Callable[[], str | None] | None
    events: EventRecorder
    retry: RetryBook
    client: RawClient  # the one the parts above write with (requests counted in the metrics)


def _api_client(config: Config) -> kubernetes.client.ApiClient:
    from extender.kube.client import load_api_client

    try:
        return load_api_client(config.kubeconfig)
    except Exception as exc:  # the kubernetes client raises several unrelated types here
        raise ConfigError(f"--kube: cannot load a cluster configuration: {exc}") from None


def _kube_parts(
    config: Config, state: ClusterState, api_client: kubernetes.client.ApiClient, metrics: Metrics
) -> _KubeParts:
    """The Kubernetes watch, binder, leader election and event recorder."""
    from extender.kube.binder import KubeBinder
    from extender.kube.client import RawClient
    from extender.kube.events import EventRecorder
    from extender.kube.leader import LeaderElector, default_identity
    from extender.kube.retry import PodRetrier
    from extender.kube.scheduler_lease import SchedulerLease
    from extender.kube.source import run_kube_source

    raw = RawClient(api_client, metrics=metrics)

    async def watch() -> None:
        await run_kube_source(state, client=raw, metrics=metrics)

    background: list[Callable[[], Awaitable[None]]] = [watch]
    is_leader = None
    lease_term: Callable[[], str | None] | None = None
    identity = default_identity()
    if config.leader_elect:
        elector = LeaderElector(
            raw, name=config.lease_name, namespace=config.lease_namespace, identity=identity, metrics=metrics
        )
        background.append(elector.run)
        is_leader, lease_term = elector.is_leader, elector.term
    scheduler_leader = None
    if not config.leader_elect and config.scheduler_lease:
        namespace, _, name = config.scheduler_lease.partition("/")
        lease = SchedulerLease(raw, namespace=namespace, name=name)
        background.append(lease.run)
        scheduler_leader, lease_term = lease.holds, lease.term
    recorder = EventRecorder(raw, instance=identity)
    binder = KubeBinder(api_client, is_leader=is_leader, metrics=metrics)
    book = RetryBook(state)
    background.append(PodRetrier(raw, book, metrics, is_leader=is_leader).run)
    return _KubeParts(binder, background, is_leader, scheduler_leader, lease_term, recorder, book, raw)


def _evict_mode(ctx: SchedulingContext, parts: _KubeParts) -> None:
    """--preemption=evict: the book of preemptions and the evictor (docs/scheduling-policy.md)."""
    from extender.kube.evict import Evictor
    from extender.scheduling.preemption.book import EvictionBook

    book = EvictionBook(ctx.state, hold_s=ctx.config.preemption_hold_s, metrics=ctx.metrics)
    ctx.evictions = book
    parts.background.append(Evictor(parts.client, ctx, book, parts.events).run)


def tls_from_args(args: argparse.Namespace) -> ReloadingTLS | None:
    """The HTTPS settings, or None for plain HTTP; half a configuration is an error, not HTTP."""
    cert, key, ca = args.tls_cert_file, args.tls_private_key_file, args.client_ca_file
    if args.client_allowed_names and ca is None:
        raise ConfigError("--client-allowed-names needs --client-ca-file (it checks client certificates)")
    if (cert is None) != (key is None):
        raise ConfigError("--tls-cert-file and --tls-private-key-file go together")
    if cert is None:
        if ca is not None:
            raise ConfigError("--client-ca-file needs --tls-cert-file and --tls-private-key-file")
        return None
    allowed = AllowedClients(frozenset(args.client_allowed_names)) if args.client_allowed_names else None
    try:
        return ReloadingTLS(TLSFiles(cert, key, ca), allowed)
    except TLSError as exc:
        raise ConfigError(f"TLS: {exc}") from None


def build_app(config: Config, debug_endpoints: bool | None = None) -> FastAPI:
    """The whole service for ``config``; raises ConfigError/ManifestError for bad input.

    ``debug_endpoints`` None means the mode's default: on locally, off against a cluster.
    """
    cel = _cel_environment(config.cel_engine)
    config = replace(config, cel_engine_in_use=cel.engine_name)
    debug = config.local if debug_endpoints is None else debug_endpoints
    api_client = _api_client(config) if config.kube else None
    unanswered = None  # why the API server's version is not known yet
    if api_client is not None:
        from extender.kube.client import RawClient

        if config.kubernetes_version is None:
            config, unanswered = _cluster_release(config, RawClient(api_client))
    elif config.kubernetes_version is None:
        # A Config made in code: its gates stand as given (local runs default to the newest).
        config = replace(config, kubernetes_version=DEFAULT_RELEASE)
    # Without a release yet, the newest one's gates stand in: the cache stays empty, and
    # nothing is decided, until the release is known (SchedulingContext.use_release).
    state = ClusterState(config.feature_gates)
    metrics = Metrics()
    if api_client is not None:
        parts = _kube_parts(config, state, api_client, metrics)
        ctx = SchedulingContext(
            config, state, parts.binder, metrics, cel, is_leader=parts.is_leader, events=parts.events,
            retry=parts.retry, scheduler_leader=parts.scheduler_leader, lease_term=parts.lease_term,
        )
        parts.background.append(ctx.handover.watch)
        if config.preemption == "evict":
            _evict_mode(ctx, parts)
        if unanswered is None:
            return create_app(ctx, background=parts.background, debug=debug)
        # Without metrics, as at start: /version is no resource for the API request metrics.
        late = _LateRelease(ctx, RawClient(api_client), parts.background, unanswered)
        app = create_app(ctx, background=[late.run], debug=debug, waiting=late.not_ready)
        app.state.late_release = late
        return app
    cluster = load_local(state, config.state_dir)
    ctx = SchedulingContext(config, state, LocalBinder(cluster), metrics, cel)
    return create_app(ctx, cluster=cluster, debug=debug)


def _build_frozen(config: Config, debug_endpoints: bool | None) -> FastAPI:
    """build_app with the cyclic GC off until the heap it built is frozen.

    The loaded cluster is long-lived: frozen, no collection re-scans it (full collections of it
    showed up as 0.4 s latency spikes on a 5,000-node cluster). Loading makes no garbage cycles
    (tests/local/test_manifests.py), so nothing is lost by freezing without a collection first.
    With the GC back on before the freeze, the young, middle and full collections that followed
    each scanned the whole cluster, then a last collection did: 1.7 s of a 5,000-node start.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        app = build_app(config, debug_endpoints)
        gc.freeze()
    finally:
        if was_enabled:
            gc.enable()
    return app


def _port_taken(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on, or None: said in one line, rather than in
    uvicorn's traceback once the app has started. Asked last, once everything else is known
    good: a port taken by another program must not hide a mistake in the flags or the state."""
    try:
        with socket.create_server((host, port), reuse_port=False):
            return None
    except OSError as exc:
        return f"cannot listen on {host}:{port}: {exc.strerror or exc}"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "explain":
        return explain_tool.run(args)
    logs.configure(args.log_level, args.log_format)
    if args.command == "simulate":
        return simulate.main(args)
    try:
        # Every flag, then the cluster (the state directory read, or the API server asked),
        # then the ports: each mistake is said as itself, whatever else is wrong.
        config = config_from_args(args)
        if not 0 <= args.probe_port < 65536 or args.probe_port == config.port:
            raise ConfigError(f"--probe-port {args.probe_port}: out of range or the same as --port")
        tls = tls_from_args(args)
        limits = ConnectionLimits(
            args.header_timeout, args.body_timeout, args.keepalive_timeout, args.max_connections
        )
        app = _build_frozen(config, args.enable_debug_endpoints)
        listen = [(config.host, config.port)]
        if args.probe_port:
            listen.append((probe_host(config.host), args.probe_port))
        for host, port in listen:
            taken = _port_taken(host, port)
            if taken:
                raise ConfigError(taken)
    except (ConfigError, ManifestError) as exc:
        print(f"dra-extender: {exc}", file=sys.stderr)
        return 2
    # The default first threshold (700 allocations) runs a young collection every few
    # candidate nodes, and promotes enough to trigger full collections of the live state every
    # second or so at 2,000 nodes: tens of ms each, landing on some request (docs/performance.md).
    gc.set_threshold(50_000, 20, 100)
    keep_freed_memory()  # large request bodies: see extender/api/heap.py
    listeners = servers(
        app,
        config.host,
        config.port,
        tls=tls,
        probe_port=args.probe_port,
        log_level=args.log_level,
        limits=limits,
    )
    late = stop_on_late_failure(app, listeners)
    # uvicorn.run would pick uvloop when installed; running the servers ourselves must too
    # (the plain asyncio loop costs about a fifth more CPU per request).
    with asyncio.Runner(loop_factory=listeners[0].config.get_loop_factory()) as runner:
        runner.run(serve(listeners))
    if late is not None and late.failure is not None:
        print(f"dra-extender: {late.failure}", file=sys.stderr)
        return 2
    return 0


def stop_on_late_failure(app: FastAPI, listeners: Sequence[uvicorn.Server]) -> _LateRelease | None:
    """Have the servers of ``app`` stop when the release its API server names late is one the
    extender cannot run with (main then exits 2, as at start); the late start, if any."""
    late = late_release(app)
    if late is not None:

        def stop() -> None:
            for server in listeners:
                server.should_exit = True

        late.on_failure = stop
    return late
