"""Smoke test of benchmarks/bench_claims.py at small sizes: it runs and prints both timings and their ratio."""

from __future__ import annotations

import re
import subprocess
import sys

from mvtest_support import REPO


def test_bench_claims_small_prints_both_sides_and_the_ratio():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_claims.py"), "--sizes", "500,1000",
                           "--chunk", "16"], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [ln.split() for ln in proc.stdout.splitlines()[1:]]
    assert [r[0] for r in rows] == ["500", "1000"]
    assert all(re.fullmatch(r"\d+\.\d+", x) for r in rows for x in r[1:]), proc.stdout
