"""What a request body may cost before it is parsed: bytes, JSON elements, and company.

Parsing JSON is the one step whose cost the client picks. A 10 MB body of nested empty arrays
becomes millions of Python lists: seconds of the event loop and hundreds of MB. Three limits
keep any body cheap:

* **bytes, per route** (``Config.body_limits``): a bind needs a few hundred bytes, a filter with
  ``NodeNames`` a few MB at most, a filter with full ``Nodes`` far more;
* **JSON elements** (``Config.max_json_elements``): every ``{``, ``[`` and ``,`` is counted as
  the body arrives (a C-speed byte count per chunk), and the body is refused as soon as the
  count passes the limit, before it is read in full or parsed. Elements, not bytes, are what
  parsing turns into objects; over-counting commas inside strings only errs on the safe side.
  Bytes not yet counted stand for as many elements, so counting waits until they could
  take the body over the limit;
* **one large body at a time**: a body beyond ``LARGE_BODY_BYTES`` waits for the large-body
  slot before it is read further, and keeps it until its request is answered, so that eight
  hostile uploads cost what one does while small requests (every normal verb call) pass by.

Nesting depth needs no check of its own: the parser refuses more than 1024 levels.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from dataclasses import dataclass

from fastapi import Request
from starlette.requests import ClientDisconnect
from starlette.types import Receive

from extender.api.wire import BadRequest

# Larger than any bind, filter-by-NodeNames or prioritize body of a normal cluster (a typical Pod
# is a few KB, the etcd limit 1.5 MiB); full Node lists and huge pods go through the slot.
LARGE_BODY_BYTES = 1024 * 1024
# How long a large body may wait for the slot before the answer is 503 (the scheduler retries).
LARGE_BODY_WAIT_S = 5.0


# The bytes counted as JSON elements (see the module docstring), and all the others: deleting
# those leaves the elements, a few percent of a body. That is 25% quicker than deleting the
# elements (the copy is small and the branch predictable), over twice as quick as three counts.
_ELEMENT_BYTES = b",{["
_OTHER_BYTES = bytes(b for b in range(256) if b not in _ELEMENT_BYTES)


class TooLarge(BadRequest):
    """A body over one of the limits: a 400 naming the limit, like any other malformed request."""


class Busy(Exception):
    """Another large body holds the slot for longer than this one may wait."""


@dataclass(frozen=True)
class BodyLimit:
    max_bytes: int
    max_elements: int


class Bodies:
    """Reads request bodies under their limits; one per app (it owns the large-body slot)."""

    def __init__(self, limits: Mapping[str, int], max_elements: int) -> None:
        self._limits = {route: BodyLimit(size, max_elements) for route, size in limits.items()}
        self._large: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def limit(self, route: str) -> BodyLimit:
        return self._limits[route]

    @contextlib.asynccontextmanager
    async def read(self, request: Request, route: str) -> AsyncIterator[bytes]:
        """The body, read under ``route``'s limits; a large one holds the large-body slot until
        the block ends."""
        body, slot = await self.collect(request.headers.get("content-length"), request.stream(), route)
        try:
            yield body
        finally:
            if slot is not None:
                slot.release()

    async def collect(
        self, declared: str | bytes | None, stream: AsyncIterable[bytes], route: str
    ) -> tuple[bytes, asyncio.Semaphore | None]:
        """The body of ``stream``, read under ``route``'s limits (``declared``: its Content-Length
        header), and the large-body slot if it took it: the caller releases that once the
        request is answered. The scheduler's verbs call this without ``read``'s context
        manager, which cost more than reading their bodies."""
        limit = self._limits[route]
        size = int(declared) if declared is not None and declared.isdigit() else None
        if size is not None and size > limit.max_bytes:
            raise TooLarge(f"request body of {size} bytes exceeds the limit of {limit.max_bytes} bytes")
        slot = None
        if size is not None and size > LARGE_BODY_BYTES:
            slot = await self._large_slot()
        try:
            chunks: list[bytes] = []
            received = elements = 0
            counted = counted_bytes = 0  # chunks[:counted], counted_bytes long, are in elements
            async for chunk in stream:
                received += len(chunk)
                if received > limit.max_bytes:
                    raise TooLarge(f"request body exceeds the limit of {limit.max_bytes} bytes")
                chunks.append(chunk)
                # An element takes a byte at least: while the elements counted and the bytes not
                # yet counted stay within the limit, so does the body. The oldest chunks are
                # counted until that holds again: a body under the limit in bytes is never
                # counted, a 3 MB one about two thirds of it, and a body over the limit is
                # refused at the chunk that takes it over, as if every chunk had been counted.
                while elements + received - counted_bytes > limit.max_elements:
                    pending = chunks[counted]
                    elements += len(pending.translate(None, _OTHER_BYTES))
                    counted, counted_bytes = counted + 1, counted_bytes + len(pending)
                    if elements > limit.max_elements:
                        raise TooLarge(
                            f"request body has more than {limit.max_elements} JSON elements "
                            "(the limit for one request)"
                        )
                if slot is None and size is None and received - len(chunk) <= LARGE_BODY_BYTES < received:
                    slot = await self._large_slot()  # chunked, grew large
        except BaseException:
            if slot is not None:
                slot.release()
            raise
        return b"".join(chunks), slot

    async def _large_slot(self) -> asyncio.Semaphore:
        """The large-body slot, taken; the caller releases it."""
        loop = asyncio.get_running_loop()
        if self._large is None or self._loop is not loop:  # an app may serve on several loops (tests)
            self._large, self._loop = asyncio.Semaphore(1), loop
        large = self._large
        try:
            await asyncio.wait_for(large.acquire(), LARGE_BODY_WAIT_S)
        except TimeoutError:
            raise Busy(
                f"another request body over {LARGE_BODY_BYTES} bytes is being handled; retry"
            ) from None
        return large


async def received_chunks(receive: Receive) -> AsyncIterator[bytes]:
    """An ASGI request's body, as its messages bring it (as Starlette's ``Request.stream``)."""
    while True:
        message = await receive()
        if message["type"] == "http.request":
            chunk = message.get("body", b"")
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                return
        elif message["type"] == "http.disconnect":
            raise ClientDisconnect()
