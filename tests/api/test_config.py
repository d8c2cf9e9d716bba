"""Flags → Config: feature gates in kube-scheduler syntax, validation, the --kube seam."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from extender import cli
from extender.config import Config, ConfigError, parse_feature_gates
from extender.model.features import Features

# What /debug/config showed before the gate table existed: keep it exactly.
DEFAULT_VIEW = {
    "DRAAdminAccess": True,
    "DRAConsumableCapacity": True,
    "DRADeviceBindingConditions": True,
    "DRADeviceTaintRules": True,
    "DRADeviceTaints": True,
    "DRAExtendedResource": True,
    "DRAListTypeAttributes": False,
    "DRAPartitionableDevices": True,
    "DRAPrioritizedList": True,
    "DRAResourceClaimDeviceStatus": True,
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
        ("DynamicResourceAllocation=true", "unknown feature gate"),
        ("DRANope=true", "unknown feature gate 'DRANope'; known DRA gates: DRAAdminAccess, "),
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
    assert cli.main(["serve", "--kube", "--kubeconfig", str(broken)]) == 2
    assert "cannot load a cluster configuration" in capsys.readouterr().err


def test_debug_config_names_the_cel_engine_in_use():
    app = cli.build_app(Config(cel_engine="python"))

    async def call():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
            return (await client.get("/debug/config")).json()

    view = asyncio.run(call())
    assert (view["celEngine"], view["celEngineInUse"]) == ("python", "python")
