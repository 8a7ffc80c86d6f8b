"""Smoke test of benchmarks/bench_api_throughput.py at a tiny size: the sides run interleaved over --pairs rounds,
each round prints every side and the ratios, then the medians; the pre-encoded side really encodes nothing."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from mvtest_support import REPO


@pytest.mark.slow
def test_bench_api_throughput_prints_rounds_ratios_and_medians(tmp_path):
    figures_path = tmp_path / "figures.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_api_throughput.py"), "--n", "40", "--pairs", "3",
           "--skip-lmms", "--size", "64", "--latency", "0.01", "--concurrency", "8", "--processes", "2",
           "--json", str(figures_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    rounds = re.findall(r"^round (\d) \[([a-z, ]+)\]:$", out, re.M)
    assert [r for r, _ in rounds] == ["1", "2", "3"], out
    orders = [order.split(", ") for _, order in rounds]
    assert all(sorted(o) == sorted(["split", "ours", "pre", "floor"]) for o in orders), out
    assert len({o[0] for o in orders}) == 3, out  # the order is rotated each round
    for side in ("split", "ours", "pre", "floor"):
        lines = re.findall(rf"^  {side}\s+wall\s+[\d.]+ s\s+client CPU\s+[\d.]+ ms/req\s+server\s+[\d.]+ ms/req\s+"
                           rf"ok (\d+)(?:\s+encoded (\d+))?$", out, re.M)
        assert len(lines) == 3 and all(ok == "40" for ok, _ in lines), (side, out)
        if side == "pre":
            assert all(enc == "0" for _, enc in lines), out  # served from the encode cache: the same bytes as the floor
        if side == "ours":
            assert all(enc == "40" for _, enc in lines), out  # a new slice per request
    ratio_rounds = re.findall(r"^  ratios: ours/floor wall [\d.]+ CPU [\d.]+  ours-new/floor wall [\d.]+ CPU [\d.]+  "
                              r"split/ours wall [\d.]+ CPU [\d.]+$", out, re.M)
    assert len(ratio_rounds) == 3, out
    assert "median over 3 rounds:" in out, out
    for label in ("ours/floor (same pre-encoded images", "ours-new/floor", "split/ours"):
        assert re.search(re.escape(label) + r".*: wall per round [\d.]+, [\d.]+, [\d.]+; median [\d.]+; client CPU per "
                         r"round [\d.]+, [\d.]+, [\d.]+; median [\d.]+$", out, re.M), (label, out)
    figures = json.loads(figures_path.read_text())
    assert len(figures["ratios"]["ours/floor"]["wall"]) == 3
    assert [len(figures[k]["rounds"]) for k in ("split", "ours", "pre", "floor")] == [3, 3, 3, 3]
