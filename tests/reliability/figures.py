"""Counters the reliability tests add to, so docs/reliability.md quotes measured figures.

The conftest prints them after the run and stores them in pytest's cache
(``.pytest_cache/v/reliability/figures``).
"""

from __future__ import annotations

from collections import Counter

FIGURES: Counter[str] = Counter()


def record(name: str, amount: int = 1) -> None:
    FIGURES[name] += amount
