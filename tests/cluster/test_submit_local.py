"""`medvision-bm submit --local N`: the SLURM plan run by worker processes on this machine."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from cluster_support import load_plan, ok_keys, status_entries, store_segments, submit

from mvtest_support import REPO, phantom_list, run_cli
from phantom_runs import run_baseline

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


def _documented_local_example() -> list[str]:
    """The words of docs/cluster.md's `--local` example (its first command block under "One machine")."""
    text = (REPO / "docs" / "cluster.md").read_text()
    block = text.split("## One machine: --local N", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return shlex.split(block.replace("\\\n", " "))


def _reported(results: Path) -> dict[tuple[str, str], tuple[int, int]]:
    """Per (model, task) store: samples selected in results.json and rows of parsed.jsonl."""
    out = {}
    for path in sorted(results.rglob("results.json")):
        rec = json.loads(path.read_text())
        out[(rec["model_name"], rec["task"])] = (rec["counts"]["selected"],
                                                 (path.parent / "parsed.jsonl").read_text().count("\n"))
    return out


def test_the_documented_local_example_leaves_the_quickstarts_stores_as_they_were(tmp_path, phantom_dir,
                                                                                 phantom_lists):
    """The quickstart's full baseline stores, then docs/cluster.md's `--local` example (its baselines: the tiny VLM
    is left out for time, on the T/L family) from the same checkout: the quickstart's stores report the same N. The
    example writes to folders of its own; run into the quickstart's own folders, as it once did, its limited
    selection still leaves the finished stores' N as it was."""
    checkout = tmp_path / "checkout"
    quick = checkout / "Results" / "MedVision-Phantom-TL"
    for model in ("oracle", "mean"):
        assert all(o.state == "done" for o in run_baseline(model, "TL", phantom_dir, quick, lists=phantom_lists))
    before = _reported(quick)
    assert before and all(n > 8 and rows == n for n, rows in before.values())
    words = _documented_local_example()
    value = {w: words[i + 1] for i, w in enumerate(words[:-1]) if w.startswith("--")}
    assert value["--results_root"] != "Results" and not value["--status_dir"].startswith("completed_tasks")
    tail = words[words.index("--") + 1:]
    assert tail == ["--sample_limit", "8"]
    common = ("--models", "oracle,mean", "--families", "TL", "--data_dir", phantom_dir, "--tasks_list_dir",
              phantom_lists, "--python", sys.executable, "--local", "2", "--", *tail)
    res = submit("--results_root", checkout / value["--results_root"], "--status_dir", checkout / value["--status_dir"],
                 *common)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert _reported(quick) == before
    assert {n for n, _ in _reported(checkout / value["--results_root"]).values()} == {8}
    same = submit("--results_root", checkout / "Results", "--status_dir", checkout / "completed_tasks", *common)
    assert same.returncode == 0, same.stdout[-3000:] + same.stderr[-3000:]
    assert _reported(quick) == before
