"""manifests/monitoring and docs/metrics.md against a real scrape.

The scrape comes from the service as ``dra-extender serve --kube`` builds it, run against the
test API server through one filter and one bind, so every metric family has samples. Every
metric the docs, the dashboard and the alerts name must be among them, and the docs must list
every ``dra_extender_*`` metric served.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from extender.cli import _parser, build_app, config_from_args
from tests.apiserver.resources import BY_KIND
from tests.apiserver.server import ApiServer
from tests.kube import objects
from tests.manifests.loader import MANIFESTS, ROOT, one

MONITORING = MANIFESTS / "monitoring"
DOCS = ROOT / "docs" / "metrics.md"
# The metrics of ours and of prometheus_client's collectors; a name outside them is a typo.
OUR_PREFIXES = ("dra_extender_", "process_", "python_")


def _scrape(tmp: Path) -> str:
    kubeconfig = tmp / "kubeconfig"
    with ApiServer(bookmark_interval=0.2) as server:
        server.write_kubeconfig(str(kubeconfig))
        store = server.store
        store.seed(BY_KIND["DeviceClass"], objects.device_class())
        store.seed(BY_KIND["Node"], objects.node("node-a"))
        store.seed(BY_KIND["ResourceSlice"], objects.resource_slice("node-a", devices=1))
        store.seed(BY_KIND["ResourceClaim"], objects.claim("claim-0"))
        pod = store.seed(BY_KIND["Pod"], objects.pod("pod-0", claim_name="claim-0"))
        args = _parser().parse_args(
            ["serve", "--kube", "--kubeconfig", str(kubeconfig), "--lease-namespace", "default"]
        )
        app = build_app(config_from_args(args))

        async def run() -> str:
            async with app.router.lifespan_context(app):
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://extender") as http:
                    deadline = asyncio.get_running_loop().time() + 10
                    while (await http.get("/readyz")).status_code != 200:
                        assert asyncio.get_running_loop().time() < deadline, "never became ready"
                        await asyncio.sleep(0.05)
                    await http.post("/filter", json={"Pod": pod, "NodeNames": ["node-a"]})
                    bind = {"PodName": "pod-0", "PodNamespace": "default",
                            "PodUID": pod["metadata"]["uid"], "Node": "node-a"}
                    # A new leader's first allocation waits for its takeover (docs/reliability.md,
                    # "Handover"); kube-scheduler retries, as here.
                    while error := (await http.post("/bind", json=bind)).json()["Error"]:
                        assert "took over scheduling" in error, error
                        assert asyncio.get_running_loop().time() < deadline + 30, "never bound"
                        await asyncio.sleep(0.5)
                    return (await http.get("/metrics")).text

        return asyncio.run(run())


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    return list(text_string_to_metric_families(_scrape(tmp_path_factory.mktemp("kube"))))


@pytest.fixture(scope="module")
def served(scrape: list[Any]) -> set[str]:
    """Every sample name of the scrape."""
    return {sample.name for family in scrape for sample in family.samples}


def _documented_name(family: Any) -> str:
    """How docs/metrics.md names a family: counters with _total, histograms by their base name."""
    return f"{family.name}_total" if family.type == "counter" else family.name


_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
             "bool", "offset", "inf", "nan"}


def promql_metrics(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords, labels left out)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for match in re.finditer(r"(?<![\w.$])[A-Za-z_:][A-Za-z0-9_:]*", expr):
        if expr[match.end():].lstrip().startswith("(") or match.group().lower() in _KEYWORDS:
            continue
        names.add(match.group())
    return names


def test_promql_metric_names_are_found() -> None:
    expr = ('histogram_quantile(0.99, sum by (le, verb) (rate(a_bucket{verb="x", job=~"$job"}'
            '[$__rate_interval]))) > 2 and on (pod) (b or vector(0)) < 1e3 unless c_total offset 5m')
    assert promql_metrics(expr) == {"a_bucket", "b", "c_total"}


def dashboard() -> dict[str, Any]:
    return json.loads((MONITORING / "dashboard.json").read_text())


def dashboard_queries() -> list[str]:
    board = dashboard()
    exprs = [t["expr"] for p in board["panels"] if p["type"] != "row" for t in p["targets"]]
    for variable in board["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            exprs.append(re.sub(r"^label_values\(([^,]+),.*\)$", r"\1", query["query"]))
    return exprs


def rule() -> dict[str, Any]:
    (doc,) = yaml.safe_load_all((MONITORING / "prometheusrule.yaml").read_text())
    return dict(doc)


def test_dashboard_is_a_grafana_dashboard() -> None:
    board = dashboard()
    assert board["uid"] and board["title"] and isinstance(board["schemaVersion"], int)
    assert {v["name"] for v in board["templating"]["list"]} >= {"datasource", "job"}
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert panel["title"] and set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)) and all(t["expr"] for t in panel["targets"])


def test_prometheus_rule_is_well_formed_and_covers_the_operational_alerts() -> None:
    doc = rule()
    assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] == "PrometheusRule"
    assert doc["metadata"]["name"] and doc["metadata"]["namespace"] == "dra-system"
    rules = [r for group in doc["spec"]["groups"] for r in group["rules"]]
    assert all(group["name"] for group in doc["spec"]["groups"])
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    for r in rules:
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}, r["alert"]
        assert re.fullmatch(r"[A-Z][A-Za-z]+", r["alert"]) and isinstance(r["expr"], str)
        assert re.fullmatch(r"\d+[smh]", r["for"]), r["alert"]
        assert r["labels"]["severity"] in {"critical", "warning"}
        assert r["annotations"]["summary"] and r["annotations"]["description"]
    selected = {name: promql_metrics(r["expr"]) for name, r in zip(names, rules, strict=True)}
    for wanted in ("dra_extender_cache_synced", "dra_extender_binds_total", "dra_extender_leader",
                   "dra_extender_request_duration_seconds_bucket"):
        assert any(wanted in metrics for metrics in selected.values()), f"no alert on {wanted}"


def test_service_monitor_scrapes_a_port_the_service_has() -> None:
    (monitor,) = yaml.safe_load_all((MONITORING / "servicemonitor.yaml").read_text())
    service = one("Service", "dra-extender-metrics")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    assert all(e["path"] == "/metrics" for e in monitor["spec"]["endpoints"])


def test_monitoring_kustomization_lists_its_files() -> None:
    kustomization = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    present = {p.name for p in MONITORING.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(present)
    (generator,) = kustomization["configMapGenerator"]
    assert generator["files"] == ["dra-extender.json=dashboard.json"]


def documented() -> set[str]:
    return set(re.findall(r"`((?:dra_extender|process|python)_[a-z0-9_]+)`", DOCS.read_text()))


@pytest.mark.parametrize("source", ["docs", "dashboard", "alerts"])
def test_every_metric_named_is_served(source: str, served: set[str], scrape: list[Any]) -> None:
    histograms = {f.name for f in scrape if f.type == "histogram"}
    if source == "docs":
        named = documented()
    else:
        exprs = dashboard_queries() if source == "dashboard" else [
            r["expr"] for group in rule()["spec"]["groups"] for r in group["rules"]]
        named = set().union(*(promql_metrics(e) for e in exprs))
    assert named, source
    assert all(name.startswith(OUR_PREFIXES) for name in named), sorted(named)
    missing = {name for name in named if name not in served and name not in histograms}
    assert not missing, f"{source} names metrics /metrics does not serve: {sorted(missing)}"


def test_the_docs_list_every_metric_served(scrape: list[Any]) -> None:
    ours = {_documented_name(f) for f in scrape if f.name.startswith(OUR_PREFIXES)}
    assert ours - documented() == set()
