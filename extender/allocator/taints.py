"""Device taints versus request tolerations (resourceclaim/devicetoleration.go semantics)."""

from __future__ import annotations

from collections.abc import Sequence

from extender.model import Device, Taint, Toleration

# Other effects, including unknown future ones, never block allocation.
_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Equal":
        return toleration.value == taint.value
    return toleration.operator == "Exists"


def all_taints_tolerated(device: Device, tolerations: Sequence[Toleration]) -> bool:
    for taint in device.taints:
        if taint.effect in _BLOCKING_EFFECTS and not any(tolerates(t, taint) for t in tolerations):
            return False
    return True
