"""The routing benchmark compares two ways into one app that answer alike."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from loadtest.bench_routing import answers, main, setup


def test_the_shortcut_and_fastapi_answer_alike() -> None:
    ways, requests = setup()
    shortcut = asyncio.run(answers(ways["shortcut"], requests))
    routed = asyncio.run(answers(ways["fastapi"], requests))
    assert shortcut == routed
    (prioritized, scores), (bound, refusal) = shortcut
    assert prioritized == 200 and len(orjson.loads(scores)) == 10
    assert bound == 200 and "nobody" in orjson.loads(refusal)["Error"]


def test_cli_prints_both_ways_and_the_difference(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--requests", "20", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "shortcut" in out and "fastapi" in out and "saved" in out
    with pytest.raises(SystemExit):
        main(["--rounds", "0"])
