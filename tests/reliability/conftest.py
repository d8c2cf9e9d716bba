"""The test API server per test, and the reliability figures of the run (see figures.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.apiserver.server import ApiServer
from tests.reliability.figures import FIGURES, record


@pytest.fixture
def apiserver() -> Iterator[ApiServer]:
    with ApiServer(bookmark_interval=0.2) as server:
        yield server
        record("faults injected", server.faults.fired)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if not FIGURES:
        return
    figures = dict(sorted(FIGURES.items()))
    if getattr(config, "cache", None) is not None:  # absent with -p no:cacheprovider
        config.cache.set("reliability/figures", figures)
    terminalreporter.section("reliability figures")
    for name, value in figures.items():
        terminalreporter.write_line(f"{name}: {value}")
