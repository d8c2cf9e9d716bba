"""Node verdicts: their values, the tables that share them between pods asking alike, and one
pod's view of them (``PodVerdicts``), through which every verb reads them."""

from extender.scheduling.verdicts.pod import Decided, Judge, PodVerdicts
from extender.scheduling.verdicts.table import PodResults, SpecVerdicts
from extender.scheduling.verdicts.values import (
    FITS,
    TIMEOUT,
    ExtendedStatus,
    NodeVerdict,
    Placement,
    Remembered,
    SharedVerdict,
    Variant,
)

__all__ = [
    "FITS",
    "TIMEOUT",
    "Decided",
    "ExtendedStatus",
    "Judge",
    "NodeVerdict",
    "Placement",
    "PodResults",
    "PodVerdicts",
    "Remembered",
    "SharedVerdict",
    "SpecVerdicts",
    "Variant",
]
