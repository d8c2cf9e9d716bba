"""In every shipped layout, nothing but kube-scheduler in the same pod can call /bind.

The extender container's args are taken from the built layout and served by the real listeners
(as ``dra-extender serve`` starts them) against the test API server; the Secret volumes of the
TLS layout hold throw-away certificates. A caller elsewhere connects from 127.0.0.2: a listener
bound to the pod's loopback address refuses it like it refuses another pod or node.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from extender.api.server import servers
from extender.cli import _parser, build_app, config_from_args, tls_from_args
from tests.api.threaded import listening
from tests.apiserver.server import ApiServer
from tests.manifests.loader import LAYOUTS, built, container
from tests.reliability.test_tls import Issued, free_port, issue

ELSEWHERE = "127.0.0.2"
BIND = {"PodName": "p", "PodNamespace": "default", "PodUID": "u", "Node": "n"}


@dataclass
class Certificates:
    ca: Issued
    scheduler: tuple[Path, Path]  # the name the TLS layout allows
    other_name: tuple[Path, Path]  # same CA, another name
    other_ca: tuple[Path, Path]


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = str(tmp_path_factory.mktemp("kube") / "kubeconfig")
    with ApiServer() as server:
        server.write_kubeconfig(path)
        yield path


def _pki(root: Path) -> Certificates:
    """The files the layouts' Secret volumes would hold, under ``root`` instead of /."""
    ca = issue("test-ca", ca=True)
    serving = root / "etc" / "dra-extender" / "tls"
    serving.mkdir(parents=True)
    ca.write(serving, "ca")
    issue("dra-extender", ca, server=True, dns=["dra-extender"]).write(serving, "tls")
    clients = root / "clients"
    clients.mkdir()
    return Certificates(
        ca,
        issue("dra-extender-scheduler", ca, dns=["dra-extender-scheduler"]).write(clients, "scheduler"),
        issue("someone-else", ca, dns=["someone-else"]).write(clients, "other-name"),
        issue("intruder", issue("other-ca", ca=True)).write(clients, "other-ca"),
    )


@dataclass
class Running:
    port: int
    probe_port: int
    https: bool
    certs: Certificates
    ca_file: Path


@contextmanager
def serving(layout: Path, root: Path, kubeconfig: str) -> Iterator[Running]:
    certs = _pki(root)
    port, probe_port = free_port(), free_port()
    shipped = container(built(layout), "extender")["args"]
    args = []
    for arg in shipped:
        arg = arg.replace("=/etc/", f"={root}/etc/")
        args.append(str(port) if args[-1:] == ["--port"] else str(probe_port) if args[-1:] == ["--probe-port"]
                    else arg)
    parsed = _parser().parse_args([*args, "--kubeconfig", kubeconfig])
    config = config_from_args(parsed)
    tls = tls_from_args(parsed)
    app = build_app(config, parsed.enable_debug_endpoints)
    listeners = servers(app, config.host, config.port, tls=tls, probe_port=parsed.probe_port,
                        log_level="warning")
    with listening(listeners):
        yield Running(port, probe_port, tls is not None, certs, root / "etc/dra-extender/tls/ca.crt")


@pytest.fixture(params=LAYOUTS.values(), ids=LAYOUTS.keys())
def running(request: pytest.FixtureRequest, tmp_path: Path, kubeconfig: str) -> Iterator[Running]:
    with serving(request.param, tmp_path, kubeconfig) as running:
        yield running


def _context(running: Running, cert: tuple[Path, Path] | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(running.ca_file))
    context.check_hostname = False  # kube-scheduler checks tlsConfig.serverName; here the CA is enough
    if cert is not None:
        context.load_cert_chain(*map(str, cert))
    return context


def _bind(running: Running, cert: tuple[Path, Path] | None = None) -> httpx.Response:
    scheme = "https" if running.https else "http"
    verify: ssl.SSLContext | bool = _context(running, cert) if running.https else False
    with httpx.Client(verify=verify, timeout=10) as client:
        return client.post(f"{scheme}://127.0.0.1:{running.port}/bind", json=BIND)


def test_the_scheduling_port_refuses_connections_from_outside_the_pod(running: Running) -> None:
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((ELSEWHERE, running.port), timeout=5).close()


def test_the_probe_port_is_reachable_from_outside_but_serves_no_bind(running: Running) -> None:
    with httpx.Client(timeout=10) as client:
        assert client.get(f"http://{ELSEWHERE}:{running.probe_port}/healthz").status_code == 200
        refused = client.post(f"http://{ELSEWHERE}:{running.probe_port}/bind", json=BIND)
        debug = client.get(f"http://{ELSEWHERE}:{running.probe_port}/debug/pods")
    assert refused.status_code == 404 and "only /healthz" in refused.json()["error"]
    assert debug.status_code == 404


def test_only_kube_scheduler_reaches_bind_inside_the_pod(running: Running) -> None:
    reached = _bind(running, running.certs.scheduler)
    assert reached.status_code == 200 and "Error" in reached.json()  # the app's answer (pod not found)
    if not running.https:
        return  # the loopback is the boundary: only the pod's own containers share it
    assert _bind(running, running.certs.other_name).status_code == 403
    for cert in (None, running.certs.other_ca):
        with pytest.raises((ssl.SSLError, httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
            _bind(running, cert)
