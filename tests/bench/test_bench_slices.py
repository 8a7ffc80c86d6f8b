"""Smoke test of benchmarks/bench_slices.py at a tiny shape: every side runs over --pairs rounds in a rotated order,
each round prints the ratios ours / array proxy (cold, disk-cold, warm), then the medians and the page-cache note."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from mvtest_support import REPO

SIDES = ["ours_cold", "ours_disk", "upstream_cold", "proxy_cold", "proxy_disk", "ours_warm", "proxy_warm", "take_warm"]
NUM = r"[\d.e+-]+"


@pytest.mark.slow
def test_bench_slices_prints_rounds_ratios_and_medians(tmp_path):
    figures_path = tmp_path / "figures.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_slices.py"), "--workdir", str(tmp_path), "--shape", "32",
           "32", "16", "--warm", "2", "--pairs", "3", "--axes", "2", "--json", str(figures_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for name in ("ct_32x32x16.nii.gz", "ct_32x32x16.nii"):
        rounds = re.findall(rf"^{re.escape(name)}, round (\d) \[([a-z_, ]+)\]:$", out, re.M)
        assert [r for r, _ in rounds] == ["1", "2", "3"], out
        orders = [order.split(", ") for _, order in rounds]
        assert all(sorted(o) == sorted(SIDES) for o in orders), out
        assert len({o[0] for o in orders}) == 3, out  # the order is rotated each round
        assert f"{name}, median over 3 rounds:" in out, out
    ratio_rounds = re.findall(rf"^  ratios ours/proxy \(axial\): cold {NUM}  disk-cold {NUM}  warm {NUM}$", out, re.M)
    assert len(ratio_rounds) == 6, out  # 3 rounds x 2 files
    for label in ("cold", "disk-cold", "warm"):
        medians = re.findall(rf"^  ours/proxy {label}\s+axial\s*: per round {NUM}, {NUM}, {NUM}; median {NUM}$", out,
                             re.M)
        assert len(medians) == 2, (label, out)
    assert out.count("the disk-cold drop (posix_fadvise DONTNEED) is best-effort") == 2, out
    figures = json.loads(figures_path.read_text())
    cold = figures["ct_32x32x16.nii/ours_cold/axial"]
    assert len(cold["rounds"]) == 3 and all(r["resident"] in (-1.0, 1.0) for r in cold["rounds"]), cold  # read through
    assert len(figures["ct_32x32x16.nii.gz/ratio/warm/axial"]["per_round"]) == 3
