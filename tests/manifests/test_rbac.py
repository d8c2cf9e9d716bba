"""The extender's RBAC grants exactly the API calls its code makes — no call denied, no grant unused.

The calls are not listed by hand: the real source, binder, leader elector and event recorder run
their paths (including conflict retries, rollback and lease release) against the test API server,
which records every request.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest

from extender.kube.binder import KubeBinder
from extender.kube.client import RawClient
from extender.kube.events import REASON_BIND_FAILED, EventRecorder
from extender.kube.leader import LeaderElector
from extender.kube.source import KubeSource
from extender.model import parse_resource_claim
from extender.model.refs import PodRef
from extender.state import ClusterState
from tests.apiserver.resources import BY_KIND, RESOURCE_TYPES
from tests.apiserver.server import ApiServer
from tests.kube import objects
from tests.manifests.loader import one

GROUP_OF = {t.plural: t.group for t in RESOURCE_TYPES}
Grant = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)
# Kubernetes >= 1.36 also authorizes status.allocation / status.reservedFor writes against this
# synthetic subresource; the test server does not model that check, so it is derived here.
SYNTHETIC = {("resource.k8s.io", "resourceclaims/status", v): ("resource.k8s.io", "resourceclaims/binding", v)
             for v in ("update", "patch")}


async def _exercise(server: ApiServer) -> None:
    client = RawClient(server.api_client())
    state = ClusterState()
    source = asyncio.create_task(KubeSource(client, state).run())
    while not state.synced:
        await asyncio.sleep(0.02)
    source.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await source

    store = server.store
    raw = store.seed(BY_KIND["ResourceClaim"], objects.claim("c"))
    pod_obj = store.create(BY_KIND["Pod"], "default", objects.pod("p", claim_name="c"))
    pod = PodRef("default", "p", pod_obj["metadata"]["uid"])
    binder = KubeBinder(client, retry_delay=0.001)
    server.faults.fail("update", "resourceclaims", 409, subresource="status")  # forces the re-read
    written = await binder.write_claim(parse_resource_claim(raw), objects.allocation("n"), pod)
    await binder.bind_pod(pod, "n")
    await binder.bind_pod(pod, "n")  # conflict → reads the pod to see it is bound there already
    await binder.release_claim(parse_resource_claim(written), pod, deallocate=True)
    # DRA-backed extended resources: the claim is created (after a lookup), named in the pod's
    # status, and deleted again (finalizer first) when a bind is rolled back.
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": pod.uid, "controller": True}
    body = {**objects.claim("unused"), "metadata": {
        "generateName": "p-extended-resources-", "namespace": "default", "ownerReferences": [owner],
        "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"}}}
    extended = await binder.create_extended_claim(body, pod)
    await binder.write_claim(parse_resource_claim(extended), objects.allocation("n", "gpu-1"), pod)
    mapping = {"containerName": "main", "resourceName": "example.com/gpu", "requestName": "gpu"}
    await binder.patch_pod_status(pod, {"extendedResourceClaimStatus": {
        "resourceClaimName": extended["metadata"]["name"], "requestMappings": [mapping]}})
    await binder.delete_extended_claims(pod)

    recorder = EventRecorder(client, instance="test")
    recorder.warn(pod, REASON_BIND_FAILED, "example")
    await recorder.flush()

    elector = LeaderElector(client, name="dra-extender", namespace="dra-system", lease_duration=2,
                            renew_deadline=1.5, retry_period=0.1)
    campaign = asyncio.create_task(elector.run())
    while not elector.is_leader():
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)  # a few renewals
    campaign.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await campaign  # releases the lease


@pytest.fixture(scope="module")
def calls() -> Iterator[list]:
    with ApiServer() as server:
        asyncio.run(_exercise(server))
        yield list(server.calls)


def _used(calls: list, namespaced_leases: bool) -> set[Grant]:
    out = set()
    for call in calls:
        if (call.resource == "leases") != namespaced_leases:
            continue
        resource = f"{call.resource}/{call.subresource}" if call.subresource else call.resource
        out.add((GROUP_OF[call.resource], resource, call.verb))
    return out


def _granted(rules: list[dict]) -> set[Grant]:
    return {(group, resource, verb) for rule in rules for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_cluster_role_is_exactly_what_the_code_uses(calls: list) -> None:
    used = _used(calls, namespaced_leases=False)
    required = used | {SYNTHETIC[g] for g in used if g in SYNTHETIC}
    rules = one("ClusterRole", "dra-extender")["rules"]
    assert not any("resourceNames" in rule for rule in rules)
    granted = _granted(rules)
    assert required - granted == set(), "calls the ClusterRole does not allow"
    assert granted - required == set(), "grants no code path uses"


def test_lease_role_is_namespaced_and_limited_to_our_lease(calls: list) -> None:
    lease_calls = [c for c in calls if c.resource == "leases"]
    role = one("Role", "dra-extender-leader-election")
    assert {c.namespace for c in lease_calls} == {role["metadata"]["namespace"]}
    for call in lease_calls:
        allowed = [rule for rule in role["rules"] if call.verb in rule["verbs"]
                   and (call.name is None or call.name in rule.get("resourceNames", [call.name]))]
        assert allowed, f"{call.verb} lease {call.name} is not allowed"
    assert _granted(role["rules"]) == _used(calls, namespaced_leases=True)
    assert {c.verb for c in lease_calls} == {"get", "create", "update"}


def test_role_bindings_point_at_the_service_account_the_deployment_uses() -> None:
    account = one("Deployment", "dra-extender")["spec"]["template"]["spec"]["serviceAccountName"]
    bindings = (("ClusterRoleBinding", "dra-extender"), ("RoleBinding", "dra-extender-leader-election"))
    for kind, name in bindings:
        binding = one(kind, name)
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "dra-system"}]
        assert binding["roleRef"]["name"] == name
    assert one("ServiceAccount", account)
