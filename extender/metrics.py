"""Prometheus collectors (``dra_extender_`` prefix), one registry per service instance.

A registry per instance (not the global one) lets tests build several apps in one process,
each showing its own cluster state and its own CEL environment's counters. Cache object counts,
sync and leader status and CEL counters are read at scrape time, so nothing has to keep them in
sync. Every metric is listed in docs/metrics.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from extender import __version__
from extender.cel.environment import CelStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_API_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# Every way a bind request ends (docs/metrics.md says what each means); each starts at 0 so that
# rate() and alerts see the series before the first such bind.
BIND_OUTCOMES = ("bound", "waiting", "rejected", "refused", "failed", "error")
# Why a kind's reflector opened a new watch (extender.kube.source).
WATCH_RESTART_REASONS = ("ended", "expired", "error")

# A `_created` sample per counter and histogram child doubles the series count for a timestamp
# nobody graphs (the process start time is in process_start_time_seconds). The switch is
# process-wide in prometheus_client; every registry of this process is ours.
disable_created_metrics()  # type: ignore[no-untyped-call]


def package_version() -> str:
    """The one version: pyproject.toml's, as installed (what ``dra-extender --version`` prints)."""
    return __version__


class _ServiceCollector(Collector):
    """Cache contents, in-flight claims, sync and leader status, read at scrape time."""

    def __init__(
        self,
        counts: Callable[[], Mapping[str, int]],
        inflight: Callable[[], int],
        synced: Callable[[], bool],
        leading: Callable[[], bool],
    ) -> None:
        self._counts = counts
        self._inflight = inflight
        self._synced = synced
        self._leading = leading

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "dra_extender_cache_objects", "Objects in the cluster-state cache", labels=["kind"]
        )
        for kind, n in self._counts().items():
            family.add_metric([kind], n)
        yield family
        yield GaugeMetricFamily(
            "dra_extender_inflight_claims",
            "Claims committed in memory, not yet written",
            value=self._inflight(),
        )
        yield GaugeMetricFamily(
            "dra_extender_cache_synced",
            "1 once every kind of the cache has been listed (the replica can be ready), else 0",
            value=int(self._synced()),
        )
        yield GaugeMetricFamily(
            "dra_extender_leader",
            "1 if this replica commits binds (it holds the lease, or leader election is off), else 0",
            value=int(self._leading()),
        )


class _CelCollector(Collector):
    """One CEL environment's counters (compilations, evaluations vs memo hits, errors)."""

    def __init__(self, stats: CelStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[CounterMetricFamily]:
        for name, value in sorted(dataclasses.asdict(self._stats).items()):
            help_text = f"CEL {name.replace('_', ' ')}"
            yield CounterMetricFamily(f"dra_extender_cel_{name}", help_text, value=value)


class Metrics:
    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        Gauge(
            "dra_extender_build_info", "Always 1; the version label is the running release",
            ["version"], registry=registry,
        ).labels(package_version()).set(1)
        self.request_seconds = Histogram(
            "dra_extender_request_duration_seconds",
            "Latency of extender HTTP verbs",
            ["verb"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.requests = Counter(
            "dra_extender_requests", "Extender verb requests by HTTP status code", ["verb", "code"],
            registry=registry,
        )
        self.allocation_attempts = Counter(
            "dra_extender_allocation_attempts",
            "Per-node allocation decisions by outcome (fit, nofit, unavailable, error, timeout, cached)",
            ["phase", "outcome"],
            registry=registry,
        )
        self.bind_outcomes = Counter(
            "dra_extender_binds", "Bind requests by outcome", ["outcome"], registry=registry
        )
        for outcome in BIND_OUTCOMES:
            self.bind_outcomes.labels(outcome)
        self.claim_writes = Counter(
            "dra_extender_claim_writes", "Claim status writes by outcome", ["outcome"], registry=registry
        )
        self.api_requests = Counter(
            "dra_extender_kube_api_requests",
            'Kubernetes API requests by verb, resource and HTTP status code ("error": no answer)',
            ["verb", "resource", "code"],
            registry=registry,
        )
        self.api_seconds = Histogram(
            "dra_extender_kube_api_request_duration_seconds",
            "Latency of Kubernetes API requests (for a watch: until it is open)",
            ["verb", "resource"],
            buckets=_API_BUCKETS,
            registry=registry,
        )
        self.watch_restarts = Counter(
            "dra_extender_watch_restarts",
            "Watches re-opened, by kind and why the previous one ended (ended, expired, error)",
            ["kind", "reason"],
            registry=registry,
        )
        self.retries = Counter(
            "dra_extender_pod_retries",
            "Pods turned away that kube-scheduler was told to retry, by outcome "
            "(written, gone, error, rate_limited)",
            ["outcome"],
            registry=registry,
        )
        for outcome in ("written", "gone", "error", "rate_limited"):
            self.retries.labels(outcome)
        self.preemptions = Counter(
            "dra_extender_preemptions",
            "Preemptions evict mode (--preemption=evict) looked at, by outcome (evicted, partial, "
            "refused, no_victims, error)",
            ["outcome"],
            registry=registry,
        )
        for outcome in ("evicted", "partial", "refused", "no_victims", "error"):
            self.preemptions.labels(outcome)
        self.preemption_holds_ended = Counter(
            "dra_extender_preemption_holds_ended",
            "Devices held for a preemptor of evict mode, released, by reason (bound, bound_elsewhere, "
            "deleted, nominated_elsewhere, timeout, failed)",
            ["reason"],
            registry=registry,
        )
        for reason in ("bound", "bound_elsewhere", "deleted", "nominated_elsewhere", "timeout", "failed"):
            self.preemption_holds_ended.labels(reason)
        self.relists = Counter(
            "dra_extender_relists", "Lists of a kind after its first one", ["kind"], registry=registry
        )
        self.leader_changes = Counter(
            "dra_extender_leader_changes",
            "Times this replica acquired or lost the lease",
            ["change"],
            registry=registry,
        )
        for change in ("acquired", "lost"):
            self.leader_changes.labels(change)
        self._attempts: dict[tuple[str, str], Any] = {}
        self._requests: dict[tuple[str, int], Any] = {}
        self._latency: dict[str, Any] = {}
        self._api: dict[tuple[str, str, str], tuple[Any, Any]] = {}

    def attempt(self, phase: str, outcome: str, n: int = 1) -> None:
        """Count allocation decisions; children are cached, labels() is costly."""
        child = self._attempts.get((phase, outcome))
        if child is None:
            child = self._attempts[(phase, outcome)] = self.allocation_attempts.labels(phase, outcome)
        child.inc(n)

    def request(self, verb: str, code: int, seconds: float) -> None:
        """One extender verb request answered with HTTP ``code``."""
        child = self._requests.get((verb, code))
        if child is None:
            child = self._requests[(verb, code)] = self.requests.labels(verb, str(code))
        child.inc()
        latency = self._latency.get(verb)
        if latency is None:
            latency = self._latency[verb] = self.request_seconds.labels(verb)
        latency.observe(seconds)

    def api_request(self, verb: str, resource: str, code: str, seconds: float) -> None:
        """One Kubernetes API request; called from the client's threads (the children are thread-safe)."""
        key = (verb, resource, code)
        children = self._api.get(key)
        if children is None:
            children = self._api.setdefault(
                key, (self.api_requests.labels(*key), self.api_seconds.labels(verb, resource))
            )
        children[0].inc()
        children[1].observe(seconds)

    def reflector_started(self, kind: str) -> None:
        """Show the kind's restart and relist series at 0 before anything happens to its watch."""
        self.relists.labels(kind)
        for reason in WATCH_RESTART_REASONS:
            self.watch_restarts.labels(kind, reason)

    def watch_service(
        self,
        counts: Callable[[], Mapping[str, int]],
        inflight: Callable[[], int],
        synced: Callable[[], bool],
        leading: Callable[[], bool],
    ) -> None:
        self.registry.register(_ServiceCollector(counts, inflight, synced, leading))

    def watch_cel(self, stats: CelStats) -> None:
        """Export ``stats``, the counters of the CEL environment this instance's allocators use."""
        self.registry.register(_CelCollector(stats))

    def render(self) -> bytes:
        return generate_latest(self.registry)
