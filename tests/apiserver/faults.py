"""Fault knobs of the test API server, for reliability tests.

A rule matches a request by verb (get, list, watch, create, update, patch, delete), resource
plural and subresource; ``None`` matches anything. Rules are consumed as they fire.

Where a fault strikes decides what the client can know afterwards:
- before the request is carried out: ``fail`` answers an error instead; ``delay`` and ``hold``
  keep it waiting, after which it is carried out as it would be then (a resourceVersion
  precondition that no longer holds gets its 409). A request kept waiting past the caller's
  deadline is a late write.
- instead of an answer: ``time_out`` answers 504 at once (kube-apiserver's own request timeout)
  and carries the request out later all the same, if its preconditions still hold then.
- after it is carried out: ``delay_reply`` answers late (a slow reply); ``lose_reply`` closes
  the connection without an answer (a lost reply: the write is in, the client cannot tell).
- on watches: ``force_gone`` and ``cut_watches`` end them; ``lag_watches`` holds their events
  back until the test releases them (a watch echo that comes late).
- ``at_random`` draws these per request from a seeded source, for property tests.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


@dataclass
class _Rule:
    verb: str | None
    resource: str | None
    subresource: str | None
    remaining: int
    code: int = 0
    delay: float = 0.0
    release: threading.Event | None = None
    drop: bool = False  # a reply rule: close the connection instead of answering

    def matches(self, verb: str, resource: str, subresource: str | None) -> bool:
        return self.remaining > 0 and _selects(self, verb, resource, subresource)


def _selects(rule: _Rule | _RandomRule, verb: str, resource: str, subresource: str | None) -> bool:
    return (rule.verb in (None, verb) and rule.resource in (None, resource)
            and (rule.subresource is None or rule.subresource == subresource))


@dataclass
class RandomFaults:
    """Faults drawn per matching request from a seeded source; each probability is 0..1."""

    rng: random.Random
    fail: float = 0.0  # answered with ``code`` and not carried out
    late: float = 0.0  # kept waiting ``hold`` seconds, then carried out if its preconditions still hold
    lost_reply: float = 0.0  # carried out; ``hold`` seconds later the connection closes, unanswered
    slow: float = 0.0  # carried out, answered ``hold`` seconds later
    # answered 504 at once; carried out ``landing`` seconds later if its preconditions still hold
    time_out: float = 0.0
    hold: float = 0.0
    landing: float = 0.0
    code: int = 500


@dataclass
class _RandomRule:
    faults: RandomFaults
    verb: str | None
    resource: str | None
    subresource: str | None
    when: Callable[[Any], bool] | None  # a test on the request body

    def matches(self, verb: str, resource: str, subresource: str | None, body: Any) -> bool:
        return _selects(self, verb, resource, subresource) and (self.when is None or self.when(body))


@dataclass
class Plan:
    """What the faults make of one request, in the order the server applies them."""

    wait: float | threading.Event = 0.0  # before carrying it out: seconds, or until the event is set
    code: int = 0  # answer this error instead of carrying it out (random draws; rules come after the wait)
    reply_after: float | threading.Event = 0.0  # carried out: answer (or drop) this much later
    drop: bool = False  # carried out: close the connection instead of answering
    # answered 504 at once, then carried out this much later (or once the event is set)
    land_after: float | threading.Event | None = None


@dataclass
class _WatchLag:
    resources: frozenset[str]
    released_rv: int  # events up to this resourceVersion go out
    max_lag: float | None  # an event this old goes out anyway


class Faults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: list[_Rule] = []
        self._delays: list[_Rule] = []
        self._replies: list[_Rule] = []
        self._timeouts: list[_Rule] = []
        self._random: list[_RandomRule] = []
        self._gone: list[_Rule] = []
        self._outages: list[tuple[float, float, int, _Rule]] = []  # (ends at, hang, code, what)
        self._lag: _WatchLag | None = None
        # Bumped to make every open watch stream (of a resource, or all) end abruptly.
        self._cut_epoch: dict[str | None, int] = {}
        # Faults that actually hit a request (failures, delays, held or lost replies, 410s, random
        # draws that struck) and watch cuts: what docs/reliability.md reports as injected.
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

    def outage(self, seconds: float, hang: float, code: int, verb: str | None = None,
               resource: str | None = None, subresource: str | None = None) -> None:
        """For the next ``seconds``, every matching request that arrives waits ``hang`` seconds
        and is then answered ``code`` without being carried out (an API server that hangs,
        then gives up)."""
        with self._lock:
            rule = _Rule(verb, resource, subresource, 1 << 30)
            self._outages.append((time.monotonic() + seconds, hang, code, rule))

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

    def time_out(self, verb: str | None = None, resource: str | None = None,
                 subresource: str | None = None, after: float | threading.Event = 0.0) -> None:
        """Answer the next matching request 504 at once, as kube-apiserver does when its request
        timeout strikes, and carry it out ``after`` seconds later (or once the event is set) all
        the same, if its preconditions still hold then: the client cannot know whether it lands."""
        seconds, release = (0.0, after) if isinstance(after, threading.Event) else (after, None)
        with self._lock:
            self._timeouts.append(_Rule(verb, resource, subresource, 1, delay=seconds, release=release))

    def delay_reply(self, seconds: float, verb: str | None = None, resource: str | None = None,
                    times: int = 1, subresource: str | None = None) -> None:
        """Carry the next matching requests out, then answer only ``seconds`` later (a slow reply)."""
        with self._lock:
            self._replies.append(_Rule(verb, resource, subresource, times, delay=seconds))

    def lose_reply(self, verb: str | None = None, resource: str | None = None, times: int = 1,
                   subresource: str | None = None, after: float | threading.Event = 0.0) -> None:
        """Carry the next matching requests out, then close the connection without an answer
        ``after`` seconds later (or once the event is set): at once, the client sees a broken
        connection; past its timeout, it has given up before."""
        seconds, release = (0.0, after) if isinstance(after, threading.Event) else (after, None)
        with self._lock:
            self._replies.append(_Rule(verb, resource, subresource, times, delay=seconds, release=release,
                                       drop=True))

    def at_random(self, faults: RandomFaults, verb: str | None = None, resource: str | None = None,
                  subresource: str | None = None, when: Callable[[Any], bool] | None = None) -> None:
        """From now on, draw ``faults`` for every matching request (whose body passes ``when``)."""
        with self._lock:
            self._random.append(_RandomRule(faults, verb, resource, subresource, when))

    def plan(self, verb: str, resource: str, subresource: str | None, body: Any) -> Plan:
        """Consume what strikes this request before it runs (a delay or hold) and after (a reply
        rule), then the random draws. Failure rules are taken once the wait is over (take_failure)."""
        plan = Plan(wait=self.take_delay(verb, resource, subresource))
        now = time.monotonic()
        with self._lock:
            for ends_at, hang, code, rule in self._outages:
                if now < ends_at and rule.matches(verb, resource, subresource):
                    self.fired += 1
                    plan.wait, plan.code = hang, code
                    break
        timeout = self._take(self._timeouts, verb, resource, subresource)
        if timeout is not None:
            plan.land_after = timeout.release or timeout.delay
        reply = self._take(self._replies, verb, resource, subresource)
        if reply is not None:
            plan.reply_after, plan.drop = reply.release or reply.delay, reply.drop
        with self._lock:
            for rule in self._random:
                if rule.matches(verb, resource, subresource, body):
                    self._draw(rule.faults, plan)
        return plan

    def _draw(self, faults: RandomFaults, plan: Plan) -> None:
        def roll(p: float) -> bool:
            hit = p > 0 and faults.rng.random() < p
            self.fired += hit
            return hit

        if roll(faults.fail):
            plan.code = plan.code or faults.code
            return
        if roll(faults.time_out) and plan.land_after is None:
            plan.land_after = faults.landing
            return
        if roll(faults.late) and not isinstance(plan.wait, threading.Event):
            plan.wait = max(plan.wait, faults.hold)
        later = plan.reply_after  # a test's own event keeps deciding
        if not isinstance(later, threading.Event):
            later = max(later, faults.hold)
        if roll(faults.lost_reply):
            plan.reply_after, plan.drop = later, True
        elif roll(faults.slow):
            plan.reply_after = later

    def release_holds(self) -> None:
        """Let every request kept waiting by ``hold`` or ``lose_reply`` go on (the server does so
        when it stops)."""
        with self._lock:
            for rule in (*self._delays, *self._replies):
                if rule.release is not None:
                    rule.release.set()

    def lag_watches(self, resources: Iterable[str], released_rv: int, max_lag: float | None) -> None:
        """Hold back watch events of ``resources`` newer than ``released_rv`` (see ApiServer.lag_watches)."""
        with self._lock:
            self._lag = _WatchLag(frozenset(resources), released_rv, max_lag)

    def release_watches(self, rv: int) -> None:
        with self._lock:
            if self._lag is not None:
                self._lag.released_rv = max(self._lag.released_rv, rv)

    def watch_lag(self, resource: str) -> tuple[int, float | None] | None:
        """(resourceVersion released up to, max lag) when ``resource``'s watch events are held back."""
        with self._lock:
            lag = self._lag
            if lag is None or resource not in lag.resources:
                return None
            return lag.released_rv, lag.max_lag

    def lagging(self) -> tuple[frozenset[str], int] | None:
        """The resources whose watch events are held back, and up to which resourceVersion they
        are released; None when no watch lags."""
        with self._lock:
            return (self._lag.resources, self._lag.released_rv) if self._lag is not None else None

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
