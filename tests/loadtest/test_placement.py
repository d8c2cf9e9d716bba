"""The placement benchmark: seeded, the same stream for every policy, kube-scheduler's scores."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.kube_scores import InTreeScores, PodRequests
from loadtest.placement import SCHEDULER_CONFIG, compare, extender_weight, markdown, stream

SMALL = {"nodes": 6, "gpus_per_node": 8, "arrivals": 120, "load": 1.0, "weight": 5}


def _rows(seed: int, variant: str = "whole") -> list[dict[str, object]]:
    rows = [f.row() for f in compare(variant, ["none", "compact"], seed=seed, **SMALL)]  # type: ignore[arg-type]
    for row in rows:  # CPU time is the one thing a seed does not fix
        row.pop("prioritize_cpu_ms_per_pod")
        row.pop("filter_cpu_ms_per_pod")
    return rows


def test_a_seed_gives_the_same_stream_and_the_same_figures():
    assert stream("whole", 3, 50, 0.9, 48) == stream("whole", 3, 50, 0.9, 48)
    assert stream("whole", 3, 50, 0.9, 48) != stream("whole", 4, 50, 0.9, 48)
    first = _rows(7)
    assert first == _rows(7)
    assert first != _rows(8)


def test_every_policy_sees_the_same_arrivals_and_compact_loses_fewer_large_requests():
    none, compact = compare("whole", ["none", "compact"], seed=1, **SMALL)  # type: ignore[arg-type]
    assert none.arrivals == compact.arrivals > 0 and none.large == compact.large > 0
    assert compact.large_failed < none.large_failed
    assert compact.utilisation >= none.utilisation
    assert compact.bind_errors == none.bind_errors == 0


def test_partitionable_cluster_runs_and_reports_topology():
    (compact,) = compare("partitionable", ["compact"], seed=2, **{**SMALL, "arrivals": 60})  # type: ignore[arg-type]
    row = compact.row()
    assert row["arrivals"] and row["utilisation_pct"] > 0
    assert len(row["utilisation_over_time_pct"]) == 10  # type: ignore[arg-type]


def test_in_tree_scores_are_least_allocated_plus_balanced_allocation():
    scores = InTreeScores({"n": (64_000, 512 * 1024)})
    pod = PodRequests(cpu_milli=6_000, memory_mi=48 * 1024)
    # cpu: (64000-6000)*100//64000 = 90, memory: (524288-49152)*100//524288 = 90 -> 90; equal
    # fractions -> balanced 100.
    assert scores.score("n", pod) == 190
    scores.take("n", PodRequests(cpu_milli=32_000, memory_mi=0))
    # cpu 38000/64000 -> 40, memory 90: least (40+90)//2 = 65; fractions .59375 and .09375:
    # balanced int((1 - .25) * 100) = 75.
    assert scores.score("n", pod) == 140
    scores.release("n", PodRequests(cpu_milli=32_000, memory_mi=0))
    assert scores.score("n", pod) == 190


def test_the_extender_weight_comes_from_the_shipped_scheduler_configuration(tmp_path: Path):
    assert extender_weight(SCHEDULER_CONFIG) == 5
    plain = tmp_path / "config.yaml"
    plain.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "extenders:\n- urlPrefix: http://x\n  prioritizeVerb: prioritize\n  weight: 3\n"
    )
    assert extender_weight(plain) == 3
    plain.write_text("kind: KubeSchedulerConfiguration\n")
    with pytest.raises(ValueError, match="no KubeSchedulerConfiguration with a prioritizing extender"):
        extender_weight(plain)


def test_the_table_says_how_many_of_the_baselines_large_failures_a_policy_placed():
    def row(policy: str, failed: int) -> dict[str, object]:
        return {"policy": policy, "large": 10, "large_failed": failed, "large_stranded": failed,
                "small_failed": 0, "utilisation_pct": 50.0, "one_numa_pct": None, "one_pcie_root_pct": 80.0,
                "prioritize_cpu_ms_per_pod": 0.1, "utilisation_over_time_pct": [50.0] * 10}

    table = markdown({"whole": [row("none", 8), row("compact", 2)]})
    assert "| whole | compact | 10 | 2 (2) | 75.0 % | 0 | 50.0 % | - | 80.0 % | 0.1 |" in table
    assert "| whole | none | 10 | 8 (8) | - |" in table
