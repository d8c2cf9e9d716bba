"""A local cluster loaded from objects, for the tests of local mode's parts."""

from __future__ import annotations

from typing import Any

from extender.local.cluster import LocalCluster
from extender.state import ClusterState


def loaded(*objs: dict[str, Any]) -> LocalCluster:
    local = LocalCluster(ClusterState())
    local.load((f"object {i}", obj) for i, obj in enumerate(objs))
    return local
