"""A real control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager, and
pairs of kube-scheduler + dra-extender — each a process started here and stopped by its PID.

No kubelet runs: Nodes and ResourceSlices are objects the scenarios create, as a node's
kubelet and a DRA driver would publish them. What that forces:

- the ``TaintNodesByCondition`` admission plugin taints every new Node ``not-ready``, and the
  node lifecycle controller that would lift it (or taint the node unreachable) is not run, so
  scenarios lift it themselves;
- kube-controller-manager runs only controllers that make sense without kubelets: the
  resourceclaim controller (claims from templates, reservations, deallocation), the garbage
  collector (claims owned by deleted pods), namespaces, ServiceAccounts;
- a pod bound to a node ends when a scenario says so: deleted with grace period 0, or
  marked ``Succeeded``/``Failed`` as the kubelet would.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from tests.e2e import shipped
from tests.e2e.api import Api, ApiError, wait_for
from tests.e2e.pki import Pki


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url, verify=False, timeout=2.0).status_code == 200
    except httpx.TransportError:
        return False


@dataclass
class Process:
    """One component: started with its output in ``logs/<name>.log``, its PID in ``pids/``."""

    name: str
    argv: list[str]
    run: Path
    health: str = ""
    env: dict[str, str] = field(default_factory=dict)
    popen: subprocess.Popen[bytes] | None = None
    # Restarted when it exits on its own, as the kubelet restarts a container of the shipped
    # Deployment (kube-scheduler exits when it loses its lease, by design).
    supervised: bool = False
    restarts: int = 0
    wanted: bool = False  # started here and not stopped here since

    @property
    def log(self) -> Path:
        return self.run / "logs" / f"{self.name}.log"

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def start(self, wait: float = 90.0) -> None:
        if self.alive:
            return
        self.wanted = True
        (self.run / "logs").mkdir(parents=True, exist_ok=True)
        (self.run / "pids").mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"=== {time.strftime('%H:%M:%S')} {' '.join(self.argv)}\n".encode())
            out.flush()
            self.popen = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
        (self.run / "pids" / f"{self.name}.pid").write_text(str(self.popen.pid))
        if self.health:
            wait_for(
                f"{self.name} healthy at {self.health} (log: {self.log})",
                lambda: self._check_running() and _healthy(self.health),
                wait,
            )

    def exited_on_its_own(self) -> bool:
        popen = self.popen
        return self.wanted and popen is not None and popen.poll() is not None

    def _check_running(self) -> bool:
        if not self.alive:
            tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise RuntimeError(f"{self.name} exited ({self.popen and self.popen.returncode}):\n{tail}")
        return True

    def stop(self, sig: int = signal.SIGTERM, wait: float = 20.0) -> None:
        """Stop by PID; a process that ignores ``sig`` for ``wait`` seconds is killed."""
        self.wanted = False
        if self.popen is None:
            return
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, sig)
            try:
                self.popen.wait(wait)
            except subprocess.TimeoutExpired:
                os.kill(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
        (self.run / "pids" / f"{self.name}.pid").unlink(missing_ok=True)
        self.popen = None



def stop_leftovers(run: Path) -> list[str]:
    """Stop what an interrupted run left: the PIDs in ``run/pids`` (and their process groups)."""
    stopped = []
    for pid_file in sorted((run / "pids").glob("*.pid")) if (run / "pids").exists() else []:
        pid = int(pid_file.read_text())
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
            stopped.append(f"{pid_file.stem} ({pid})")
        pid_file.unlink()
    return stopped


@dataclass
class Pair:
    """One replica of the shipped pod: the extender and the kube-scheduler that calls it."""

    index: int
    extender: Process
    scheduler: Process
    port: int

    def start(self) -> None:
        self.extender.start()
        self.scheduler.start()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        self.scheduler.stop(sig)
        self.extender.stop(sig)

    @property
    def extender_url(self) -> str:
        """The extender's own port: /debug/* and the verbs, as kube-scheduler reaches them."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def probe_url(self) -> str:
        """/healthz, /readyz and /metrics."""
        return self.extender.health.rsplit("/", 1)[0]


class ControlPlane:
    """etcd, kube-apiserver and kube-controller-manager of one release, and scheduler pairs."""

    def __init__(self, bin_dir: Path, run: Path, version: str) -> None:
        self.bin, self.run, self.version = bin_dir, run, version
        self.minor = ".".join(version.split(".")[:2])
        run.mkdir(parents=True, exist_ok=True)
        self.pki = Pki.create(run / "pki")
        self.api_port = free_port()
        self.server = f"https://127.0.0.1:{self.api_port}"
        etcd_port, etcd_peer = free_port(), free_port()
        self.etcd = Process(
            "etcd",
            [
                str(bin_dir / "etcd"),
                "--name",
                "e2e",
                "--data-dir",
                str(run / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{etcd_peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{etcd_peer}",
                "--initial-cluster",
                f"e2e=http://127.0.0.1:{etcd_peer}",
                "--quota-backend-bytes",
                str(4 << 30),
                "--unsafe-no-fsync",
            ],
            run,
            health=f"http://127.0.0.1:{etcd_port}/health",
        )
        p = self.pki
        self.apiserver = Process(
            "kube-apiserver",
            [
                str(bin_dir / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--tls-cert-file={p.cert('apiserver')}",
                f"--tls-private-key-file={p.key('apiserver')}",
                f"--client-ca-file={p.ca}",
                f"--service-account-key-file={p.service_account_public_key}",
                f"--service-account-signing-key-file={p.service_account_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--authorization-mode=Node,RBAC",
                "--service-cluster-ip-range=10.96.0.0/16",
                # The `kubernetes` Service's Endpoints would name 127.0.0.1, which their validation
                # refuses; nothing here uses them.
                "--endpoint-reconciler-type=none",
                "--profiling=false",
            ],
            run,
            health="",
        )
        kcm_port = free_port()
        kcm_kubeconfig = p.kubeconfig(
            run / "controller-manager.kubeconfig", self.server, identity="controller-manager"
        )
        self.controller_manager = Process(
            "kube-controller-manager",
            [
                str(bin_dir / "kube-controller-manager"),
                f"--kubeconfig={kcm_kubeconfig}",
                f"--authentication-kubeconfig={kcm_kubeconfig}",
                f"--authorization-kubeconfig={kcm_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                "--leader-elect=false",
                "--controllers=resourceclaim-controller,garbage-collector-controller,namespace-controller,"
                "serviceaccount-controller,disruption-controller,deployment-controller,replicaset-controller",
                # Each controller as its own ServiceAccount, with the roles bootstrap RBAC gives it,
                # as clusters run it.
                "--use-service-account-credentials=true",
                f"--root-ca-file={p.ca}",
                f"--service-account-private-key-file={p.service_account_key}",
            ],
            run,
            health=f"https://127.0.0.1:{kcm_port}/healthz",
        )
        self.api = Api(self.server, p.ca, p.cert("admin"), p.key("admin"))
        self.pairs: list[Pair] = []
        self.others: list[Process] = []
        self._supervising = threading.Event()
        self._supervisor = threading.Thread(target=self._supervise, daemon=True)

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self.etcd.start()
        self.start_apiserver()
        for obj in shipped.cluster_objects():
            self.api.apply(obj)
        self.controller_manager.start()
        self._service_account_kubeconfig = self._token_kubeconfig()
        self._supervisor.start()

    def _supervise(self) -> None:
        """The kubelet's part: a container that exits is started again (after a second; the
        kubelet's crash-loop back-off starts at ten, which only makes the scenarios slower), and
        a pod being deleted gracefully on a node is confirmed gone (its containers stopped)."""
        while not self._supervising.wait(1.0):
            with contextlib.suppress(Exception):  # the API server may be away (the outage scenario)
                for pod in self.api.list("Pod"):
                    meta = pod["metadata"]
                    if meta.get("deletionTimestamp") and pod["spec"].get("nodeName"):
                        self.api.delete("Pod", meta["name"], meta["namespace"], grace=0)
            for process in [p for pair in self.pairs for p in (pair.extender, pair.scheduler)]:
                if process.supervised and process.exited_on_its_own():
                    code = process.popen.returncode if process.popen else None
                    with process.log.open("a") as out:
                        out.write(f"=== {time.strftime('%H:%M:%S')} exited with {code}: restarting\n")
                    process.restarts += 1
                    process.popen = None
                    with contextlib.suppress(Exception):  # a failed start is retried next round
                        process.start(wait=0)

    def start_apiserver(self) -> None:
        self.apiserver.start()
        wait_for(
            f"kube-apiserver ready (log: {self.apiserver.log})",
            lambda: self.apiserver._check_running() and self.api.ready(),
            120,
        )

    def down(self) -> None:
        self._supervising.set()
        for process in [
            *self.others,
            *(p for pair in self.pairs for p in (pair.scheduler, pair.extender)),
            self.controller_manager,
            self.apiserver,
            self.etcd,
        ]:
            process.stop()
        self.api.close()

    def _token_kubeconfig(self) -> Path:
        """A kubeconfig for the shipped pod's identity, the ServiceAccount dra-system/dra-extender:
        both the extender and its kube-scheduler act with exactly the RBAC of manifests/base."""
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 7 * 24 * 3600},
        }
        path = f"/api/v1/namespaces/{shipped.NAMESPACE}/serviceaccounts/{shipped.SERVICE_ACCOUNT}/token"
        token = wait_for(
            "a token of the extender's ServiceAccount",
            lambda: self.api.request("POST", path, request)["status"]["token"],
            30,
        )
        return self.pki.kubeconfig(self.run / "dra-extender.kubeconfig", self.server, token=token)

    # --- scheduler pairs -------------------------------------------------------------------------

    def pair(self, *, kubernetes_minor: str | None = "", extra_args: tuple[str, ...] = ()) -> Pair:
        """A new replica of the shipped pod (not started). ``kubernetes_minor``: the extender's
        ``--kubernetes-version`` (default: this control plane's; ``None``: the flag left out)."""
        index = len(self.pairs)
        port, probe, sched_port = free_port(), free_port(), free_port()
        minor = self.minor if kubernetes_minor == "" else kubernetes_minor
        kubeconfig = self._service_account_kubeconfig
        extender = Process(
            f"dra-extender-{index}",
            [
                str(Path(sys.executable).parent / "dra-extender"),
                *shipped.extender_args(port, probe, kubeconfig, minor),
                *extra_args,
            ],
            self.run,
            health=f"http://127.0.0.1:{probe}/healthz",
            supervised=True,
            env={"POD_NAMESPACE": shipped.NAMESPACE, "POD_NAME": f"dra-extender-{index}"},
        )
        config = self.run / f"scheduler-{index}.yaml"
        config.write_text(yaml.safe_dump(shipped.scheduler_config(kubeconfig, port)))
        scheduler = Process(
            f"kube-scheduler-{index}",
            [
                str(self.bin / "kube-scheduler"),
                f"--config={config}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={sched_port}",
            ],
            self.run,
            health=f"https://127.0.0.1:{sched_port}/readyz",
            supervised=True,
        )
        pair = Pair(index, extender, scheduler, port)
        self.pairs.append(pair)
        return pair

    def in_tree_scheduler(self, scheduler_name: str) -> Process:
        """A stock kube-scheduler whose profile ``scheduler_name`` allocates devices itself."""
        kubeconfig = self.pki.kubeconfig(self.run / "scheduler.kubeconfig", self.server, identity="scheduler")
        config = self.run / "in-tree-scheduler.yaml"
        config.write_text(yaml.safe_dump(shipped.in_tree_scheduler_config(kubeconfig, scheduler_name)))
        port = free_port()
        process = Process(
            "kube-scheduler-in-tree",
            [
                str(self.bin / "kube-scheduler"),
                f"--config={config}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
            ],
            self.run,
            health=f"https://127.0.0.1:{port}/readyz",
        )
        self.others.append(process)
        return process

    def server_version(self) -> str:
        try:
            version: str = self.api.request("GET", "/version")["gitVersion"]
            return version
        except ApiError:
            return "unknown"
