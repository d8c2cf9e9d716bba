"""The command line a user meets: --version, help with defaults, a busy port, explain."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from extender import __version__
from extender.api.server import servers
from extender.cli import _parser, main
from tests.api.threaded import free_port, listening
from tests.scheduling.cluster import Service, claim, gpu_cluster, pod


def test_version_is_the_package_version(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as done:
        _parser().parse_args(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"dra-extender {__version__}"
    assert __version__ != "unknown"


def test_every_serve_flag_has_help_and_says_its_default():
    serve = _parser()._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    text = serve.format_help()
    for action in serve._actions:
        assert action.help, f"{action.option_strings} has no help"
    assert "--port PORT" in text and "(default: 8888)" in text and "(default: 127.0.0.1)" in text
    assert "(default: None)" not in text


def test_a_busy_port_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dra-extender: cannot listen on 127.0.0.1:{port}:") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--body-timeout", "0"], "--body-timeout must be positive"),
        (["--max-connections", "0"], "--max-connections must be at least 1"),
        (["--client-ca-file", "ca.crt"], "--client-ca-file needs --tls-cert-file"),
        (["--feature-gates", "DRANope=true"], "unknown feature gate"),
        (["--state", "{tmp}/missing"], "{tmp}/missing: no such directory"),
        (["--state", "{tmp}"], "{tmp}/bad.yaml (document 1)"),
    ],
)
def test_what_is_wrong_with_flags_or_state_is_said_before_a_busy_port(
    flags: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
):
    """Everything is checked before the port is: a busy port (another extender, a test server)
    must not hide the mistake to fix."""
    monkeypatch.setattr("extender.cli.servers", lambda *a, **k: pytest.fail("serve started"))
    (tmp_path / "bad.yaml").write_text("kind: Node\nmetadata: {}\n")
    flags = [flag.replace("{tmp}", str(tmp_path)) for flag in flags]
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port), *flags]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("dra-extender: ") and message.replace("{tmp}", str(tmp_path)) in line, line


def test_a_probe_port_busy_on_any_interface_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    """The probe port listens on every interface: a program holding it on another address than
    --host's (here 127.0.0.2, --host being 127.0.0.1) keeps it from starting all the same."""
    monkeypatch.setattr("extender.cli.servers", lambda *a, **k: pytest.fail("serve started"))
    with socket.create_server(("127.0.0.2", 0)) as taken:
        probe = taken.getsockname()[1]
        assert main(["serve", "--port", str(free_port()), "--probe-port", str(probe)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"dra-extender: cannot listen on 0.0.0.0:{probe}:"), line


@pytest.fixture(scope="module")
def extender_url():
    svc = Service([*gpu_cluster(nodes=2, per_node=1), claim("c"), pod("p", claims={"gpu": "c"})])
    port = free_port()
    with listening(servers(svc.app, "127.0.0.1", port, log_level="warning")):
        yield f"http://127.0.0.1:{port}"


def test_explain_prints_why_per_node(extender_url: str, capsys: pytest.CaptureFixture[str]):
    assert main(["explain", "default/p", "--url", extender_url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "pod default/p: fits on 2 of 2 nodes"
    assert out[1] == "  claim default/c: not allocated"
    assert out[2].startswith("  node-0: fits (default/c: gpu.example.com/node-0/gpu-0)")


def test_explain_json_is_the_endpoint_answer(extender_url: str, capsys: pytest.CaptureFixture[str]):
    assert main(["explain", "default/p", "--url", extender_url, "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["pod"] == "default/p" and set(answer["nodes"]) == {"node-0", "node-1"}


@pytest.mark.parametrize(
    ("pod_arg", "code", "message"),
    [
        ("default/nobody", 1, "HTTP 404: pod default/nobody is not known"),
        ("nobody", 2, "expected NAMESPACE/NAME"),
    ],
)
def test_explain_errors_are_one_clear_line(
    extender_url: str, capsys: pytest.CaptureFixture[str], pod_arg: str, code: int, message: str
):
    assert main(["explain", pod_arg, "--url", extender_url]) == code
    assert message in capsys.readouterr().err


def test_explain_of_an_unreachable_extender_exits_1(capsys: pytest.CaptureFixture[str]):
    assert main(["explain", "default/p", "--url", f"http://127.0.0.1:{free_port()}"]) == 1
    assert "Connection refused" in capsys.readouterr().err


def test_the_program_prints_usage_for_no_command():
    done = subprocess.run([sys.executable, "-m", "extender"], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "COMMAND" in done.stderr
