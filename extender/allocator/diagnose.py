"""A short human reason why a node could not satisfy the claims (for events and logs).

The reason names the claims by position (``outcome.claim_slot``): it may be shared with other
pods whose claims ask alike, and each names its own claims when it is rendered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from extender.allocator.outcome import AllocationError, claim_slot
from extender.allocator.taints import all_taints_tolerated

if TYPE_CHECKING:
    from extender.allocator.requests import RequestData
    from extender.allocator.search import Search


def _shortfall(search: Search, data: RequestData) -> str | None:
    """Why this (sub)request alone cannot be met, ignoring the other requests; None if it can."""
    matching = in_use = tainted = 0
    candidates = data.all_devices if data.all_mode else search.candidates
    for candidate in candidates:
        try:
            if not search.selectable(candidate, data):
                continue
        except AllocationError:
            return None
        matching += 1
        if not data.admin and candidate.device.id in search.state.allocated_devices:
            in_use += 1
        elif search.features.device_taints and not all_taints_tolerated(
            candidate.device, data.exact.tolerations
        ):
            tainted += 1
    usable = matching - in_use - tainted
    wanted = data.num_devices
    if data.all_mode and wanted and usable == wanted:
        return None
    if not data.all_mode and usable >= wanted:
        return None
    details = f"{matching} match the selectors, {in_use} in use"
    if tainted:
        details += f", {tainted} tainted"
    return f"{max(usable, 0)} of {wanted or 'all'} devices available ({details})"


def explain_failure(search: Search) -> str:
    reason = _first_shortfall(search)
    if reason is None:
        keys = ", ".join(claim_slot(c) for c in range(len(search.claims)))
        reason = f"claims {keys}: no combination of devices satisfies all requests and constraints"
    incomplete = [f"{p.driver}/{p.name}" for p in search.pools if p.incomplete]
    if incomplete:
        # Devices of pools being updated are not offered; say so, it is often the real cause.
        reason += f"; resource pools being updated: {', '.join(incomplete)}"
    return reason


def _first_shortfall(search: Search) -> str | None:
    for c, claim_requests in enumerate(search.requests):
        for variants in claim_requests:
            reasons = [_shortfall(search, data) for data in variants]
            if all(reasons):
                return f"claim {claim_slot(c)}, request {variants[0].parent}: {reasons[0]}"
    return None
