"""How a decision says it failed: one value, from the allocator up to the verbs' replies.

``Allocator.allocate`` returns the results or a ``Failure``; the scheduling verbs keep it in
their node verdicts, turn it into a filter reply's reason, a bind refusal or an explanation.
Nothing on that way raises to say "no": the one exception, ``AllocationError``, only unwinds a
search inside the allocator, which turns it into the failure it carries.

A failure an allocator computes may be shared between pods whose claims ask alike (the
scheduler's verdict tables), so its ``reason`` names the claims it was computed for by their
position only (``claim_slot``); ``naming`` fills in the claims of the pod it is told to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

# What the failure means to the one who reads it:
# - "nofit": no combination of devices satisfies the claims on this node (``resolvable``:
#   devices held by others are near, so evicting pods might help);
# - "unavailable": this node cannot serve the claims at all (invalid pools, a claim allocated
#   for other nodes, resources the node does not offer through DRA);
# - "timeout": the allocation ran out of time on this node;
# - "fatal": the claims as such cannot be allocated (bad CEL, unknown class, limits): no node
#   can change that;
# - "refused": a verb turns the pod away for a reason of its own (bind, placement).
FailureKind = Literal["nofit", "unavailable", "timeout", "fatal", "refused"]


def claim_slot(index: int) -> str:
    """Where a failure's reason names the ``index``-th claim asked for (NUL never occurs in
    names or reasons)."""
    return f"\x00{index}\x00"


@dataclass(frozen=True, slots=True)
class Failure:
    """Why something could not be done, and what kind of "no" it is."""

    kind: FailureKind
    reason: str
    resolvable: bool = False

    def naming(self, claim_keys: Sequence[str]) -> Failure:
        """This failure told about the claims ``claim_keys`` ("ns/name", in the order they were
        asked for): each claim slot of the reason replaced by its claim's name."""
        reason = self.reason
        if "\x00" not in reason:
            return self
        for index, key in enumerate(claim_keys):
            reason = reason.replace(claim_slot(index), key)
        return Failure(self.kind, reason, self.resolvable)


class AllocationError(Exception):
    """Unwinds a search that cannot go on: the claims as such cannot be allocated anywhere
    (invalid claim/class, CEL error, limits, ...: ``kind`` "fatal") or its deadline passed
    ("timeout"). Never leaves ``Allocator.allocate``."""

    def __init__(self, message: str, kind: FailureKind = "fatal") -> None:
        super().__init__(message)
        self.message = message
        self.kind: FailureKind = kind


# What a search says when its deadline passes (upstream's words).
TIMED_OUT = "filter operation aborted: context deadline exceeded"
