"""Latency over time and latency histograms, one colour per verb (needs matplotlib)."""

from __future__ import annotations

from pathlib import Path

from loadtest.report import VERB_ORDER
from loadtest.stats import LatencyLog


def plot(log: LatencyLog, title: str, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on servers and CI
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise RuntimeError("plotting needs matplotlib: pip install matplotlib") from e

    every = [s.seconds * 1000 for samples in log.samples.values() for s in samples]
    low, high = max(min(every, default=0.01), 0.01), max(max(every, default=1.0), 0.02)
    # Latencies span orders of magnitude: equal-width bins on a log axis keep the tail visible.
    bins = [low * (high / low) ** (i / 80) for i in range(81)]
    verbs = sorted(log.samples, key=lambda v: (VERB_ORDER.index(v) if v in VERB_ORDER else 99, v))
    fig, (over_time, histogram) = plt.subplots(2, 1, figsize=(11, 8))
    for verb in verbs:
        samples = log.samples[verb]
        at = [s.at for s in samples]
        ms = [s.seconds * 1000 for s in samples]
        over_time.scatter(at, ms, s=3, alpha=0.5, label=verb)
        histogram.hist(ms, bins=bins, alpha=0.5, label=verb, log=True)
    over_time.set(title=title, xlabel="time since start (s)", ylabel="latency (ms)", yscale="log")
    histogram.set(xlabel="latency (ms)", ylabel="calls", xscale="log")
    over_time.legend(markerscale=4)
    histogram.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
