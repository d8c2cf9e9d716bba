"""One log line per verb call on the ``extender.decisions`` logger: what was asked, what was
decided and how long it took (fields: docs/usage.md, "Logs").

filter, preempt and bind log at INFO, prioritize at DEBUG; a filter or preempt of a pod that
wants no devices (its answer is every node, untouched) at DEBUG too. The fields are gathered
only when the logger is enabled for the verb's level (``start`` returns None otherwise), so a
disabled line costs one level check per request.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Collection, Mapping
from typing import Any

from extender.logs import decision_fields, decisions, log_line
from extender.model.pods import PodInfo
from extender.scheduling.filter import FilterOutcome

_LEVELS = {"filter": logging.INFO, "prioritize": logging.DEBUG, "bind": logging.INFO, "preempt": logging.INFO}
# A failing node's reason is a sentence: a few of them say why; all of them would flood the line.
_REASONS = 3


def start(verb: str) -> dict[str, Any] | None:
    """The fields of ``verb``'s line to fill in, or None when the line would not be written."""
    return {} if decisions.isEnabledFor(_LEVELS[verb]) else None


def _level(pod: PodInfo) -> int:
    return logging.INFO if pod.wants_devices else logging.DEBUG


def filtered(pod: PodInfo, nodes: int, out: FilterOutcome) -> None:
    fields = decision_fields()
    if fields is None:
        return
    fields.update(pod=pod.ref, level=_level(pod), nodes=nodes, passed=len(out.passed),
                  failed=len(out.failed), unresolvable=len(out.unresolvable))
    failing = itertools.chain(out.failed.items(), out.unresolvable.items())
    reasons = dict(itertools.islice(failing, _REASONS))
    if reasons:
        fields["reasons"] = reasons
    if out.error:
        fields["error"] = out.error


def prioritized(pod: PodInfo, scores: Mapping[str, int]) -> None:
    fields = decision_fields()
    if fields is None:
        return
    best = sorted(scores.items(), key=lambda item: -item[1])[:_REASONS]
    fields.update(pod=pod.ref, nodes=len(scores), top=dict(best))


def preempted(pod: PodInfo, asked: int, kept: Collection[str]) -> None:
    fields = decision_fields()
    if fields is None:
        return
    fields.update(pod=pod.ref, level=_level(pod), nodes=asked, kept=len(kept))


def finish(verb: str, fields: dict[str, Any], status: int, seconds: float) -> None:
    """Write ``verb``'s line, answered with HTTP ``status`` after ``seconds``."""
    level = fields.pop("level", _LEVELS[verb])
    if status == 499 or not decisions.isEnabledFor(level):
        # 499: the client left before its body was complete; nothing was decided, and replies.py
        # has said so in one debug line.
        return
    line = {"verb": verb, **fields, "status": status, "duration_ms": round(seconds * 1000, 3)}
    log_line(decisions, level, _message(verb, line), line)


def _message(verb: str, f: Mapping[str, Any]) -> str:
    if f["status"] != 200:
        return f"{verb}: answered {f['status']}: {f.get('error', '')}"
    pod = f.get("pod", "?")
    if verb == "filter":
        return f"filter {pod}: {f['passed']} of {f['nodes']} nodes pass"
    if verb == "prioritize":
        return f"prioritize {pod}: {f['nodes']} nodes scored"
    if verb == "preempt":
        return f"preempt {pod}: {f['kept']} of {f['nodes']} nodes worth preempting"
    return f"bind {pod} to {f.get('node', '?')}: {f.get('outcome', '?')}"
