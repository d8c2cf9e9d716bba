"""Kubernetes' CEL environment for DRA device selectors.

The contract the allocator relies on (engines live behind it):

- ``Environment.compile_selector(expression)`` (``extender.cel.environment``; one environment
  is built at start-up and passed in) returns a compiled selector or raises
  :class:`CelCompileError` with a cel-go style message.
- ``selector.matches(device, checkpoint)`` returns True/False or raises :class:`CelRuntimeError`.
  Results are memoized per (expression, device version) in ``device.cel_memo``;
  a device object is immutable, a new slice version brings new device objects,
  so the memo is invalidated exactly when the device changes.
- ``checkpoint`` (optional, a :data:`Checkpoint`) is called every :data:`CHECK_EVERY_COST`
  cost units of a long evaluation: the caller may let other work run there (the scheduler
  switches to its event loop) or abandon the evaluation by raising
  :class:`EvaluationInterrupted` (its deadline passed). That exception goes through the
  engines unchanged and nothing is memoized, since the verdict is unknown, not false.

``device`` is any object with the attributes of :class:`DeviceInput`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

# Kubernetes' runtime cost limit of one selector evaluation (CELSelectorExpressionMaxCost in
# k8s.io/api resource/v1 types.go, applied by k8s.io/dynamic-resource-allocation cel/compile.go
# as cel-go's cel.CostLimit), and cel-go's wording when an evaluation goes over it.
COST_LIMIT = 1_000_000
COST_EXCEEDED = "operation cancelled: actual cost limit exceeded"

# How many cost units an evaluation runs between two calls of its checkpoint: a fraction of a
# millisecond in either engine (docs/performance.md, CEL cost table), so the caller's turns
# and deadline are kept to within that much.
CHECK_EVERY_COST = 1_000

Checkpoint = Callable[[], None]


class CelError(Exception):
    """Base of all CEL failures; ``expression`` is the offending selector."""

    def __init__(self, message: str, expression: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.expression = expression


class CelCompileError(CelError):
    """The expression is rejected before any device is seen."""


class CelRuntimeError(CelError):
    """Evaluation on one device failed (no such key, overflow, cost limit, ...)."""


class EvaluationInterrupted(Exception):
    """Raised by a caller's :data:`Checkpoint` to abandon an evaluation (its deadline passed).

    Not a :class:`CelError`: the selector did not fail, it was not given the time to finish.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class DeviceInput(Protocol):
    """What the CEL layer reads of a device (API-shaped values, parsed lazily).

    Read-only members: the CEL layer never assigns them, so frozen devices qualify.
    """

    @property
    def driver(self) -> str: ...

    # qualified or bare attribute name -> API value dict, e.g. {"int": 1}, {"strings": ["a"]}
    @property
    def attributes(self) -> Mapping[str, Mapping[str, Any]]: ...

    # qualified or bare capacity name -> {"value": "80Gi", "requestPolicy": {...}}
    @property
    def capacity(self) -> Mapping[str, Mapping[str, Any]]: ...

    @property
    def allow_multiple_allocations(self) -> bool: ...

    # Owned by the CEL layer: the activation and memoized results for this device version
    # (filled in place, never replaced).
    @property
    def cel_memo(self) -> dict[Any, Any]: ...
