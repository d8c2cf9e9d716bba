"""The API server's version, asked for until it answers.

With --kube and no --kubernetes-version the feature gates are those of the API server's release.
An extender that starts while its API server cannot be reached (a control plane restarting, a
node whose network is not up yet) must not exit for it, or it crash-loops: it serves, not ready,
and asks again with backoff, one log line per attempt.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from extender.kube.client import KubeApiError, RawClient
from extender.kube.source import Backoff

log = logging.getLogger(__name__)

# /version answers anyone (the ClusterRole system:public-info-viewer is bound to
# system:authenticated and system:unauthenticated): a refusal means credentials the API server
# rejects, or a cluster that removed that binding. Neither heals by itself, but a rotated
# service-account token or a restored binding does, so the extender keeps asking, loudly.
REFUSED = (401, 403)


async def wait_for_version(
    client: RawClient,
    backoff: Backoff | None = None,
    *,
    failed: Callable[[KubeApiError], None] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> str:
    """The API server's gitVersion, asked for again after each failure with ``backoff``'s delays.

    ``failed`` hears of every failure (the caller's readiness reason shows the last one).
    """
    backoff = backoff or Backoff()
    failures = 0
    while True:
        try:
            return await asyncio.to_thread(client.server_version)
        except KubeApiError as exc:
            failures += 1
            delay = backoff.delay(failures)
            if failed is not None:
                failed(exc)
            if exc.status in REFUSED:
                log.error(
                    "the API server refuses to say its version (%s): /version is readable by anyone "
                    "unless the cluster removed the system:public-info-viewer binding, so the "
                    "credentials are probably rejected; --kubernetes-version names the release "
                    "instead; asking again in %.1f s",
                    exc, delay,
                )
            else:
                log.warning("cannot read the API server's version (%s); asking again in %.1f s", exc, delay)
            await sleep(delay)
