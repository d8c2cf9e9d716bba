"""What ``dra-extender simulate`` prints: one row per pod, as a table or as JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Placement:
    """One pod's fate: bound to ``node`` with ``devices``, or pending for ``reason``."""

    pod: str  # namespace/name
    priority: int
    node: str | None = None
    devices: list[dict[str, str]] = field(default_factory=list)  # claim, request, driver, pool, device
    preempted: list[str] = field(default_factory=list)  # namespace/name of the pods it evicted
    reason: str = ""


def summary(placements: Sequence[Placement]) -> dict[str, int]:
    scheduled = sum(1 for p in placements if p.node)
    return {
        "pods": len(placements),
        "scheduled": scheduled,
        "pending": len(placements) - scheduled,
        "preempted": sum(len(p.preempted) for p in placements),
    }


def render_json(placements: Sequence[Placement]) -> str:
    pods = [
        {"pod": p.pod, "priority": p.priority, "node": p.node, "devices": p.devices,
         "preempted": p.preempted, "reason": p.reason}
        for p in placements
    ]
    return json.dumps({"pods": pods, "summary": summary(placements)}, indent=2)


def render_table(placements: Sequence[Placement]) -> str:
    header = ("POD", "PRIORITY", "NODE", "DEVICES", "PREEMPTED", "REASON")
    rows = [header] + [
        (
            p.pod,
            str(p.priority),
            p.node or "-",
            ",".join(f"{d['pool']}/{d['device']}" for d in p.devices) or "-",
            ",".join(p.preempted) or "-",
            p.reason or "-",
        )
        for p in placements
    ]
    # The last column (the reason) is left unpadded: it may be long.
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = ["  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]).rstrip()
             for row in rows]
    counts = summary(placements)
    lines.append(
        f"\n{counts['scheduled']} of {counts['pods']} pods scheduled, {counts['pending']} pending, "
        f"{counts['preempted']} preempted"
    )
    return "\n".join(lines)
