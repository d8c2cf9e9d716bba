"""dra_extender_leader under --no-leader-elect: whether the kube-scheduler beside this replica
holds its Lease (holderIdentity ``<hostname>_<uuid>``), read from the API server."""

from __future__ import annotations

from typing import Any

import pytest

from extender.cli import _parser, config_from_args
from extender.config import ConfigError
from extender.kube.client import RawClient
from extender.kube.scheduler_lease import SchedulerLease, holder_host
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer

LEASE = BY_KIND["Lease"]


def lease(holder: str) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "dra-extender-scheduler", "namespace": "dra-system"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}}


def watcher(client: RawClient, now: list[float], hostname: str = "dra-extender-7d9f-abcde") -> SchedulerLease:
    return SchedulerLease(client, namespace="dra-system", name="dra-extender-scheduler", hostname=hostname,
                          clock=lambda: now[0])


def test_holder_host_is_the_part_before_the_uuid() -> None:
    holder = "dra-extender-7d9f-abcde_0b7c4c1e-3a0f-4d2c-9f0e-1d2c3b4a5f6e"
    assert holder_host(holder) == "dra-extender-7d9f-abcde"
    assert holder_host("with_underscore_uuid") == "with_underscore"
    assert holder_host("plain") == "plain"


def test_holds_only_while_this_pods_scheduler_is_the_holder(apiserver: ApiServer, client: RawClient) -> None:
    now = [0.0]
    mine = watcher(client, now)
    assert not mine.holds()  # nothing read yet
    mine.read_once()
    assert not mine.holds()  # no Lease yet: no kube-scheduler has led
    apiserver.store.seed(LEASE, lease("dra-extender-7d9f-abcde_0b7c4c1e"))
    mine.read_once()
    assert mine.holds()
    other = watcher(client, now, hostname="dra-extender-7d9f-fghij")
    other.read_once()
    assert not other.holds()
    apiserver.store.update(LEASE, "dra-system", "dra-extender-scheduler", lease("dra-extender-7d9f-fghij_77"))
    mine.read_once()
    other.read_once()
    assert not mine.holds() and other.holds()


def test_an_answer_gone_stale_is_not_leadership(apiserver: ApiServer, client: RawClient) -> None:
    now = [0.0]
    mine = watcher(client, now)
    apiserver.store.seed(LEASE, lease("dra-extender-7d9f-abcde_1"))
    mine.read_once()
    assert mine.holds()
    apiserver.faults.fail("get", "leases", 503)
    now[0] = 29.0
    mine.read_once()  # fails: the last answer stands until it is stale
    assert mine.holds()
    now[0] = 31.0
    assert not mine.holds()


def test_the_flag_defaults_to_the_shipped_lease_and_is_checked() -> None:
    args = _parser().parse_args(["serve", "--kube", "--no-leader-elect"])
    assert config_from_args(args).scheduler_lease == "dra-system/dra-extender-scheduler"
    for bad in ("no-slash", "ns/", "/name", "a/b/c"):
        with pytest.raises(ConfigError, match="--scheduler-lease"):
            config_from_args(_parser().parse_args(["serve", "--kube", "--scheduler-lease", bad]))
    off = _parser().parse_args(["serve", "--kube", "--scheduler-lease", ""])
    assert config_from_args(off).scheduler_lease == ""


def test_each_holding_is_its_own_term_whoever_holds_it(apiserver: ApiServer, client: RawClient) -> None:
    now = [0.0]
    mine = watcher(client, now)
    assert mine.term() is None  # nothing read yet
    mine.read_once()
    assert mine.term() == ""  # no Lease: no kube-scheduler elects itself, one term
    apiserver.store.seed(LEASE, lease("dra-extender-7d9f-abcde_1"))
    mine.read_once()
    first = mine.term()
    apiserver.store.update(LEASE, "dra-system", "dra-extender-scheduler", lease("dra-extender-7d9f-fghij_2"))
    mine.read_once()
    other = mine.term()
    assert not mine.holds() and other not in (None, "", first)  # another pod's scheduler: its own term
    again = lease("dra-extender-7d9f-abcde_1")
    again["spec"]["leaseTransitions"] = 2
    apiserver.store.update(LEASE, "dra-system", "dra-extender-scheduler", again)
    mine.read_once()
    assert mine.term() not in (None, first, other)  # held again by the same process: a new term
    now[0] += 31.0
    assert mine.term() is None  # an answer gone stale tells nothing
