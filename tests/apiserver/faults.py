"""Fault knobs of the test API server, for reliability tests.

A rule matches a request by verb (get, list, watch, create, update, patch, delete), resource
plural and subresource; ``None`` matches anything. Rules are consumed as they fire.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass
class _Rule:
    verb: str | None
    resource: str | None
    subresource: str | None
    remaining: int
    code: int = 0
    delay: float = 0.0
    release: threading.Event | None = None

    def matches(self, verb: str, resource: str, subresource: str | None) -> bool:
        return (self.remaining > 0 and self.verb in (None, verb) and self.resource in (None, resource)
                and (self.subresource is None or self.subresource == subresource))


class Faults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: list[_Rule] = []
        self._delays: list[_Rule] = []
        self._gone: list[_Rule] = []
        # Bumped to make every open watch stream (of a resource, or all) end abruptly.
        self._cut_epoch: dict[str | None, int] = {}
        # Faults that actually hit a request (failures, delays, 410s) and watch cuts: what
        # docs/reliability.md reports as injected.
        self.fired = 0

    def fail(self, verb: str | None, resource: str | None, code: int, times: int = 1,
             subresource: str | None = None) -> None:
        """Answer the next ``times`` matching requests with HTTP ``code``."""
        with self._lock:
            self._failures.append(_Rule(verb, resource, subresource, times, code=code))

    def delay(self, seconds: float, verb: str | None = None, resource: str | None = None, times: int = 1,
              subresource: str | None = None) -> None:
        with self._lock:
            self._delays.append(_Rule(verb, resource, subresource, times, delay=seconds))

    def hold(self, verb: str | None = None, resource: str | None = None,
             subresource: str | None = None) -> threading.Event:
        """Keep the next matching request waiting until the returned event is set.

        Unlike ``delay``, the test decides when the request goes on, so a client-side deadline
        can expire before it no matter how slow the machine is.
        """
        release = threading.Event()
        with self._lock:
            self._delays.append(_Rule(verb, resource, subresource, 1, release=release))
        return release

    def force_gone(self, resource: str | None = None, times: int = 1) -> None:
        """The next ``times`` watches of ``resource`` get a 410 Expired ERROR event."""
        with self._lock:
            self._gone.append(_Rule("watch", resource, None, times))

    def cut_watches(self, resource: str | None = None) -> None:
        with self._lock:
            self._cut_epoch[resource] = self._cut_epoch.get(resource, 0) + 1
            self.fired += 1

    def cut_epoch(self, resource: str) -> tuple[int, int]:
        with self._lock:
            return self._cut_epoch.get(None, 0), self._cut_epoch.get(resource, 0)

    def take_failure(self, verb: str, resource: str, subresource: str | None) -> int:
        rule = self._take(self._failures, verb, resource, subresource)
        return rule.code if rule else 0

    def take_delay(self, verb: str, resource: str, subresource: str | None) -> float | threading.Event:
        """Seconds to sleep, or the event to wait for, before answering this request."""
        rule = self._take(self._delays, verb, resource, subresource)
        if rule is None:
            return 0.0
        return rule.release or rule.delay

    def take_gone(self, resource: str) -> bool:
        return self._take(self._gone, "watch", resource, None) is not None

    def _take(self, rules: list[_Rule], verb: str, resource: str, subresource: str | None) -> _Rule | None:
        with self._lock:
            for rule in rules:
                if rule.matches(verb, resource, subresource):
                    rule.remaining -= 1
                    self.fired += 1
                    return rule
        return None
