"""DeviceTaintRules through the Kubernetes source: watched where served, empty where not."""

from __future__ import annotations

import asyncio

import pytest

from extender.kube.client import RawClient
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


async def test_a_cluster_that_does_not_serve_the_rules_api_is_ready_without_them() -> None:
    with ApiServer(bookmark_interval=0.2, served={"devicetaintrules": ()}) as server:
        server.store.seed(RULE, drain_rule("gpu-0"))  # stored, but no version serves it
        state = ClusterState()
        async with running(RawClient(server.api_client(), request_timeout=5.0), state):
            await eventually(lambda: state.synced, what="all kinds synced")
            assert state.counts()["DeviceTaintRule"] == 0
        assert not [c for c in server.calls if c.resource == "devicetaintrules"]


@pytest.mark.parametrize("version", ["v1beta2", "v1alpha3"])
async def test_rules_are_read_at_the_newest_version_the_cluster_serves(version: str) -> None:
    # Kubernetes 1.36 serves DeviceTaintRules at v1beta2 (when turned on), 1.35 at v1alpha3.
    with ApiServer(bookmark_interval=0.2, served={"devicetaintrules": (version, "v1alpha3")}) as server:
        server.store.seed(BY_KIND["ResourceSlice"], objects.resource_slice("node-a"))
        server.store.seed(RULE, drain_rule("gpu-0"))
        state = ClusterState()
        async with running(RawClient(server.api_client(), request_timeout=5.0), state):
            await eventually(lambda: tainted_devices(state) == {"gpu-0"}, what="the rule's taint")
            assert state.taint_rules["drain"].raw["apiVersion"] == f"resource.k8s.io/{version}"
            await asyncio.to_thread(server.store.delete, RULE, "", "drain")
            await eventually(lambda: not tainted_devices(state), what="the taint to go with the rule")
