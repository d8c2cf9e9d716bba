"""Binding conditions (DRADeviceBindingConditions + DRAResourceClaimDeviceStatus).

Upstream's PreBind (kubernetes/kubernetes
``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go``) polls until every
binding condition of the allocated devices is ``True`` in ``status.devices``. An extender
cannot hold a bind call that long (kube-scheduler's httpTimeout is seconds), so bind answers
with an ``Error`` while conditions are pending and keeps the claims allocated and reserved;
the scheduler retries the pod with backoff, filter then only admits the allocation's node,
and the next bind checks again. A failure condition, or ``allocationTimestamp`` older than
the binding timeout, makes bind release (and deallocate) the claims so that a later attempt
allocates afresh.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

BINDING_TIMEOUT_S = 600.0  # DynamicResourcesArgs.bindingTimeout default


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    failed: bool
    message: str


READY = Readiness(True, False, "")


def _conditions(status: Mapping[str, Any], driver: str, pool: str, device: str) -> dict[str, str]:
    for entry in status.get("devices") or ():
        if (entry.get("driver"), entry.get("pool"), entry.get("device")) == (driver, pool, device):
            return {c.get("type"): c.get("status") for c in entry.get("conditions") or ()}
    return {}


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def claim_readiness(raw: Mapping[str, Any], now: datetime | None = None) -> Readiness:
    """Whether an allocated claim's devices may be used yet."""
    status = raw.get("status") or {}
    allocation = status.get("allocation") or {}
    name = f"{(raw.get('metadata') or {}).get('namespace')}/{(raw.get('metadata') or {}).get('name')}"
    pending: list[str] = []
    for result in (allocation.get("devices") or {}).get("results") or ():
        wanted, failing = result.get("bindingConditions") or (), result.get("bindingFailureConditions") or ()
        if not wanted and not failing:
            continue
        device = f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}"
        conditions = _conditions(status, result.get("driver"), result.get("pool"), result.get("device"))
        for condition in failing:
            if conditions.get(condition) == "True":
                return Readiness(
                    False, True, f"claim {name} binding failed: device {device}: {condition} is True"
                )
        pending.extend(f"{device}: {c}" for c in wanted if conditions.get(c) != "True")
    if not pending:
        return READY
    started = _timestamp(allocation.get("allocationTimestamp"))
    now = now or datetime.now(UTC)
    if started is not None and (now - started).total_seconds() > BINDING_TIMEOUT_S:
        return Readiness(False, True, f"claim {name}: device binding timeout ({', '.join(pending)})")
    return Readiness(False, False, f"claim {name}: waiting for binding conditions ({', '.join(pending)})")


def first_problem(claims: Iterable[Mapping[str, Any]]) -> Readiness:
    """The first claim that is not ready (failed ones first), or READY."""
    waiting = None
    for raw in claims:
        readiness = claim_readiness(raw)
        if readiness.failed:
            return readiness
        if not readiness.ready and waiting is None:
            waiting = readiness
    return waiting or READY
