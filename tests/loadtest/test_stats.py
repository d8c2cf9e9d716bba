from __future__ import annotations

import pytest

from loadtest.stats import LatencyLog, percentile


def test_nearest_rank_percentiles() -> None:
    values = list(range(100, 0, -1))  # 1..100, unsorted on purpose
    assert percentile(values, 50) == 50
    assert percentile(values, 90) == 90
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile(values, 0.5) == 1


def test_percentile_of_small_samples_is_an_observed_value() -> None:
    assert percentile([7.0], 99) == 7.0
    assert percentile([1.0, 2.0, 3.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile([1.0, 10.0], 99) == 10.0


@pytest.mark.parametrize("p", [0, -1, 101])
def test_percentile_out_of_range(p: float) -> None:
    with pytest.raises(ValueError, match="percentile"):
        percentile([1.0], p)


def test_percentile_of_nothing() -> None:
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)


def test_summary_per_verb_in_milliseconds() -> None:
    log = LatencyLog()
    for i in range(1, 101):
        log.record("filter", at=i, seconds=i / 1000, ok=i != 5)
    log.record("bind", at=0, seconds=0.25, ok=True)
    summary = log.summary()
    assert summary["filter"] == {
        "calls": 100,
        "errors": 1,
        "p50_ms": 50.0,
        "p90_ms": 90.0,
        "p99_ms": 99.0,
        "max_ms": 100.0,
    }
    assert summary["bind"]["p99_ms"] == summary["bind"]["max_ms"] == 250.0
