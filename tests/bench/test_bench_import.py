"""benchmarks/bench_import.py runs end to end at a small size and prints its figures."""

from __future__ import annotations

import re
import subprocess
import sys

from mvtest_support import REPO


def test_bench_import_prints_time_memory_and_the_stores_digest(tmp_path):
    script = REPO / "benchmarks" / "bench_import.py"
    cmd = [sys.executable, str(script), "--n", "300", "--workdir", str(tmp_path), "--baseline_ref", ""]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "upstream samples file: 300 records" in out, out
    assert re.search(r"round 1 this checkout\s+[\d.]+ s\s+CPU\s+[\d.]+ s\s+peak RSS\s+\d+ MB\s+\(300 added, 0 "
                     r"unmatched\)", out), out
    assert len(list(tmp_path.glob("upstream-n300-g*/*/*_samples_*.jsonl"))) == 1


def test_bench_import_of_the_judged_copy_prints_time_and_memory(tmp_path):
    script = REPO / "benchmarks" / "bench_import.py"
    cmd = [sys.executable, str(script), "--n", "300", "--workdir", str(tmp_path), "--baseline_ref", "", "--judged"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # every judged record's answer is the store's (300 used), the 6 repeated ones counted apart
    assert re.search(r"round 1 this checkout\s+[\d.]+ s\s+CPU\s+[\d.]+ s\s+peak RSS\s+\d+ MB\s+\(300 added, 0 "
                     r"unmatched\)", proc.stdout), proc.stdout
    (judged,) = tmp_path.glob("upstream-n300-g*/*/llm-parsed_bench-judge/*_samples_*.jsonl")
    assert len(judged.read_text().splitlines()) == 306
