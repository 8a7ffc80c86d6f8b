"""`medvision-bm submit --batch`: per API model and family a short submit job (`run --batch --batch_phase submit`)
and a collect job after it (afterany), run locally and on the real one-node SLURM against the stub provider's batch
routes through the real openai SDK. A collect job stopped before its batches end (Ctrl-C of `--local`, SLURM's time
limit) leaves them open; the same command submitted again, or the collect job's script, re-attaches to them:
exactly one batch per task is created at the stub."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster_support import jobs_by_name, load_plan, one_line_error, status_entries, submit

from batch_support import ENV, PLANTED, batch_stub, no_key_in, popen_cli, submitted_records, wait_for
from mvtest_support import phantom_list, run_cli

pytestmark = pytest.mark.slow
LIMIT = 2  # samples per task


@pytest.fixture()
def stub():
    with batch_stub() as served:
        yield served


def _args(tmp_path: Path, phantom_dir: Path, lists: Path, url: str, *extra: str) -> list[str]:
    return ["--models", "openai", "--families", "detect", "--batch", "--data_dir", str(phantom_dir),
            "--tasks_list_dir", str(lists), "--results_root", str(tmp_path / "res"), "--status_dir",
            str(tmp_path / "st"), "--python", sys.executable, *extra, "--", "--base_url", f"{url}/v1",
            "--batch_poll", "0.05", "--sample_limit", str(LIMIT)]


def _all_answers(tmp_path: Path) -> dict[str, list[dict]]:
    """task/key -> the answer records of every store under the results root."""
    out: dict[str, list[dict]] = {}
    for seg in (tmp_path / "res").glob("*/*/*/*/samples/*.jsonl"):
        for line in seg.read_text().splitlines():
            rec = json.loads(line)
            out.setdefault(f"{seg.parents[2].name}/{rec['key']}", []).append(rec)
    return out


def _polls(fake) -> int:
    return sum(1 for r in fake.received if r.method == "GET" and "/batches/" in r.path)


def test_batch_plan_is_a_submit_job_then_a_collect_job_with_no_key_in_any_script(
        tmp_path, phantom_dir, phantom_lists):
    res = submit(*_args(tmp_path, phantom_dir, phantom_lists, "http://127.0.0.1:9", "--dry-run", "--time",
                        "00:20:00", "--collect_time", "24:00:00", "--submit_dir", str(tmp_path / "sub")), env=ENV)
    assert res.returncode == 0, res.stderr[-2000:]
    jobs = jobs_by_name(load_plan(tmp_path / "sub"))
    assert list(jobs) == ["batch-submit-openai-detect", "batch-collect-openai-detect", "summary"]
    sub, col = jobs["batch-submit-openai-detect"], jobs["batch-collect-openai-detect"]
    assert (sub["kind"], col["kind"], sub["gpus"], col["gpus"]) == ("submit", "collect", 0, 0)
    assert sub["depends"] == [] and col["depends"] == [["afterany", sub["name"]]]
    assert sorted(sub["tasks"]) == sorted(col["tasks"]) == sorted(phantom_list(phantom_lists, "detect"))
    scripts = {n: Path(j["script"]).read_text() for n, j in jobs.items()}
    assert "--batch --batch_phase submit" in scripts[sub["name"]]
    assert "--batch --batch_phase collect" in scripts[col["name"]]
    assert "#SBATCH --time=00:20:00" in scripts[sub["name"]] and "#SBATCH --time=24:00:00" in scripts[col["name"]]
    assert "#SBATCH --time=00:20:00" in scripts["summary"]
    assert PLANTED not in res.stdout + res.stderr
    no_key_in(tmp_path / "sub")


@pytest.mark.parametrize(("own", "runner", "needles"), [
    (("--models", "openai,oracle"), (), ("--batch: oracle is not an API record", "without --batch")),
    (("--shards", "2"), (), ("--batch: --shards for openai", "drop --shards")),
    (("--model_flags", "openai=--api_provider openrouter --openai_model_code openai/gpt-5.5"), (),
     ("--batch: openai asks through openrouter, which has no batch interface",)),
    ((), ("--batch_phase", "collect"), ("--batch_phase is set by `medvision-bm submit`",)),
    ((), ("--max_cost", "5"), ("--batch with --max_cost (openai)", "drop --max_cost")),
    ((), ("--estimate",), ("--estimate is set by `medvision-bm submit`",)),
])
def test_batch_submissions_refuse_what_has_no_batch_run_in_one_line(tmp_path, phantom_dir, phantom_lists, own, runner,
                                                                       needles):
    args = [*own, *_args(tmp_path, phantom_dir, phantom_lists, "http://127.0.0.1:9", "--dry-run"), *runner]
    if own[:1] == ("--models",):  # the later --models wins: put the list in its place
        args = args[2:]
        args[1] = own[1]
    one_line_error(submit(*args, env={**ENV, "OPENROUTER_API_KEY": PLANTED}), *needles)
    assert not (tmp_path / "res").exists()


def test_collect_time_without_batch_is_refused_in_one_line(tmp_path, phantom_dir, phantom_lists):
    args = _args(tmp_path, phantom_dir, phantom_lists, "http://127.0.0.1:9", "--dry-run", "--collect_time", "24:00:00")
    args.remove("--batch")
    one_line_error(submit(*args, env=ENV), "--collect_time", "give --batch too")
    assert not (tmp_path / "res").exists()


def test_local_pair_collect_stopped_then_the_same_command_reattaches(tmp_path, phantom_dir, phantom_lists, stub):
    fake, batches = stub
    tasks = phantom_list(phantom_lists, "detect")
    batches.hold = True
    args = ["submit", *_args(tmp_path, phantom_dir, phantom_lists, fake.url, "--local", "1")]
    first = popen_cli(args)
    try:
        wait_for("the collect job polling", lambda: _polls(fake) > 0, timeout=300)
        assert batches.created == len(tasks), "the submit job submitted every task's batch before collect began"
    finally:
        first.send_signal(signal.SIGINT)  # stops the workers: the collect job dies with its batches open
        out, _ = first.communicate(timeout=120)
    assert first.returncode != 0, out[-2000:]
    assert len(submitted_records(tmp_path / "res" / "MedVision-Phantom-detect")) == len(tasks)
    assert not any(r["status"] == "ok" for v in _all_answers(tmp_path).values() for r in v)
    shown = run_cli("status", "--results_root", str(tmp_path / "res"))
    assert f"open batches: {len(tasks)}" in shown.stdout, shown.stdout + shown.stderr

    batches.hold = False
    second = run_cli(*args, env=ENV, timeout=600)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert batches.created == len(tasks), "the second submission re-attached; no batch was submitted again"
    stored = _all_answers(tmp_path)
    assert len(stored) == LIMIT * len(tasks) and all(len(v) == 1 and v[0]["status"] == "ok" for v in stored.values())
    done = status_entries(tmp_path / "st" / "completed_tasks_MedVision-Phantom-detect.json")
    assert sorted(next(iter(done.values()))) == sorted(tasks)
    newest = max((tmp_path / "res" / "submissions").iterdir())
    log = (newest / "logs" / "batch-collect-openai-detect_local.out").read_text()
    assert log.count("re-attached to batch") == len(tasks), log[-3000:]
    assert "open batches: none" in run_cli("status", str(newest)).stdout
    no_key_in(tmp_path)


def test_real_slurm_collect_job_out_of_time_then_resubmitted_by_hand_reattaches(slurm_cluster, tmp_path, phantom_dir,
                                                                                 phantom_lists, stub):
    fake, batches = stub
    tasks = phantom_list(phantom_lists, "detect")
    env = {**slurm_cluster, **ENV}
    batches.hold = True
    args = _args(tmp_path, phantom_dir, phantom_lists, fake.url, "--partition", "debug", "--time", "00:10:00",
                 "--collect_time", "00:01:00")
    first = submit("--submit_dir", tmp_path / "sub", *args, env=env)
    assert first.returncode == 0, first.stderr[-2000:]
    jobs = jobs_by_name(load_plan(tmp_path / "sub"))
    collect = jobs["batch-collect-openai-detect"]
    assert "#SBATCH --time=00:01:00" in Path(collect["script"]).read_text()
    wait_for("the collect job polling", lambda: _polls(fake) > 0, timeout=300)
    assert batches.created == len(tasks)
    t0 = time.monotonic()
    waited = run_cli("status", str(tmp_path / "sub"), "--wait", "--interval", "1", "--timeout", "400",
                     env=env, timeout=500)
    assert waited.returncode == 3, waited.stdout + waited.stderr
    rows = [json.loads(ln) for ln in run_cli("status", str(tmp_path / "sub"), "--json", env=env).stdout.splitlines()]
    assert all(r["state"] == "failed" and "timeout" in r["detail"] and collect["job_id"] in r["job"] for r in rows), rows
    assert f"open batches: {len(tasks)}" in run_cli("status", str(tmp_path / "sub"), env=env).stdout
    timed_out_s = time.monotonic() - t0

    batches.hold = False  # the collect job's own script, submitted again by hand
    again = subprocess.run(["sbatch", "--parsable", collect["script"]], capture_output=True, text=True, timeout=60,
                           env={**os.environ, **env})
    assert again.returncode == 0, again.stderr
    status_file = tmp_path / "st" / "completed_tasks_MedVision-Phantom-detect.json"
    wait_for("every task marked done", lambda: sorted(next(iter(status_entries(status_file).values()), {}))
             == sorted(tasks), timeout=300)
    assert batches.created == len(tasks), "the resubmitted collect job re-attached; nothing was submitted twice"
    stored = _all_answers(tmp_path)
    assert len(stored) == LIMIT * len(tasks) and all(len(v) == 1 and v[0]["status"] == "ok" for v in stored.values())
    assert not submitted_records(tmp_path / "res" / "MedVision-Phantom-detect")
    rerun = submit("--submit_dir", tmp_path / "sub2", *args, env=env)
    assert rerun.returncode == 0 and "nothing to submit" in rerun.stdout, rerun.stdout + rerun.stderr
    no_key_in(tmp_path)
    print(f"\ncollect job timed out {timed_out_s:.0f} s after the wait began")


def test_runner_flag_batch_keeps_the_evaluation_array_with_its_cost_cap(tmp_path, phantom_dir, phantom_lists):
    """`-- --batch --max_cost USD` without submit's --batch: each element submits and collects in one run."""
    args = _args(tmp_path, phantom_dir, phantom_lists, "http://127.0.0.1:9", "--dry-run", "--submit_dir",
                 str(tmp_path / "sub"))
    args.remove("--batch")
    res = submit(*args, "--batch", "--max_cost", "5", env=ENV)
    assert res.returncode == 0, res.stderr[-2000:]
    jobs = jobs_by_name(load_plan(tmp_path / "sub"))
    assert [j["kind"] for j in jobs.values()] == ["eval", "summary"]
    script = Path(jobs["eval-openai-detect"]["script"]).read_text()
    assert "--batch --max_cost 5" in script and "--batch_phase" not in script
