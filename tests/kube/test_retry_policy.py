"""The kube binder's one retry policy: which answers are worth another attempt, how many, and
that none starts after the deadline or while the replica does not lead."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from extender.kube.binder import Attempt, RetryPolicy
from extender.kube.client import KubeApiError
from extender.scheduling.binder import NOT_THE_LEADER, BindError


def failing(*codes: int) -> tuple[list[Attempt], Callable[[Attempt], str]]:
    """An attempt that fails with ``codes`` in turn, then succeeds; and the attempts it saw."""
    seen: list[Attempt] = []

    def attempt(at: Attempt) -> str:
        seen.append(at)
        if at.number < len(codes):
            raise KubeApiError(codes[at.number], "injected")
        return "done"

    return seen, attempt


@pytest.mark.parametrize("code", [0, 409, 429, 500, 503, 504])
def test_transient_answers_are_tried_again(code: int) -> None:
    seen, attempt = failing(code, code)
    assert RetryPolicy(delay=0.0).run("writing", attempt) == "done"
    assert [a.number for a in seen] == [0, 1, 2]


@pytest.mark.parametrize("code", [400, 403, 404, 422])
def test_a_final_answer_ends_the_run_at_once(code: int) -> None:
    seen, attempt = failing(code)
    with pytest.raises(BindError, match=f"writing failed: {code}"):
        RetryPolicy(delay=0.0).run("writing", attempt)
    assert len(seen) == 1


def test_attempts_are_counted_and_the_last_error_named() -> None:
    seen, attempt = failing(*[500] * 9)
    with pytest.raises(BindError, match="writing failed after 3 attempts: 500"):
        RetryPolicy(attempts=3, delay=0.0).run("writing", attempt)
    assert len(seen) == 3


def test_no_attempt_starts_after_the_deadline_and_each_knows_its_time_left() -> None:
    seen, attempt = failing(*[500] * 9)
    deadline = time.monotonic() + 0.05
    with pytest.raises(BindError, match="after 1 attempts"):
        RetryPolicy(attempts=5, delay=0.1).run("writing", attempt, deadline)
    assert len(seen) == 1 and seen[0].remaining is not None and 0 < seen[0].remaining <= 0.05
    with pytest.raises(BindError, match="no time left"):
        RetryPolicy().run("writing", attempt, time.monotonic() - 1)


def test_a_replica_that_does_not_lead_starts_no_attempt_and_the_caller_shapes_the_error() -> None:
    seen, attempt = failing()

    class Refused(BindError):
        pass

    with pytest.raises(Refused, match=NOT_THE_LEADER):
        RetryPolicy(is_leader=lambda: False).run("writing", attempt, failure=Refused)
    assert seen == []


def test_the_pause_before_each_attempt_grows_with_its_number_plus_up_to_a_tenth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pauses: list[float] = []
    monkeypatch.setattr("extender.kube.binder.time.sleep", pauses.append)
    for jitter in (0.0, 0.5, 0.999):
        pauses.clear()
        monkeypatch.setattr("extender.kube.binder.random.random", lambda j=jitter: j)
        _, attempt = failing(500, 500, 500)
        assert RetryPolicy(attempts=4, delay=0.2).run("writing", attempt) == "done"
        assert pauses == pytest.approx([0.2 * (1 + 0.1 * jitter) * n for n in (1, 2, 3)])


def test_each_attempt_that_will_be_tried_again_is_logged_with_its_number(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, attempt = failing(500, 409)
    with caplog.at_level("INFO", logger="extender.kube.binder"):
        assert RetryPolicy(delay=0.0).run("writing claim default/c", attempt) == "done"
    assert [r.getMessage() for r in caplog.records] == [
        "writing claim default/c: 500: injected (attempt 1)",
        "writing claim default/c: 409: injected (attempt 2)",
    ]
