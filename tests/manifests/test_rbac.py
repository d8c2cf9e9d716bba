"""The extender's RBAC grants exactly the API calls its code makes — no call denied, no grant unused.

The calls are not listed by hand: the real source, binder and event recorder run their paths
(including conflict retries and rollback) against the test API server, which records every
request. The shipped layout runs the extender with --no-leader-elect (kube-scheduler's own lease
decides which pod schedules), so the extender only reads that Lease, for dra_extender_leader.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest

from extender.cli import _parser, config_from_args
from extender.kube.binder import KubeBinder
from extender.kube.client import RawClient
from extender.kube.events import REASON_BIND_FAILED, EventRecorder
from extender.kube.evict import Evictor
from extender.kube.scheduler_lease import SchedulerLease
from extender.kube.source import KubeSource
from extender.model import parse_resource_claim
from extender.model.refs import PodRef
from extender.state import ClusterState
from tests.apiserver.resources import BY_KIND, RESOURCE_TYPES
from tests.apiserver.server import ApiServer
from tests.kube import objects
from tests.manifests.loader import MANIFESTS, built, container, one

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

    SchedulerLease(client, namespace="dra-system", name="dra-extender-scheduler", hostname="h").read_once()
    # --preemption=evict: a victim evicted through the Eviction API.
    victim = store.create(BY_KIND["Pod"], "default", objects.pod("victim"))
    evictor = Evictor(client, None, None)  # type: ignore[arg-type]
    assert evictor._evict(PodRef("default", "victim", victim["metadata"]["uid"])) == "evicted"

    recorder = EventRecorder(client, instance="test")
    recorder.warn(pod, REASON_BIND_FAILED, "example")
    await recorder.flush()


@pytest.fixture(scope="module")
def calls() -> Iterator[list]:
    with ApiServer() as server:
        asyncio.run(_exercise(server))
        yield list(server.calls)


def _used(calls: list) -> set[Grant]:
    out = set()
    for call in calls:
        resource = f"{call.resource}/{call.subresource}" if call.subresource else call.resource
        out.add((GROUP_OF[call.resource], resource, call.verb))
    return out


def _granted(rules: list[dict]) -> set[Grant]:
    return {(group, resource, verb) for rule in rules for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_cluster_role_is_exactly_what_the_code_uses(calls: list) -> None:
    used = _used([c for c in calls if c.resource != "leases"])  # the Lease: a Role, below
    required = used | {SYNTHETIC[g] for g in used if g in SYNTHETIC}
    rules = one("ClusterRole", "dra-extender")["rules"]
    assert not any("resourceNames" in rule for rule in rules)
    granted = _granted(rules)
    assert required - granted == set(), "calls the ClusterRole does not allow"
    assert granted - required == set(), "grants no code path uses"


def test_the_extender_only_reads_the_schedulers_lease_in_the_shipped_layout(calls: list) -> None:
    objects = built(MANIFESTS)
    args = config_from_args(_parser().parse_args(container(objects, "extender")["args"]))
    assert not args.leader_elect
    namespace, name = args.scheduler_lease.split("/")
    leases = {(c.verb, c.namespace, c.name) for c in calls if c.resource == "leases"}
    assert leases == {("get", namespace, name)}
    reader_name = "dra-extender-scheduler-lease-reader"
    (reader,) = [doc for doc in objects if doc["kind"] == "Role" and doc["metadata"]["name"] == reader_name]
    assert reader["metadata"]["namespace"] == namespace
    assert reader["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                "resourceNames": [name], "verbs": ["get"]}]
    lease_names = {name for doc in objects if doc["kind"] == "Role" for rule in doc["rules"]
                   if "leases" in rule["resources"] for name in rule.get("resourceNames", [])}
    assert lease_names == {"dra-extender-scheduler"}  # kube-scheduler's, and no other


def test_role_bindings_point_at_the_service_account_the_pod_uses() -> None:
    objects = built(MANIFESTS)
    account = one("Deployment", "dra-extender")["spec"]["template"]["spec"]["serviceAccountName"]
    bindings = [doc for doc in objects if doc["kind"] in {"ClusterRoleBinding", "RoleBinding"}]
    assert {(b["kind"], b["roleRef"]["name"]) for b in bindings} == {
        ("ClusterRoleBinding", "dra-extender"),
        ("ClusterRoleBinding", "system:kube-scheduler"),
        ("ClusterRoleBinding", "system:volume-scheduler"),
        ("RoleBinding", "extension-apiserver-authentication-reader"),
        ("RoleBinding", "dra-extender-scheduler-leader-election"),
        ("RoleBinding", "dra-extender-scheduler-lease-reader"),
    }
    for binding in bindings:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "dra-system"}]
    assert one("ServiceAccount", account)
