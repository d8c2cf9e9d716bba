"""In every layout, kube-scheduler's configuration and the extender beside it fit each other."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from extender.cli import _parser, config_from_args
from extender.config import Config
from extender.model.features import Features
from tests.manifests.loader import LAYOUTS, MANIFESTS, built, container, find, one

Objects = tuple[dict[str, Any], ...]


@pytest.fixture(params=LAYOUTS.values(), ids=LAYOUTS.keys())
def objects(request: pytest.FixtureRequest) -> Objects:
    return built(request.param)


def scheduler_config(objects: Objects) -> dict[str, Any]:
    return yaml.safe_load(find(objects, "ConfigMap", "dra-extender-scheduler-config")["data"]["config.yaml"])


def extender_entry(objects: Objects) -> dict[str, Any]:
    (entry,) = scheduler_config(objects)["extenders"]
    return entry


def extender_args(objects: Objects) -> argparse.Namespace:
    return _parser().parse_args(container(objects, "extender")["args"])  # the CLI accepts them as given


def flag_values(command: list[str], flag: str) -> list[str]:
    return [arg.removeprefix(f"{flag}=") for arg in command if arg.startswith(f"{flag}=")]


def seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", duration)
    assert match, f"not a Go duration kube-scheduler accepts here: {duration!r}"
    return float(match[1]) * {"ms": 0.001, "s": 1, "m": 60}[match[2]]


def test_profile_disables_the_in_tree_dra_plugin_for_a_name_the_extender_handles(objects: Objects) -> None:
    config = scheduler_config(objects)
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    (profile,) = config["profiles"]
    handled = config_from_args(extender_args(objects)).handled_scheduler_names
    assert handled is not None and profile["schedulerName"] in handled
    assert {"name": "DynamicResources"} in profile["plugins"]["multiPoint"]["disabled"]


def test_the_scheduler_name_variant_renames_both_sides() -> None:
    base, renamed = built(MANIFESTS), built(LAYOUTS["scheduler-name"])
    (profile,) = scheduler_config(renamed)["profiles"]
    assert profile["schedulerName"] == "gpu-scheduler"
    assert config_from_args(extender_args(renamed)).handled_scheduler_names == ("gpu-scheduler",)
    # Apart from the name, the variant's configuration is the base's.
    unnamed = scheduler_config(renamed)
    unnamed["profiles"][0]["schedulerName"] = "dra-extender-scheduler"
    assert unnamed == scheduler_config(base)


def test_extender_entry_uses_names_only_and_binds(objects: Objects) -> None:
    entry = extender_entry(objects)
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


def test_extender_url_is_the_extenders_loopback_listener(objects: Objects) -> None:
    entry, args = extender_entry(objects), extender_args(objects)
    url = urlsplit(entry["urlPrefix"])
    config = config_from_args(args)
    assert config.kube and config.host == "127.0.0.1"
    assert (url.hostname, url.port) == (config.host, config.port)
    assert url.scheme == ("https" if args.tls_cert_file else "http")


def test_with_tls_kube_scheduler_presents_a_certificate_the_extender_lets_in() -> None:
    objects = built(LAYOUTS["tls"])
    args, tls = extender_args(objects), extender_entry(objects)["tlsConfig"]
    assert args.client_ca_file and args.client_allowed_names == ("dra-extender-scheduler",)
    pod = find(objects, "Deployment", "dra-extender")["spec"]["template"]["spec"]
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}

    def secret_of(c: dict[str, Any], path: Path) -> str:
        (mount,) = [m for m in c["volumeMounts"] if path.parent == Path(m["mountPath"])]
        return secrets[mount["name"]]

    scheduler, extender = container(objects, "kube-scheduler"), container(objects, "extender")
    client = {secret_of(scheduler, Path(tls[key])) for key in ("certFile", "keyFile", "caFile")}
    serving = {secret_of(extender, p) for p in (args.tls_cert_file, args.tls_private_key_file,
                                                 args.client_ca_file)}
    assert client == {"dra-extender-scheduler-client-cert"} and serving == {"dra-extender-serving-cert"}
    assert tls["serverName"] and tls.get("insecure", False) is False


def test_scheduler_container_mounts_its_config(objects: Objects) -> None:
    pod = find(objects, "Deployment", "dra-extender")["spec"]["template"]["spec"]
    scheduler = container(objects, "kube-scheduler")
    (config_file,) = flag_values(scheduler["command"], "--config")
    (mount,) = [m for m in scheduler["volumeMounts"] if m["name"] == "scheduler-config"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert config_file == f"{mount['mountPath']}/config.yaml"
    assert volume["configMap"]["name"] == "dra-extender-scheduler-config"
    leader = scheduler_config(objects)["leaderElection"]
    role = find(objects, "Role", "dra-extender-scheduler-leader-election")
    assert leader["leaderElect"] is True
    assert [leader["resourceName"]] in [rule.get("resourceNames") for rule in role["rules"]]
    assert leader["resourceNamespace"] == role["metadata"]["namespace"]


def test_both_containers_use_the_same_release_and_feature_gates(objects: Objects) -> None:
    with (MANIFESTS / "base" / "kustomization.yaml").open() as f:
        images = {image["name"]: image for image in yaml.safe_load(f)["images"]}
    scheduler = container(objects, "kube-scheduler")
    name, _, tag = scheduler["image"].partition(":")
    pinned = images[name]["newTag"]
    assert tag == pinned, "the Deployment's tag and kustomization.yaml's must agree"
    minor = ".".join(pinned.removeprefix("v").split(".")[:2])
    config = config_from_args(extender_args(objects))
    assert config.kubernetes_version == minor
    gates = ",".join(flag_values(scheduler["command"], "--feature-gates"))
    overrides = dict(item.split("=") for item in gates.split(",")) if gates else {}
    assert {k: v == "true" for k, v in overrides.items()} == dict(config.feature_gate_overrides)
    assert config.feature_gates == Features.for_release(minor, config.feature_gate_overrides)


def test_the_feature_gate_variant_turns_gates_on() -> None:
    config = config_from_args(extender_args(built(LAYOUTS["feature-gates"])))
    assert config.feature_gate_overrides and all(config.feature_gate_overrides.values())
    assert config.feature_gates != Features.defaults(config.kubernetes_version)


def test_example_workload_uses_the_scheduler_and_an_existing_class() -> None:
    workload = one("Deployment", "gpu-workload")["spec"]["template"]["spec"]
    template = one("ResourceClaimTemplate", "one-gpu")
    assert workload["schedulerName"] == "dra-extender-scheduler"
    assert workload["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert one("DeviceClass", request["exactly"]["deviceClassName"])
