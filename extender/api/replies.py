"""What every route of the service shares: reading a request body under the size cap,
answering in JSON (an error as ``{"error": message}``), and the answer to a request that failed.

The extender's verbs (:mod:`extender.api.routes`) and local mode's routes
(:mod:`extender.api.local_routes`) both use these, so their replies look alike.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import Request, Response
from starlette.requests import ClientDisconnect

from extender.api import wire
from extender.api.wire import BadRequest

log = logging.getLogger(__name__)

JSON = "application/json"


class TooLarge(BadRequest):
    """An oversized body is one more malformed request: 400 like the others, as the issue asks."""


def json_reply(obj: Any, status: int = 200) -> Response:
    return Response(wire.encode(obj), status_code=status, media_type=JSON)


def problem(status: int, message: str) -> Response:
    return json_reply({"error": message}, status)


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge(f"request body of {declared} bytes exceeds the limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def failed(what: str, exc: Exception) -> Response:
    """The answer to request ``what`` that raised ``exc``.

    Bad input is the caller's: a 400 with the message. A client gone mid-body (or cut at
    ``--body-timeout``) has nobody to answer: one debug line and a 499. Anything else is a bug,
    not the request's fault: logged with its traceback and said so in a 500.
    """
    if isinstance(exc, BadRequest):
        return problem(400, f"{what}: {exc}")
    if isinstance(exc, ClientDisconnect):
        log.debug("%s: the client went away before its request body was complete", what)
        return Response(status_code=499)
    log.error("%s failed", what, exc_info=exc)
    return problem(500, f"{what}: internal error: {exc}")
