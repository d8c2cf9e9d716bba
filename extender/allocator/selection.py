"""Whether a device may serve a request: CEL selectors of class and request, node; and
which picks of a ``matchAttribute`` request cannot lead to a result (:class:`MatchPruner`).

Upstream: isSelectable and selectorsMatch in structured/internal/*/allocator_*.go of
k8s.io/dynamic-resource-allocation (their error texts, and CEL errors fatal for the claim).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from extender.allocator.constraints import ConstraintState, MatchAttribute
from extender.allocator.outcome import AllocationError
from extender.allocator.pools import Candidate, device_matches_node
from extender.allocator.requests import RequestData
from extender.allocator.state import AllocatedState
from extender.cel import CelCompileError, CelRuntimeError, Checkpoint, DeviceInput, EvaluationInterrupted
from extender.cel.device import PlainDevice
from extender.model import AttributeValue, Device, DeviceID, Node
from extender.model.features import Features

if TYPE_CHECKING:
    from extender.cel.environment import DerivedExpression, Environment, Selector

T = TypeVar("T")


class SelectorCache:
    """Compiled selectors and derived attribute expressions by expression for the allocator
    object's lifetime.

    Compile errors are cached too; they are raised (with their owner) only when a device is
    actually evaluated, as upstream does.
    """

    def __init__(self, cel: Environment) -> None:
        self._cel = cel
        self._compiled: dict[str, Selector | CelCompileError] = {}
        self._derived: dict[str, DerivedExpression | CelCompileError] = {}

    def derived(
        self, expression: str, checkpoint: Checkpoint | None = None
    ) -> DerivedExpression | CelCompileError:
        compiled = self._derived.get(expression)
        if compiled is None:
            compiled = _compiled(self._cel.compile_derived, expression, checkpoint)
            self._derived[expression] = compiled
        return compiled

    def get(self, expression: str, checkpoint: Checkpoint | None = None) -> Selector | CelCompileError:
        compiled = self._compiled.get(expression)
        if compiled is None:
            compiled = _compiled(self._cel.compile_selector, expression, checkpoint)
            self._compiled[expression] = compiled
        return compiled


def _compiled(
    compile_: Callable[[str, Checkpoint | None], T], expression: str, checkpoint: Checkpoint | None
) -> T | CelCompileError:
    """The compiled expression, or its compile error (kept like a result, see SelectorCache)."""
    try:
        return compile_(expression, checkpoint)
    except CelCompileError as exc:
        return exc


# Where a device's stand-in for the stable allocator's selectors is kept in its CEL memo (which
# devices alike to CEL share, so they share the stand-in too).
_STABLE_INPUT_KEY = ("allocator", "stable input")


def cel_input(device: Device, hide_multiple: bool) -> DeviceInput:
    """What selectors see of ``device``. The stable allocator gives CEL the driver, attributes
    and capacity only, so ``device.allowMultipleAllocations`` reads false there whatever the
    device says (allocator_stable.go, isSelectable, v0.37.2); the other variants pass it on."""
    if not (hide_multiple and device.allow_multiple_allocations):
        return device
    stand_in = device.cel_memo.get(_STABLE_INPUT_KEY)
    if stand_in is None:
        stand_in = device.cel_memo[_STABLE_INPUT_KEY] = PlainDevice(
            device.driver, device.attributes, device.capacity, allow_multiple_allocations=False
        )
    return stand_in


def selectors_match(
    cache: SelectorCache,
    owner: str,
    expressions: Sequence[str],
    device: Device,
    hide_multiple: bool = False,
    checkpoint: Checkpoint | None = None,
) -> bool:
    """All selectors true, evaluated in order up to the first false; CEL failures are fatal.
    ``hide_multiple``: the stable allocator's view (:func:`cel_input`).

    ``checkpoint`` runs inside long evaluations (the search's deadline and turns); a deadline
    passed there is a timeout, as between search steps."""
    seen = cel_input(device, hide_multiple) if expressions else device
    for i, expression in enumerate(expressions):
        try:
            compiled = cache.get(expression, checkpoint)
        except EvaluationInterrupted as exc:  # the deadline passed while it compiled
            raise AllocationError(exc.message, "timeout") from None
        if isinstance(compiled, CelCompileError):
            message = compiled.message
            if expression not in message:
                # The reason must name the expression: some engines' messages quote it, some not.
                message = f"{message} (expression: {expression})"
            raise AllocationError(f"{owner}: selector #{i}: CEL compile error: {message}")
        try:
            if not compiled.matches(seen, checkpoint):
                return False
        except EvaluationInterrupted as exc:
            raise AllocationError(exc.message, "timeout") from None
        except CelRuntimeError as exc:
            raise AllocationError(
                f"{owner}: selector #{i} on device {'/'.join(device.id)}: CEL runtime error: {exc.message}"
            ) from None
    return True


def derived_attribute(
    cache: SelectorCache,
    data: RequestData,
    name: str,
    device: Device,
    checkpoint: Checkpoint | None = None,
) -> AttributeValue:
    """The value of ``data``'s derived attribute ``name`` for ``device`` (upstream
    lookupAttribute): evaluated once per device and expression (the device's CEL memo), and only
    where a constraint of the request asks, after the device passed the request's selectors.
    A compile or runtime error is fatal for the claims, as upstream aborts the allocation; the
    reason names the claim, the request, the attribute and the expression."""
    expression = data.derived[name]
    owner = f"claim {data.claim_key}, request {data.result_name}"
    try:
        compiled = cache.derived(expression, checkpoint)
        if isinstance(compiled, CelCompileError):
            raise AllocationError(
                f"{owner}: compile derived attribute {name} failed: {compiled.message} "
                f"(expression: {expression})"
            )
        return compiled.value(device, checkpoint)
    except EvaluationInterrupted as exc:  # the deadline passed while it compiled or ran
        raise AllocationError(exc.message, "timeout") from None
    except CelRuntimeError as exc:
        raise AllocationError(
            f"{owner}: evaluate derived attribute {name} on device {'/'.join(device.id)} failed: "
            f"{exc.message} (expression: {expression})"
        ) from None


def node_allows(node: Node | None, candidate: Candidate) -> bool:
    """Per-device node selection only; slice-level selection was settled when gathering pools."""
    if not candidate.slice.per_device_node_selection:
        return True
    return device_matches_node(node, candidate.device)


# Skipping picks whose search subtree is known to fail, with the search's results unchanged.
#
# A request for k devices bound by ``matchAttribute`` constraints can only be completed by
# devices that agree with the first pick on every matched attribute. When, after picking
# candidate i, fewer than the still needed devices with i's values remain at later indices,
# the subtree under i fails; on a node where every PCIe root offers 3 of the 4 devices a
# claim asks for, the plain search proves that one combination at a time (issue 15,
# docs/performance.md "Cold cache"). Upstream has no such rule
# (structured/internal/experimental/allocator_experimental.go in kubernetes/kubernetes,
# allocateOne): skipping is only done where it cannot change anything the search returns,
# raises or leaves behind, which takes these conditions (checked by :func:`pruner_for` and
# :meth:`MatchPruner.futile`):
#
# - No candidate of the search consumes counters: before 1.37 ``try_pick`` leaves counters
#   consumed on a rejection, as upstream did, so a skipped subtree could change what later
#   picks see (kept for every release: one rule).
# - Every constraint on the request is a scalar ``matchAttribute``: ``distinctAttribute``
#   forgets a request's value on any removal (upstream's lossy bookkeeping), and the list
#   semantics narrow their reference as picks join, so both carry state out of a subtree.
# - The request asks for no capacity while consumable capacity is on: the subtree's
#   ``fits`` may raise for such a request.
# - Every verdict the subtree would compute is already known, and none raised: the subtree
#   evaluates every free later candidate in index order, so a CEL runtime error there would
#   be fatal. Verdicts are computed ahead in that same order and their errors are held back
#   (the search meets them again, from the device's CEL memo, when it gets there); a request
#   with such an error is not pruned before it.
#
# Why the subtree then fails with nothing left behind: its picks are later candidates of the
# same request that are free now (picks only take devices), selected, and pass every
# constraint, hence agree with i's key (:meth:`MatchAttribute.key`); with fewer such devices
# than needed it never completes the request, so it never reaches a later request (no
# ``MAX_SIZE`` from one can become ``FAIL``) and its own ``MAX_SIZE`` check equals the one
# already passed. Without counters, every pick it makes is undone, and scalar
# ``matchAttribute`` keeps its reference while the subtree's root pick holds it. A pick a
# constraint refuses is skipped without ``try_pick``: under these conditions its refusal
# leaves nothing behind either. The test comes before ``fits``, which cannot raise here
# and changes nothing, so the order of the two does not matter.

Key = tuple[tuple[str, Any] | None, ...]


class SearchView(Protocol):
    """What pruning reads of the search (``extender.allocator.search.Search``)."""

    features: Features
    state: AllocatedState
    candidates: list[Candidate]
    allocating: dict[DeviceID, set[int]]
    constraints: list[list[ConstraintState]]

    def verdicts_for(self, data: RequestData) -> list[bool | None]: ...

    def evaluate(self, candidate: Candidate, data: RequestData) -> bool: ...


class MatchPruner:
    """Decides for one exact (sub)request of claim ``c`` whether a pick is futile."""

    def __init__(
        self, search: SearchView, c: int, data: RequestData, constraints: list[MatchAttribute]
    ) -> None:
        self._search = search
        self._c = c
        self._data = data
        self._constraints = constraints
        self._verdicts = search.verdicts_for(data)
        self._keys: list[Key | None] = [None] * len(search.candidates)
        self._known = bytearray(len(search.candidates))  # whether _keys[i] is computed
        # Candidates that are selected and not committed elsewhere, by key: built once every
        # verdict is known, from then on a lookup per pick instead of a scan.
        self._by_key: dict[Key, list[int]] | None = None
        # The highest index whose verdict raised: picks before it are never skipped.
        self._error_at = -1

    def futile(self, index: int, need: int) -> bool:
        """Whether the search may skip candidate ``index``: a constraint refuses it (so would
        ``try_pick``), or picking it leaves fewer than ``need`` later devices that could join
        it, with every verdict the search would compute after it known and clean."""
        device = self._search.candidates[index].device
        for constraint in self._constraints:
            if not constraint.admits(device):
                return True
        if self._error_at > index:
            return False
        key = self._key(index)
        by_key = self._by_key
        if by_key is None:
            return self._scan(index, key, need)
        if key is None:
            return True
        later = by_key.get(key)
        if later is None:
            return True
        found = 0
        for i in range(bisect_right(later, index), len(later)):
            if self._free(later[i]):
                found += 1
                if found >= need:
                    return False
        return True

    def _scan(self, index: int, key: Key | None, need: int) -> bool:
        """Walk the later candidates as the search would, up to ``need`` that could join."""
        found = 0
        for j in range(index + 1, len(self._search.candidates)):
            if not self._free(j):
                continue
            verdict = self._verdict(j)
            if verdict is None:
                return False
            if verdict and key is not None and self._key(j) == key:
                found += 1
                if found >= need:
                    return False
        self._index()
        return True

    def _index(self) -> None:
        committed = self._search.state.allocated_devices
        candidates = self._search.candidates
        by_key: dict[Key, list[int]] = {}
        for j in range(len(candidates)):
            if not self._data.admin and candidates[j].device.id in committed:
                continue
            key = self._key(j) if self._verdict(j) else None
            if key is not None:
                by_key.setdefault(key, []).append(j)
        self._by_key = by_key

    def _free(self, index: int) -> bool:
        """The search's own test for a candidate it may try (``Search._visit_exact``)."""
        search = self._search
        dev_id = search.candidates[index].device.id
        if self._data.admin:
            return self._c not in search.allocating.get(dev_id, ())
        return dev_id not in search.state.allocated_devices and not search.allocating.get(dev_id)

    def _verdict(self, index: int) -> bool | None:
        """The request's verdict on a candidate, computed if need be; None if it raised."""
        verdict = self._verdicts[index]
        if verdict is None:
            search = self._search
            try:
                verdict = self._verdicts[index] = search.evaluate(search.candidates[index], self._data)
            except AllocationError:
                self._error_at = max(self._error_at, index)
                return None
        return verdict

    def _key(self, index: int) -> Key | None:
        if self._known[index]:
            return self._keys[index]
        device = self._search.candidates[index].device
        parts = tuple(constraint.key(device) for constraint in self._constraints)
        key = self._keys[index] = None if None in parts else parts
        self._known[index] = 1
        return key


def pruner_for(search: SearchView, c: int, data: RequestData) -> MatchPruner | None:
    """A pruner for ``data`` when the conditions in this module's docstring allow one."""
    if not data.constraints or (search.features.consumable_capacity and data.exact.capacity_requests):
        return None
    if data.derived:
        return None  # its constraints may read values only a CEL evaluation gives
    constraints: list[MatchAttribute] = []
    for i in data.constraints:
        state = search.constraints[c][i]
        if type(state) is not MatchAttribute:
            return None
        constraints.append(state)
    if any(candidate.device.consumes_counters for candidate in search.candidates):
        return None
    return MatchPruner(search, c, data, constraints)
