"""What every route of the service shares: answering in JSON (an error as
``{"error": message}``), and the answer to a request that failed.

The extender's verbs (:mod:`extender.api.routes`) and local mode's routes
(:mod:`extender.api.local_routes`) both use these, so their replies look alike.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import Response
from starlette.requests import ClientDisconnect

from extender.api import wire
from extender.api.bodies import Busy
from extender.api.wire import BadRequest

log = logging.getLogger(__name__)

JSON = "application/json"


def json_reply(obj: Any, status: int = 200) -> Response:
    return Response(wire.encode(obj), status_code=status, media_type=JSON)


def problem(status: int, message: str) -> Response:
    return json_reply({"error": message}, status)


def failed(what: str, exc: Exception) -> Response:
    """The answer to request ``what`` that raised ``exc``.

    Bad input is the caller's: a 400 with the message. A large body that found the large-body
    slot taken for too long: a 503, to be retried. A client gone mid-body (or cut at
    ``--body-timeout``) has nobody to answer: one debug line and a 499. Anything else is a bug,
    not the request's fault: logged with its traceback and said so in a 500.
    """
    if isinstance(exc, BadRequest):
        return problem(400, f"{what}: {exc}")
    if isinstance(exc, Busy):
        return problem(503, f"{what}: {exc}")
    if isinstance(exc, ClientDisconnect):
        log.debug("%s: the client went away before its request body was complete", what)
        return Response(status_code=499)
    log.error("%s failed", what, exc_info=exc)
    return problem(500, f"{what}: internal error: {exc}")
