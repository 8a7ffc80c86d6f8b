"""`submit` and `status` against stand-in SLURM commands (no root, no daemons): what they pass to sbatch, what
they do when the cluster refuses, and how status reads squeue/sacct. The real cluster is test_slurm_e2e.py."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from cluster_support import jobs_by_name, load_plan, one_line_error, submit

from mvtest_support import phantom_list, run_cli

# sbatch: logs its argv, answers ids 101, 102, ... and rejects the script named in $FAKE_REJECT.
SBATCH = """#!/bin/bash
n=$(( $(wc -l < "$FAKE/sbatch.log" 2>/dev/null || echo 0) + 101 ))
echo "$n $*" >> "$FAKE/sbatch.log"
if [ -n "${FAKE_REJECT:-}" ] && [[ "${@: -1}" == *"$FAKE_REJECT"* ]]; then
    echo "sbatch: error: Batch job submission failed: Invalid account or account/partition combination" >&2
    exit 1
fi
echo "$n;cluster"
"""
SINFO = '#!/bin/bash\nprintf "debug\\ngpu\\ngpu\\n"\n'
SCANCEL = '#!/bin/bash\necho "$*" >> "$FAKE/scancel.log"\n'
SQUEUE = '#!/bin/bash\ncat "$FAKE/squeue.txt" 2>/dev/null\n'
SACCT = '#!/bin/bash\ncat "$FAKE/sacct.txt" 2>/dev/null\n'


@pytest.fixture()
def fake_slurm(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    folder = tmp_path / "fake-slurm"
    folder.mkdir()
    for name, text in (("sbatch", SBATCH), ("sinfo", SINFO), ("scancel", SCANCEL), ("squeue", SQUEUE),
                       ("sacct", SACCT)):
        path = folder / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return folder, {"FAKE": str(folder), "PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"}


def _args(tmp_path: Path, phantom_dir: Path, lists: Path, *extra: str) -> list[str]:
    return ["--models", "oracle,mean", "--families", "AD", "--shards", "oracle=2:samples", "--data_dir",
            str(phantom_dir), "--tasks_list_dir", str(lists), "--results_root", str(tmp_path / "res"),
            "--status_dir", str(tmp_path / "st"), "--submit_dir", str(tmp_path / "sub"), *extra]


def _sbatch_calls(folder: Path) -> dict[str, list[str]]:
    """script stem -> [job id, sbatch args...]"""
    out = {}
    for line in (folder / "sbatch.log").read_text().splitlines():
        jid, *argv = line.split()
        out[Path(argv[-1]).stem] = [jid, *argv[:-1]]
    return out


def test_unknown_partition_is_refused(fake_slurm, tmp_path, phantom_dir, phantom_lists):
    folder, env = fake_slurm
    res = submit(*_args(tmp_path, phantom_dir, phantom_lists, "--partition", "nosuch"), env=env)
    one_line_error(res, "partition 'nosuch' does not exist", "debug, gpu", "--partition")
    assert not (folder / "sbatch.log").exists() and not (tmp_path / "sub").exists()


def test_jobs_are_submitted_in_order_with_their_dependencies(fake_slurm, tmp_path, phantom_dir, phantom_lists):
    folder, env = fake_slurm
    res = submit(*_args(tmp_path, phantom_dir, phantom_lists, "--partition", "gpu"), env=env)
    assert res.returncode == 0, res.stderr
    calls = _sbatch_calls(folder)
    assert list(calls) == ["warmup-eval-cpu", "eval-oracle-AD", "finalize-oracle-AD", "eval-mean-AD", "summary"]
    ids = {name: c[0] for name, c in calls.items()}
    assert calls["warmup-eval-cpu"][1:] == ["--parsable"]
    assert calls["eval-oracle-AD"][1:] == ["--parsable", f"--dependency=afterok:{ids['warmup-eval-cpu']}"]
    assert calls["finalize-oracle-AD"][1:] == [
        "--parsable", f"--dependency=afterok:{ids['warmup-eval-cpu']},afterany:{ids['eval-oracle-AD']}"]
    others = [ids[n] for n in ("warmup-eval-cpu", "eval-oracle-AD", "finalize-oracle-AD", "eval-mean-AD")]
    assert calls["summary"][1:] == ["--parsable", "--dependency=afterany:" + ":".join(others)]
    plan = load_plan(tmp_path / "sub")
    assert plan["mode"] == "slurm"
    assert {j["name"]: j["job_id"] for j in plan["jobs"]} == ids
    assert f"medvision-bm status {tmp_path / 'sub'}" in res.stdout
    assert not (folder / "scancel.log").exists()

    # status: squeue holds the oracle shards (one running, one waiting), sacct says the mean array failed
    jobs = jobs_by_name(plan)
    oracle, mean = jobs["eval-oracle-AD"]["job_id"], jobs["eval-mean-AD"]["job_id"]
    (folder / "squeue.txt").write_text(f"{oracle}_0|RUNNING|None\n{oracle}_[1]|PENDING|JobArrayTaskLimit\n"
                                       f"{jobs['finalize-oracle-AD']['job_id']}|PENDING|Dependency\n")
    (folder / "sacct.txt").write_text(f"{ids['warmup-eval-cpu']}|COMPLETED|0:0\n{mean}_0|FAILED|1:0\n")
    shown = run_cli("status", str(tmp_path / "sub"), "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    rows = [json.loads(ln) for ln in shown.stdout.splitlines()]
    assert len(rows) == 2 * len(phantom_list(phantom_lists, "AD"))  # two models
    for r in rows:
        if r["model"] == "oracle":  # every task has a sample range in both shards
            assert (r["state"], r["job"]) == ("running", f"{oracle}_0"), r
        else:
            assert (r["state"], r["job"], r["detail"]) == ("failed", f"{mean}_0", "failed exit 1:0"), r


def test_a_rejected_job_cancels_what_was_submitted(fake_slurm, tmp_path, phantom_dir, phantom_lists):
    folder, env = fake_slurm
    res = submit(*_args(tmp_path, phantom_dir, phantom_lists), env={**env, "FAKE_REJECT": "finalize-oracle-AD"})
    one_line_error(res, "sbatch rejected finalize-oracle-AD.sbatch", "Invalid account")
    calls = _sbatch_calls(folder)
    assert list(calls) == ["warmup-eval-cpu", "eval-oracle-AD", "finalize-oracle-AD"]
    cancelled = (folder / "scancel.log").read_text().split()
    assert cancelled == [calls["warmup-eval-cpu"][0], calls["eval-oracle-AD"][0]]
    assert not (tmp_path / "sub" / "plan.json").exists()  # status has nothing to follow


def test_status_rejects_a_broken_plan(tmp_path):
    folder = tmp_path / "sub"
    folder.mkdir()
    (folder / "plan.json").write_text('{"schema": "medvision-submit/1",')
    one_line_error(run_cli("status", str(folder)), "cannot read", "plan.json")
    (folder / "plan.json").write_text('{"schema": "medvision-submit/1"}')
    one_line_error(run_cli("status", str(folder)), "is not a `medvision-bm submit` plan")


def test_resubmitting_while_jobs_are_queued_warns(fake_slurm, tmp_path, phantom_dir, phantom_lists):
    folder, env = fake_slurm
    args = ["--models", "oracle", "--families", "AD", "--data_dir", str(phantom_dir), "--tasks_list_dir",
            str(phantom_lists), "--results_root", str(tmp_path / "res"), "--status_dir", str(tmp_path / "st")]
    first = submit(*args, env=env)
    assert first.returncode == 0 and "warning" not in first.stderr, first.stderr
    ids = [c[0] for c in _sbatch_calls(folder).values()]  # warm-up, eval array, summary
    (folder / "squeue.txt").write_text(f"{ids[0]}|COMPLETED|None\n{ids[1]}_[0]|PENDING|Dependency\n"
                                       f"{ids[2]}|PENDING|Dependency\n")
    second = submit(*args, env=env)
    assert second.returncode == 0, second.stderr
    (line,) = [ln for ln in second.stderr.splitlines() if ln.startswith("warning")]
    first_dir = min((tmp_path / "res" / "submissions").iterdir())  # names are times: the older one
    assert f"submission {first_dir} still has 2 job(s) queued or running" in line


def test_a_batch_submission_gives_its_collect_job_an_afterany_dependency_on_its_submit_job(
        fake_slurm, tmp_path, phantom_dir, phantom_lists):
    folder, env = fake_slurm
    res = submit("--models", "openai", "--families", "AD", "--batch", "--data_dir", str(phantom_dir),
                 "--tasks_list_dir", str(phantom_lists), "--results_root", str(tmp_path / "res"), "--status_dir",
                 str(tmp_path / "st"), "--submit_dir", str(tmp_path / "sub"), env=env)
    assert res.returncode == 0, res.stderr
    calls = _sbatch_calls(folder)
    assert list(calls) == ["warmup-eval-api", "batch-submit-openai-AD", "batch-collect-openai-AD", "summary"]
    ids = {name: c[0] for name, c in calls.items()}
    assert calls["batch-submit-openai-AD"][1:] == ["--parsable", f"--dependency=afterok:{ids['warmup-eval-api']}"]
    assert calls["batch-collect-openai-AD"][1:] == [
        "--parsable", f"--dependency=afterok:{ids['warmup-eval-api']},afterany:{ids['batch-submit-openai-AD']}"]
    # status: the submit job ended, the collect job waits for its batches
    (folder / "squeue.txt").write_text(f"{ids['batch-collect-openai-AD']}|RUNNING|None\n")
    (folder / "sacct.txt").write_text(f"{ids['warmup-eval-api']}|COMPLETED|0:0\n"
                                      f"{ids['batch-submit-openai-AD']}|COMPLETED|0:0\n")
    rows = [json.loads(ln) for ln in run_cli("status", str(tmp_path / "sub"), "--json", env=env).stdout.splitlines()]
    assert len(rows) == len(phantom_list(phantom_lists, "AD"))
    assert all((r["state"], r["job"]) == ("running", ids["batch-collect-openai-AD"]) for r in rows), rows
