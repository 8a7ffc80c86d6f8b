"""`medvision-bm submit --local N`: the SLURM plan run by worker processes on this machine."""

from __future__ import annotations

import json
import sys

import pytest
from cluster_support import load_plan, ok_keys, status_entries, store_segments, submit

from mvtest_support import phantom_list, run_cli

pytestmark = pytest.mark.slow


def test_local_workers_run_sample_shards_then_finalize_and_summary(tmp_path, phantom_dir, phantom_lists):
    tasks = phantom_list(phantom_lists, "AD")
    limit = 4
    assert min(tasks.values()) >= limit  # every task fills both shards
    args = ("--models", "oracle", "--families", "AD", "--shards", "2:samples", "--data_dir", phantom_dir,
            "--tasks_list_dir", phantom_lists, "--results_root", tmp_path / "res", "--status_dir", tmp_path / "st",
            "--python", sys.executable, "--local", "2", "--", "--sample_limit", str(limit))
    res = submit("--submit_dir", tmp_path / "sub", *args)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert f"all {len(tasks)} tasks done" in res.stdout
    # the two shards ran side by side before the finalize job, which ran before the summary
    lines = res.stdout.splitlines()
    order = [ln.split("] ", 1)[1] for ln in lines if ln.startswith("[")]

    def at(prefix: str) -> int:
        return next(i for i, o in enumerate(order) if o.startswith(prefix))

    assert at("finalize-oracle-AD started") > max(at("eval-oracle-AD[0] done"), at("eval-oracle-AD[1] done"))
    assert at("summary started") > at("finalize-oracle-AD done")
    assert at("eval-oracle-AD[1] started") < at("eval-oracle-AD[0] done")  # two workers: shards side by side

    plan = load_plan(tmp_path / "sub")
    assert plan["mode"] == "local"
    names = list(plan["work"][0]["tasks"])
    assert sorted(names) == sorted(tasks)
    done = status_entries(tmp_path / "st" / "completed_tasks_MedVision-Phantom-AD.json")["oracle"]
    assert sorted(done) == sorted(names) and all(e["done"] and e["n"] == limit for e in done.values())
    stores = store_segments(tmp_path / "res" / "MedVision-Phantom-AD", "oracle")
    for task in names:
        segs = stores[task]
        assert sorted(s.split("-")[0] for s in segs) == ["g0s0", f"g0s{limit // 2}"]  # one segment per shard
        keys = ok_keys(segs)
        assert len(keys) == limit and len(set(keys)) == limit  # merged without duplicates; finalize asked nothing
        results = json.loads(next((tmp_path / "res" / "MedVision-Phantom-AD" / "oracle" / task).glob(
            "*/results.json")).read_text())
        assert results["complete"] and results["counts"]["selected"] == limit
        assert results["counts"]["asked_this_run"] == 0
    assert (tmp_path / "res" / "summary" / "index.html").is_file()

    shown = run_cli("status", str(tmp_path / "sub"))
    assert shown.returncode == 0 and shown.stdout.count(" done") >= len(tasks), shown.stdout + shown.stderr
    assert f"tasks: {len(tasks)} done" in shown.stdout

    again = submit("--submit_dir", tmp_path / "sub2", *args)
    assert again.returncode == 0 and "nothing to submit" in again.stdout, again.stdout + again.stderr
