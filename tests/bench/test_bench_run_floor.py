"""Smoke test of benchmarks/bench_run_floor.py at a tiny size: the data holds one task whose every sample is a
different slice, the run and the floor run in fresh processes in rotated order, every round prints both and their
ratio, and the figures file holds them."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest

from mvtest_support import REPO


@pytest.mark.slow
def test_bench_run_floor_runs_both_sides_in_rotated_rounds(tmp_path):
    figures_path = tmp_path / "figures.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_run_floor.py"), "--n", "7", "--volumes", "2", "--shape",
           "64", "64", "6", "--pairs", "2", "--latency", "0.01", "--concurrency", "4", "--workdir",
           str(tmp_path / "work"), "--json", str(figures_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    rounds = re.findall(r"^round (\d) \[([a-z, ]+)\]: run's first request ([\d.]+) s after launch, exit ([\d.]+) s "
                        r"after its last answer$", out, re.M)
    assert [(r, order) for r, order, _, _ in rounds] == [("1", "run, floor"), ("2", "floor, run")], out
    assert len(re.findall(r"^  run wall +[\d.]+ s CPU +[\d.]+ s .* floor wall +[\d.]+ s CPU +[\d.]+ s .* run/floor "
                          r"wall [\d.]+ CPU [\d.]+$", out, re.M)) == 2, out
    assert re.search(r"^  run/floor wall per round [\d.]+, [\d.]+; median [\d.]+$", out, re.M), out
    figures = json.loads(figures_path.read_text())
    assert len(figures["rounds"]) == 2 and len(figures["wall_ratio"]) == 2
    for rnd in figures["rounds"]:
        assert rnd["floor"]["wall_s"] > 0 and rnd["run"]["cpu_s"] > 0
        assert 0 < rnd["run"]["first_request_s"] < rnd["run"]["wall_s"] and math.isfinite(rnd["run"]["tail_s"])

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from bench_run_floor import plan_slices
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    data = next((tmp_path / "work").glob("Data-7-2-*"))
    slices = [(path, k) for path, indices in plan_slices(data) for k in indices]
    assert len(slices) == 7 == len(set(slices)) and len({p for p, _ in slices}) == 2  # every sample its own slice
