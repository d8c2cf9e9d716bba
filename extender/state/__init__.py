"""The cluster-state cache: what sources feed and what scheduling reads."""

from extender.model.kinds import object_key
from extender.state.inuse import InFlight
from extender.state.store import ClusterState

__all__ = ["ClusterState", "InFlight", "object_key"]
