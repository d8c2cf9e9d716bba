"""kube-scheduler's own default scores, as far as they tell nodes apart in the placement stream.

The default profile (kubernetes/kubernetes pkg/scheduler/apis/config/v1/default_plugins.go)
scores with TaintToleration (weight 3), NodeAffinity (2), NodeResourcesFit (1),
PodTopologySpread (2), InterPodAffinity (2), NodeResourcesBalancedAllocation (1) and
ImageLocality (1); VolumeBinding scores only pods with volumes. In the placement stream no node
has taints, no pod has affinity, preferred node affinity or volumes, the pods are bare (no
Service or controller for the system default spreading to select them) and every node holds
the same images, so all of those give every node the same score and cannot change a choice.
What is left, computed here as upstream computes it:

* **NodeResourcesFit**, strategy ``LeastAllocated`` over cpu and memory (weight 1 each): per
  resource ``(allocatable - requested) x 100 / allocatable`` in integers, ``requested``
  including the pod, then the weighted mean (noderesources/least_allocated.go);
* **NodeResourcesBalancedAllocation** over cpu and memory: each resource's requested fraction
  (the pod included, at most 1), and ``(1 - standard deviation) x 100``, which for two
  resources is ``(1 - |f1 - f2| / 2) x 100`` (noderesources/balanced_allocation.go).

Each has weight 1, so a node's in-tree total is their sum (0..200), beside the extender's
``score x 10 x weight`` (the extender's 0..10 scaled to the scheduler's 0..100).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

MAX_NODE_SCORE = 100


class PodRequests(NamedTuple):
    cpu_milli: int
    memory_mi: int


class InTreeScores:
    """Requested CPU and memory per node, and the two scores that follow from them."""

    def __init__(self, allocatable: Mapping[str, tuple[int, int]]) -> None:
        self.allocatable = dict(allocatable)
        self.requested = {name: [0, 0] for name in allocatable}

    def take(self, node: str, pod: PodRequests) -> None:
        self.requested[node][0] += pod.cpu_milli
        self.requested[node][1] += pod.memory_mi

    def release(self, node: str, pod: PodRequests) -> None:
        self.requested[node][0] -= pod.cpu_milli
        self.requested[node][1] -= pod.memory_mi

    def score(self, node: str, pod: PodRequests) -> int:
        """LeastAllocated + BalancedAllocation for ``pod`` on ``node``, both of weight 1."""
        allocatable = self.allocatable[node]
        requested = (self.requested[node][0] + pod.cpu_milli, self.requested[node][1] + pod.memory_mi)
        least = 0
        for have, want in zip(allocatable, requested, strict=True):
            least += (have - want) * MAX_NODE_SCORE // have if want <= have else 0
        least //= 2
        fractions = [min(1.0, want / have) for have, want in zip(allocatable, requested, strict=True)]
        balanced = int((1 - abs(fractions[0] - fractions[1]) / 2) * MAX_NODE_SCORE)
        return least + balanced
