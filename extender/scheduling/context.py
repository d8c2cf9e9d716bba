"""Everything one pod's decisions need, shared by filter, prioritize, bind and preempt."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from cachetools import TTLCache

from extender.allocator import AllocatedState, Allocator, Features
from extender.binder import Binder
from extender.config import Config
from extender.metrics import Metrics
from extender.model import AllocationResult
from extender.state import ClusterState
from extender.state.pods import PodInfo


@dataclass(frozen=True, slots=True)
class Remembered:
    """A filter decision kept for bind: valid only while the state epoch is unchanged."""

    epoch: int
    claim_uids: tuple[str, ...]
    results: tuple[AllocationResult, ...]


@dataclass
class SchedulingContext:
    config: Config
    state: ClusterState
    binder: Binder
    metrics: Metrics
    features: Features = field(init=False)
    # (pod uid, node) -> filter result. Invalidation: TTL, an epoch mismatch, and a successful
    # bind of the pod (which drops its entries).
    remembered: TTLCache[tuple[str, str], Remembered] = field(init=False)
    # Pods whose bind is running: a concurrent duplicate bind is refused, not interleaved.
    binding: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.features = Features.from_gate_names(self.config.enabled_gates)
        self.remembered = TTLCache(maxsize=200_000, ttl=self.config.result_ttl_s)

    def handles(self, pod: PodInfo) -> bool:
        """Pods of another scheduler pass untouched; a pod without schedulerName counts as ours."""
        return pod.scheduler_name is None or pod.scheduler_name in self.config.scheduler_names

    def allocated_state(self) -> AllocatedState:
        """The live in-use sets (committed + in flight); read-only for the allocator."""
        inuse = self.state.inuse
        return AllocatedState(
            allocated_devices=inuse.devices,
            allocated_shared=inuse.shared,
            aggregated_capacity=inuse.capacity,
        )

    def allocator(self, allocated: AllocatedState | None = None) -> Allocator:
        deadline = time.monotonic() + self.config.filter_timeout_s
        return Allocator(
            self.features,
            self.allocated_state() if allocated is None else allocated,
            self.state.classes,
            self.state.slices,
            deadline=deadline,
        )

    def forget_pod(self, pod_uid: str) -> None:
        for key in [k for k in self.remembered if k[0] == pod_uid]:
            self.remembered.pop(key, None)
