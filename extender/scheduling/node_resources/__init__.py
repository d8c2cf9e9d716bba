"""Devices that use node CPU, memory, hugepages or ephemeral storage (DRANodeAllocatableResources):
what they cost the node, and whether the pod still fits there."""

from extender.scheduling.node_resources.fit import NodeResourcesOutcome, check
from extender.scheduling.node_resources.footprint import sharing_problem

__all__ = ["NodeResourcesOutcome", "check", "sharing_problem"]
