"""Long allocation work takes turns with everything else on the event loop.

The verbs' allocation work is synchronous code (the allocator's search, node after node). One
request may legitimately compute for its whole budget (seconds, on a claim with no solution);
run on the event loop as one block, it would hold back ``/healthz``, ``/readyz``, watch events
and every other verb for that long.

``in_turns`` runs such work in a greenlet. ``pause()``, called at points where the work holds
no lock and leaves no structure half-changed (between search steps, between nodes), switches
back to the event loop once the work has had its turn (``TURN_S``); the loop serves whatever is
ready and then switches back in. Everything still runs on the one event-loop thread, one piece
at a time, so the cluster state needs no locks and the allocator stays plain synchronous code:
the only cost is a time check per step. Outside ``in_turns`` (tests, bind's atomic commit)
``pause()`` does nothing.

The cluster state may change while the work is paused. That is harmless by construction: a
verdict is keyed by the node signature read *before* it was computed, so one computed across a
change is never reused as current, and bind re-checks what it commits.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable
from typing import Any, TypeVar

from greenlet import getcurrent, greenlet

T = TypeVar("T")

# How long the work runs before it lets the loop serve others: short enough that a health
# probe or a normal filter waits at most a few turns, long enough that switching costs nothing.
# It is shared: with N pieces of work under way each turn is TURN_S / N (at least MIN_TURN_S),
# so that one pass of the loop over them all still takes about TURN_S. Twenty hostile preempts
# at once with a turn each of their own held every probe back 2-3.5 s.
TURN_S = 0.01
MIN_TURN_S = 0.0005
_running = 0  # pieces of work under way (in_turns calls not yet returned)


def _turn() -> float:
    return max(TURN_S / max(_running, 1), MIN_TURN_S)


class _Turns(greenlet):  # type: ignore[misc]
    """The greenlet of one piece of work; ``turn_ends`` is when it should let others run."""

    turn_ends: float = 0.0


def pause() -> None:
    """Let the event loop run if this work's turn is over; a no-op outside ``in_turns``."""
    current = getcurrent()
    if type(current) is _Turns and time.monotonic() >= current.turn_ends:
        current.parent.switch()


async def in_turns(work: Callable[..., T], *args: Any) -> T:
    """Run ``work(*args)`` on this thread, giving the loop a turn at every due ``pause()``.

    Exceptions of ``work`` propagate; if the caller is cancelled the work is unwound (its
    ``finally`` blocks run) before the cancellation goes on.
    """
    global _running
    runner = _Turns(work)
    # The work sees the caller's context variables, as a plain call would.
    runner.gr_context = contextvars.copy_context()
    _running += 1
    try:
        runner.turn_ends = time.monotonic() + _turn()
        result = runner.switch(*args)
        while not runner.dead:
            await asyncio.sleep(0)
            runner.turn_ends = time.monotonic() + _turn()
            result = runner.switch()
    finally:
        _running -= 1
        if not runner.dead:
            runner.throw()  # GreenletExit inside the work: it unwinds and ends
    return result  # type: ignore[no-any-return]
