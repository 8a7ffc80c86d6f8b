"""`run --batch` against a local server speaking OpenAI's Files and Batches wire format, through the real openai SDK
in a real `medvision-bm run`: the same stored answers and metrics as a live run, re-attaching after a kill,
failed and expired items asked again and never scored, no sample submitted twice, no key in any file."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from batch_support import (
    ENV,
    PLANTED,
    PROVIDERS,
    N,
    answers,
    batch_bodies,
    live_bodies,
    no_key_in,
    popen_cli,
    run_args,
    store_of,
    submitted_records,
    wait_for,
)
from mvtest_support import REPO, phantom_list, run_cli

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_batch_run_stores_what_a_live_run_stores_and_scores_it_the_same(
        tmp_path: Path, phantom_dir: Path, task_list: Path, stub, provider: str) -> None:
    fake, batches = stub
    live = run_cli(*run_args(fake.url, phantom_dir, task_list, tmp_path / "live", batch=False, provider=provider),
                   env=ENV)
    assert live.returncode == 0, live.stderr[-2000:]
    sent_live = live_bodies(fake, provider)
    assert len(sent_live) == N and batches.created == 0
    got = run_cli(*run_args(fake.url, phantom_dir, task_list, tmp_path / "batch", provider=provider), env=ENV)
    assert got.returncode == 0, got.stderr[-2000:]
    assert len(live_bodies(fake, provider)) == N, "a batch run sends no live request"
    assert batches.created == 1 and batches.lines_answered == N
    key = lambda b: json.dumps(b, sort_keys=True)  # noqa: E731
    assert sorted(map(key, batch_bodies(batches))) == sorted(map(key, sent_live)), "each line is the live body"
    live_answers, batch_answers = answers(tmp_path / "live"), answers(tmp_path / "batch")
    assert set(live_answers) == set(batch_answers) and len(batch_answers) == N
    for k, (rec,) in batch_answers.items():
        (twin,) = live_answers[k]
        for field in ("status", "text", "finish_reason", "usage", "doc_sha", "index", "answer_signature"):
            assert rec[field] == twin[field], (k, field)
    live_res = json.loads((store_of(tmp_path / "live") / "results.json").read_text())
    batch_res = json.loads((store_of(tmp_path / "batch") / "results.json").read_text())
    assert batch_res["answer_signature"] == live_res["answer_signature"]
    assert batch_res["metrics"] == live_res["metrics"] and batch_res["complete"]
    inputs = json.loads((store_of(tmp_path / "batch") / "signature.json").read_text())["inputs"]
    prices = _shipped_prices(json.dumps(inputs["model_flags"]))  # the record's model code: the shipped batch price
    assert prices is not None
    usage = batch_res["usage"]
    billed = (usage["input_tokens"] * prices["batch_input"] + usage["output_tokens"] * prices["batch_output"]) / 1e6
    assert batch_res["cost_usd"] == pytest.approx(billed) and prices["batch_input"] < prices["input"]
    assert not list((store_of(tmp_path / "batch") / "batches").glob("*.json")), "a collected batch is no claim"
    creates = [r for r in fake.received if r.path in ("/v1/files", "/v1/messages/batches")
               or r.path.endswith(":batchGenerateContent")]
    assert creates and all(PLANTED in r.headers.get("Authorization", "") + r.headers.get("x-api-key", "")
                           + r.headers.get("x-goog-api-key", "") for r in creates)
    no_key_in(tmp_path)


def _shipped_prices(flags: str) -> dict[str, float] | None:
    """The shipped price table's entry whose model code the signature's model flags name, if any."""
    table = json.loads((REPO / "src" / "medvision_bm" / "models" / "api" / "prices.json").read_text())["models"]
    return next((e for code, e in table.items() if f'"{code}"' in flags), None)


def test_batch_is_refused_in_one_line_where_the_provider_has_no_batch_interface(
        tmp_path: Path, phantom_dir: Path, task_list: Path) -> None:
    res = run_cli("run", "--model", "openai", "--api_provider", "openrouter", "--openai_model_code", "openai/gpt-5.5",
                  "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(task_list), "--results_dir",
                  str(tmp_path / "res"), "--skip_env_setup", "--batch", env={"OPENROUTER_API_KEY": PLANTED})
    assert res.returncode == 2 and "--batch: openai:openrouter has no batch interface" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "res").exists()


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_run_killed_between_submit_and_collect_is_reattached_by_the_rerun(
        tmp_path: Path, phantom_dir: Path, task_list: Path, stub, provider: str) -> None:
    fake, batches = stub
    batches.hold = True
    results = tmp_path / "res"
    args = run_args(fake.url, phantom_dir, task_list, results, provider=provider)
    proc = popen_cli(args)
    try:
        wait_for("a submitted batch recorded in the store", lambda: bool(submitted_records(results)))
        wait_for("a look at the batch", lambda: any(r.method == "GET" and "batches/" in r.path
                                                     for r in fake.received))
        running = run_cli("status", "--batches", str(results))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    assert batches.created == 1
    (record,) = submitted_records(results)
    assert len(record["items"]) == N and not answers(results)
    assert running.returncode == 0 and record["batch_id"] in running.stdout, running.stderr
    assert f"{N} sample(s)" in running.stdout and "collecting (a live run holds it)" in running.stdout
    after = run_cli("status", "--batches", str(results))
    assert "waiting: rerun the same `run --batch` command" in after.stdout and "open batches: 1" in after.stdout
    n_live = len(live_bodies(fake, provider))
    live = run_cli(*run_args(fake.url, phantom_dir, task_list, results, batch=False, provider=provider), env=ENV)
    assert live.returncode == 3 and f"{N} sample(s) are in an open provider batch" in live.stderr, live.stderr[-2000:]
    assert len(live_bodies(fake, provider)) == n_live, "a live run asks no sample of an open batch"
    batches.hold = False
    again = run_cli(*args, env=ENV)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"re-attached to batch {record['batch_id']}" in again.stderr
    assert batches.created == 1, "the rerun collects the open batch instead of submitting again"
    assert all(len(v) == 1 and v[0]["status"] == "ok" for v in answers(results).values())
    assert len(answers(results)) == N and not submitted_records(results)
    assert run_cli("status", "--batches", str(results)).stdout == "open batches: none\n"
    no_key_in(tmp_path)


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_expired_and_failed_items_are_never_scored_and_asked_again(
        tmp_path: Path, phantom_dir: Path, task_list: Path, stub, provider: str) -> None:
    fake, batches = stub
    batches.outcome = lambda cid, body: {"s0": "expired", "s1": "failed"}.get(cid, "ok")
    results = tmp_path / "res"
    args = run_args(fake.url, phantom_dir, task_list, results, provider=provider)
    first = run_cli(*args, env=ENV)
    assert first.returncode == 3, first.stderr[-2000:]
    assert "2 without an answer (asked again next run)" in first.stderr
    res = json.loads((store_of(results) / "results.json").read_text())
    assert res["counts"]["answered"] == N - 2 and res["counts"]["request_failed"] == 2 and not res["complete"]
    failed = {k for k, v in answers(results).items() if v[0]["status"] != "ok"}
    assert len(failed) == 2
    parsed = {json.loads(ln)["key"]: json.loads(ln) for ln in (store_of(results) / "parsed.jsonl").read_text().splitlines()}
    for k in failed:
        assert parsed[k]["status"] == "request_failed" and not parsed[k]["success"], "a failed item is never scored"
        assert answers(results)[k][0]["error"]["retryable"]
    batches.outcome = lambda cid, body: "ok"
    second = run_cli(*args, env=ENV)
    assert second.returncode == 0, second.stderr[-2000:]
    assert batches.created == 2
    assert len(batch_bodies(batches)) == N + 2, "only the two items without an answer are submitted again"
    done = answers(results)
    assert all(any(r["status"] == "ok" for r in v) for v in done.values())
    assert json.loads((store_of(results) / "results.json").read_text())["complete"]


def test_two_concurrent_batch_runs_never_submit_a_sample_twice(
        tmp_path: Path, phantom_dir: Path, task_list: Path, stub) -> None:
    fake, batches = stub
    batches.hold = True
    results = tmp_path / "res"
    args = run_args(fake.url, phantom_dir, task_list, results)
    procs = [popen_cli(args), popen_cli(args)]
    try:
        wait_for("a submitted batch", lambda: bool(submitted_records(results)))
        time.sleep(1.0)  # the other run has claimed what it could meanwhile
        batches.hold = False
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode in (0, 3) for p in procs), [o[1][-1500:] for o in outs]
    assert batches.created >= 1
    assert len(batch_bodies(batches)) == N, "every sample is in exactly one batch"
    stored = answers(results)
    assert len(stored) == N and all(len(v) == 1 for v in stored.values())
    third = run_cli(*args, env=ENV)
    assert third.returncode == 0 and len(batch_bodies(batches)) == N, third.stderr[-2000:]


def test_a_run_splits_its_samples_into_batches_at_the_providers_count_limit(
        tmp_path: Path, phantom_dir: Path, task_list: Path, stub, monkeypatch: pytest.MonkeyPatch) -> None:
    from medvision_bm.models.api.batch_openai import OpenAIBatches
    from medvision_bm.models.registry import get_record
    from medvision_bm.runner.args import add_estimate_argument, build_parser
    from medvision_bm.runner.backends import build_backend
    from medvision_bm.runner.config import build_config
    from medvision_bm.runner.loop import Runner

    fake, batches = stub
    monkeypatch.setattr(OpenAIBatches, "max_requests", 3)
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED)
    record = get_record("openai")
    parser = build_parser(record, "test")
    add_estimate_argument(parser)
    argv = run_args(fake.url, phantom_dir, task_list, tmp_path / "res")[3:]  # the flags after `run --model openai`
    cfg = build_config(parser.parse_args(argv), record, argv)
    outcomes = Runner(cfg, build_backend).run()
    assert [o.state for o in outcomes] == ["done"]
    assert sorted(b.counts["total"] for b in batches.batches.values()) == [1, 3]
    stored = answers(tmp_path / "res")
    assert len(stored) == N and all(len(v) == 1 and v[0]["status"] == "ok" for v in stored.values())


def test_max_cost_holds_batches_back_until_the_answers_in_flight_are_priced(
        tmp_path: Path, phantom_dir: Path, phantom_lists: Path, stub) -> None:
    """Each stub answer bills 11 input and 7 output tokens; at 1e6/18 USD per 1M tokens each costs $1. Before any
    answer lands one sample goes in a batch, to learn the cost; then the $5 cap leaves room for 4 more: 5 answers
    in two batches, the rest not submitted, and a rerun with a larger cap goes on."""
    fake, batches = stub
    task, n = next(iter(phantom_list(phantom_lists, "detect").items()))
    tl = tmp_path / "all.json"
    tl.write_text(json.dumps({task: n}))
    price = str(1e6 / 18)
    args = ["run", "--model", "openai", "--base_url", f"{fake.url}/v1", "--data_dir", str(phantom_dir),
            "--tasks_list_json_path", str(tl), "--results_dir", str(tmp_path / "res"), "--skip_update_status",
            "--skip_env_setup", "--no_progress", "--max_new_tokens", "64", "--price_in", price, "--price_out", price,
            "--batch", "--batch_poll", "0.05"]
    capped = run_cli(*args, "--max_cost", "5", env=ENV)
    assert capped.returncode == 3, capped.stderr[-2000:]
    assert "--max_cost $5.00 reached (this run spent $5.00)" in capped.stderr
    assert sorted(b.counts["total"] for b in batches.batches.values()) == [1, 4]
    results = json.loads((store_of(tmp_path / "res") / "results.json").read_text())
    assert results["counts"]["answered"] == 5 and results["counts"]["pending"] == n - 5
    rest = run_cli(*args, "--max_cost", "1000", env=ENV)
    assert rest.returncode == 0, rest.stderr[-2000:]
    assert len(batch_bodies(batches)) == n, "the rerun submits only what the cap left"
