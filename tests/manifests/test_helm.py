"""charts/dra-extender renders what manifests/ builds, for the same settings, and is valid.

The chart and kustomize are rendered for each layout (the base, each overlay, the base with
manifests/monitoring) and compared object by object: same (apiVersion, kind, namespace, name),
same content. Two things are normalized, and nothing else:

- the Namespace object: kustomize's base creates ``dra-system``, the chart only with
  ``namespace.create`` (Helm makes the release namespace with ``--create-namespace``). It is
  dropped from kustomize's side unless the case sets ``namespace.create``;
- the order of the names in a ``--feature-gates=`` flag: the chart writes the ``featureGates``
  map sorted by name, the overlay in its own order; both are sorted before comparing.

The chart adds no labels of its own (no helm.sh/chart, no app.kubernetes.io/managed-by), so
labels are compared as they are.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from extender.cli import _parser, config_from_args
from tests.manifests.helm import CHART, NAMESPACE, find_helm, render, run
from tests.manifests.loader import EXTRAS, LAYOUTS, MANIFESTS, ROOT, built, container, find

Obj = dict[str, Any]
GATES = {"DRAPartitionableDevices": True, "DRADeviceTaints": True, "DRAConsumableCapacity": True}
MONITORING = {"monitoring": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True},
                             "dashboard": {"enabled": True}}}
# Each layout of manifests/ (and the base with manifests/monitoring), and the values that make
# the chart render it.
CASES: dict[str, tuple[dict[str, Any], list[Path]]] = {
    "manifests": ({}, [MANIFESTS]),
    "namespace": ({"namespace": {"create": True}}, [MANIFESTS]),
    "tls": ({"tls": {"enabled": True}}, [LAYOUTS["tls"]]),
    "scheduler-name": ({"schedulerName": "gpu-scheduler"}, [LAYOUTS["scheduler-name"]]),
    "feature-gates": ({"featureGates": GATES}, [LAYOUTS["feature-gates"]]),
    "monitoring": (MONITORING, [MANIFESTS, EXTRAS["monitoring"]]),
}
# Every value switched away from its default at once, for the schema checks and lint.
EVERYTHING: dict[str, Any] = {
    **MONITORING, "tls": {"enabled": True}, "schedulerName": "gpu-scheduler", "featureGates": GATES,
    "namespace": {"create": True}, "replicas": 3, "extraArgs": ["--log-format", "json"],
    "image": {"repository": "registry.example.com/x/dra-extender", "tag": "0.1.0", "pullPolicy": "Always"},
    "kubeScheduler": {"image": {"repository": "registry.example.com/kube-scheduler", "tag": "v1.35.1",
                                "pullPolicy": "IfNotPresent"}},
    "priorityClass": {"create": False, "name": "system-cluster-critical"},
    "podDisruptionBudget": {"enabled": True, "maxUnavailable": "50%"},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
}
VARIANTS = {name: values for name, (values, _) in CASES.items()} | {"everything": EVERYTHING}
# As tests/manifests/test_schemas.py: the oldest release with resource.k8s.io/v1, and the newest schema.
VERSIONS = ["1.34.0", kubernetes_validate.latest_version()]


@pytest.fixture(scope="session")
def helm() -> Iterator[Path]:
    binary, why = find_helm()
    if binary is None:
        pytest.skip(why)
    yield binary


def keyed(objects: list[Obj]) -> dict[tuple[str, str, str | None, str], Obj]:
    out = {}
    for obj in objects:
        meta = obj["metadata"]
        out[(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])] = obj
    assert len(out) == len(objects), "two objects with the same kind, namespace and name"
    return out


def _sorted_gates(arguments: list[str]) -> list[str]:
    prefix = "--feature-gates="
    return [prefix + ",".join(sorted(a.removeprefix(prefix).split(","))) if a.startswith(prefix) else a
            for a in arguments]


def normalized(objects: list[Obj], keep_namespace: bool) -> dict[tuple[str, str, str | None, str], Obj]:
    out = []
    for obj in objects:
        if obj["kind"] == "Namespace" and not keep_namespace:
            continue
        if obj["kind"] == "Deployment":
            obj = json.loads(json.dumps(obj))
            for c in obj["spec"]["template"]["spec"]["containers"]:
                for field in ("command", "args"):
                    if field in c:
                        c[field] = _sorted_gates(c[field])
        out.append(obj)
    return keyed(out)


@pytest.mark.parametrize("case", CASES, ids=CASES.keys())
def test_chart_renders_what_kustomize_builds(helm: Path, case: str) -> None:
    values, directories = CASES[case]
    keep_namespace = bool(values.get("namespace", {}).get("create"))
    expected = normalized([obj for d in directories for obj in built(d)], keep_namespace)
    rendered = normalized(render(helm, values), keep_namespace)
    assert sorted(rendered, key=str) == sorted(expected, key=str), "not the same objects"
    for key in sorted(expected, key=str):
        assert rendered[key] == expected[key], f"{key} differs"


def test_every_layout_has_a_case() -> None:
    """A new overlay of manifests/ needs its chart values here (and in the chart)."""
    covered = {d for _, directories in CASES.values() for d in directories}
    assert set(LAYOUTS.values()) | {EXTRAS["monitoring"]} <= covered


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANTS.keys())
def test_every_rendered_object_is_valid(helm: Path, variant: str, version: str) -> None:
    # Prometheus Operator objects have no official schema here (as in test_schemas.py).
    objects = [o for o in render(helm, VARIANTS[variant])
               if not o["apiVersion"].startswith("monitoring.coreos.com/")]
    assert objects
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("variant", ["defaults", "everything"])
def test_helm_lint_is_clean(helm: Path, variant: str) -> None:
    done = run(helm, "lint", "--strict", "--namespace", NAMESPACE, str(CHART),
               values=EVERYTHING if variant == "everything" else {})
    assert "0 chart(s) failed" in done.stdout, done.stdout


def test_everything_changes_what_it_names(helm: Path) -> None:
    objects = render(helm, EVERYTHING)
    deployment = find(objects, "Deployment", "dra-extender")
    pod = deployment["spec"]["template"]["spec"]
    extender, scheduler = container(tuple(objects), "extender"), container(tuple(objects), "kube-scheduler")
    assert deployment["spec"]["replicas"] == 3
    assert extender["image"] == "registry.example.com/x/dra-extender:0.1.0"
    assert extender["imagePullPolicy"] == "Always"
    assert scheduler["image"] == "registry.example.com/kube-scheduler:v1.35.1"
    # --kubernetes-version follows kube-scheduler's tag.
    version = extender["args"][extender["args"].index("--kubernetes-version") + 1]
    assert version == "1.35"
    assert extender["args"][-2:] == ["--log-format", "json"]
    # The extender accepts its arguments, and both containers agree on the name and the gates.
    config = config_from_args(_parser().parse_args(extender["args"]))
    assert config.handled_scheduler_names == ("gpu-scheduler",)
    assert dict(config.feature_gate_overrides) == GATES
    assert [a for a in scheduler["command"] if a.startswith("--feature-gates=")] == [
        a for a in extender["args"] if a.startswith("--feature-gates=")]
    assert config.kubernetes_version == "1.35" and config.client_allowed_names == ("dra-extender-scheduler",)
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert not [o for o in objects if o["kind"] == "PriorityClass"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"} and len(pod["tolerations"]) == 1
    assert find(objects, "PodDisruptionBudget", "dra-extender")["spec"]["maxUnavailable"] == "50%"


def test_switches_leave_objects_out(helm: Path) -> None:
    objects = render(helm, {"networkPolicy": {"enabled": False}, "podDisruptionBudget": {"enabled": False},
                            "priorityClass": {"create": False, "name": ""}})
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"NetworkPolicy", "PodDisruptionBudget", "PriorityClass", "Namespace"}
    assert "priorityClassName" not in find(objects, "Deployment", "dra-extender")["spec"]["template"]["spec"]


def test_release_namespace_is_used_everywhere_but_kube_system(helm: Path) -> None:
    objects = render(helm, {"namespace": {"create": True}}, namespace="gpu-system")
    for obj in objects:
        where = obj["metadata"].get("namespace")
        if obj["kind"] in {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass"}:
            assert where is None
            for subject in obj.get("subjects", []):
                assert subject["namespace"] == "gpu-system"
        elif obj["metadata"]["name"] == "dra-extender-scheduler-auth-reader":
            assert where == "kube-system"  # next to extension-apiserver-authentication-reader
        else:
            assert where == "gpu-system", obj["metadata"]["name"]
    config_map = find(objects, "ConfigMap", "dra-extender-scheduler-config")
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    assert config["leaderElection"]["resourceNamespace"] == "gpu-system"
    assert find(objects, "Namespace", "gpu-system")


@pytest.mark.parametrize(("values", "message"), [
    ({"replicas": 0}, "replicas"),
    ({"tls": {"enabled": "yes"}}, "enabled"),
    ({"featureGates": {"DRADeviceTaints": "on"}}, "DRADeviceTaints"),
    ({"schedulerName": "Not A Name"}, "schedulerName"),
    ({"imag": {"repository": "x"}}, "imag"),
    ({"kubeScheduler": {"image": {"tag": "latest"}}}, "kubeScheduler.kubernetesVersion"),
])
def test_bad_values_are_refused(helm: Path, values: dict[str, Any], message: str) -> None:
    done = run(helm, "template", "dra-extender", str(CHART), values=values, check=False)
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_notes_say_how_to_point_a_pod_at_the_scheduler(helm: Path, tmp_path: Path) -> None:
    # Only `helm install` prints NOTES.txt, and it needs a cluster even with --dry-run=client; so a
    # copy of the chart renders the notes with `tpl` into a ConfigMap that `helm template` prints.
    chart = tmp_path / "dra-extender"
    shutil.copytree(CHART, chart)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "files" / "notes.txt")
    (chart / "templates" / "notes-test.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
        'data: {notes: {{ tpl (.Files.Get "files/notes.txt") . | toJson }}}\n')
    output = run(helm, "template", "dra-extender", str(chart), "--namespace", NAMESPACE,
                 "--show-only", "templates/notes-test.yaml", values={"schedulerName": "gpu-scheduler"}).stdout
    notes = yaml.safe_load(output)["data"]["notes"]
    assert "schedulerName: gpu-scheduler" in notes
    assert "registry.example.com/dra-extender" in notes and "WARNING" in notes  # the placeholder image


# Without helm: the chart's copies and defaults agree with manifests/.


def test_the_dashboard_is_the_one_of_manifests_monitoring() -> None:
    copy = CHART / "files" / "dashboard.json"
    assert copy.read_bytes() == (MANIFESTS / "monitoring" / "dashboard.json").read_bytes(), (
        f"cp manifests/monitoring/dashboard.json {copy.relative_to(ROOT)}")


def test_defaults_are_the_images_of_the_base() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    with (ROOT / "pyproject.toml").open("rb") as f:
        version = tomllib.load(f)["project"]["version"]
    kustomization = yaml.safe_load((MANIFESTS / "base" / "kustomization.yaml").read_text())
    images = {i["name"]: i for i in kustomization["images"]}
    assert chart["appVersion"] == version == images["dra-extender"]["newTag"]
    assert values["image"]["tag"] in ("", version)
    assert values["image"]["repository"] == images["dra-extender"]["newName"]
    scheduler = values["kubeScheduler"]["image"]
    assert scheduler["tag"] == images[scheduler["repository"]]["newTag"]


def test_the_schema_describes_every_default() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values) <= set(schema["properties"])
    assert schema["additionalProperties"] is False
