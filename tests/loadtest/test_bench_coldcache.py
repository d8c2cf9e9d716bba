"""The cold-cache benchmark builds the case it claims and times real filter answers."""

from __future__ import annotations

import pytest

from loadtest.bench_coldcache import cluster, main, one_round


def test_fits_passes_every_node_and_unsat_none() -> None:
    fits = one_round(nodes=3, devices=16, roots=4, variant="fits", profile=False)
    assert fits["first_passed"] == fits["second_passed"] == 3
    unsat = one_round(nodes=3, devices=16, roots=4, variant="unsat", profile=False)
    assert unsat["first_passed"] == unsat["second_passed"] == 0
    assert unsat["first_digest"] == unsat["second_digest"] != fits["first_digest"]
    assert fits["first_ms"] > 0 and fits["first_cpu_ms"] > 0


def test_unsat_leaves_three_devices_per_root() -> None:
    workload = cluster(nodes=1, devices=16, roots=4, variant="unsat")
    (slice_,) = [o for o in workload.objects if o["kind"] == "ResourceSlice"]
    small = [d["name"] for d in slice_["spec"]["devices"] if d["capacity"]["memory"]["value"] == "24Gi"]
    assert small == ["gpu-12", "gpu-13", "gpu-14", "gpu-15"]
    assert workload.expected_bound == 0


def test_cli_runs_rounds_in_fresh_processes(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--variant", "fits", "--nodes", "2", "--devices-per-node", "8", "--roots", "2", "--rounds", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "fits: 2 nodes x 8 GPUs on 2 roots, 2 fresh processes; passed 2" in out
    assert "first_ms" in out and "second_ms" in out
    with pytest.raises(SystemExit):
        main(["--devices-per-node", "2", "--roots", "4"])
