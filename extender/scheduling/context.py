"""The wiring every verb is handed: configuration, cluster state, binder, metrics, the
allocator factory, the clock and the scheduler's memory.

Nothing here changes while the extender serves: what the scheduler learns between verbs is in
``memory`` (``SchedulerMemory``), and changes only through its methods. The one exception comes
before anything is decided: with --kube and no --kubernetes-version, an API server that did not
answer /version at start gives its release later (``use_release``), before the cache fills.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from extender.allocator import AllocatedState, Allocator, Features
from extender.cel.environment import Environment
from extender.config import Config
from extender.metrics import Metrics
from extender.model.refs import PodRef
from extender.scheduling.binder import Binder
from extender.scheduling.memory import SchedulerMemory
from extender.scheduling.placement.profiles import NodeProfiles
from extender.scheduling.preemption.book import EvictionBook
from extender.scheduling.retry import RetryBook
from extender.scheduling.settle import Handover, Releases, Settler
from extender.scheduling.turns import pause
from extender.state import ClusterState


class PodEvents(Protocol):
    """Where a user-visible reason goes (Kubernetes Events on the pod with --kube)."""

    def bind_failed(self, pod: PodRef, message: str) -> object: ...

    def no_node_fits(self, pod: PodRef, message: str) -> object: ...


@dataclass
class SchedulingContext:
    config: Config
    state: ClusterState
    binder: Binder
    metrics: Metrics
    cel: Environment  # compiles the selectors of every allocator made here
    # With leader election: only the leader commits binds and reports ready.
    is_leader: Callable[[], bool] | None = None
    # With --kube --no-leader-elect: whether the kube-scheduler beside this replica holds its
    # Lease, which is what dra_extender_leader reports then (extender/kube/scheduler_lease.py).
    scheduler_leader: Callable[[], bool] | None = None
    # The current holding of the Lease that decides which replica schedules: kube-scheduler's
    # (--scheduler-lease, whoever holds it; None: not read lately) or this extender's own
    # (--leader-elect; None: not leading). A new one is a handover: allocations wait (``handover``).
    lease_term: Callable[[], str | None] | None = None
    # With --kube: bind failures and "no node fits" become Events on the pod (rate-limited).
    events: PodEvents | None = None
    # With --kube: pods turned away, for kube-scheduler to be told when to retry them.
    retry: RetryBook | None = None
    # With --preemption=evict: the pods waiting to preempt and the holds of our evictions.
    evictions: EvictionBook | None = None
    # What memory's TTLs are measured with (expected placements, remembered filter results,
    # deleted claims). The allocator's deadline and in-flight entries use time.monotonic, which
    # the allocator and the state read themselves.
    clock: Callable[[], float] = time.monotonic
    features: Features = field(init=False)
    memory: SchedulerMemory = field(init=False)
    # Claim writes and Bindings that outlived their bind, followed until their fate is known.
    settler: Settler = field(init=False)
    # Stale-claim releases under way (scheduling/stale.py).
    releases: Releases = field(init=False)
    # What a replica taking over waits for before it allocates (settle.Handover).
    handover: Handover = field(init=False)
    # Each node's devices as the compact score policy reads them (scheduling/placement).
    placement: NodeProfiles = field(init=False)

    def __post_init__(self) -> None:
        self.features = self.config.feature_gates
        self.memory = SchedulerMemory(self.state, self.config.result_ttl_s, self.clock)
        self.placement = NodeProfiles(self.state)
        bind_timeout = self.config.bind_timeout_s
        self.settler = Settler(
            self.state, self.binder,
            write_timeout_s=bind_timeout, readback_s=min(2.0, max(0.1, bind_timeout / 2)),
            fence_after_s=self.config.fence_after_s,
        )
        self.releases = Releases()
        self.handover = Handover(
            self.state, self.binder, term=self.lease_term, leading=self.scheduler_leader or self.is_leader,
            quiet_s=bind_timeout, give_up_s=self.config.fence_after_s,
        )

    async def close(self) -> None:
        """Stop the background work of scheduling (the app's shutdown): nothing outlives the app."""
        await self.releases.close()
        await self.handover.close()
        await self.settler.close()

    def use_release(self, config: Config) -> None:
        """``config`` (the same, with the release the API server named after start) in force
        from now on, in the cache too; only before the cache holds anything, so that no object
        was parsed and no decision taken under the gates it replaces."""
        self.state.use_features(config.feature_gates)
        self.config = config
        self.features = config.feature_gates

    @property
    def leading(self) -> bool:
        return self.is_leader is None or self.is_leader()

    def reports_leader(self) -> bool:
        """dra_extender_leader: this replica's scheduler holds its Lease, else whether it leads."""
        return self.scheduler_leader() if self.scheduler_leader is not None else self.leading

    def allocated_state(self) -> AllocatedState:
        """The live in-use sets (committed + in flight); read-only for the allocator."""
        inuse = self.state.inuse
        return AllocatedState(
            allocated_devices=inuse.devices,
            allocated_shared=inuse.shared,
            aggregated_capacity=inuse.capacity,
        )

    def deadline(self) -> float:
        """When allocation work of a request starting now must stop (one budget per request)."""
        return time.monotonic() + self.config.filter_timeout_s

    def allocator(self, allocated: AllocatedState | None = None, deadline: float | None = None) -> Allocator:
        """An allocator over ``allocated`` (default: the live in-use sets) that stops at
        ``deadline`` (default: a fresh request budget) and takes turns with other work."""
        return Allocator(
            self.features,
            self.allocated_state() if allocated is None else allocated,
            self.state.classes,
            self.state.slices,
            self.cel,
            deadline=self.deadline() if deadline is None else deadline,
            pause=pause,
            node_timeout=self.config.node_timeout_s,
            gathered=self.state.gathered_pools(),
        )
