"""DeviceTaintRules through the Kubernetes source: watched where served, empty where not."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from extender.kube.client import RawClient
from extender.kube.source import KINDS
from extender.state import ClusterState
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer
from tests.kube import objects
from tests.kube.conftest import eventually
from tests.kube.test_source import running

pytestmark = pytest.mark.anyio

RULE = BY_KIND["DeviceTaintRule"]


def drain_rule(device: str) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": "drain"},
            "spec": {"deviceSelector": {"device": device},
                     "taint": {"key": "maintenance", "effect": "NoExecute"}}}


def tainted_devices(state: ClusterState) -> set[str]:
    return {d.name for rs in state.slices.by_name.values() for d in rs.devices if d.taints}


async def test_a_watched_rule_taints_its_device_until_it_is_deleted(apiserver: ApiServer,
                                                                     client: RawClient) -> None:
    apiserver.store.seed(BY_KIND["ResourceSlice"], objects.resource_slice("node-a"))
    apiserver.store.seed(RULE, drain_rule("gpu-0"))
    state = ClusterState()
    async with running(client, state):
        await eventually(lambda: state.synced, what="all kinds synced")
        await eventually(lambda: tainted_devices(state) == {"gpu-0"}, what="the rule's taint")
        await asyncio.to_thread(apiserver.store.delete, RULE, "", "drain")
        await eventually(lambda: not tainted_devices(state), what="the taint to go with the rule")


async def test_a_cluster_that_does_not_serve_the_rules_api_is_ready_without_them(
    apiserver: ApiServer, client: RawClient,
) -> None:
    # An API version this server does not serve stands for a cluster with the rules API off.
    unserved = tuple(
        dataclasses.replace(k, path="/apis/resource.k8s.io/v1alpha3/devicetaintrules")
        if k.name == "DeviceTaintRule" else k
        for k in KINDS
    )
    state = ClusterState()
    async with running(client, state, unserved):
        await eventually(lambda: state.synced, what="all kinds synced")
        assert state.counts()["DeviceTaintRule"] == 0
