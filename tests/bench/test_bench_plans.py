"""Smoke test of benchmarks/bench_plans.py at its --small size: it runs and prints every figure."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys

from mvtest_support import REPO


def test_bench_plans_small_prints_the_figures(tmp_path):
    script = REPO / "benchmarks" / "bench_plans.py"
    cmd = [sys.executable, str(script), "--small", "--cases", "6", "--workers", "1", "--workdir", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for label in ("json.load (baseline, whole plan)", "cold: first doc", "cold: first", "(--sample_limit 1000)",
                  "docs of the test split", "cached: first", "cached: all docs of the test split"):
        assert label in out, out
    assert re.search(r"cold: all [\d,]+ docs of the test split\s+\d+\.\d\ds\s+\d+MB\s+\d+\.\d\dx json\.load", out), out
    for target in ("first 1000 docs < 5 s", "all docs < 3x json.load", "all docs peak RSS < 4 GB",
                   "cached run < 2 s"):
        assert re.search(re.escape(target) + r"\s+: [\d.]+ ?(s|x|GB) -> (OK|MISSED)", out), out

    # the generated plan is a valid single-member gzip in upstream's key order, cached for the next run
    plan_path = next(tmp_path.glob("*/Datasets/BenchCT/benchmark_plan_detection_v1.0.0.json.gz"))
    plan = json.loads(gzip.decompress(plan_path.read_bytes()))
    task = plan["tasks"][0]
    assert next(iter(task)) == "task_ID"
    assert list(task)[-4:] == ["train_cases_number", "train_cases", "test_cases_number", "test_cases"]
    assert (task["train_cases_number"], task["test_cases_number"]) == (4, 2) == (len(task["train_cases"]),
                                                                                len(task["test_cases"]))
    again = subprocess.run([*cmd, "--skip_json_load"], capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0 and "(cached)" in again.stdout, again.stdout + again.stderr


def test_bench_plans_folder_prints_cold_and_cached_figures(tmp_path):
    """--folder at a tiny scale: every plan of the synthetic folder is written, and both commands are timed cold and
    cached, the cold runs with the plans dropped from the page cache (the baseline commit is left out here: it needs
    the repository's history)."""
    script = REPO / "benchmarks" / "bench_plans.py"
    cmd = [sys.executable, str(script), "--folder", "--folder_scale", "0.0003", "--workers", "1", "--workdir",
           str(tmp_path), "--baseline_ref", "", "--disk_cold"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert re.search(r"folder: .*: 29 datasets, 41 plans, 101 plan tasks", out), out
    for what in ("data tasks (", "data check of 8 listed tasks"):
        for state in ("cold", "cached"):
            assert re.search(re.escape(what) + r".*\s" + state + r"\s+[\d.]+ s\s+CPU\s+[\d.]+ s\s+peak RSS\s+\d+ MB",
                             out), out
        assert re.search(re.escape(what) + r".*\scold\s.*plans \d+% in the page cache before it", out), out
    assert len(list(tmp_path.glob("*/Datasets/*/benchmark_plan_*_v1.0.0.json.gz"))) == 41
