"""How long one allocation may run, and when it lets other work run: the search's clock.

A search looks at the clock between its steps, and a long CEL evaluation inside a step looks
at it too (``in_evaluation``, the checkpoint the CEL engines call every so many cost units).
Both ask this object rather than the search, so that an evaluation never calls back into the
search that started it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from extender.allocator.outcome import TIMED_OUT, AllocationError
from extender.cel import EvaluationInterrupted

# How often a long search offers its ``pause`` hook the chance to let other work run.
PAUSE_EVERY_S = 0.002


class Budget:
    """The ``deadline`` (monotonic seconds; None: none) and the ``pause`` hook of one search.

    ``due`` is when the clock is next worth looking at: the deadline, or sooner to let others
    run. Callers compare ``time.monotonic()`` with it themselves (cheap, on every step) and call
    ``check`` once it has passed.
    """

    __slots__ = ("deadline", "due", "pause")

    def __init__(self, deadline: float | None, pause: Callable[[], None] | None) -> None:
        self.deadline = deadline
        self.pause = pause
        self.due = self._next(time.monotonic())

    def _next(self, now: float) -> float:
        deadline = math.inf if self.deadline is None else self.deadline
        return deadline if self.pause is None else min(deadline, now + PAUSE_EVERY_S)

    def check(self) -> None:
        """Raise the search's timeout once the deadline has passed; else take a turn."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise AllocationError(TIMED_OUT, kind="timeout")
        if self.pause is not None:
            self.pause()
        self.due = self._next(time.monotonic())

    def in_evaluation(self) -> None:
        """The checkpoint of a long CEL evaluation: the deadline and the turns hold there too;
        a deadline passed ends the evaluation (``EvaluationInterrupted``)."""
        if time.monotonic() >= self.due:
            try:
                self.check()
            except AllocationError as exc:  # its deadline passed: the only error it raises
                raise EvaluationInterrupted(exc.message) from None
