"""`run --batch --batch_phase submit|collect`: a batch run split in two runs (a cluster's pair of jobs) against the
stub provider through the real openai SDK. The submit run submits and ends without waiting; the collect run
re-attaches and stores the answers, submits nothing, and when it is killed the next collect run re-attaches: one
batch created at the stub in all."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from batch_support import (
    ENV,
    N,
    answers,
    live_bodies,
    no_key_in,
    popen_cli,
    run_args,
    store_of,
    submitted_records,
    wait_for,
)
from mvtest_support import run_cli

pytestmark = pytest.mark.slow


def _polls(fake) -> int:
    return sum(1 for r in fake.received if r.method == "GET" and "/batches/" in r.path)


def test_submit_phase_ends_with_its_batch_open_and_collect_runs_reattach_after_a_kill(
        tmp_path: Path, phantom_dir: Path, task_list: Path, stub) -> None:
    fake, batches = stub
    batches.hold = True
    results = tmp_path / "res"
    args = run_args(fake.url, phantom_dir, task_list, results)
    submitted = run_cli(*args, "--batch_phase", "submit", env=ENV)
    assert submitted.returncode == 0, submitted.stderr[-2000:]
    assert "1 batch(es) submitted (4 samples)" in submitted.stderr
    assert batches.created == 1 and _polls(fake) == 0, "the submit run does not wait for its batch"
    (record,) = submitted_records(results)
    assert len(record["items"]) == N and not answers(results)
    assert not (store_of(results) / "results.json").exists(), "nothing is scored before the answers land"
    waiting = run_cli("status", "--batches", str(results))
    assert record["batch_id"] in waiting.stdout and "waiting" in waiting.stdout, waiting.stdout

    again = run_cli(*args, "--batch_phase", "submit", env=ENV)  # a second submit run: its samples are batched
    assert again.returncode == 0 and batches.created == 1, again.stderr[-2000:]
    assert len(submitted_records(results)) == 1 and _polls(fake) == 0

    collect = [*args, "--batch_phase", "collect"]
    proc = popen_cli(collect)
    try:
        wait_for("the collect run polling the batch", lambda: _polls(fake) > 0)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    assert submitted_records(results) == [record] and not answers(results), "a killed collect run leaves it open"

    batches.hold = False
    done = run_cli(*collect, env=ENV)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"re-attached to batch {record['batch_id']}" in done.stderr
    assert batches.created == 1, "collect runs re-attach; nothing is submitted twice"
    stored = answers(results)
    assert len(stored) == N and all(len(v) == 1 and v[0]["status"] == "ok" for v in stored.values())
    res = json.loads((store_of(results) / "results.json").read_text())
    assert res["complete"] and res["counts"]["answered"] == N
    assert not submitted_records(results) and not live_bodies(fake)
    no_key_in(tmp_path)


def test_the_collect_phase_submits_nothing_and_names_what_no_batch_holds(
        tmp_path: Path, phantom_dir: Path, task_list: Path, stub) -> None:
    fake, batches = stub
    res = run_cli(*run_args(fake.url, phantom_dir, task_list, tmp_path / "res"), "--batch_phase", "collect",
                  env=ENV)
    assert res.returncode == 3, res.stderr[-2000:]
    assert f"{N} sample(s) are in no open batch" in res.stderr
    assert batches.created == 0 and not live_bodies(fake) and not answers(tmp_path / "res")


@pytest.mark.parametrize(("extra", "needle"), [
    ((), "--batch_phase submit: a phase of a batch run; give --batch too"),
    (("--batch", "--max_cost", "5"), "--batch_phase submit with --max_cost"),
])
def test_a_batch_phase_without_batch_or_with_a_cost_cap_is_refused_in_one_line(
        tmp_path: Path, phantom_dir: Path, task_list: Path, extra: tuple[str, ...], needle: str) -> None:
    args = run_args("http://127.0.0.1:9", phantom_dir, task_list, tmp_path / "res", batch=False)
    res = run_cli(*args, *extra, "--batch_phase", "submit", env=ENV)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1 and needle in lines[0], res.stderr
    assert not (tmp_path / "res").exists()
