from __future__ import annotations

import math

import pytest

from loadtest.promtext import cel_evaluations, request_histograms

EXPOSITION = """\
# HELP dra_extender_cel_evaluations_total CEL selector evaluations.
# TYPE dra_extender_cel_evaluations_total counter
dra_extender_cel_evaluations_total{engine="cpp",result="true"} 120.0
dra_extender_cel_evaluations_total{engine="cpp",result="false"} 30.0
# TYPE dra_extender_cel_evaluations_created gauge
dra_extender_cel_evaluations_created 1.7e9
# TYPE dra_extender_cel_evaluation_errors_total counter
dra_extender_cel_evaluation_errors_total 4.0
# TYPE dra_extender_filter_requests_total counter
dra_extender_filter_requests_total 99.0
"""


def test_sums_cel_evaluation_counters_over_labels_without_errors() -> None:
    assert cel_evaluations(EXPOSITION) == 150.0


def test_no_cel_counter_means_unknown_not_zero() -> None:
    text = "# TYPE dra_extender_filter_requests_total counter\ndra_extender_filter_requests_total 1\n"
    assert cel_evaluations(text) is None
    assert cel_evaluations("") is None


def test_untyped_total_samples_count() -> None:
    text = "# TYPE dra_extender_cel_evaluations counter\ndra_extender_cel_evaluations_total 5\n"
    assert cel_evaluations(text) == 5.0


HISTOGRAMS = """\
# TYPE dra_extender_request_duration_seconds histogram
dra_extender_request_duration_seconds_bucket{le="0.005",verb="filter"} %d
dra_extender_request_duration_seconds_bucket{le="0.01",verb="filter"} %d
dra_extender_request_duration_seconds_bucket{le="+Inf",verb="filter"} %d
dra_extender_request_duration_seconds_sum{verb="filter"} %f
dra_extender_request_duration_seconds_count{verb="filter"} %d
"""


def test_server_histogram_delta_and_percentile_bound() -> None:
    before = request_histograms(HISTOGRAMS % (10, 10, 10, 0.02, 10))["filter"]
    after = request_histograms(HISTOGRAMS % (100, 208, 210, 1.02, 210))["filter"]
    delta = after.minus(before)
    assert delta.count == 200 and delta.mean() == pytest.approx(0.005)
    assert delta.percentile_bound(45) == 0.005  # 90 of 200 within 5 ms
    assert delta.percentile_bound(99) == 0.01  # 198 of 200 within 10 ms
    assert delta.percentile_bound(99.5) == math.inf
    assert request_histograms("") == {}
