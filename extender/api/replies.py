"""What every route of the service shares: reading a request body under the size cap, and
answering in JSON (an error as ``{"error": message}``).

The extender's verbs (:mod:`extender.api.routes`) and local mode's routes
(:mod:`extender.api.local_routes`) both use these, so their replies look alike.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request, Response

from extender.api import wire
from extender.api.wire import BadRequest

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
