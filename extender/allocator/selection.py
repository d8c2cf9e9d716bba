"""Whether a device may serve a request: CEL selectors of class and request, node.

Upstream: isSelectable and selectorsMatch in structured/internal/*/allocator_*.go of
k8s.io/dynamic-resource-allocation (their error texts, and CEL errors fatal for the claim).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from extender.allocator.errors import AllocationError
from extender.allocator.pools import Candidate, device_matches_node
from extender.cel import CelCompileError, CelRuntimeError
from extender.model import Device, Node

if TYPE_CHECKING:
    from extender.cel.environment import Environment, Selector


class SelectorCache:
    """Compiled selectors by expression for the allocator object's lifetime.

    Compile errors are cached too; they are raised (with their owner) only when a device is
    actually evaluated, as upstream does.
    """

    def __init__(self, cel: Environment) -> None:
        self._cel = cel
        self._compiled: dict[str, Selector | CelCompileError] = {}

    def get(self, expression: str) -> Selector | CelCompileError:
        compiled = self._compiled.get(expression)
        if compiled is None:
            try:
                compiled = self._cel.compile_selector(expression)
            except CelCompileError as exc:
                compiled = exc
            self._compiled[expression] = compiled
        return compiled


def selectors_match(cache: SelectorCache, owner: str, expressions: Sequence[str], device: Device) -> bool:
    """All selectors true, evaluated in order up to the first false; CEL failures are fatal."""
    for i, expression in enumerate(expressions):
        compiled = cache.get(expression)
        if isinstance(compiled, CelCompileError):
            message = compiled.message
            if expression not in message:
                # The reason must name the expression: some engines' messages quote it, some not.
                message = f"{message} (expression: {expression})"
            raise AllocationError(f"{owner}: selector #{i}: CEL compile error: {message}")
        try:
            if not compiled.matches(device):
                return False
        except CelRuntimeError as exc:
            raise AllocationError(
                f"{owner}: selector #{i} on device {'/'.join(device.id)}: CEL runtime error: {exc.message}"
            ) from None
    return True


def node_allows(node: Node | None, candidate: Candidate) -> bool:
    """Per-device node selection only; slice-level selection was settled when gathering pools."""
    if not candidate.slice.per_device_node_selection:
        return True
    return device_matches_node(node, candidate.device)
