"""Log output: one handler on the root logger, text or JSON lines with the same fields, and the
per-request decision record the verbs fill in and log once (docs/usage.md, "Logs").

A record's ``extra`` fields are its structured part: JSON lines carry them as keys next to
``ts``, ``level``, ``logger`` and ``msg``; text lines append them as ``key=value``.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
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


def _timestamp(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the record's extra fields, and exc if any."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        line.update(_fields(record))
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


class TextFormatter(logging.Formatter):
    """``ts LEVEL logger: msg key=value ...``; values with spaces or quotes are JSON-quoted."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        text = super().formatMessage(record)
        pairs = [f"{key}={_text_value(value)}" for key, value in _fields(record).items()]
        return " ".join([text, *pairs]) if pairs else text


def _text_value(value: Any) -> str:
    if isinstance(value, str) and value and not any(c in value for c in ' "=\n'):
        return value
    return orjson.dumps(value, default=str).decode()


def configure(level: str, fmt: str, stream: TextIO | None = None, *, force: bool = False) -> None:
    """Send every logger's records, uvicorn's included, to one handler in format ``fmt``.

    As with ``logging.basicConfig``, a root logger that already has handlers (a test runner's,
    an embedding program's) is left alone unless ``force``.
    """
    root = logging.getLogger()
    if root.handlers and not force:
        return
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.handlers[:] = [handler]
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
