"""Smoke test of benchmarks/bench_first_request.py's baseline mode: a baseline's run timed to its first stored answer
on both sides, with the medians and ratios printed."""

from __future__ import annotations

import re
import subprocess
import sys

from mvtest_support import REPO


def test_bench_first_request_times_a_baselines_first_answer_on_both_sides(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_first_request.py"), "--model", "oracle",
                           "--pairs", "1", "--baseline_ref", "HEAD", "--workdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    medians = proc.stdout.split("ratio side/now", 1)[1].splitlines()[2:]
    assert [ln.split()[0] for ln in medians] == ["now", "baseline"], proc.stdout
    assert all(re.search(r"\d+\.\d+ s +\d+\.\d+ +\d+\.\d+ s +\d+\.\d+$", ln) for ln in medians), proc.stdout
    assert list(tmp_path.glob("Results-r0s0/oracle/*/*/samples/*.jsonl")), "the run stored its answers"
