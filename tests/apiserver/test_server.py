"""The test API server behaves like kube-apiserver where the extender depends on it.

Driven through the official client's typed APIs, so the server is checked against the same
client code the extender's raw requests are built with.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator

import kubernetes
import pytest
from kubernetes.client import ApiException

from extender.kube.client import KubeApiError, RawClient
from tests.apiserver.faults import RandomFaults
from tests.apiserver.patch import PatchError, strategic_merge_patch
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer
from tests.apiserver.store import ApiError
from tests.kube import objects


@pytest.fixture
def server() -> Iterator[ApiServer]:
    with ApiServer(history_size=50, bookmark_interval=0.1) as s:
        yield s


@pytest.fixture
def core(server: ApiServer) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(server.api_client())


@pytest.fixture
def resource(server: ApiServer) -> kubernetes.client.ResourceV1Api:
    return kubernetes.client.ResourceV1Api(server.api_client())


def test_resource_versions_come_from_one_increasing_counter(
        core: kubernetes.client.CoreV1Api, resource: kubernetes.client.ResourceV1Api) -> None:
    a = core.create_node(objects.node("a"))
    c = resource.create_namespaced_resource_claim("default", objects.claim("c"))
    b = core.create_node(objects.node("b"))
    versions = [int(o.metadata.resource_version) for o in (a, c, b)]
    assert versions == sorted(versions) and len(set(versions)) == 3
    listed = core.list_node()
    assert int(listed.metadata.resource_version) == versions[-1]


def test_stale_update_conflicts(core: kubernetes.client.CoreV1Api) -> None:
    node = core.create_node(objects.node("a"))
    core.patch_node("a", {"metadata": {"labels": {"x": "1"}}})
    node.metadata.labels = {"y": "2"}
    with pytest.raises(ApiException) as err:
        core.replace_node("a", node)
    assert err.value.status == 409
    assert core.read_node("a").metadata.labels == {"x": "1"}


def test_status_and_main_resource_are_written_separately(server: ApiServer,
                                                         resource: kubernetes.client.ResourceV1Api) -> None:
    claim = server.store.create(BY_KIND["ResourceClaim"], "default", objects.claim("c"))
    claim["status"] = {"allocation": objects.allocation("n")}
    main = server.store.update(BY_KIND["ResourceClaim"], "default", "c", claim)
    assert "status" not in main  # the main resource ignores status
    written = server.store.update(BY_KIND["ResourceClaim"], "default", "c", claim, "status")
    assert written["status"]["allocation"] == objects.allocation("n")
    other = dict(written, status={"allocation": objects.allocation("m")})
    with pytest.raises(Exception, match="field is immutable"):
        server.store.update(BY_KIND["ResourceClaim"], "default", "c", other, "status")


def test_finalizers_delay_deletion_until_removed(server: ApiServer,
                                                 resource: kubernetes.client.ResourceV1Api) -> None:
    body = objects.claim("c")
    body["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    resource.create_namespaced_resource_claim("default", body)
    resource.delete_namespaced_resource_claim("c", "default")
    marked = resource.read_namespaced_resource_claim("c", "default")
    assert marked.metadata.deletion_timestamp is not None
    resource.patch_namespaced_resource_claim("c", "default", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as err:
        resource.read_namespaced_resource_claim("c", "default")
    assert err.value.status == 404


def test_binding_sets_node_and_rejects_rebinding_and_uid_mismatch(core: kubernetes.client.CoreV1Api) -> None:
    pod = core.create_namespaced_pod("default", objects.pod("p"))
    binding = kubernetes.client.V1Binding(
        api_version="v1", kind="Binding", metadata=kubernetes.client.V1ObjectMeta(name="p", uid="wrong"),
        target=kubernetes.client.V1ObjectReference(kind="Node", name="n1"))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_binding("p", "default", binding)
    assert err.value.status == 409 and "UID in precondition" in err.value.body
    binding.metadata.uid = pod.metadata.uid
    # Like kube-apiserver the server answers a Status, which the typed client cannot read as a Binding
    # (kubernetes-client/python#547); the raw reply is what matters.
    reply = core.create_namespaced_pod_binding("p", "default", binding, _preload_content=False)
    assert reply.status == 201
    assert core.read_namespaced_pod("p", "default").spec.node_name == "n1"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_binding("p", "default", binding)
    assert err.value.status == 409 and "already assigned" in err.value.body


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ({"metadata": {"name": "other"}}, "name in URL does not match"),
        ({"metadata": {}}, "name in URL does not match"),
        ({"metadata": {"name": "p", "namespace": "elsewhere"}}, "namespace of the provided object"),
        ({"apiVersion": "V1"}, "is registered for version"),
        ({"kind": "Pod"}, "a Binding"),
    ],
)
def test_a_binding_not_named_for_its_pod_or_of_another_version_is_refused(
    server: ApiServer, core: kubernetes.client.CoreV1Api, change: dict, refused: str
) -> None:
    """kube-apiserver's checks on a Binding's body; absent kind, apiVersion and namespace are the URL's."""
    core.create_namespaced_pod("default", objects.pod("p"))
    store, pods = server.store, BY_KIND["Pod"]
    with pytest.raises(ApiError) as err:
        store.bind(pods, "default", "p", {"target": {"name": "n1"}, "metadata": {"name": "p"}, **change})
    assert err.value.code == 400 and refused in str(err.value)
    assert "nodeName" not in store.get(pods, "default", "p")["spec"]
    store.bind(pods, "default", "p", {"target": {"name": "n1"}, "metadata": {"name": "p"}})
    assert store.get(pods, "default", "p")["spec"]["nodeName"] == "n1"


def test_strategic_merge_patch_deletes_one_reservation(server: ApiServer,
                                                       resource: kubernetes.client.ResourceV1Api) -> None:
    reserved = [{"resource": "pods", "name": n, "uid": f"uid-{n}"} for n in ("a", "b")]
    claim = objects.claim("c")
    claim["status"] = {"allocation": objects.allocation("n"), "reservedFor": reserved}
    uid = server.store.seed(BY_KIND["ResourceClaim"], claim)["metadata"]["uid"]
    patch = {"metadata": {"uid": uid}, "status": {"reservedFor": [{"$patch": "delete", "uid": "uid-a"}]}}
    patched = resource.patch_namespaced_resource_claim_status("c", "default", patch)
    assert [r.name for r in patched.status.reserved_for] == ["b"]
    with pytest.raises(ApiException) as err:  # the uid in the patch is a precondition
        resource.patch_namespaced_resource_claim_status("c", "default", {"metadata": {"uid": "other"}})
    assert err.value.status == 409


def test_schema_validation_rejects_unknown_and_missing_fields(server: ApiServer) -> None:
    raw = RawClient(server.api_client())  # the typed client would refuse to send these
    bad = objects.claim("c")
    bad["spec"]["devices"]["requests"][0]["exactly"]["count"] = "two"
    with pytest.raises(KubeApiError) as err:
        raw.request("POST", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims", body=bad)
    assert err.value.status == 422 and "'two' is not of type 'integer'" in err.value.message
    bad = objects.node("n")
    bad["spec"] = {"unknownField": True}
    with pytest.raises(KubeApiError, match="'unknownField' was unexpected"):
        raw.request("POST", "/api/v1/nodes", body=bad)
    claim = server.store.create(BY_KIND["ResourceClaim"], "default", objects.claim("c"))
    claim["status"] = {"allocation": {"devices": {"results": [{"request": "gpu"}]}}}
    with pytest.raises(Exception, match="'driver' is a required property"):
        server.store.update(BY_KIND["ResourceClaim"], "default", "c", claim, "status")


def test_watch_streams_changes_and_bookmarks(server: ApiServer, core: kubernetes.client.CoreV1Api) -> None:
    start = core.create_node(objects.node("a")).metadata.resource_version
    seen: list[tuple[str, str]] = []

    def watch() -> None:
        for event in kubernetes.watch.Watch().stream(core.list_node, resource_version=start,
                                                     allow_watch_bookmarks=True, timeout_seconds=1):
            seen.append((event["type"], event["raw_object"]["metadata"].get("name", "")))

    thread = threading.Thread(target=watch)
    thread.start()
    time.sleep(0.2)
    core.create_node(objects.node("b"))
    core.delete_node("a")
    thread.join()
    assert [e for e in seen if e[0] != "BOOKMARK"] == [("ADDED", "b"), ("DELETED", "a")]
    assert ("BOOKMARK", "") in seen


def test_compacted_history_answers_410(server: ApiServer) -> None:
    client = server.api_client()
    core = kubernetes.client.CoreV1Api(client)
    old = core.create_node(objects.node("a")).metadata.resource_version
    core.create_node(objects.node("b"))
    server.store.compact()
    response = core.list_node_with_http_info(resource_version=old, watch=True, timeout_seconds=1,
                                             _preload_content=False)
    body = response.raw_data if hasattr(response, "raw_data") else response.data
    assert b'"code": 410' in body and b'"type": "ERROR"' in body


def test_fault_knobs_fail_and_delay(server: ApiServer, core: kubernetes.client.CoreV1Api) -> None:
    server.faults.fail("list", "nodes", 503, times=2)
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            core.list_node()
        assert err.value.status == 503
    core.list_node()
    server.faults.delay(0.3, "get", "nodes")
    core.create_node(objects.node("a"))
    started = time.monotonic()
    core.read_node("a")
    assert time.monotonic() - started >= 0.3


def test_strategic_merge_rejects_malformed_list_entries() -> None:
    with pytest.raises(PatchError, match="merge key 'uid'"):
        strategic_merge_patch({"status": {"reservedFor": []}}, {"status": {"reservedFor": [{"name": "x"}]}})


def test_reply_faults_carry_the_request_out_then_answer_late_or_not_at_all(server: ApiServer) -> None:
    raw = RawClient(server.api_client(), request_timeout=0.3)
    server.faults.delay_reply(0.2, "create", "nodes")
    started = time.monotonic()
    raw.request("POST", "/api/v1/nodes", body=objects.node("slow"))
    assert time.monotonic() - started >= 0.2
    server.faults.lose_reply("create", "nodes")
    with pytest.raises(KubeApiError) as err:
        raw.request("POST", "/api/v1/nodes", body=objects.node("lost"))
    assert err.value.status == 0  # the connection broke: the client cannot tell what happened
    server.faults.lose_reply("create", "nodes", after=1.0)
    with pytest.raises(KubeApiError, match="timed out"):
        raw.request("POST", "/api/v1/nodes", body=objects.node("held"))
    assert {n["metadata"]["name"] for n in server.store.list(BY_KIND["Node"], None)[0]} == {
        "slow", "lost", "held"
    }
    assert server.faults.fired == 3


def test_a_late_request_is_carried_out_only_if_its_precondition_still_holds(server: ApiServer) -> None:
    raw = RawClient(server.api_client(retries=0), request_timeout=0.1)
    node = server.store.create(BY_KIND["Node"], "", objects.node("a"))
    release = server.faults.hold("update", "nodes")
    stale = {**node, "metadata": {**node["metadata"], "labels": {"late": "yes"}}}
    with pytest.raises(KubeApiError, match="timed out"):
        raw.request("PUT", "/api/v1/nodes/a", body=stale)  # the client gave up; the request waits on
    newer = {**node, "metadata": {**node["metadata"], "labels": {"newer": "yes"}}}
    server.store.update(BY_KIND["Node"], "", "a", newer)
    release.set()
    time.sleep(0.1)
    assert server.store.get(BY_KIND["Node"], "", "a")["metadata"]["labels"] == {"newer": "yes"}  # a 409


def test_stopping_drops_held_requests_instead_of_carrying_them_out() -> None:
    server = ApiServer().start()
    server.faults.hold("create", "nodes")
    raw = RawClient(server.api_client(), request_timeout=5.0)
    failed: list[KubeApiError] = []

    def create() -> None:
        try:
            raw.request("POST", "/api/v1/nodes", body=objects.node("never"))
        except KubeApiError as exc:
            failed.append(exc)

    client = threading.Thread(target=create)
    client.start()
    time.sleep(0.1)
    server.stop()
    client.join(2.0)
    assert not client.is_alive() and failed and server.store.list(BY_KIND["Node"], None)[0] == []


def test_lagging_watch_events_go_out_when_released_and_in_order(server: ApiServer) -> None:
    raw = RawClient(server.api_client())
    start = server.store.create(BY_KIND["Node"], "", objects.node("a"))["metadata"]["resourceVersion"]
    server.lag_watches("nodes")
    for name in ("b", "c", "d"):
        server.store.create(BY_KIND["Node"], "", objects.node(name))
    seen: list[str] = []

    def watch() -> None:
        query = {"resourceVersion": start, "allowWatchBookmarks": "true", "timeoutSeconds": "1"}
        for event in raw.watch("/api/v1/nodes", query, 5):
            seen.append(event["object"]["metadata"].get("name", "bookmark"))

    thread = threading.Thread(target=watch)
    thread.start()
    time.sleep(0.4)
    assert seen == []  # held back, and no bookmark that would skip them
    server.release_watch_events(2)
    time.sleep(0.2)
    assert seen == ["b", "c"]
    server.release_watch_events()
    thread.join()
    assert [n for n in seen if n != "bookmark"] == ["b", "c", "d"]


def test_a_lag_bound_lets_held_events_out_by_themselves(server: ApiServer) -> None:
    raw = RawClient(server.api_client())
    start = server.store.create(BY_KIND["Node"], "", objects.node("first"))["metadata"]["resourceVersion"]
    server.lag_watches("nodes", max_lag=0.3)
    server.store.create(BY_KIND["Node"], "", objects.node("a"))
    stream = raw.watch("/api/v1/nodes", {"resourceVersion": start, "timeoutSeconds": "2"}, 5)
    started = time.monotonic()
    first = next(iter(stream))
    stream.close()
    assert first["object"]["metadata"]["name"] == "a" and time.monotonic() - started >= 0.2


def test_random_faults_strike_only_matching_requests_and_are_counted(server: ApiServer) -> None:
    raw = RawClient(server.api_client())
    faults = RandomFaults(random.Random(1), fail=1.0, code=503)
    server.faults.at_random(faults, "create", "nodes", when=lambda body: body["metadata"]["name"] != "spared")
    with pytest.raises(KubeApiError) as err:
        raw.request("POST", "/api/v1/nodes", body=objects.node("struck"))
    assert err.value.status == 503
    raw.request("POST", "/api/v1/nodes", body=objects.node("spared"))
    raw.request("GET", "/api/v1/nodes")
    assert server.faults.fired == 1


def test_version_and_discovery_as_the_official_client_reads_them() -> None:
    with ApiServer(version="v1.36.2", served={"devicetaintrules": ("v1beta2",)}) as s:
        client = s.api_client()
        assert kubernetes.client.VersionApi(client).get_code().git_version == "v1.36.2"
        v1 = {r.name for r in kubernetes.client.ResourceV1Api(client).get_api_resources().resources}
        assert "resourceclaims" in v1 and "devicetaintrules" not in v1
        raw = RawClient(client)
        assert raw.serves("resource.k8s.io", "v1beta2", "devicetaintrules")
        assert not raw.serves("resource.k8s.io", "v1", "devicetaintrules")
        assert not raw.serves("resource.k8s.io", "v1alpha3", "devicetaintrules")  # no such group version
        with pytest.raises(KubeApiError) as exc:
            raw.request("GET", "/apis/resource.k8s.io/v1/devicetaintrules")
        assert exc.value.not_found
        listed = raw.request("GET", "/apis/resource.k8s.io/v1beta2/devicetaintrules")
        assert listed["apiVersion"] == "resource.k8s.io/v1beta2"


def _eviction(name: str, uid: str | None = None) -> kubernetes.client.V1Eviction:
    options = kubernetes.client.V1DeleteOptions(preconditions=kubernetes.client.V1Preconditions(uid=uid))
    return kubernetes.client.V1Eviction(
        metadata=kubernetes.client.V1ObjectMeta(name=name, namespace="default"), delete_options=options
    )


def test_eviction_honours_the_disruption_budget_and_deletes_gracefully(
        server: ApiServer, core: kubernetes.client.CoreV1Api) -> None:
    store, pods = server.store, BY_KIND["Pod"]
    for name in ("a", "b", "loose"):
        pod = objects.pod(name)
        pod["spec"]["nodeName"] = "n"
        pod["metadata"]["labels"] = {"app": "guarded" if name != "loose" else "loose"}
        store.seed(pods, pod)
    store.seed(BY_KIND["PodDisruptionBudget"], {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        "status": {"disruptionsAllowed": 1, "currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 2},
    })
    with pytest.raises(ApiException) as wrong_uid:
        core.create_namespaced_pod_eviction("a", "default", _eviction("a", uid="not-a"))
    assert wrong_uid.value.status == 409
    core.create_namespaced_pod_eviction("a", "default", _eviction("a"))
    evicted = store.get(pods, "default", "a")
    assert evicted["metadata"]["deletionTimestamp"]  # graceful: its kubelet finishes it
    assert evicted["metadata"]["deletionGracePeriodSeconds"] == 30
    budget = store.get(BY_KIND["PodDisruptionBudget"], "default", "keep")
    assert budget["status"]["disruptionsAllowed"] == 0 and "a" in budget["status"]["disruptedPods"]
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod_eviction("b", "default", _eviction("b"))
    assert refused.value.status == 429
    assert not store.get(pods, "default", "b")["metadata"].get("deletionTimestamp")
    core.create_namespaced_pod_eviction("a", "default", _eviction("a"))  # terminating: no budget check
    core.create_namespaced_pod_eviction("loose", "default", _eviction("loose"))  # no budget selects it
    assert store.get(pods, "default", "loose")["metadata"]["deletionTimestamp"]
    unbound = objects.pod("pending")
    store.seed(pods, unbound)
    core.create_namespaced_pod_eviction("pending", "default", _eviction("pending"))
    with pytest.raises(ApiError):  # an unbound pod goes at once
        store.get(pods, "default", "pending")
