"""Flags → Config: feature gates in kube-scheduler syntax, validation, the --kube seam."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from extender import cli
from extender.config import Config, ConfigError, parse_feature_gates
from extender.model.features import Features
from tests.api.threaded import free_port

# What /debug/config shows for 1.37, the newest release: what it showed before the gate table
# knew releases, plus the newer gates (off by default) and the filter timeout.
DEFAULT_VIEW = {
    "DRAAdminAccess": True,
    "DRAConsumableCapacity": True,
    "DRADerivedAttributes": False,
    "DRADeviceBindingConditions": True,
    "DRADeviceCompatibilityGroups": False,
    "DRADeviceTaintRules": True,
    "DRADeviceTaints": True,
    "DRAExtendedResource": True,
    "DRAFractionalCapacityRange": False,
    "DRAListTypeAttributes": False,
    "DRANodeAllocatableResources": False,
    "DRAOptionalNodeOperations": False,
    "DRAPartitionableDevices": True,
    "DRAPrioritizedList": True,
    "DRAResourceClaimDeviceStatus": True,
    "DRASchedulerFilterTimeout": True,
    "DRAWorkloadResourceClaims": False,
}


def test_feature_gates_default_to_the_newest_release_and_accept_overrides():
    features = parse_feature_gates("")
    assert features == Features.defaults() == Config().feature_gates
    assert features.partitionable_devices and not features.list_type_attributes
    features = parse_feature_gates("DRAPartitionableDevices=false, DRAListTypeAttributes=TRUE")
    assert not features.partitionable_devices and features.list_type_attributes


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("DRAAdminAccess", "expected NAME=true"),
        ("DRAAdminAccess=maybe", "expected NAME=true"),
        ("DynamicResourceAllocation=true", "changes nothing the extender decides"),
        ("DRANope=true", "unknown feature gate 'DRANope'; DRA gates the extender reads: DRAAdminAccess, "),
    ],
)
def test_bad_feature_gates_are_errors(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_feature_gates(text)


def test_config_validation_and_debug_view():
    with pytest.raises(ConfigError, match="score policy"):
        Config(score_policy="random")
    with pytest.raises(ConfigError, match="exclude each other"):
        Config(kube=True, state_dir=cli.Path("/tmp"))
    view = Config(feature_gates=parse_feature_gates("DRADeviceTaints=false")).describe()
    assert view["mode"] == "local" and view["featureGates"] == {**DEFAULT_VIEW, "DRADeviceTaints": False}
    assert list(view["featureGates"]) == sorted(DEFAULT_VIEW)
    assert Config().describe()["featureGates"] == DEFAULT_VIEW


def test_flags_reach_the_config():
    args = cli._parser().parse_args(
        [
            "serve",
            "--port",
            "9999",
            "--score-policy",
            "spread",
            "--scheduler-name",
            "a",
            "--scheduler-name",
            "b",
        ]
    )
    config = cli.config_from_args(args)
    assert (config.port, config.score_policy, config.scheduler_names) == (9999, "spread", ("a", "b"))


def test_kube_mode_with_an_unreadable_kubeconfig_fails_cleanly(tmp_path, capsys):
    broken = tmp_path / "kubeconfig"
    broken.write_text("this: is: not a kubeconfig")
    assert cli.main(["serve", "--kube", "--kubeconfig", str(broken), "--port", str(free_port())]) == 2
    assert "cannot load a cluster configuration" in capsys.readouterr().err


def debug_config(app) -> dict:
    async def call():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
            return (await client.get("/debug/config")).json()

    return asyncio.run(call())


def test_debug_config_names_the_cel_engine_in_use():
    view = debug_config(cli.build_app(Config(cel_engine="python")))
    assert (view["celEngine"], view["celEngineInUse"]) == ("python", "python")


def served(*flags: str) -> dict:
    """/debug/config of the local service started with ``flags``."""
    args = cli._parser().parse_args(["serve", "--cel-engine", "python", *flags])
    return debug_config(cli.build_app(cli.config_from_args(args)))


def test_kubernetes_version_picks_that_releases_defaults_and_explicit_gates_win():
    assert served()["kubernetesVersion"] == "1.37" and served()["featureGates"] == DEFAULT_VIEW
    old = served("--kubernetes-version", "1.35")
    assert old["kubernetesVersion"] == "1.35"
    assert old["featureGates"] == {
        "DRAAdminAccess": True, "DRAConsumableCapacity": False, "DRADeviceBindingConditions": False,
        "DRADeviceTaintRules": False, "DRADeviceTaints": False, "DRAExtendedResource": False,
        "DRAPartitionableDevices": False, "DRAPrioritizedList": True, "DRAResourceClaimDeviceStatus": True,
        "DRASchedulerFilterTimeout": True,
    }
    assert served("--kubernetes-version", "v1.40.2")["kubernetesVersion"] == "1.37"
    pinned = served("--kubernetes-version", "1.35", "--feature-gates", "DRAExtendedResource=true")
    assert pinned["featureGates"] == {**old["featureGates"], "DRAExtendedResource": True}
    derived = served("--kubernetes-version", "1.37", "--feature-gates", "DRADerivedAttributes=true")
    assert derived["featureGates"] == {**DEFAULT_VIEW, "DRADerivedAttributes": True}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--kubernetes-version", "1.33"], "Kubernetes 1.33 is not supported: the extender needs 1.34"),
        (["--kubernetes-version", "one"], "expected MAJOR.MINOR"),
        (["--kubernetes-version", "1.34", "--feature-gates", "DRADeviceTaintRules=true"],
         "feature gate DRADeviceTaintRules does not exist in Kubernetes 1.34"),
        (["--kubernetes-version", "1.36", "--feature-gates", "DRADerivedAttributes=true"],
         "feature gate DRADerivedAttributes does not exist in Kubernetes 1.36"),
        (["--node-filter-timeout", "-1"], "per-node filter timeout must be zero"),
    ],
)
def test_bad_release_flags_stop_the_start(flags, message, capsys):
    assert cli.main(["serve", "--port", str(free_port()), *flags]) == 2
    assert message in capsys.readouterr().err


def test_node_filter_timeout_follows_its_gate():
    assert served()["nodeFilterTimeoutSeconds"] == 10.0
    assert served("--node-filter-timeout", "0.5")["nodeFilterTimeoutSeconds"] == 0.5
    assert served("--node-filter-timeout", "0")["nodeFilterTimeoutSeconds"] is None
    off = served("--feature-gates", "DRASchedulerFilterTimeout=false")
    assert off["nodeFilterTimeoutSeconds"] is None and off["filterTimeoutSeconds"] == 4.0
