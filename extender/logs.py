"""Log output: one handler on the root logger, text or JSON lines with the same fields, and the
per-request decision record the verbs fill in and log once (docs/usage.md, "Logs").

A record's ``extra`` fields are its structured part: JSON lines carry them as keys next to
``ts``, ``level``, ``logger`` and ``msg``; text lines append them as ``key=value``.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TextIO

import orjson

FORMATS = ("text", "json")

# One line per verb call (extender.api.decisions writes them).
decisions = logging.getLogger("extender.decisions")

# uvicorn adds color_message, an ANSI-coloured copy of the message, to some of its records.
_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "color_message"
}
_decision: ContextVar[dict[str, Any] | None] = ContextVar("decision", default=None)


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _RESERVED}


def _timestamp(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class OncePerSecond:
    """A text of the whole second (a timestamp), worked out once a second: a log line per verb
    call, or a stamp per object admitted, comes many times a second.

    It holds one entry, the last second and its text, swapped whole (so a thread reading it
    meanwhile sees the old pair or the new); its text is a function of the second alone, so
    one instance may serve every caller of the process.
    """

    __slots__ = ("_last", "_text_of")

    def __init__(self, text_of: Callable[[int], str]) -> None:
        self._text_of = text_of
        self._last: tuple[int, str] = (-1, "")

    def __call__(self, second: int) -> str:
        last = self._last
        if last[0] != second:
            last = self._last = (second, self._text_of(second))
        return last[1]


_local_second = OncePerSecond(lambda second: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second)))
# A whole second as RFC 3339 in UTC: the timestamps local mode stamps on the objects it admits.
utc_rfc3339 = OncePerSecond(lambda second: datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))


def _asctime(created: float, msecs: float) -> str:
    """``logging.Formatter.formatTime`` without a date format: local time, then milliseconds."""
    return f"{_local_second(int(created))},{int(msecs):03d}"


def _json_line(
    created: float, levelname: str, name: str, message: str, fields: Mapping[str, Any], exc: str = ""
) -> str:
    line: dict[str, Any] = {
        "ts": _timestamp(created), "level": levelname.lower(), "logger": name, "msg": message
    }
    line.update(fields)
    if exc:
        line["exc"] = exc
    return orjson.dumps(line, default=str).decode()


def _text_line(asctime: str, levelname: str, name: str, message: str, fields: Mapping[str, Any]) -> str:
    text = f"{asctime} {levelname} {name}: {message}"
    pairs = [f"{key}={_text_value(value)}" for key, value in fields.items()]
    return " ".join([text, *pairs]) if pairs else text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the record's extra fields, and exc if any."""

    def format(self, record: logging.LogRecord) -> str:
        exc = self.formatException(record.exc_info) if record.exc_info else ""
        message = record.getMessage()
        return _json_line(record.created, record.levelname, record.name, message, _fields(record), exc)


class TextFormatter(logging.Formatter):
    """``ts LEVEL logger: msg key=value ...``; values with spaces or quotes are JSON-quoted."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return super().formatTime(record, datefmt) if datefmt else _asctime(record.created, record.msecs)

    def formatMessage(self, record: logging.LogRecord) -> str:
        return _text_line(record.asctime, record.levelname, record.name, record.message, _fields(record))


def _text_value(value: Any) -> str:
    if isinstance(value, str) and value and not any(c in value for c in ' "=\n'):
        return value
    return orjson.dumps(value, default=str).decode()


class LineHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler ``configure`` installs; ``line`` writes a record's line without the record."""

    def __init__(self, stream: TextIO, fmt: str) -> None:
        super().__init__(stream)
        self.json = fmt == "json"
        self.setFormatter(JsonFormatter() if self.json else TextFormatter())

    def line(self, level: int, name: str, message: str, fields: Mapping[str, Any]) -> None:
        """The line a record of ``name`` at ``level`` with ``message`` and ``fields`` as its extra
        fields would be written as, by the formatter's own functions (a record's time and
        milliseconds are taken as LogRecord takes them)."""
        created = time.time()
        levelname = logging.getLevelName(level)
        if self.json:
            text = _json_line(created, levelname, name, message, fields)
        else:
            text = _text_line(_asctime(created, int((created - int(created)) * 1000) + 0.0), levelname, name,
                              message, fields)
        self.acquire()
        try:
            self.stream.write(text + self.terminator)
            self.flush()
        except Exception:
            self.handleError(logging.makeLogRecord({"name": name, "levelno": level, "levelname": levelname,
                                                    "msg": message}))
        finally:
            self.release()


def log_line(logger: logging.Logger, level: int, message: str, fields: Mapping[str, Any]) -> None:
    """``logger.log(level, message, extra=fields)`` for a logger enabled at ``level``, written the
    same. When ``configure``'s handler is the only one the record would reach and nothing could
    filter it, the line is written without a LogRecord, a caller lookup and the formatter's
    steps: for the line per verb call, those cost more than the rest of a refused bind.
    """
    handler = _only_handler(logger, level)
    if handler is None:
        logger.log(level, message, extra=fields)
    else:
        handler.line(level, logger.name, message, fields)


def _only_handler(logger: logging.Logger, level: int) -> LineHandler | None:
    # As Logger.handle and callHandlers go: the logger's own filters, then every handler up
    # the hierarchy until a logger that does not propagate.
    if logger.disabled or logger.filters:
        return None
    found: LineHandler | None = None
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if found is not None or type(handler) is not LineHandler:
                return None
            if handler.filters or level < handler.level:
                return None
            found = handler
        current = current.parent if current.propagate else None
    return found


def configure(level: str, fmt: str, stream: TextIO | None = None, *, force: bool = False) -> None:
    """Send every logger's records, uvicorn's included, to one handler in format ``fmt``.

    As with ``logging.basicConfig``, a root logger that already has handlers (a test runner's,
    an embedding program's) is left alone unless ``force``.
    """
    root = logging.getLogger()
    if root.handlers and not force:
        return
    root.handlers[:] = [LineHandler(stream or sys.stderr, fmt)]
    root.setLevel(level.upper())
    # Every API request goes through extender.kube.client with urllib3's retries off; each caller
    # retries on its own and logs that with the cause. urllib3's own warnings (a connection pool
    # full, a retry of some other caller) would only repeat that, once per connection.
    logging.getLogger("urllib3").setLevel(logging.ERROR)


def decision_fields() -> dict[str, Any] | None:
    """The fields of the current request's decision line, or None when it logs none."""
    return _decision.get()


def note(**fields: Any) -> None:
    """Add ``fields`` to the current request's decision line, if it logs one."""
    current = _decision.get()
    if current is not None:
        current.update(fields)


@contextlib.contextmanager
def recording(fields: dict[str, Any] | None) -> Iterator[None]:
    """Collect the decision fields of the code run inside into ``fields`` (None: collect nothing)."""
    token = _decision.set(fields)
    try:
        yield
    finally:
        _decision.reset(token)
