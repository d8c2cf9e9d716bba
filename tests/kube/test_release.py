"""With --kube, the API server's /version picks the gate defaults (unless --kubernetes-version)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from extender import cli
from extender.model.features import Features, view
from tests.api.test_config import debug_config
from tests.apiserver.server import ApiServer
from tests.reliability.test_tls import free_port


def _kube_view(server: ApiServer, tmp_path: Path, *flags: str) -> dict:
    kubeconfig = tmp_path / "kubeconfig"
    server.write_kubeconfig(str(kubeconfig))
    args = cli._parser().parse_args(
        ["serve", "--kube", "--kubeconfig", str(kubeconfig), "--cel-engine", "python", "--no-leader-elect",
         *flags]
    )
    return debug_config(cli.build_app(cli.config_from_args(args), debug_endpoints=True))


def test_the_api_servers_version_picks_the_release(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="extender")
    with ApiServer(version="v1.35.4") as server:
        shown = _kube_view(server, tmp_path)
    assert shown["kubernetesVersion"] == "1.35"
    assert shown["featureGates"] == view(Features.defaults("1.35"), "1.35")
    assert not shown["featureGates"]["DRAExtendedResource"]
    assert "API server v1.35.4: 1.35 gate defaults" in caplog.text


def test_explicit_flags_win_over_the_api_servers_version(tmp_path: Path) -> None:
    with ApiServer(version="v1.35.4") as server:
        pinned = _kube_view(server, tmp_path, "--kubernetes-version", "1.37")
        overridden = _kube_view(server, tmp_path, "--feature-gates", "DRAExtendedResource=true")
    assert pinned["kubernetesVersion"] == "1.37" and pinned["featureGates"]["DRADeviceTaintRules"] is True
    assert overridden["kubernetesVersion"] == "1.35"
    assert overridden["featureGates"]["DRAExtendedResource"] is True


def test_a_newer_api_server_gets_the_newest_release(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="extender")
    with ApiServer(version="v1.39.0") as server:
        assert _kube_view(server, tmp_path)["kubernetesVersion"] == "1.37"
    assert "API server v1.39.0, newer than 1.37: 1.37 gate defaults" in caplog.text


@pytest.mark.parametrize(
    ("version", "flags", "message"),
    [
        ("v1.33.2", [], "Kubernetes 1.33 is not supported: the extender needs 1.34 or newer"),
        ("v1.34.1", ["--feature-gates", "DRADeviceTaintRules=true"],
         "feature gate DRADeviceTaintRules does not exist in Kubernetes 1.34"),
    ],
)
def test_an_unsupported_cluster_stops_the_start(
    version: str, flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    with ApiServer(version=version) as server:
        server.write_kubeconfig(str(kubeconfig))
        port = str(free_port())
        assert cli.main(["serve", "--port", port, "--kube", "--kubeconfig", str(kubeconfig), *flags]) == 2
    assert message in capsys.readouterr().err


def test_an_unreachable_api_server_stops_the_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    server = ApiServer().start()
    server.write_kubeconfig(str(kubeconfig))
    server.stop()
    assert cli.main(["serve", "--port", str(free_port()), "--kube", "--kubeconfig", str(kubeconfig)]) == 2
    assert "cannot read the API server's version" in capsys.readouterr().err
