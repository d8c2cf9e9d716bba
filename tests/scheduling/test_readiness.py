"""Binding-condition readiness of allocated claims."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from extender.model import ResourceClaim, parse_resource_claim
from extender.scheduling.claims import READY, claim_readiness, first_problem


def claim(
    conditions: dict[str, str], stamp: datetime | None = None, wanted=("attached",), failing=("broken",)
) -> ResourceClaim:
    result = {"request": "r", "driver": "d", "pool": "p", "device": "x"}
    if wanted:
        result["bindingConditions"] = list(wanted)
    if failing:
        result["bindingFailureConditions"] = list(failing)
    allocation = {"devices": {"results": [result]}}
    if stamp is not None:
        allocation["allocationTimestamp"] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    devices = [
        {
            "driver": "d",
            "pool": "p",
            "device": "x",
            "conditions": [{"type": t, "status": s} for t, s in conditions.items()],
        }
    ]
    return parse_resource_claim({
        "metadata": {"namespace": "ns", "name": "c"},
        "status": {"allocation": allocation, "devices": devices},
    })


def test_ready_when_every_binding_condition_is_true():
    assert claim_readiness(claim({"attached": "True"})) == READY
    assert claim_readiness(claim({}, wanted=(), failing=())) == READY


def test_pending_then_timed_out():
    now = datetime.now(UTC)
    pending = claim_readiness(claim({"attached": "False"}, stamp=now))
    assert not pending.ready and not pending.failed and "d/p/x: attached" in pending.message
    late = claim_readiness(claim({}, stamp=now - timedelta(seconds=601)), now=now)
    assert late.failed and "device binding timeout" in late.message


def test_failure_condition_wins_and_failed_claims_come_first():
    failed = claim({"attached": "True", "broken": "True"})
    assert claim_readiness(failed).failed
    assert first_problem([claim({}), failed]).failed
    assert not first_problem([claim({}), claim({"attached": "True"})]).ready
