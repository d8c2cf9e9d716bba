"""Prometheus collectors (``dra_extender_`` prefix), one registry per service instance.

A registry per instance (not the global one) lets tests build several apps in one process,
each showing its own cluster state and its own CEL environment's counters. Cache object counts
and CEL counters are read at scrape time, so nothing has to keep them in sync.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from extender.cel.environment import CelStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _StateCollector(Collector):
    def __init__(self, counts: Callable[[], Mapping[str, int]], inflight: Callable[[], int]) -> None:
        self._counts = counts
        self._inflight = inflight

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
        self.registry = CollectorRegistry()
        self.request_seconds = Histogram(
            "dra_extender_request_duration_seconds",
            "Latency of extender HTTP verbs",
            ["verb"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.allocation_attempts = Counter(
            "dra_extender_allocation_attempts",
            "Per-node allocation decisions by outcome (fit, nofit, unavailable, error, timeout, cached)",
            ["phase", "outcome"],
            registry=self.registry,
        )
        self.bind_outcomes = Counter(
            "dra_extender_binds", "Bind calls by outcome", ["outcome"], registry=self.registry
        )
        self.claim_writes = Counter(
            "dra_extender_claim_writes", "Claim status writes by outcome", ["outcome"], registry=self.registry
        )
        self._attempts: dict[tuple[str, str], Any] = {}

    def attempt(self, phase: str, outcome: str, n: int = 1) -> None:
        """Count allocation decisions; children are cached, labels() is costly."""
        child = self._attempts.get((phase, outcome))
        if child is None:
            child = self._attempts[(phase, outcome)] = self.allocation_attempts.labels(phase, outcome)
        child.inc(n)

    def watch_state(self, counts: Callable[[], Mapping[str, int]], inflight: Callable[[], int]) -> None:
        self.registry.register(_StateCollector(counts, inflight))

    def watch_cel(self, stats: CelStats) -> None:
        """Export ``stats``, the counters of the CEL environment this instance's allocators use."""
        self.registry.register(_CelCollector(stats))

    def render(self) -> bytes:
        return generate_latest(self.registry)
