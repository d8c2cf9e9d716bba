"""The resourceclaim controller's part in the test API server: what happens to claims when pods go."""

from __future__ import annotations

import pytest

from tests.apiserver.controller import DELETE_PROTECTION_FINALIZER, sync_claims
from tests.apiserver.resources import BY_KIND
from tests.apiserver.store import ApiError, Store
from tests.kube import objects

CLAIM, POD = BY_KIND["ResourceClaim"], BY_KIND["Pod"]


def reserved_claim(store: Store, name: str, *pods: dict) -> dict:
    claim = objects.claim(name)
    claim["metadata"]["finalizers"] = [DELETE_PROTECTION_FINALIZER]
    claim["status"] = {
        "allocation": objects.allocation("n"),
        "reservedFor": [{"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
                        for p in pods],
    }
    return store.seed(CLAIM, claim)


def test_a_gone_pod_loses_its_reservations_and_a_claim_nobody_uses_is_deallocated() -> None:
    store = Store()
    a, b = (store.seed(POD, objects.pod(n, claim_name="shared")) for n in ("a", "b"))
    reserved_claim(store, "shared", a, b)
    reserved_claim(store, "alone", a)
    assert sync_claims(store) == 0  # everyone still there
    store.delete(POD, "default", "a")
    assert sync_claims(store) == 2
    shared, alone = store.get(CLAIM, "default", "shared"), store.get(CLAIM, "default", "alone")
    assert [r["name"] for r in shared["status"]["reservedFor"]] == ["b"] and shared["status"]["allocation"]
    assert "status" not in alone and "finalizers" not in alone["metadata"]


def test_a_deleted_claim_waits_for_its_consumers_then_goes() -> None:
    store = Store()
    pod = store.seed(POD, objects.pod("a", claim_name="c"))
    reserved_claim(store, "c", pod)
    store.delete(CLAIM, "default", "c")
    assert sync_claims(store) == 0
    assert store.get(CLAIM, "default", "c")["metadata"]["deletionTimestamp"]
    store.delete(POD, "default", "a")
    assert sync_claims(store) == 1
    with pytest.raises(ApiError, match="not found"):  # it went with its last consumer
        store.get(CLAIM, "default", "c")
