from __future__ import annotations

from loadtest.promtext import cel_evaluations

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
