"""Latency bookkeeping and percentiles.

Percentiles use the nearest-rank definition: the reported p99 is a latency that was actually
observed, never an interpolation between two calls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

PERCENTILES = (50, 90, 99)


def percentile(values: Sequence[float], p: float) -> float:
    if not values:
        raise ValueError("percentile of an empty sample")
    if not 0 < p <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {p}")
    ordered = sorted(values)
    rank = math.ceil(p / 100 * len(ordered))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Sample:
    at: float  # seconds since the run started
    seconds: float
    ok: bool


@dataclass
class LatencyLog:
    samples: dict[str, list[Sample]] = field(default_factory=dict)

    def record(self, verb: str, at: float, seconds: float, ok: bool) -> None:
        self.samples.setdefault(verb, []).append(Sample(at, seconds, ok))

    def summary(self) -> dict[str, dict[str, float]]:
        """Per verb: call count, errors and p50/p90/p99/max in milliseconds."""
        out: dict[str, dict[str, float]] = {}
        for verb, samples in self.samples.items():
            ms = [s.seconds * 1000 for s in samples]
            row: dict[str, float] = {"calls": len(ms), "errors": sum(not s.ok for s in samples)}
            for p in PERCENTILES:
                row[f"p{p}_ms"] = round(percentile(ms, p), 3)
            row["max_ms"] = round(max(ms), 3)
            out[verb] = row
        return out
