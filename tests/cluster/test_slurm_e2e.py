"""End to end on a real one-node SLURM (tests/cluster/slurm-local.sh): submit, cancel mid-run, resubmit.

Two baselines and the tiny local VLM run the phantom benchmark across the three families through the real
launchers; the tiny model is sharded by samples. One shard and its finalize job are cancelled while running;
resubmitting the same command must run only the missing work.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from cluster_support import (
    jobs_by_name,
    load_plan,
    ok_keys,
    one_line_error,
    status_entries,
    store_segments,
    submit,
)

from mvtest_support import REPO, phantom_list, run_cli

pytestmark = pytest.mark.slow
FAMILIES = ("AD", "TL", "detect")
LIMIT = 8  # samples per task: keeps the run near two minutes on two cores


@pytest.fixture(scope="module")
def tiny_weights(tmp_path_factory) -> Path:
    from medvision_bm.models.tiny import make_tiny_llava

    return make_tiny_llava(tmp_path_factory.mktemp("tiny") / "tiny-llava")


def _env(cluster: dict[str, str]) -> dict[str, str]:
    # environments persist between test runs (the launchers reuse them when the lock is unchanged)
    return {**cluster, "ENVS_ROOT": os.environ.get("MEDVISION_TEST_ENVS_ROOT", str(REPO / ".envs"))}


def _slurm(cluster: dict[str, str], *argv: str) -> str:
    res = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, env={**os.environ, **cluster})
    assert res.returncode == 0, res.stderr
    return res.stdout


def _wait_status(cluster: dict[str, str], folder: Path, timeout: float) -> subprocess.CompletedProcess:
    return run_cli("status", str(folder), "--wait", "--interval", "1", "--timeout", str(timeout),
                   env=_env(cluster), timeout=timeout + 60)


def test_unknown_partition_is_refused_before_submitting(slurm_cluster, tmp_path, phantom_dir):
    res = submit("--models", "oracle", "--families", "AD", "--partition", "nosuch", "--data_dir", phantom_dir,
                 "--results_root", tmp_path, env=slurm_cluster)
    one_line_error(res, "partition 'nosuch' does not exist on this cluster", "debug", "--partition")
    assert not (tmp_path / "submissions").exists()


def test_phantom_benchmark_cancel_and_resubmit(slurm_cluster, tmp_path, phantom_dir, phantom_lists, tiny_weights):
    env = _env(slurm_cluster)
    lists = {f: phantom_list(phantom_lists, f) for f in FAMILIES}
    assert all(n >= LIMIT for f in FAMILIES for n in lists[f].values())  # every task fills both hf shards
    tiny = tiny_weights.name  # the hf record names results after the weights folder
    res_root, status_dir = tmp_path / "res", tmp_path / "status"
    command = ("--models", "oracle,mean,hf", "--model_flags", f"hf=--model_hf_id {tiny_weights} --device cpu",
               "--families", ",".join(FAMILIES), "--shards", "hf=2:samples", "--data_dir", phantom_dir,
               "--tasks_list_dir", phantom_lists, "--results_root", res_root, "--status_dir", status_dir, "--partition", "debug", "--time", "00:20:00",
               "--", "--sample_limit", str(LIMIT))
    t0 = time.monotonic()
    first = submit("--submit_dir", tmp_path / "first", *command, env=env)
    assert first.returncode == 0, first.stderr
    plan1 = load_plan(tmp_path / "first")
    jobs1 = jobs_by_name(plan1)
    assert {j["kind"] for j in plan1["jobs"]} == {"warmup", "eval", "finalize", "summary"}
    assert all(j["job_id"] for j in plan1["jobs"])
    queued = _slurm(slurm_cluster, "squeue", "-h", "-o", "%j")
    assert "mvbm-eval-hf-detect" in queued and "mvbm-summary" in queued

    # Cancel the second detect shard of the tiny model once it has stored an answer, and its finalize job.
    victim = jobs1["eval-hf-detect"]
    shard = victim["elements"][1]["shard"]
    detect_dir = res_root / "MedVision-Phantom-detect"
    deadline = time.monotonic() + 900  # the warm-up job builds the environment first (minutes on 2 busy cores)
    while not any(ln.strip() for seg in detect_dir.glob(f"{tiny}/*/*/samples/{shard}-*.jsonl")
                  for ln in seg.read_text().splitlines()):
        assert time.monotonic() < deadline, "the tiny model's second detect shard never answered"
        time.sleep(0.1)
    _slurm(slurm_cluster, "scancel", jobs1["finalize-hf-detect"]["job_id"], f"{victim['job_id']}_1")

    waited = _wait_status(slurm_cluster, tmp_path / "first", 900)
    assert waited.returncode == 3, waited.stdout + waited.stderr  # incomplete: the cancelled work is missing
    rows = _rows(slurm_cluster, tmp_path / "first")
    not_done = {(m, f) for (m, f, _t), r in rows.items() if r["state"] != "done"}
    assert not_done == {(tiny, "detect")}, rows
    for (m, f, _t), r in rows.items():
        if (m, f) == (tiny, "detect"):  # the cancelled shard and the cancelled finalize job are named
            assert r["state"] == "failed" and "cancelled" in r["detail"], r
            assert f"{victim['job_id']}_1" in r["job"] and jobs1["finalize-hf-detect"]["job_id"] in r["job"], r
    first_s = time.monotonic() - t0

    before = {(f, m): store_segments(res_root / f"MedVision-Phantom-{f}", m)
              for f in FAMILIES for m in ("oracle", "mean", tiny)}
    status_before = {f: status_entries(status_dir / f"completed_tasks_MedVision-Phantom-{f}.json") for f in FAMILIES}
    answered = {t: set(ok_keys(segs)) for t, segs in before[("detect", tiny)].items()}
    missing = sum(LIMIT - len(keys) for keys in answered.values()) + LIMIT * (len(lists["detect"]) - len(answered))
    assert missing > 0, "the cancelled shard had finished before it was cancelled"

    # Resubmitting the same command plans only the tiny model's detect work, and only the unanswered range.
    t1 = time.monotonic()
    second = submit("--submit_dir", tmp_path / "second", *command, env=env)
    assert second.returncode == 0, second.stderr
    jobs2 = jobs_by_name(load_plan(tmp_path / "second"))
    assert set(jobs2) == {"warmup-eval-cpu", "eval-hf-detect", "finalize-hf-detect", "summary"}
    assert [e["sample_indices"] for e in jobs2["eval-hf-detect"]["elements"]] == [victim["elements"][1]["sample_indices"]]
    waited = _wait_status(slurm_cluster, tmp_path / "second", 400)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    second_s = time.monotonic() - t1

    for f in FAMILIES:
        tasks = lists[f]
        status = status_entries(status_dir / f"completed_tasks_MedVision-Phantom-{f}.json")
        for model in ("oracle", "mean", tiny):
            assert sorted(status[model]) == sorted(tasks), (f, model)
            assert all(e["done"] and e["n"] == LIMIT for e in status[model].values())
            after = store_segments(res_root / f"MedVision-Phantom-{f}", model)
            for task in tasks:
                keys = ok_keys(after[task])
                assert len(keys) == LIMIT and len(set(keys)) == LIMIT, (f, model, task)  # complete, no duplicates
            if (f, model) != ("detect", tiny):
                assert after == before[(f, model)], (f, model)  # nothing re-asked
                assert status[model] == status_before[f][model]  # not even re-marked
    # the tiny model's detect stores: the new segments hold exactly the answers that were missing
    after = store_segments(detect_dir, tiny)
    new = [r["key"] for t, segs in after.items() for name, recs in segs.items()
           if name not in before[("detect", tiny)].get(t, {}) for r in recs if r.get("status") == "ok"]
    assert len(new) == missing and not any(k in answered.get(t, set()) for t in after for k in new)
    assert (res_root / "summary" / "index.html").is_file()
    print(f"\nfirst submission {first_s:.0f} s, resubmission {second_s:.0f} s")


def _rows(cluster: dict[str, str], folder: Path) -> dict[tuple[str, str, str], dict[str, str]]:
    res = run_cli("status", str(folder), "--json", env=_env(cluster))
    assert res.returncode == 0, res.stderr
    return {(r["model_name"], r["family"], r["task"]): r for r in map(json.loads, res.stdout.splitlines())}
