"""An alike node's results, built when first read, and what any node's results take.

A filter's first lap over a big cluster meets thousands of nodes alike (shapes.py) and keeps a
verdict for each, but reads the results of few: the nodes prioritize weighs against nominated
pods' devices and the one bind commits. Building every node's results was a third of such a
filter's CPU (docs/performance.md, "15,000 nodes by simulation"). What each verdict keeps of
them (``Takes``) is read from the answer's picks instead; the results themselves are built, by
the same code as a search's, the first time something reads them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

from extender.allocator.alike.gathered import NodePools
from extender.allocator.alike.shapes import Answer
from extender.allocator.result import Pick, Takes, build_result
from extender.model import AllocationResult, Node, ResourceClaim
from extender.model.features import Features


class AlikeResults(Sequence[AllocationResult]):
    """One result per claim, for ``node`` from an alike node's ``answer``; built on first read."""

    __slots__ = ("_answer", "_built", "_claims", "_features", "_gathered", "_node", "takes")

    def __init__(
        self,
        answer: Answer,
        node: Node,
        claims: Sequence[ResourceClaim],
        gathered: NodePools,
        features: Features,
    ) -> None:
        self._answer = answer
        self._node = node
        self._claims = claims
        self._gathered = gathered
        self._features = features
        self._built: tuple[AllocationResult, ...] | None = None
        # The candidates at the picked indices are this node's devices; the rest is what the
        # searched node's results take, which the shapes match pool by pool and pick by pick.
        candidates = gathered.shape().candidates
        devices = frozenset([candidates[index].device.id for index in answer.indices])
        searched = answer.takes
        self.takes = Takes(devices, searched.drivers, searched.taken, searched.shares)

    def _results(self) -> tuple[AllocationResult, ...]:
        built = self._built
        if built is None:
            answer, features, gathered = self._answer, self._features, self._gathered
            candidates, here = gathered.shape().candidates, gathered.only_here()
            built = self._built = tuple(
                build_result(
                    claim,
                    [Pick(data, candidates[index], None, None) for index, data in answer.picks[c]],
                    answer.configs[c],
                    self._node,
                    features,
                    here,
                )
                for c, claim in enumerate(self._claims)
            )
        return built

    @overload
    def __getitem__(self, index: int) -> AllocationResult: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[AllocationResult, ...]: ...

    def __getitem__(self, index: int | slice) -> AllocationResult | tuple[AllocationResult, ...]:
        return self._results()[index]

    def __len__(self) -> int:
        return len(self._claims)

    def __iter__(self) -> Iterator[AllocationResult]:
        return iter(self._results())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AlikeResults):
            other = other._results()
        return isinstance(other, tuple) and self._results() == other

    def __hash__(self) -> int:
        return hash(self._results())


def takes_of(results: Sequence[AllocationResult]) -> Takes:
    """What ``results`` take; an alike node's read without building them."""
    return results.takes if isinstance(results, AlikeResults) else Takes.of(results)
