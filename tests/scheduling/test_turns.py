"""in_turns: synchronous work that lets the event loop run at its pauses."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from extender.scheduling import turns
from extender.scheduling.turns import in_turns, pause


def busy(seconds: float, log: list[str], name: str) -> str:
    """Compute for ``seconds``, pausing as the allocator's search does."""
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        log.append(name)
        pause()
    return name


def test_pause_outside_in_turns_does_nothing():
    log: list[str] = []
    assert busy(0.02, log, "plain") == "plain"
    assert set(log) == {"plain"}


def test_two_pieces_of_work_and_the_loop_take_turns():
    log: list[str] = []

    async def ticker() -> None:
        for _ in range(5):
            log.append("loop")
            await asyncio.sleep(0)

    async def main() -> list[str]:
        return await asyncio.gather(
            in_turns(busy, 0.1, log, "a"), in_turns(busy, 0.1, log, "b"), ticker()
        )

    assert asyncio.run(main())[:2] == ["a", "b"]
    switches = [name for i, name in enumerate(log) if i == 0 or log[i - 1] != name]
    # Each piece ran in several turns, interleaved with the other and with the loop.
    assert switches.count("a") >= 3 and switches.count("b") >= 3 and "loop" in switches[1:]


def test_turns_last_about_turn_s(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(turns, "TURN_S", 0.05)
    stamps: list[float] = []

    async def main() -> None:
        work = asyncio.ensure_future(in_turns(busy, 0.3, [], "w"))
        while not work.done():
            stamps.append(time.monotonic())
            await asyncio.sleep(0)

    asyncio.run(main())
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert len(stamps) >= 4 and max(gaps) < 0.05 * 3


def test_an_exception_of_the_work_reaches_the_caller():
    def failing() -> None:
        pause()
        raise ValueError("bad claim")

    with pytest.raises(ValueError, match="bad claim"):
        asyncio.run(in_turns(failing))


def test_a_cancelled_caller_unwinds_the_work():
    unwound: list[bool] = []

    def endless() -> None:
        try:
            while True:
                pause()
        finally:
            unwound.append(True)

    async def main() -> None:
        work = asyncio.ensure_future(in_turns(endless))
        await asyncio.sleep(0.05)
        work.cancel()
        with pytest.raises(asyncio.CancelledError):
            await work

    asyncio.run(main())
    assert unwound == [True]
