"""Loading a state directory or the demo: errors name their file, documents wait in a compact form
and are let go once applied, every kind arrives."""

from __future__ import annotations

import gc
import json
import logging
import subprocess
import sys
import weakref
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender import cli
from extender.cli import main
from extender.local.cluster import LocalCluster, load_local
from extender.local.manifests import JsonText, read_manifests
from extender.local.store import ManifestError
from extender.state import ClusterState
from tests.api.threaded import free_port
from tests.scheduling.cluster import gpu, gpu_cluster, node, node_slice, pod, template


class Doc(dict):
    """A plain dict that can be weakly referenced, to see when the loader lets it go."""


class Probe(ClusterState):
    """Records, at each apply, which of the loaded documents are still alive."""

    def __init__(self, refs: list[weakref.ref[Doc]]) -> None:
        super().__init__()
        self.refs = refs
        self.alive: list[list[bool]] = []

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        self.alive.append([ref() is not None for ref in self.refs])
        super().apply(kind, obj)


def test_documents_are_released_as_they_are_applied():
    refs: list[weakref.ref[Doc]] = []

    def docs():
        # Pods-last order is the loader's: the slice comes after the node although given first.
        for obj in (node_slice("node-0", [gpu("gpu-0")]), node("node-0"), node("node-1")):
            doc = Doc(obj)
            refs.append(weakref.ref(doc))
            yield ("object", doc)

    state = Probe(refs)
    assert LocalCluster(state).load(docs()) == 3
    # Applied in load order: node-0, node-1, then the slice; each earlier document is gone.
    assert state.alive == [[True, True, True], [True, False, True], [True, False, False]]
    assert state.counts()["Node"] == 2 and state.counts()["ResourceSlice"] == 1


def test_documents_wait_in_plain_json_with_repeated_subtrees_shared(tmp_path: Path):
    obj = node_slice("node-0", [gpu(f"gpu-{i}") for i in range(3)])
    obj["metadata"]["creationTimestamp"] = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)  # a YAML timestamp
    (tmp_path / "slices.yaml").write_text(yaml.safe_dump(obj))
    [(origin, doc)] = read_manifests([tmp_path / "slices.yaml"])
    assert origin.endswith("slices.yaml (document 1)")
    assert doc["metadata"]["creationTimestamp"] == "2026-01-02T03:04:05+00:00"  # a string, as in JSON
    first, second, third = doc["spec"]["devices"]
    assert first["attributes"] is second["attributes"] is third["attributes"]
    assert [d["name"] for d in (first, second, third)] == ["gpu-0", "gpu-1", "gpu-2"]


def test_a_document_that_is_not_json_is_still_refused_with_its_origin(tmp_path: Path):
    (tmp_path / "nodes.yaml").write_text("kind: Node\nmetadata: {name: n, labels: {1: a}}\n")
    docs = read_manifests([tmp_path / "nodes.yaml"])
    refused = r"nodes\.yaml \(document 1\): metadata\.labels: not representable as JSON"
    with pytest.raises(ManifestError, match=refused):
        LocalCluster(ClusterState()).load(docs)


def test_invalid_file_is_rejected_with_its_name(tmp_path: Path):
    (tmp_path / "good.yaml").write_text(yaml.safe_dump_all(gpu_cluster(nodes=1)))
    bad = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"}, "spec": []}
    (tmp_path / "zz-bad.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ManifestError, match=r"zz-bad\.yaml \(document 1\): .*ResourceClaim"):
        load_local(ClusterState(), tmp_path)
    (tmp_path / "zz-bad.yaml").write_text("kind: [unclosed")
    with pytest.raises(ManifestError, match=r"zz-bad\.yaml: while parsing .* line 1, column 7") as refused:
        load_local(ClusterState(), tmp_path)
    assert "\n" not in str(refused.value)
    (tmp_path / "zz-bad.yaml").write_text(
        yaml.safe_dump({"apiVersion": "resource.k8s.io/v1beta1", "kind": "DeviceClass"})
    )
    with pytest.raises(ManifestError, match="v1beta1"):
        load_local(ClusterState(), tmp_path)


def test_cli_exits_non_zero_on_bad_state_and_bad_gates(tmp_path: Path, capsys):
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"kind": "Node", "metadata": {"labels": {}}}))
    assert main(["serve", "--state", str(tmp_path), "--port", str(free_port())]) != 0
    assert "bad.yaml" in capsys.readouterr().err
    assert main(["serve", "--port", str(free_port()), "--feature-gates", "DRANope=true"]) != 0
    assert "unknown feature gate" in capsys.readouterr().err


@pytest.fixture
def refused(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """``serve`` with some flags on a free port, which must exit with code 2 before it would
    serve (a start that goes through fails the test rather than serving on): the one line it wrote."""

    def started(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("serve started")

    monkeypatch.setattr(cli, "servers", started)

    def run(*flags: str) -> str:
        assert main(["serve", "--port", str(free_port()), *flags]) == 2
        [line] = capsys.readouterr().err.splitlines()
        return line

    return run


def test_a_state_directory_that_does_not_exist_or_is_not_one_stops_the_start(
    tmp_path: Path, refused: Callable[..., str]
):
    missing = tmp_path / "no-such-dir"
    assert refused("--state", str(missing)) == f"dra-extender: --state {missing}: no such directory"
    (tmp_path / "file.yaml").write_text(yaml.safe_dump(node("n")))
    line = refused("--state", str(tmp_path / "file.yaml"))
    assert line == f"dra-extender: --state {tmp_path / 'file.yaml'}: not a directory"


def test_an_empty_state_directory_stops_the_start(tmp_path: Path, refused: Callable[..., str]):
    # A mistyped or not yet filled directory would serve a cluster in which nothing fits.
    (tmp_path / "notes.txt").write_text("not a manifest")
    (tmp_path / "sub.yaml").mkdir()
    line = refused("--state", str(tmp_path))
    assert line == f"dra-extender: --state {tmp_path}: no *.yaml, *.yml or *.json file in it"


def test_an_unreadable_state_directory_stops_the_start(
    tmp_path: Path, refused: Callable[..., str], monkeypatch: pytest.MonkeyPatch
):
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(node("n")))
    tmp_path.chmod(0)  # root reads it anyway: the listing is refused below as well
    listing = Path.iterdir

    def unreadable(self: Path) -> Any:
        if self == tmp_path:
            raise PermissionError(13, "Permission denied", str(self))
        return listing(self)

    monkeypatch.setattr(Path, "iterdir", unreadable)
    try:
        line = refused("--state", str(tmp_path))
    finally:
        tmp_path.chmod(0o700)
    assert line == f"dra-extender: --state {tmp_path}: cannot list it: Permission denied"


def test_yml_files_load_like_yaml(tmp_path: Path):
    (tmp_path / "cluster.yml").write_text(yaml.safe_dump_all(gpu_cluster(nodes=2)))
    state = ClusterState()
    load_local(state, tmp_path)
    assert len(state.nodes) == 2 and len(state.slices) == 2


def test_a_state_directory_without_an_object_the_extender_uses_is_served_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    (tmp_path / "app.yaml").write_text("kind: Service\nmetadata: {name: a}\n")
    (tmp_path / "empty.yaml").write_text("# nothing yet\n")
    state = ClusterState()
    with caplog.at_level(logging.WARNING):
        load_local(state, tmp_path)
    assert state.synced and not any(state.counts().values())
    [warning] = [r.getMessage() for r in caplog.records if "no object" in r.getMessage()]
    assert warning.startswith(f"--state {tmp_path}: 2 files, no object of a kind the extender uses (")
    assert "Node" in warning and "ResourceSlice" in warning


def test_a_yaml_file_that_is_not_utf8_stops_the_start_naming_it(tmp_path: Path, refused: Callable[..., str]):
    (tmp_path / "cluster.yaml").write_bytes(b"kind: Node\nmetadata: {name: \"n\xff\"}\n")
    line = refused("--state", str(tmp_path))
    assert line.startswith(f"dra-extender: {tmp_path / 'cluster.yaml'}: ") and "utf-8" in line.lower(), line


def _claim_requests(value: object) -> dict[str, Any]:
    return {"kind": "ResourceClaim", "metadata": {"name": "x"}, "spec": {"devices": {"requests": value}}}


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"kind": {"a": 1}, "metadata": {"name": "x"}}, "kind {'a': 1} is not supported"),
        ({"kind": [1], "metadata": {"name": "x"}}, "kind [1] is not supported"),
        (_claim_requests(1.5), "ResourceClaim default/x: spec.devices.requests: must be a list, got float"),
        (_claim_requests(True), "ResourceClaim default/x: spec.devices.requests: must be a list, got bool"),
        (_claim_requests(-1), "ResourceClaim default/x: spec.devices.requests: must be a list, got int"),
        (node("n", zone=2**64), "metadata.labels.zone: not representable as JSON"),
    ],
)
def test_serve_refuses_a_malformed_object_with_exit_code_2_and_one_line_naming_file_document_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: dict[str, Any], field: str
):
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all([node("ok"), doc]))
    assert main(["serve", "--state", str(tmp_path), "--port", str(free_port())]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"dra-extender: {tmp_path / 'cluster.yaml'} (document 2): {field}"), line


def test_serve_started_as_a_program_refuses_a_malformed_object_without_a_traceback(tmp_path: Path):
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all([node("ok"), _claim_requests(1.5)]))
    done = subprocess.run(
        [sys.executable, "-m", "extender", "serve", "--state", str(tmp_path), "--log-level", "warning",
         "--port", str(free_port())],
        cwd=Path(__file__).parents[2], capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"dra-extender: {tmp_path / 'cluster.yaml'} (document 2): "
        "ResourceClaim default/x: spec.devices.requests: must be a list, got float"
    ]


def test_multi_document_directory_loads_every_kind(tmp_path: Path):
    rule = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": "drain"},
            "spec": {"taint": {"key": "maintenance", "effect": "NoSchedule"}}}
    budget = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep"},
              "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}}}
    group = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": "g"},
             "spec": {"schedulingPolicy": {"basic": {}}}}
    objs = [*gpu_cluster(nodes=2), template("one"), pod("p", templates={"gpu": "one"}), rule, budget, group]
    (tmp_path / "a.yaml").write_text(yaml.safe_dump_all(objs[:3]))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump_all(objs[3:]))
    (tmp_path / "ignored.txt").write_text("not yaml")
    state = ClusterState()
    load_local(state, tmp_path)
    assert state.synced
    assert state.counts() == {
        "Node": 2,
        "DeviceClass": 1,
        "ResourceSlice": 2,
        "DeviceTaintRule": 1,
        "ResourceClaim": 1,
        "ResourceClaimTemplate": 1,
        "PodGroup": 1,
        "Pod": 1,
        "PodDisruptionBudget": 1,
    }


def test_demo_cluster_loads_with_generated_claims():
    state = ClusterState()
    load_local(state, None)
    assert state.synced and len(state.nodes) == 3 and len(state.slices) == 2
    pods = {p.name: p for p in state.pods.values()}
    assert all(state.claim("default", n) for p in pods.values() for n in p.claim_statuses.values())
    assert any(not p.claims for p in pods.values())  # one pod needs no device at all


def test_a_state_directory_of_ones_own_manifests_loads_the_kinds_the_extender_uses(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    # The project's own example: a Deployment, a DeviceClass, a ResourceClaimTemplate.
    for path in Path("manifests/example").glob("*.yaml"):
        (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / "more.yaml").write_text(
        "kind: Service\nmetadata: {name: a}\n---\nkind: Service\nmetadata: {name: b}\n"
    )
    state = ClusterState()
    with caplog.at_level(logging.WARNING):
        load_local(state, tmp_path)
    assert state.classes and state.counts()["ResourceClaimTemplate"] == 1
    skipped = [r.getMessage() for r in caplog.records if "skipping" in r.getMessage()]
    assert len(skipped) == 3  # one line per kind: Deployment, Kustomization, Service
    assert any("2 Service object(s)" in line and "and 1 more" in line for line in skipped)


def test_json_state_files_load_like_yaml(tmp_path: Path):
    # kubectl's `-o json` shapes: a List of objects, and one object alone.
    objs = [*gpu_cluster(nodes=2), template("one"), pod("p", templates={"gpu": "one"})]
    as_json, as_yaml = tmp_path / "json", tmp_path / "yaml"
    as_json.mkdir()
    as_yaml.mkdir()
    (as_json / "a.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs[:-1]}))
    (as_json / "b.json").write_text(json.dumps(objs[-1]))
    (as_yaml / "a.yaml").write_text(yaml.safe_dump_all(objs))
    from_json, from_yaml = ClusterState(), ClusterState()
    load_local(from_json, as_json)
    load_local(from_yaml, as_yaml)
    assert from_json.counts() == from_yaml.counts()
    assert from_json.counts()["ResourceClaim"] == 1 and from_json.counts()["Pod"] == 1
    origins = [origin for origin, _ in read_manifests([as_json / "a.json", as_json / "b.json"])]
    assert origins[0] == f"{as_json / 'a.json'} (item 1)" and origins[-1] == f"{as_json / 'b.json'}"


def test_json_and_yaml_files_of_one_directory_load_together(tmp_path: Path):
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(node("n1")))
    (tmp_path / "b.json").write_text(json.dumps(node("n2")))
    state = ClusterState()
    load_local(state, tmp_path)
    assert sorted(state.nodes) == ["n1", "n2"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"kind": "Node", ', r"bad\.json: unexpected end of data: line 1 column 18"),
        ("[1, 2]", r"bad\.json: expected a Kubernetes object or a List, got an array"),
        ('{"kind": "List", "items": {}}', r"bad\.json: items: expected an array of objects"),
    ],
)
def test_a_malformed_json_file_is_refused_with_its_name(tmp_path: Path, text: str, message: str):
    (tmp_path / "bad.json").write_text(text)
    with pytest.raises(ManifestError, match=message):
        read_manifests([tmp_path / "bad.json"])


class GcProbe(ClusterState):
    """Records whether the cyclic garbage collector was enabled at each apply."""

    def __init__(self) -> None:
        super().__init__()
        self.gc_enabled: list[bool] = []

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        self.gc_enabled.append(gc.isenabled())
        super().apply(kind, obj)


def test_loading_pauses_the_cyclic_gc_and_restores_it(tmp_path: Path):
    # Loading allocates millions of long-lived objects and no garbage cycles worth collecting:
    # full collections during it re-scanned the growing cache (40% of a 5,000-node start).
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(gpu_cluster(nodes=2)))
    state = GcProbe()
    assert gc.isenabled()
    load_local(state, tmp_path)
    assert state.gc_enabled and not any(state.gc_enabled)
    assert gc.isenabled()
    (tmp_path / "zz-bad.yaml").write_text("kind: [unclosed")
    with pytest.raises(ManifestError):
        load_local(GcProbe(), tmp_path)
    assert gc.isenabled()
    gc.disable()
    try:
        load_local(GcProbe(), None)
        assert not gc.isenabled()  # a caller's choice is left as it was
    finally:
        gc.enable()


def _cluster_files(tmp_path: Path) -> Path:
    pods = [pod(f"p{i}", templates={"gpu": "one"}) for i in range(4)]
    objs = [*gpu_cluster(nodes=3), template("one"), *pods]
    (tmp_path / "all.json").write_text("\n".join(json.dumps(obj) for obj in objs) + "\n")
    more = [node("extra"), pod("q", templates={"gpu": "one"})]
    (tmp_path / "more.yaml").write_text(yaml.safe_dump_all(more))
    return tmp_path


def test_loading_makes_no_garbage_cycles(tmp_path: Path):
    # What serve freezes without a collection (cli._build_frozen) must hold no garbage.
    directory = _cluster_files(tmp_path)
    gc.collect()
    gc.disable()
    try:
        cluster = load_local(ClusterState(), directory)
        assert gc.collect() == 0
    finally:
        gc.enable()
    assert cluster.state.counts()["ResourceClaim"] == 5


def test_serve_builds_with_the_gc_off_and_freezes_what_it_loaded(tmp_path: Path):
    # Collections between loading and the freeze each scanned the whole cluster (1.7 s of a
    # 5,000-node start): none may run, and the loaded objects end up frozen.
    args = cli._parser().parse_args(["serve", "--state", str(_cluster_files(tmp_path))])
    collections: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    def states_in_sight() -> int:
        return sum(isinstance(o, ClusterState) for o in gc.get_objects())

    # What earlier tests left: one that froze the collector without thawing it hides its states
    # until our unfreeze below, and the CEL warm-up's collection would count the garbage out.
    gc.unfreeze()
    gc.collect()
    before = states_in_sight()
    gc.callbacks.append(record)
    try:
        cli._build_frozen(cli.config_from_args(args), None)
        assert collections == [2]  # the one after the CEL warm-up, before anything is loaded
        assert gc.isenabled()
        assert gc.get_freeze_count() > 0
        assert states_in_sight() == 0  # the new cache is frozen with the rest, out of the GC's sight
    finally:
        gc.callbacks.remove(record)
        gc.unfreeze()
    assert states_in_sight() == before + 1


def test_local_serve_does_without_the_kubernetes_client(tmp_path: Path):
    # Importing it is 0.15-0.3 s of a start-up that must be ready in 3 s at 5,000 nodes.
    code = (
        "import sys\n"
        "from extender import cli\n"
        f"args = cli._parser().parse_args(['serve', '--state', {str(_cluster_files(tmp_path))!r}])\n"
        "cli._build_frozen(cli.config_from_args(args), None)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('kubernetes', 'extender.kube'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_json_lines_wait_as_text_and_load_like_yaml(tmp_path: Path):
    objs = [*gpu_cluster(nodes=2), template("one"), pod("p", templates={"gpu": "one"})]
    (tmp_path / "all.json").write_text("\n".join(json.dumps(obj) for obj in objs) + "\n\n")
    docs = read_manifests([tmp_path / "all.json"])
    lines = range(1, len(objs) + 1)
    assert [origin for origin, _ in docs] == [f"{tmp_path / 'all.json'} (line {n})" for n in lines]
    assert all(isinstance(doc, JsonText) for _, doc in docs)
    assert [doc.kind for _, doc in docs] == [obj["kind"] for obj in objs]
    state = ClusterState()
    load_local(state, tmp_path)
    as_yaml = tmp_path / "yaml"
    as_yaml.mkdir()
    (as_yaml / "all.yaml").write_text(yaml.safe_dump_all(objs))
    from_yaml = ClusterState()
    load_local(from_yaml, as_yaml)
    assert state.counts() == from_yaml.counts() and state.counts()["ResourceClaim"] == 1


def test_every_format_stores_the_same_objects(tmp_path: Path):
    # A JSON Lines document is decoded for the store alone, so admission defaults it in place;
    # what is stored is what a copy of a YAML or a JSON List document becomes.
    objs = [*gpu_cluster(nodes=2), template("one"), pod("p", templates={"gpu": "one"}), pod("q")]
    objs[-1]["status"] = {"phase": None}
    for name in ("lines", "list", "yaml"):
        (tmp_path / name).mkdir()
    (tmp_path / "lines" / "all.json").write_text("\n".join(json.dumps(obj) for obj in objs))
    (tmp_path / "list" / "all.json").write_text(json.dumps({"kind": "List", "items": objs}))
    (tmp_path / "yaml" / "all.yaml").write_text(yaml.safe_dump_all(objs))

    def stored(directory: Path) -> dict[str, list[Any]]:
        state = ClusterState()
        load_local(state, directory)
        out = {}
        for kind in state.counts():
            items = [json.loads(json.dumps(raw)) for raw in state.items(kind)]
            for item in items:
                item["metadata"].pop("creationTimestamp")
            out[kind] = items
        return out

    lines = stored(tmp_path / "lines")
    assert lines == stored(tmp_path / "list") == stored(tmp_path / "yaml")
    assert lines["ResourceClaim"][0]["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"]
    assert [p["status"] for p in lines["Pod"]][1] == {"phase": None}


def test_a_bad_line_of_a_json_lines_file_is_named(tmp_path: Path):
    (tmp_path / "nodes.json").write_text(json.dumps(node("a")) + "\n" + '{"kind": "Node"\n')
    with pytest.raises(ManifestError, match=r"nodes\.json: line 2: unexpected end of data, column 16"):
        read_manifests([tmp_path / "nodes.json"])
    # A pretty-printed object that is malformed is one document: its error is the whole file's.
    (tmp_path / "nodes.json").write_text('{\n  "kind": "Node",\n  "metadata": {}\n')
    with pytest.raises(ManifestError, match=r"nodes\.json: unexpected end of data: line 4 column 1"):
        read_manifests([tmp_path / "nodes.json"])


def test_a_malformed_object_of_a_json_lines_file_is_refused_with_its_line(tmp_path: Path):
    bad = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": 3}}
    (tmp_path / "c.json").write_text(json.dumps(node("a")) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(ManifestError, match=r"c\.json \(line 2\): .*metadata\.name"):
        load_local(ClusterState(), tmp_path)
