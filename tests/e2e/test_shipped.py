"""The end-to-end run starts from the manifests as shipped: these checks run without binaries,
so a manifest change that the e2e rendering no longer follows fails in `make test` already."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.e2e import shipped
from tests.e2e.scenarios import SCENARIOS, _without_flag


def test_the_scheduler_config_is_the_configmaps_with_only_kubeconfig_and_port_changed(tmp_path: Path) -> None:
    (config_map,) = shipped.documents(shipped.BASE / "scheduler-config.yaml")
    original = yaml.safe_load(config_map["data"]["config.yaml"])
    rendered = shipped.scheduler_config(tmp_path / "kc", 4242)
    assert rendered["clientConnection"] == {"kubeconfig": str(tmp_path / "kc")}
    assert rendered["extenders"][0].pop("urlPrefix") == "http://127.0.0.1:4242"
    original["extenders"][0].pop("urlPrefix")
    rendered.pop("clientConnection")
    assert rendered == original  # leader election, profile, verbs, weight, timeouts: as shipped


def test_the_extender_runs_with_the_deployments_arguments(tmp_path: Path) -> None:
    (deployment,) = shipped.documents(shipped.BASE / "deployment.yaml")
    containers = {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}
    shipped_args = containers["extender"]["args"]
    args = shipped.extender_args(1111, 2222, tmp_path / "kc", "1.37")
    assert args[-2:] == ["--kubeconfig", str(tmp_path / "kc")]
    assert args[args.index("--port") + 1] == "1111" and args[args.index("--probe-port") + 1] == "2222"
    assert args[args.index("--kubernetes-version") + 1] == "1.37"
    changed = {"--port", "--probe-port", "--kubernetes-version"}
    kept = [a for i, a in enumerate(shipped_args) if a not in changed and shipped_args[i - 1] not in changed]
    assert [a for i, a in enumerate(args[:-2]) if a not in changed and args[i - 1] not in changed] == kept
    without = shipped.extender_args(1111, 2222, tmp_path / "kc", None)
    assert "--kubernetes-version" not in without and len(without) == len(args) - 2


def test_the_cluster_objects_are_the_bases_rbac_unchanged() -> None:
    kinds = sorted(o["kind"] for o in shipped.cluster_objects())
    assert {"ClusterRole", "ClusterRoleBinding", "ServiceAccount", "Namespace", "PriorityClass"} <= set(kinds)
    binding = next(o for o in shipped.cluster_objects() if o["kind"] == "ClusterRoleBinding"
                   and o["metadata"]["name"] == "dra-extender")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": shipped.SERVICE_ACCOUNT,
                                    "namespace": shipped.NAMESPACE}]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_says_what_it_checks(name: str) -> None:
    assert (SCENARIOS[name].__doc__ or "").strip()


def test_a_flag_and_its_value_are_dropped_together() -> None:
    assert _without_flag(["serve", "--a", "1", "--b", "2"], "--a") == ["serve", "--b", "2"]
