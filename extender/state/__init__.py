"""The cluster-state cache: what sources feed and what scheduling reads."""

from extender.state.inuse import InFlight
from extender.state.store import KINDS, ClusterState, object_key

__all__ = ["KINDS", "ClusterState", "InFlight", "object_key"]
