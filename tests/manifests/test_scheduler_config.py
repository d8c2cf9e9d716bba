"""The second kube-scheduler's configuration, and the Deployments, fit the extender they talk to."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import yaml

from extender.cli import _parser, config_from_args
from extender.config import Config
from extender.model.features import Features
from tests.manifests.loader import MANIFESTS, one


def scheduler_config() -> dict[str, Any]:
    return yaml.safe_load(one("ConfigMap", "dra-extender-scheduler-config")["data"]["config.yaml"])


def extender_entry() -> dict[str, Any]:
    (entry,) = scheduler_config()["extenders"]
    return entry


def seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", duration)
    assert match, f"not a Go duration kube-scheduler accepts here: {duration!r}"
    return float(match[1]) * {"ms": 0.001, "s": 1, "m": 60}[match[2]]


def test_profile_disables_the_in_tree_dra_plugin_for_our_scheduler_name() -> None:
    config = scheduler_config()
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    (profile,) = config["profiles"]
    assert profile["schedulerName"] == "dra-extender-scheduler"
    # the extender handles these pods
    assert profile["schedulerName"] in (Config(kube=True).handled_scheduler_names or ())
    assert {"name": "DynamicResources"} in profile["plugins"]["multiPoint"]["disabled"]


def test_extender_entry_uses_names_only_and_binds() -> None:
    entry = extender_entry()
    assert entry["filterVerb"] == "filter" and entry["prioritizeVerb"] == "prioritize"
    assert entry["bindVerb"] == "bind" and entry["preemptVerb"] == "preempt"
    assert entry["nodeCacheCapable"] is True
    assert "managedResources" not in entry  # pods with only resourceClaims must reach the extender
    assert entry["weight"] > 0  # required by kube-scheduler's validation when prioritizeVerb is set
    assert entry.get("ignorable", False) is False  # a skipped bind would bind pods without their claims
    # The extender must answer filter and bind (rolling back on its own deadline) before the
    # scheduler stops listening.
    assert seconds(entry["httpTimeout"]) > Config().filter_timeout_s
    assert seconds(entry["httpTimeout"]) > Config().bind_timeout_s


def test_extender_url_reaches_the_service_and_container() -> None:
    url = urlsplit(extender_entry()["urlPrefix"])
    service = one("Service", "dra-extender")
    deployment = one("Deployment", "dra-extender")
    assert url.hostname == f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    (port,) = service["spec"]["ports"]
    assert url.port == port["port"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert port["targetPort"] in named
    args = config_from_args(_parser().parse_args(container["args"]))  # the CLI accepts the args as given
    assert args.kube and args.port == named[port["targetPort"]] and args.host == "0.0.0.0"
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_extender_deployment_is_hardened_and_probed() -> None:
    deployment = one("Deployment", "dra-extender")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert deployment["spec"]["replicas"] == 2
    assert spec["serviceAccountName"] == "dra-extender"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]


def test_scheduler_deployment_mounts_its_config() -> None:
    spec = one("Deployment", "dra-extender-scheduler")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    (flag,) = [arg for arg in container["command"] if arg.startswith("--config=")]
    (mount,) = container["volumeMounts"]
    (volume,) = spec["volumes"]
    assert flag == f"--config={mount['mountPath']}/config.yaml"
    assert volume["name"] == mount["name"] and volume["configMap"]["name"] == "dra-extender-scheduler-config"
    leader = scheduler_config()["leaderElection"]
    role = one("Role", "dra-extender-scheduler-leader-election")
    assert [leader["resourceName"]] in [rule.get("resourceNames") for rule in role["rules"]]
    assert leader["resourceNamespace"] == role["metadata"]["namespace"]


def test_example_workload_uses_the_scheduler_and_an_existing_class() -> None:
    workload = one("Deployment", "gpu-workload")["spec"]["template"]["spec"]
    template = one("ResourceClaimTemplate", "one-gpu")
    assert workload["schedulerName"] == "dra-extender-scheduler"
    assert workload["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert one("DeviceClass", request["exactly"]["deviceClassName"])


def test_the_extender_uses_the_feature_gates_of_the_kube_scheduler_it_ships_with() -> None:
    with (MANIFESTS / "kustomization.yaml").open() as f:
        images = {image["name"]: image for image in yaml.safe_load(f)["images"]}
    container = one("Deployment", "dra-extender-scheduler")["spec"]["template"]["spec"]["containers"][0]
    name, _, tag = container["image"].partition(":")
    pinned = images[name]["newTag"]
    assert tag == pinned, "the Deployment's tag and kustomization.yaml's must agree"
    minor = ".".join(pinned.removeprefix("v").split(".")[:2])
    args = one("Deployment", "dra-extender")["spec"]["template"]["spec"]["containers"][0]["args"]
    config = config_from_args(_parser().parse_args(args))
    assert config.kubernetes_version == minor
    assert config.feature_gates == Features.defaults(minor)
