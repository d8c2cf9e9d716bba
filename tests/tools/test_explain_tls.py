"""`dra-extender explain` against a real TLS-serving extender whose certificate names only the
Service (DNS:dra-extender), reached at 127.0.0.1 as through `kubectl port-forward`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from extender.cli import main
from tests.reliability.test_tls import Pki, Running, issue, pki, serving

__all__ = ["pki"]  # the module-scoped fixture, used here


@pytest.fixture
def named_only(pki: Pki, tmp_path: Path) -> Iterator[Running]:
    """The extender serving a certificate of the docs' first recipe: no IP address, no localhost."""
    cert, key = issue("dra-extender", pki.ca, dns=["dra-extender"]).write(tmp_path, "named")
    only_named = Pki(tmp_path, pki.ca, pki.ca_file, cert, key, pki.client, pki.stranger)
    (tmp_path / "served").mkdir()
    with serving(only_named, tmp_path / "served") as running:
        yield running


def explain(running: Running, *flags: str) -> int:
    return main(["explain", "default/trainer-0", "--url", f"https://127.0.0.1:{running.port}", *flags])


def trusted(pki: Pki) -> list[str]:
    """The CA and kube-scheduler's client certificate, which the extender admits."""
    cert, key = pki.client
    return ["--ca-file", str(pki.ca_file), "--cert-file", str(cert), "--key-file", str(key)]


def test_the_server_name_the_certificate_carries_gets_the_answer(
    named_only: Running, pki: Pki, capsys: pytest.CaptureFixture[str]
) -> None:
    code = explain(named_only, *trusted(pki), "--server-name", "dra-extender")
    out = capsys.readouterr()
    assert code == 0, out.err
    assert out.out.startswith("pod default/trainer-0: ")


def test_without_the_server_name_the_address_does_not_match(
    named_only: Running, pki: Pki, capsys: pytest.CaptureFixture[str]
) -> None:
    assert explain(named_only, *trusted(pki)) == 1
    assert "IP address mismatch" in capsys.readouterr().err


@pytest.mark.parametrize("who", ["no client certificate", "a CA the extender does not trust"])
def test_the_extender_refuses_a_client_without_its_certificate(
    named_only: Running, pki: Pki, who: str, capsys: pytest.CaptureFixture[str]
) -> None:
    client = [] if who == "no client certificate" else ["--cert-file", str(pki.stranger[0]),
                                                          "--key-file", str(pki.stranger[1])]
    assert explain(named_only, "--ca-file", str(pki.ca_file), "--server-name", "dra-extender", *client) == 1
    assert capsys.readouterr().err.startswith("dra-extender explain: https://127.0.0.1:")


def test_an_unknown_ca_is_refused(named_only: Running, pki: Pki, capsys: pytest.CaptureFixture[str]) -> None:
    assert explain(named_only, *trusted(pki)[2:], "--server-name", "dra-extender") == 1
    assert "CERTIFICATE_VERIFY_FAILED" in capsys.readouterr().err


def test_tls_flags_on_a_plain_http_url_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "default/p", "--url", "http://127.0.0.1:1", "--server-name", "x"]) == 2
    assert "--server-name need an https:// --url" in capsys.readouterr().err
