"""Smoke test of benchmarks/bench_plan_strings.py at a small size: it runs, reads the string whole and prints every
figure."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys

from mvtest_support import REPO


def test_bench_plan_strings_small_prints_the_figures(tmp_path):
    script = REPO / "benchmarks" / "bench_plan_strings.py"
    proc = subprocess.run([sys.executable, str(script), "--sizes", "1,2", "--workdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [ln for ln in proc.stdout.splitlines() if re.match(r"\s+\d+MB\s", ln)]
    assert len(rows) == 2, proc.stdout
    for row in rows:
        assert re.search(r"\d+MB\s+\d+\.\d\ds\s+\d+\.\d\ds\s+\d+MB\s+\d+\.\d\ds$", row), row
    plan = json.loads(gzip.decompress((tmp_path / "reordered_2mb.json.gz").read_bytes()))
    task = plan["tasks"][0]
    assert next(iter(task)) == "test_cases" and len(task["test_cases"][0]["note"]) == 2 << 20  # keys reordered
