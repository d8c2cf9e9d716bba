"""What the project ships, read from ``manifests/`` and changed only where one machine must.

The end-to-end run exists to test what a platform engineer applies: the kube-scheduler
configuration of the ConfigMap, the extender's arguments of the Deployment, and the RBAC
objects. Everything here starts from those files; each change is named with its reason, and
a shipped value that a change assumes (the extender's port, say) is checked first, so a change
to the manifests cannot silently leave the end-to-end run testing something else.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "manifests" / "base"
EXAMPLE = ROOT / "manifests" / "example"
SCHEDULER_NAME = "dra-extender-scheduler"
NAMESPACE = "dra-system"
SERVICE_ACCOUNT = "dra-extender"


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _deployment_container(name: str) -> dict[str, Any]:
    (deployment,) = documents(BASE / "deployment.yaml")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    found: dict[str, Any] = next(c for c in containers if c["name"] == name)
    return found


def scheduler_config(kubeconfig: Path, extender_port: int, *, leader_elect: bool = True) -> dict[str, Any]:
    """The ConfigMap's KubeSchedulerConfiguration, with the two things a pod gives it for free:

    - ``clientConnection.kubeconfig``: outside a pod there is no in-cluster configuration;
    - the extender's ``urlPrefix``: every pair on this machine shares one loopback, so each
      extender listens on a port of its own instead of the pod's 8888.
    """
    (config_map,) = documents(BASE / "scheduler-config.yaml")
    config: dict[str, Any] = yaml.safe_load(config_map["data"]["config.yaml"])
    (extender,) = config["extenders"]
    if extender["urlPrefix"] != "http://127.0.0.1:8888":
        raise AssertionError(f"the shipped urlPrefix changed ({extender['urlPrefix']}): update tests/e2e")
    extender["urlPrefix"] = f"http://127.0.0.1:{extender_port}"
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    if not leader_elect:
        config["leaderElection"] = {"leaderElect": False}
    return config


def in_tree_scheduler_config(kubeconfig: Path, scheduler_name: str) -> dict[str, Any]:
    """kube-scheduler's defaults (DynamicResources on, no extender): the in-tree comparison."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": scheduler_name}],
    }


def extender_args(port: int, probe_port: int, kubeconfig: Path, kubernetes_minor: str | None) -> list[str]:
    """The Deployment's ``serve`` arguments with this machine's ports and kubeconfig.

    ``--kubernetes-version`` names the minor of the kube-scheduler beside the extender (the
    Deployment pins its image's); ``None`` drops the flag, to test the API server's version
    being read instead.
    """
    args: list[str] = list(_deployment_container("extender")["args"])
    replaced = {"--port": str(port), "--probe-port": str(probe_port)}
    if kubernetes_minor is not None:
        replaced["--kubernetes-version"] = kubernetes_minor
    out: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == "--kubernetes-version" and kubernetes_minor is None:
            skip = True
            continue
        if i > 0 and args[i - 1] in replaced:
            out.append(replaced[args[i - 1]])
        else:
            out.append(arg)
    for flag in replaced:
        if flag not in args:
            raise AssertionError(f"the shipped extender arguments lost {flag}: update tests/e2e")
    return [*out, "--kubeconfig", str(kubeconfig)]


def cluster_objects() -> list[dict[str, Any]]:
    """The namespace, ServiceAccount, RBAC and PriorityClass of the base, unchanged."""
    objects: list[dict[str, Any]] = []
    for name in ("namespace.yaml", "extender-rbac.yaml", "scheduler-rbac.yaml", "priorityclass.yaml"):
        objects.extend(copy.deepcopy(documents(BASE / name)))
    return objects


def example(name: str) -> dict[str, Any]:
    (doc,) = documents(EXAMPLE / name)
    return doc
