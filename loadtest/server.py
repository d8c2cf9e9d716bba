"""Starting `dra-extender serve` as a subprocess and reading its peak memory."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx

import extender


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_command() -> list[str]:
    """The installed console script when there is one; otherwise the same CLI through -m."""
    script = Path(sys.executable).with_name("dra-extender")
    if script.exists():
        return [str(script)]
    found = shutil.which("dra-extender")
    return [found] if found else [sys.executable, "-m", "extender"]


def server_env() -> dict[str, str]:
    """The environment for the server: the ``extender`` package this driver imports comes
    first on its path. The console script is installed from one checkout; without this, a run
    from another checkout (a git worktree, say) would measure the installed copy's code."""
    root = str(Path(extender.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root, env["PYTHONPATH"]]) if env.get("PYTHONPATH") else root
    return env


def peak_rss_bytes(pid: int) -> int | None:
    """VmHWM of a live process: the kernel's high-water mark of its resident set."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time a live process has used (fields 14 and 15 of /proc/<pid>/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; the fields after its closing parenthesis do not.
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ServerError(RuntimeError):
    pass


class ExtenderServer:
    """`dra-extender serve --state DIR` on a free port, stopped on exit."""

    def __init__(self, state: Path, log_path: Path, ready_timeout: float = 300.0) -> None:
        self.state = state
        self.log_path = log_path
        self.ready_timeout = ready_timeout
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_seconds: float | None = None

    def __enter__(self) -> ExtenderServer:
        cmd = [*server_command(), "serve", "--state", str(self.state), "--host", "127.0.0.1"]
        cmd += ["--port", str(self.port)]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=server_env())
        started = time.monotonic()
        try:
            self._wait_ready(started)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _wait_ready(self, started: float) -> None:
        assert self.process is not None
        with httpx.Client(base_url=self.url, timeout=2.0) as client:
            while time.monotonic() - started < self.ready_timeout:
                if self.process.poll() is not None:
                    tail = self.log_path.read_text(errors="replace")[-2000:]
                    code = self.process.returncode
                    raise ServerError(f"dra-extender exited with {code} before ready:\n{tail}")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get("/readyz").status_code == 200:
                        return
                time.sleep(0.1)
        raise ServerError(f"dra-extender not ready after {self.ready_timeout:.0f}s (log: {self.log_path})")

    def peak_rss_bytes(self) -> int | None:
        return None if self.process is None else peak_rss_bytes(self.process.pid)

    def cpu_seconds(self) -> float | None:
        return None if self.process is None else cpu_seconds(self.process.pid)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
