from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import orjson
import pytest
import yaml

from loadtest.cli import main
from loadtest.driver import DriverConfig, PendingPod, SchedulerDriver
from loadtest.matrix import markdown
from loadtest.report import render
from loadtest.stats import LatencyLog


def test_generate_writes_a_loadable_state_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["generate", "--workload", "constraint", "--nodes", "2", "--pods", "3", "--out", str(tmp_path)]
    )
    assert code == 0
    kinds = {doc["kind"] for f in tmp_path.glob("*.yaml") for doc in yaml.safe_load_all(f.read_text())}
    assert kinds == {"DeviceClass", "Node", "ResourceSlice", "ResourceClaimTemplate", "Pod"}
    assert "expected bound 3" in capsys.readouterr().out


def test_bad_arguments_exit_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--workload", "nonsense"])
    with pytest.raises(SystemExit):
        main(["run", "--nodes", "0"])
    assert "invalid choice" in capsys.readouterr().err


def test_matrix_refuses_unknown_workloads(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "--workloads", "template,bogus", "--nodes", "1"]) == 2
    assert "unknown workloads" in capsys.readouterr().err


def _result(ok: bool = True) -> dict:
    log = LatencyLog()
    log.record("filter", 0.0, 0.002, True)
    log.record("bind", 0.0, 0.004, True)
    return {
        "workload": "template",
        "nodes": 4,
        "devices_per_node": 2,
        "candidates_per_filter": 4,
        "bind_concurrency": 16,
        "pods_bound": 6,
        "pods_expected": 6,
        "pods_unschedulable": 0,
        "pods_per_second": 123.4,
        "phases": [{"name": "all", "pods": 6, "bound": 6, "seconds": 0.05, "pods_per_second": 120.0}],
        "latency_ms": log.summary(),
        "server_peak_rss_mb": 80.5,
        "server_cpu_ms_per_pod": 1.5,
        "load_average": [0.5, 1.25],
        "cel_evaluations_per_pod": None,
        "double_allocations": [] if ok else ["d/p/gpu-0 allocated to ns/a, ns/b"],
        "misplaced_pods": [],
        "unreserved_pods": [],
        "ok": ok,
    }


def test_report_and_matrix_show_the_figures() -> None:
    text = render(_result())
    assert "6 / 6 expected" in text and "123.4 pods/s" in text and "RESULT: OK" in text
    assert "80.5 MiB" in text and "CEL evals / pod   n/a" in text
    assert "load average      0.5 -> 1.25" in text
    failed = render(_result(ok=False))
    assert "RESULT: FAILED" in failed and "d/p/gpu-0 allocated to ns/a, ns/b" in failed
    table = markdown([_result(), {"workload": "shared", "nodes": 9, "error": "server died"}])
    lines = table.splitlines()
    assert lines[0].startswith("| workload | nodes |")
    row = (
        "| template | 4 | 4 | 6/6 | 123.4 | 2.0 | 2.0 | n/a | 4.0 | 80.5 | 1.5 | n/a | 0 | 0.5→1.25 | True |"
    )
    assert row in lines
    assert "run failed: server died" in lines[-1]


def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="plots need matplotlib")
    from loadtest.plot import plot

    log = LatencyLog()
    for i in range(50):
        log.record("filter", i * 0.01, 0.001 * (1 + i % 7), True)
        log.record("bind", i * 0.01, 0.003, True)
    plot(log, "test", tmp_path / "latency.png")
    assert (tmp_path / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_highest_score_wins_and_ties_follow_the_seed() -> None:
    scores = {"n1": 3, "n2": 9, "n3": 9, "n4": 1}

    def prioritize(request: httpx.Request) -> httpx.Response:
        asked = orjson.loads(request.content)["NodeNames"]
        return httpx.Response(200, json=[{"Host": n, "Score": scores[n]} for n in asked])

    async def picks(seed: int) -> list[str]:
        transport = httpx.MockTransport(prioritize)
        async with httpx.AsyncClient(base_url="http://x", transport=transport) as client:
            driver = SchedulerDriver(client, list(scores), DriverConfig(seed=seed))
            pod = PendingPod({"metadata": {"name": "p", "namespace": "ns"}}, b"{}")
            return [await driver._pick(pod, list(scores)) for _ in range(20)]

    first = asyncio.run(picks(1))
    assert set(first) == {"n2", "n3"}  # both tied nodes get picked, nothing else does
    assert asyncio.run(picks(1)) == first


def test_unreachable_url_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", "--nodes", "2", "--pods", "1", "--url", "http://127.0.0.1:1", "--no-plot"]
    assert main(args) == 2
    assert "no extender reachable at http://127.0.0.1:1" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "expected"), [([], [(2, 8), (3, 12)]), (["--pods", "5"], [(2, 5), (3, 5)])]
)
def test_matrix_sizes_each_run_per_node_or_fixed(
    extra: list[str], expected: list[tuple[int, int]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import loadtest.matrix

    seen: list[tuple[int, int]] = []

    def fake_run(spec: object) -> object:  # records the sizes instead of starting servers
        seen.append((spec.params.nodes, spec.params.pods))  # type: ignore[attr-defined]
        raise OSError("not started in this test")

    monkeypatch.setattr(loadtest.matrix, "run", fake_run)
    out = tmp_path / "m.md"
    args = ["matrix", "--workloads", "template", "--nodes", "2,3", "--out", str(out), *extra]
    assert main(args) == 1  # every row failed
    assert seen == expected
    assert out.read_text().count("run failed: not started in this test") == 2
    with pytest.raises(SystemExit):
        main(["matrix", "--pods", "0"])


def test_repeated_runs_report_the_median_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import loadtest.cli
    from loadtest.runner import RunOutcome

    rates = iter([300.0, 100.0, 200.0])

    def fake_run(spec: object) -> RunOutcome:  # stands in for starting a server
        result = _result()
        result["pods_per_second"] = next(rates)
        return RunOutcome(result, LatencyLog())

    monkeypatch.setattr(loadtest.cli, "run", fake_run)
    out = tmp_path / "r.json"
    assert main(["run", "--nodes", "2", "--repeat", "3", "--no-plot", "--out", str(out)]) == 0
    median = orjson.loads(out.read_bytes())
    assert median["pods_per_second"] == 200.0
    assert median["repeats"]["median_run"] == 3
    assert [r["pods_per_second"] for r in median["repeats"]["runs"]] == [300.0, 100.0, 200.0]
    assert orjson.loads((tmp_path / "r-2.json").read_bytes())["pods_per_second"] == 100.0
    printed = capsys.readouterr().out
    assert "3 runs; the median by throughput is run 3" in printed and "load 0.5 -> 1.25" in printed


def test_median_of_an_even_count_is_the_lower_middle_and_of_none_an_error() -> None:
    from loadtest.report import median_run

    assert median_run([{"pods_per_second": r} for r in (4.0, 1.0, 3.0, 2.0)]) == 3
    with pytest.raises(ValueError, match="no runs"):
        median_run([])


@pytest.mark.parametrize("flags, suffix", [([], ".yaml"), (["--format", "json"], ".json")])
def test_run_starts_the_extender_on_state_in_the_format_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str], suffix: str
) -> None:
    import loadtest.runner
    from loadtest.server import ServerError

    seen: list[set[str]] = []

    class NoServer:  # stands in for starting `serve --state`: records what it would load
        def __init__(self, state: Path, *_: object) -> None:
            seen.append({p.suffix for p in state.iterdir()})

        def __enter__(self) -> None:
            raise ServerError("not started in this test")

        def __exit__(self, *_: object) -> None:
            return None

    monkeypatch.setattr(loadtest.runner, "ExtenderServer", NoServer)
    out = tmp_path / "r.json"
    assert main(["run", "--nodes", "2", "--no-plot", "--out", str(out), *flags]) == 2
    assert seen == [{suffix}]
