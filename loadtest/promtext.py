"""Reading counters from the server's Prometheus exposition."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

# Counters about evaluations that are not themselves evaluations (errors are a subset of them).
_NOT_EVALUATIONS = ("error", "fail", "cache", "cost")


def cel_evaluations(exposition: str) -> float | None:
    """Sum of every CEL evaluation counter the server exports, or None when it has none.

    The name is matched loosely (prefix `dra_extender_`, containing `cel` and `eval`) because
    the server's metric names are its own choice; labels (engine, result) are summed over.
    Untyped `_total` samples count too: hand-written expositions often declare the type under
    the name without the suffix, which leaves the sample untyped for the parser. Error counters
    are left out because they count a subset of the evaluations again.
    """
    total = None
    for family in text_string_to_metric_families(exposition):
        name = family.name
        if family.type not in ("counter", "unknown") or not name.startswith("dra_extender_"):
            continue
        if "cel" not in name or "eval" not in name or any(w in name for w in _NOT_EVALUATIONS):
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                total = (total or 0.0) + sample.value
    return total


REQUEST_HISTOGRAM = "dra_extender_request_duration_seconds"


@dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts by upper bound (seconds), with the running sum and count."""

    buckets: tuple[tuple[float, float], ...]
    total: float
    count: float

    def minus(self, earlier: Histogram | None) -> Histogram:
        if earlier is None:
            return self
        before = dict(earlier.buckets)
        buckets = tuple((le, n - before.get(le, 0.0)) for le, n in self.buckets)
        return Histogram(buckets, self.total - earlier.total, self.count - earlier.count)

    def percentile_bound(self, p: float) -> float | None:
        """Upper bound of the bucket holding the p-th percentile (inf when beyond the last)."""
        if self.count <= 0:
            return None
        wanted = p / 100 * self.count
        for le, cumulative in sorted(self.buckets):
            if cumulative >= wanted:
                return le
        return math.inf

    def mean(self) -> float | None:
        return self.total / self.count if self.count > 0 else None


def request_histograms(exposition: str, name: str = REQUEST_HISTOGRAM) -> dict[str, Histogram]:
    """The server's own per-verb latency histograms, keyed by the `verb` label."""
    parts: dict[str, dict[str, Any]] = {}
    for family in text_string_to_metric_families(exposition):
        if family.name != name or family.type != "histogram":
            continue
        for sample in family.samples:
            verb = sample.labels.get("verb", "")
            entry = parts.setdefault(verb, {"buckets": [], "sum": 0.0, "count": 0.0})
            if sample.name.endswith("_bucket"):
                entry["buckets"].append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_sum"):
                entry["sum"] = sample.value
            elif sample.name.endswith("_count"):
                entry["count"] = sample.value
    return {v: Histogram(tuple(e["buckets"]), e["sum"], e["count"]) for v, e in parts.items()}
