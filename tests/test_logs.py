"""Log output: JSON and text lines with the same fields, uvicorn's lines in the same format, and
urllib3's own warnings left out (our retry messages say it)."""

from __future__ import annotations

import io
import json
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3

from extender import logs
from extender.api.server import servers
from extender.cli import _parser


@pytest.fixture
def output() -> Iterator[io.StringIO]:
    """The root logger's configuration as ``logs.configure`` leaves it, restored afterwards."""
    root, urllib3_logger = logging.getLogger(), logging.getLogger("urllib3")
    saved = root.handlers[:], root.level, urllib3_logger.level
    uvicorn_saved = {name: (logging.getLogger(name).handlers[:], logging.getLogger(name).propagate)
                     for name in ("uvicorn", "uvicorn.error", "uvicorn.access")}
    buffer = io.StringIO()
    try:
        yield buffer
    finally:
        root.handlers[:], level, urllib3_level = saved
        root.setLevel(level)
        urllib3_logger.setLevel(urllib3_level)
        for name, (handlers, propagate) in uvicorn_saved.items():
            logging.getLogger(name).handlers[:] = handlers
            logging.getLogger(name).propagate = propagate


def lines(buffer: io.StringIO) -> list[str]:
    return buffer.getvalue().splitlines()


def test_json_lines_carry_the_standard_and_the_extra_fields(output):
    logs.configure("info", "json", output, force=True)
    fields = {"pod": "default/p", "passed": 1, "reasons": {"n": "x y"}}
    logging.getLogger("extender.decisions").info("filter default/p: 1 of 2 nodes pass", extra=fields)
    logging.getLogger("extender.x").debug("below the level")
    (line,) = lines(output)
    record = json.loads(line)
    assert record["level"] == "info" and record["logger"] == "extender.decisions"
    assert record["msg"] == "filter default/p: 1 of 2 nodes pass"
    assert record["pod"] == "default/p" and record["passed"] == 1 and record["reasons"] == {"n": "x y"}
    assert record["ts"].endswith("Z") and "T" in record["ts"]
    assert set(record) == {"ts", "level", "logger", "msg", "pod", "passed", "reasons"}


def test_a_traceback_stays_inside_its_json_line(output):
    logs.configure("info", "json", output, force=True)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("extender").exception("failed")
    (line,) = lines(output)
    record = json.loads(line)
    assert record["level"] == "error" and "RuntimeError: boom" in record["exc"]


def test_text_lines_append_the_same_fields_as_key_value(output):
    logs.configure("debug", "text", output, force=True)
    logging.getLogger("extender.decisions").info(
        "bind default/p to node-0: bound", extra={"pod": "default/p", "error": "", "note": "two words"}
    )
    (line,) = lines(output)
    assert line.split(" ", 2)[2] == (
        'INFO extender.decisions: bind default/p to node-0: bound pod=default/p error="" note="two words"'
    )


def test_uvicorn_logs_in_our_format(output):
    logs.configure("info", "json", output, force=True)
    servers(object(), "127.0.0.1", 0)  # configures uvicorn's logging, as serving does
    logging.getLogger("uvicorn.error").info("Started server process")
    uvicorn_lines = [json.loads(line) for line in lines(output) if '"uvicorn.error"' in line]
    assert [r["msg"] for r in uvicorn_lines] == ["Started server process"]
    assert "color_message" not in uvicorn_lines[0]


def test_urllib3_warnings_are_left_out(output):
    logs.configure("info", "text", output, force=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        urllib3.PoolManager().request("GET", f"http://127.0.0.1:{port}/", retries=2)
    logging.getLogger("extender.kube.source").warning("Node list/watch failed (...); retrying in 1.0s")
    assert [line.split(" ", 3)[3] for line in lines(output)] == [
        "extender.kube.source: Node list/watch failed (...); retrying in 1.0s"
    ]


def test_the_cli_takes_text_or_json() -> None:
    assert _parser().parse_args(["serve"]).log_format == "text"
    assert _parser().parse_args(["serve", "--log-format", "json"]).log_format == "json"
    with pytest.raises(SystemExit):
        _parser().parse_args(["serve", "--log-format", "xml"])


def test_a_root_logger_with_handlers_is_left_alone_unless_forced(output):
    logging.getLogger().addHandler(logging.NullHandler())  # as a test runner or host program would
    logs.configure("info", "json", output)
    logging.getLogger("extender").warning("not ours to format")
    assert lines(output) == []


def test_the_served_program_logs_every_line_as_json(tmp_path):
    """``dra-extender serve --log-format json`` from start-up to shutdown, uvicorn's lines included."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "extender", "serve", "--port", str(port), "--log-format", "json"],
        stderr=subprocess.PIPE, text=True,
    )
    try:
        seen = []
        for line in process.stderr:  # type: ignore[union-attr]
            seen.append(json.loads(line))
            if "Uvicorn running" in seen[-1]["msg"]:
                break
    finally:
        process.terminate()
        rest, _ = process.communicate(timeout=20)
    seen += [json.loads(line) for line in (rest or "").splitlines()]
    assert {"extender", "extender.api.server", "uvicorn.error"} <= {r["logger"] for r in seen}
    assert all(set(r) >= {"ts", "level", "logger", "msg"} for r in seen)


FIELDS = {"verb": "filter", "pod": "default/p", "nodes": 3, "passed": 1,
          "reasons": {"node-1": 'no "GPU" = left'}, "error": "", "claims": ["a b", None], "top": {"n": 7},
          "status": 200, "duration_ms": 1.5}


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("now", [1764150000.123456, 1764150000.9999, 1764150001.0])
def test_a_line_written_without_a_record_is_the_record_s_line(output, monkeypatch, fmt, now):
    monkeypatch.setattr(time, "time", lambda: now)
    logs.configure("info", fmt, output, force=True)
    logger = logging.getLogger("extender.decisions")
    made: list[logging.LogRecord] = []

    def making(*args: Any, **kwargs: Any) -> logging.LogRecord:
        made.append(logging.Logger.makeRecord(logger, *args, **kwargs))
        return made[-1]

    monkeypatch.setattr(logger, "makeRecord", making)
    logs.log_line(logger, logging.INFO, "filter default/p: 1 of 3 nodes pass", FIELDS)
    assert made == []  # written straight away
    logger.log(logging.INFO, "filter default/p: 1 of 3 nodes pass", extra=FIELDS)
    direct, through_a_record = lines(output)
    assert direct == through_a_record
    other = logging.getLogger("extender.x")
    logs.log_line(other, logging.WARNING, "no fields", {})
    other.warning("no fields")
    assert lines(output)[2] == lines(output)[3]


def test_a_line_takes_the_record_s_way_when_anything_else_could_see_or_stop_it(output):
    logs.configure("info", "text", output, force=True)
    logger, root = logging.getLogger("extender.decisions"), logging.getLogger()
    seen: list[logging.LogRecord] = []
    other = logging.Handler(logging.ERROR)  # a second handler, even one below the line's level
    other.emit = seen.append  # type: ignore[method-assign]
    root.addHandler(other)
    logs.log_line(logger, logging.ERROR, "seen by both", {"pod": "p"})
    root.removeHandler(other)
    assert [(r.getMessage(), r.pod) for r in seen] == [("seen by both", "p")]  # type: ignore[attr-defined]
    stop = logging.Filter("nothing.of.ours")
    logger.addFilter(stop)
    logs.log_line(logger, logging.INFO, "filtered out", {})
    logger.removeFilter(stop)
    handler = root.handlers[0]
    handler.setLevel(logging.ERROR)
    logs.log_line(logger, logging.INFO, "below the handler's level", {})
    handler.setLevel(logging.NOTSET)
    logs.log_line(logger, logging.INFO, "written", {})
    assert [line.split(": ", 1)[1] for line in lines(output)] == ["seen by both pod=p", "written"]


def test_a_second_is_formatted_once_and_a_new_one_anew() -> None:
    formatted: list[int] = []

    def text_of(second: int) -> str:
        formatted.append(second)
        return f"t{second}"

    clock = logs.OncePerSecond(text_of)
    assert [clock(5), clock(5), clock(6), clock(6), clock(5)] == ["t5", "t5", "t6", "t6", "t5"]
    assert formatted == [5, 6, 5]
