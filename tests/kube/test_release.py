"""With --kube, the API server's /version picks the gate defaults (unless --kubernetes-version),
whether it answers at start or later."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from extender import cli
from extender.api.server import servers
from extender.kube.client import KubeApiError, RawClient
from extender.kube.source import Backoff
from extender.kube.version import wait_for_version
from extender.model.features import Features, view
from tests.api.test_config import debug_config
from tests.api.threaded import free_port, listening
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer, write_kubeconfig
from tests.kube import objects
from tests.kube.test_service import NODES, seed


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
        port = str(free_port())  # not 8888: something else may be listening there
        assert cli.main(["serve", "--kube", "--kubeconfig", str(kubeconfig), "--port", port, *flags]) == 2
    assert message in capsys.readouterr().err


def start(kubeconfig: Path, port: int) -> tuple[FastAPI, list[uvicorn.Server]]:
    """``dra-extender serve --kube`` as main builds it, listening on ``port``.

    No kube-scheduler Lease is followed (``--scheduler-lease ''``): these tests are about the
    release, and a first term of that Lease would hold new allocations back for the takeover's
    wait (tests/reliability/test_handover.py)."""
    args = cli._parser().parse_args(
        ["serve", "--kube", "--kubeconfig", str(kubeconfig), "--cel-engine", "python", "--no-leader-elect",
         "--scheduler-lease", "", "--enable-debug-endpoints", "--port", str(port)]
    )
    app = cli.build_app(cli.config_from_args(args), args.enable_debug_endpoints)
    listeners = servers(app, "127.0.0.1", port, log_level="warning")
    cli.stop_on_late_failure(app, listeners)
    return app, listeners


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_an_api_server_that_answers_late_gives_its_release_late(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An extender started before its API server serves, not ready, and asks again until it
    answers: no crash loop. Then the gates are the API server's release's, and it schedules."""
    caplog.set_level(logging.INFO, logger="extender")
    api_port, port = free_port(), free_port()
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(str(kubeconfig), f"http://127.0.0.1:{api_port}")  # nothing listens there yet
    _, listeners = start(kubeconfig, port)
    with listening(listeners), httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
        assert http.get("/healthz").status_code == 200
        waiting = http.get("/readyz")
        assert waiting.status_code == 503
        assert "waiting for the API server's version (last attempt:" in waiting.text
        assert "refused" in waiting.text
        assert http.get("/debug/config").json()["kubernetesVersion"] is None
        # The verbs answer as before the cache has synced: kube-scheduler retries the pod.
        pod = objects.pod("pod-0", claim_name="claim-0")
        pod["metadata"]["uid"] = "uid-0"
        refused = http.post("/filter", json={"Pod": pod, "NodeNames": NODES}).json()
        assert refused["Error"] == "dra-extender: cluster state not synced yet"
        passed = http.post("/filter", json={"Pod": objects.pod("plain"), "NodeNames": NODES}).json()
        assert passed["NodeNames"] == NODES
        bind = {"PodName": "pod-0", "PodNamespace": "default", "PodUID": "uid-0", "Node": "node-a"}
        assert "not known to the extender" in http.post("/bind", json=bind).json()["Error"]
        with ApiServer(version="v1.35.4", port=api_port, bookmark_interval=0.2) as server:
            seed(server, pods=1)
            wait_for(lambda: http.get("/readyz").status_code == 200, "ready")
            shown = http.get("/debug/config").json()
            assert shown["kubernetesVersion"] == "1.35"
            assert shown["featureGates"] == view(Features.defaults("1.35"), "1.35")
            pod = server.store.get(BY_KIND["Pod"], "default", "pod-0")
            fits = http.post("/filter", json={"Pod": pod, "NodeNames": NODES}).json()
            assert fits["Error"] == "" and fits["NodeNames"], fits
            bind = {"PodName": "pod-0", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"],
                    "Node": fits["NodeNames"][0]}
            assert http.post("/bind", json=bind).json() == {"Error": ""}
    failures = [r for r in caplog.records if "cannot read the API server's version" in r.getMessage()]
    assert failures and all(r.levelno == logging.WARNING for r in failures)
    assert "API server v1.35.4: 1.35 gate defaults" in caplog.text


def test_an_unsupported_release_named_late_stops_the_extender(tmp_path: Path) -> None:
    """What exits 2 at start exits 2 when the API server says it late: the servers stop."""
    api_port, port = free_port(), free_port()
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(str(kubeconfig), f"http://127.0.0.1:{api_port}")
    app, listeners = start(kubeconfig, port)
    late = cli.late_release(app)
    assert late is not None
    with listening(listeners), ApiServer(version="v1.33.2", port=api_port):
        wait_for(lambda: late.failure is not None, "the release")
        wait_for(lambda: all(s.should_exit for s in listeners), "the servers to stop")
    assert late.failure.startswith("Kubernetes 1.33 is not supported: the extender needs 1.34 or newer")
    assert late.not_ready() == f"cannot run with this cluster: {late.failure}"


class Unanswering:
    """A RawClient whose API server answers /version only after ``failures`` failures."""

    def __init__(self, *failures: KubeApiError) -> None:
        self.failures = list(failures)

    def server_version(self, timeout: float | None = None) -> str:
        if self.failures:
            raise self.failures.pop(0)
        return "v1.36.2"


@pytest.mark.anyio
async def test_the_version_is_asked_again_with_backoff_and_each_failure_logged_once(
    caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="extender")
    refused = KubeApiError(0, "GET /version: Connection refused")
    client = Unanswering(*[refused] * 6)
    delays: list[float] = []

    async def sleep(delay: float) -> None:
        delays.append(delay)

    heard: list[KubeApiError] = []
    version = await wait_for_version(cast(RawClient, client), Backoff(initial=1, cap=8), failed=heard.append,
                                     sleep=sleep)
    assert version == "v1.36.2" and heard == [refused] * 6
    ceilings = [1, 2, 4, 8, 8, 8]  # full jitter: each delay between half its ceiling and the ceiling
    assert all(c / 2 <= d <= c for c, d in zip(ceilings, delays, strict=True)), delays
    lines = [r for r in caplog.records if r.name == "extender.kube.version"]
    assert len(lines) == 6 and all(r.levelno == logging.WARNING for r in lines)
    assert "cannot read the API server's version (0: GET /version: Connection refused); asking again in" in (
        lines[0].getMessage())


@pytest.mark.anyio
@pytest.mark.parametrize("status", [401, 403])
async def test_a_refused_version_is_logged_as_an_error_and_asked_again(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="extender")
    client = Unanswering(KubeApiError(status, "forbidden", "Forbidden"))

    async def sleep(delay: float) -> None:
        pass

    assert await wait_for_version(cast(RawClient, client), sleep=sleep) == "v1.36.2"
    (line,) = [r for r in caplog.records if r.name == "extender.kube.version"]
    assert line.levelno == logging.ERROR
    message = line.getMessage()
    assert "refuses to say its version" in message and "system:public-info-viewer" in message
    assert "--kubernetes-version" in message


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
