"""HTTPS against a real uvicorn on 127.0.0.1: rotation without restart, client certificates, probes."""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from extender.api.server import servers
from extender.api.tls import ReloadingTLS, TLSFiles
from extender.cli import _parser, build_app, config_from_args, tls_from_args
from extender.config import ConfigError
from tests.api.threaded import free_port, listening
from tests.apiserver.server import ApiServer
from tests.reliability.figures import record

x509 = pytest.importorskip("cryptography.x509", reason="the TLS tests need the cryptography package")
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402

from tests.certs import Issued, issue  # noqa: E402


@dataclass
class Pki:
    directory: Path
    ca: Issued
    ca_file: Path
    cert_file: Path
    key_file: Path
    client: tuple[Path, Path]
    stranger: tuple[Path, Path]

    def rotate(self, common_name: str) -> None:
        """Replace the serving cert and key the way kubelet updates a Secret volume: rename over."""
        cert, key = issue(common_name, self.ca, server=True).write(self.directory, "next")
        os.replace(key, self.key_file)
        os.replace(cert, self.cert_file)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = issue("test-ca", ca=True)
    ca_file, _ = ca.write(directory, "ca")
    cert_file, key_file = issue("extender-1", ca, server=True).write(directory, "server")
    client = issue("kube-scheduler", ca).write(directory, "client")
    other_ca = issue("other-ca", ca=True)
    stranger = issue("stranger", other_ca).write(directory, "stranger")
    return Pki(directory, ca, ca_file, cert_file, key_file, client, stranger)


@dataclass
class Running:
    port: int
    probe_port: int


@contextmanager
def serving(pki: Pki, tmp_path: Path, *flags: str, parser: str = "auto") -> Iterator[Running]:
    """``dra-extender serve`` (local demo cluster, TLS, client CA, probe port, ``flags``) in a thread."""
    port, probe_port = free_port(), free_port()
    # Per-test copies: a test may rotate them without touching the next test's server.
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert_file.write_bytes(pki.cert_file.read_bytes())
    key_file.write_bytes(pki.key_file.read_bytes())
    pki_here = Pki(tmp_path, pki.ca, pki.ca_file, cert_file, key_file, pki.client, pki.stranger)
    args = _parser().parse_args(
        [
            "serve",
            "--port",
            str(port),
            "--tls-cert-file",
            str(cert_file),
            "--tls-private-key-file",
            str(key_file),
            "--client-ca-file",
            str(pki.ca_file),
            *flags,
        ]
    )
    tls = tls_from_args(args)
    app = build_app(config_from_args(args))
    listeners = servers(
        app, "127.0.0.1", port, tls=tls, probe_port=probe_port, log_level="warning", parser=parser
    )
    running = Running(port, probe_port)
    running.pki = pki_here  # type: ignore[attr-defined]
    with listening(listeners):
        yield running


@pytest.fixture
def running(pki: Pki, tmp_path: Path) -> Iterator[Running]:
    with serving(pki, tmp_path) as running:
        yield running


def client_context(pki: Pki, cert: tuple[Path, Path] | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


def served_common_name(port: int, ctx: ssl.SSLContext) -> str:
    """A fresh connection's view of the server certificate's CN."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    cert = x509.load_der_x509_certificate(der)
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


BIND = {"PodName": "trainer-0", "PodNamespace": "default", "Node": "node-a"}


def test_the_scheduler_binds_over_https_with_its_client_certificate(running: Running, pki: Pki) -> None:
    ctx = client_context(pki, pki.client)
    with httpx.Client(verify=ctx, base_url=f"https://127.0.0.1:{running.port}") as http:
        assert http.get("/healthz").text == "ok"
        reply = http.post("/bind", json=BIND)
        assert reply.status_code == 200 and reply.json() == {"Error": ""}
        claims = http.get("/debug/claims").json()["items"]  # local mode: debug endpoints on by default
    assert any(c.get("status", {}).get("reservedFor") for c in claims)
    record("tls connections", 1)


@pytest.mark.parametrize("who", ["no certificate", "certificate of another CA"])
def test_a_client_without_a_trusted_certificate_is_refused(running: Running, pki: Pki, who: str) -> None:
    ctx = client_context(pki, None if who == "no certificate" else pki.stranger)
    with (
        pytest.raises((ssl.SSLError, httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)),
        httpx.Client(verify=ctx, base_url=f"https://127.0.0.1:{running.port}") as http,
    ):
        # TLS 1.3 completes the client's side of the handshake first; the refusal arrives on first use.
        http.post("/bind", json=BIND)
    record("tls connections refused", 1)


SCHEDULER_DNS = "kube-scheduler.kube-system.svc"
ALLOWED = ("--client-allowed-names", f"kube-scheduler,{SCHEDULER_DNS}")
REFUSED_TLS = (ssl.SSLError, httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)


@pytest.fixture(params=["httptools", "h11"])
def allowing(pki: Pki, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Running]:
    """The server with an allow-list (pki.client's subject CN and one DNS name), on each parser."""
    with serving(pki, tmp_path, *ALLOWED, parser=request.param) as running:
        yield running


def call_as(pki: Pki, port: int, cert: tuple[Path, Path], method: str, path: str) -> httpx.Response:
    with httpx.Client(verify=client_context(pki, cert), base_url=f"https://127.0.0.1:{port}") as http:
        return http.request(method, path, json=BIND if method == "POST" else None)


def reservations(pki: Pki, port: int) -> dict[str, object]:
    claims = call_as(pki, port, pki.client, "GET", "/debug/claims").json()["items"]
    return {c["metadata"]["name"]: c.get("status", {}).get("reservedFor") for c in claims}


@pytest.mark.parametrize("who", ["subject CN, no SAN", "DNS SAN", "DNS SAN, clientAuth usage"])
def test_an_allowed_client_is_served(allowing: Running, pki: Pki, tmp_path: Path, who: str) -> None:
    cert = {
        "subject CN, no SAN": pki.client,
        "DNS SAN": issue("anything", pki.ca, dns=["other.example", SCHEDULER_DNS]).write(tmp_path, "dns"),
        "DNS SAN, clientAuth usage": issue(
            "anything", pki.ca, dns=[SCHEDULER_DNS], usages=[ExtendedKeyUsageOID.CLIENT_AUTH]
        ).write(tmp_path, "dns-client-auth"),
    }[who]
    reply = call_as(pki, allowing.port, cert, "POST", "/bind")
    assert reply.status_code == 200 and reply.json() == {"Error": ""}
    config = call_as(pki, allowing.port, cert, "GET", "/debug/config").json()
    assert config["clientAllowedNames"] == ["kube-scheduler", SCHEDULER_DNS]


@pytest.mark.parametrize(
    "who", ["another CN", "an allowed CN but a SAN without the name", "the extender's own certificate"]
)
def test_a_client_the_ca_signed_but_not_allowed_is_answered_403_and_never_served(
    allowing: Running, pki: Pki, tmp_path: Path, who: str
) -> None:
    cert = {
        "another CN": issue("intruder", pki.ca).write(tmp_path, "intruder"),
        # With a subjectAltName the subject CN does not count, as in hostname checks.
        "an allowed CN but a SAN without the name": issue(
            "kube-scheduler", pki.ca, dns=["intruder.example"]
        ).write(tmp_path, "cn-behind-san"),
        # Signed by the same CA, no extended key usage, an IP SAN only: the issue's example.
        "the extender's own certificate": (pki.cert_file, pki.key_file),
    }[who]
    before = reservations(pki, allowing.port)
    for method, path in (("POST", "/bind"), ("GET", "/healthz"), ("GET", "/debug/claims")):
        reply = call_as(pki, allowing.port, cert, method, path)
        assert reply.status_code == 403, (method, path, reply.text)
        assert "--client-allowed-names" in reply.json()["error"]
        assert reply.headers["connection"] == "close"
    assert reservations(pki, allowing.port) == before  # the bind never reached the app
    record("tls connections refused", 3)


@pytest.mark.parametrize("flags", [(), ALLOWED], ids=["any name", "allow-list"])
def test_a_certificate_for_servers_only_is_refused_as_a_client(
    pki: Pki, tmp_path: Path, flags: tuple[str, ...]
) -> None:
    cert = issue(
        "kube-scheduler", pki.ca, dns=[SCHEDULER_DNS], usages=[ExtendedKeyUsageOID.SERVER_AUTH]
    ).write(tmp_path, "server-only")
    with serving(pki, tmp_path, *flags) as running, pytest.raises(REFUSED_TLS):
        call_as(pki, running.port, cert, "POST", "/bind")


def test_plain_http_on_the_tls_port_gets_no_answer(running: Running) -> None:
    with (
        pytest.raises((httpx.RemoteProtocolError, httpx.ReadError, httpx.ConnectError)),
        httpx.Client(base_url=f"http://127.0.0.1:{running.port}") as http,
    ):
        http.post("/bind", json=BIND)


def test_a_rotated_certificate_is_served_on_the_next_connection(running: Running, pki: Pki) -> None:
    ctx = client_context(pki, pki.client)
    assert served_common_name(running.port, ctx) == "extender-1"
    here: Pki = running.pki  # type: ignore[attr-defined]
    here.rotate("extender-2")
    assert served_common_name(running.port, ctx) == "extender-2"
    # a broken rotation (a key that does not match) keeps the last good certificate
    here.key_file.write_bytes(issue("x", pki.ca).write(here.directory, "junk")[1].read_bytes())
    assert served_common_name(running.port, ctx) == "extender-2"
    here.rotate("extender-3")
    assert served_common_name(running.port, ctx) == "extender-3"
    record("tls rotations", 2)


def test_the_probe_port_serves_only_the_probes_without_tls(running: Running) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{running.probe_port}") as http:
        assert http.get("/healthz").status_code == 200
        assert http.get("/readyz").status_code == 200
        assert http.get("/metrics").status_code == 200
        for method, path in (("POST", "/bind"), ("POST", "/filter"), ("GET", "/debug/claims")):
            reply = http.request(method, path, json=BIND)
            assert reply.status_code == 404 and "probe port" in reply.json()["error"]


def test_reload_keeps_the_context_until_the_files_change(pki: Pki, tmp_path: Path) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_bytes(pki.cert_file.read_bytes())
    key.write_bytes(pki.key_file.read_bytes())
    tls = ReloadingTLS(TLSFiles(cert, key))
    assert not tls.refresh() and tls.current is tls.context
    issued = issue("again", pki.ca, server=True)
    issued.write(tmp_path, "again")
    os.replace(tmp_path / "again.crt", cert)
    os.replace(tmp_path / "again.key", key)
    assert tls.refresh() and tls.current is not tls.context and tls.reloads == 1
    cert.unlink()
    assert not tls.refresh()  # a vanished file keeps the last good context


def test_half_or_broken_tls_configuration_refuses_to_start(pki: Pki, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    cases = [
        (["--tls-cert-file", str(pki.cert_file)], "go together"),
        (["--client-ca-file", str(pki.ca_file)], "needs --tls-cert-file"),
        (["--tls-cert-file", str(garbage), "--tls-private-key-file", str(pki.key_file)], "garbage.pem"),
        (
            ["--tls-cert-file", str(pki.cert_file), "--tls-private-key-file", str(tmp_path / "missing")],
            "missing",
        ),
        (
            [
                "--tls-cert-file",
                str(pki.cert_file),
                "--tls-private-key-file",
                str(pki.key_file),
                "--client-ca-file",
                str(garbage),
            ],
            "client CA",
        ),
    ]
    for flags, message in cases:
        with pytest.raises(ConfigError, match=message):
            tls_from_args(_parser().parse_args(["serve", *flags]))


def test_debug_endpoints_follow_the_mode_and_the_flag(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    with ApiServer() as server:
        server.write_kubeconfig(str(kubeconfig))

        def debug_paths(*flags: str) -> set[str]:
            args = _parser().parse_args(["serve", *flags])
            app = build_app(config_from_args(args), args.enable_debug_endpoints)
            return {route.path for route in app.routes if route.path.startswith("/debug")}  # type: ignore[attr-defined]

        kube = ("--kube", "--kubeconfig", str(kubeconfig))
        assert "/debug/claims" in debug_paths()
        assert debug_paths("--no-enable-debug-endpoints") == set()
        assert debug_paths(*kube) == set()
        assert "/debug/explain" in debug_paths(*kube, "--enable-debug-endpoints")


def test_serve_refuses_bad_listener_flags_with_exit_code_2(
    capsys: pytest.CaptureFixture[str], pki: Pki
) -> None:
    from extender.cli import main

    port = str(free_port())
    assert main(["serve", "--port", port, "--probe-port", port]) == 2
    assert f"--probe-port {port}" in capsys.readouterr().err
    assert main(["serve", "--port", str(free_port()), "--client-ca-file", str(pki.ca_file)]) == 2
    assert "needs --tls-cert-file" in capsys.readouterr().err


def test_allowed_names_without_a_client_ca_or_with_an_empty_name_exit_2(
    capsys: pytest.CaptureFixture[str], pki: Pki
) -> None:
    from extender.cli import main

    tls = ["--port", str(free_port()), "--tls-cert-file", str(pki.cert_file), "--tls-private-key-file",
           str(pki.key_file)]
    for flags in (["--port", str(free_port())], tls):
        assert main(["serve", *flags, "--client-allowed-names", "kube-scheduler"]) == 2
        assert "--client-allowed-names needs --client-ca-file" in capsys.readouterr().err
    for names in ("", "kube-scheduler,,other", "kube-scheduler, other"):
        with pytest.raises(SystemExit) as exited:
            main(["serve", *tls, "--client-ca-file", str(pki.ca_file), "--client-allowed-names", names])
        assert exited.value.code == 2
        assert "--client-allowed-names" in capsys.readouterr().err
