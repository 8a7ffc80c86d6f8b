"""Runner behaviours through its Python API: keep-failed, selections, signatures, status updates."""

from __future__ import annotations

import dataclasses
import json

import pytest

from medvision_bm.data.planner import parse_planner_version
from medvision_bm.models.base import GenResult, RequestError, SyncBackend
from medvision_bm.models.baselines import OracleBackend
from medvision_bm.models.registry import get_record
from medvision_bm.runner.args import build_parser
from medvision_bm.runner.config import build_config
from medvision_bm.runner.loop import Runner, prepare_task, todo_rundocs
from medvision_bm.runner.selection import StreamedSelection
from medvision_bm.store.signature import doc_sha
from mvtest_support import REPO, TEST_CONTRACT_ENV

pytestmark = pytest.mark.slow
TASKS = REPO / "tasks_list" / "tasks_MedVision-Phantom-AD.json"


class CountingBackend(SyncBackend):
    """Answers like the oracle, fails the keys it is told to, and remembers every key it was asked."""

    name = "counting"

    def __init__(self, fail: set[str] | None = None) -> None:
        self.fail = fail or set()
        self.asked: list[str] = []
        self._oracle = OracleBackend()

    def answer(self, request):
        self.asked.append(request.key)
        if request.key in self.fail:
            return GenResult(request.key, None, RequestError("http", "503 Service Unavailable", 503, True), attempts=3)
        return self._oracle.answer(request)


def make_runner(tmp_path, phantom_dir, backend, *extra: str, model: str = "oracle"):
    record = get_record(model)
    argv = ["--data_dir", str(phantom_dir), "--tasks_list_json_path", str(TASKS), "--results_dir",
            str(tmp_path / "res"), "--task_status_json_path", str(tmp_path / "status.json"), "--skip_env_setup",
            "--no_progress", *extra]
    cfg = build_config(build_parser(record, "test").parse_args(argv), record, argv)
    return Runner(cfg, lambda cfg, data: backend), cfg


def make_generating_runner(tmp_path, phantom_dir, backend, *extra: str):
    """A runner of a model that generates (a baseline takes no generation setting: its signature ignores them)."""
    return make_runner(tmp_path, phantom_dir, backend, *extra, "--model_hf_id", "test/counting", "--processor_resize", "none",
                       model="hf")


def _status(tmp_path):
    p = tmp_path / "status.json"
    return json.loads(p.read_text()) if p.exists() else {}


def test_failed_requests_are_stored_retried_and_kept_with_keep_failed(tmp_path, phantom_dir, clean_env):
    first = CountingBackend()
    runner, _ = make_generating_runner(tmp_path, phantom_dir, first, "--sample_limit", "4")
    keys = []
    for o in runner.run():
        assert o.state == "done"
    keys = first.asked
    fail = set(keys[::3])
    # a new signature (different max tokens), some requests fail
    b1 = CountingBackend(fail)
    runner, _ = make_generating_runner(tmp_path, phantom_dir, b1, "--sample_limit", "4", "--max_new_tokens", "99")
    outcomes = runner.run()
    assert any(o.state == "incomplete" for o in outcomes)
    assert sorted(b1.asked) == sorted(keys), "a new signature asks every sample again"
    res = json.loads(next(p for p in (tmp_path / "res").glob("counting/*/*/results.json")
                          if json.loads(p.read_text())["counts"]["request_failed"]).read_text())
    assert not res["complete"] and res["metrics"]["n_request_failed"] >= 1
    # --keep-failed: failed samples are not asked again, the task stays not done
    b2 = CountingBackend()
    runner, _ = make_generating_runner(tmp_path, phantom_dir, b2, "--sample_limit", "4", "--max_new_tokens", "99", "--keep-failed")
    assert any(o.state == "incomplete" for o in runner.run())
    assert b2.asked == []
    # default: exactly the failed samples are retried, then every task is done
    b3 = CountingBackend()
    runner, cfg = make_generating_runner(tmp_path, phantom_dir, b3, "--sample_limit", "4", "--max_new_tokens", "99")
    assert all(o.state == "done" for o in runner.run())
    assert sorted(b3.asked) == sorted(fail)
    assert set(_status(tmp_path)["counting"]) == set(cfg.tasks)


def test_selection_flags_and_store_reuse_across_selections(tmp_path, phantom_dir, clean_env):
    b1 = CountingBackend()
    runner, cfg = make_runner(tmp_path, phantom_dir, b1, "--sample_indices", "1,3", "--skip_update_status")
    outcomes = runner.run()
    assert [o.n_selected for o in outcomes] == [2] * len(cfg.tasks)
    assert len(b1.asked) == 2 * len(cfg.tasks)
    assert not (tmp_path / "status.json").exists(), "--skip_update_status never writes the status file"
    # --sample_limit 4 selects indices 0..3: only 0 and 2 are new; indices 1 and 3 come from the store
    b2 = CountingBackend()
    runner, cfg = make_runner(tmp_path, phantom_dir, b2, "--sample_limit", "4")
    outcomes = runner.run()
    assert [o.n_selected for o in outcomes] == [4] * len(cfg.tasks)
    assert len(b2.asked) == 2 * len(cfg.tasks)
    # the whole split, under the same answer signature: nothing asked twice
    b3 = CountingBackend()
    runner, cfg = make_runner(tmp_path, phantom_dir, b3)
    outcomes = runner.run()
    assert len(b3.asked) == sum(cfg.tasks.values()) - 4 * len(cfg.tasks)
    assert len(set(b1.asked + b2.asked + b3.asked)) == len(b1.asked + b2.asked + b3.asked)


def test_changing_a_generation_setting_changes_the_signature(tmp_path, phantom_dir, clean_env):
    b1 = CountingBackend()
    runner, _ = make_generating_runner(tmp_path, phantom_dir, b1, "--sample_limit", "2", "--temperature", "0")
    runner.run()
    b2 = CountingBackend()
    runner, _ = make_generating_runner(tmp_path, phantom_dir, b2, "--sample_limit", "2", "--temperature", "0.7")
    runner.run()
    assert sorted(b1.asked) == sorted(b2.asked) and b2.asked, "new settings must not reuse old answers"
    stores = {p.parent.name for p in (tmp_path / "res").glob("counting/*/*/signature.json")}
    assert len(stores) == 2 * len(json.loads(TASKS.read_text()))
    sigs = [json.loads(p.read_text()) for p in (tmp_path / "res").glob("counting/*/*/signature.json")]
    temps = {s["inputs"]["generation"]["temperature"] for s in sigs}
    assert temps == {0.0, 0.7}
    # a setting that does not change answers (the status file's bookkeeping) keeps the signature; a local
    # model's batch size is an engine input of its answers (runner/engine.py)
    b3 = CountingBackend()
    runner, _ = make_generating_runner(tmp_path, phantom_dir, b3, "--sample_limit", "2", "--temperature", "0.7",
                                       "--skip_update_status", "--force")
    runner.run()
    assert b3.asked == []
    # the protocol (upstream's prompts, parser and metric rules of one generation) is part of the signature
    b4 = CountingBackend()
    runner, _ = make_generating_runner(tmp_path, phantom_dir, b4, "--sample_limit", "2", "--temperature", "0.7",
                            "--protocol", "paper")
    runner.run()
    assert sorted(b4.asked) == sorted(b2.asked)
    sigs = [json.loads(p.read_text()) for p in (tmp_path / "res").glob("counting/*/*/signature.json")]
    assert {s["inputs"]["protocol"] for s in sigs} == {"current", "paper"}
    pin = parse_planner_version(TEST_CONTRACT_ENV["MedVision_PLANNER_VERSION"])
    assert {(s["inputs"]["planner_version"], s["inputs"]["sample_filtering"]) for s in sigs} == {(pin, True)}


def test_a_changed_sample_is_asked_again_and_its_new_answer_is_used(tmp_path, phantom_dir, clean_env):
    """A stored answer is reused only for the very same sample; after the sample changes, its new answer wins."""
    b1 = CountingBackend()
    runner, _ = make_runner(tmp_path, phantom_dir, b1, "--sample_limit", "2", "--skip_update_status")
    runner.run()
    runner, cfg = make_runner(tmp_path, phantom_dir, CountingBackend(), "--sample_limit", "2",
                              "--skip_update_status")
    task = next(iter(cfg.tasks))
    prep = prepare_task(cfg, runner.data, task)
    assert todo_rundocs(prep, prep.store.read(), keep_failed=False) == []
    # the same key with another annotation (e.g. a regenerated dataset) has another doc hash: it is to do again
    rundocs = prep.rundocs
    rd = rundocs[0]
    changed_doc = dataclasses.replace(rd.doc, biometric_profile={**rd.doc.biometric_profile, "metric_value": 1.0})
    prep = dataclasses.replace(prep, samples=StreamedSelection.of_rundocs([dataclasses.replace(rd, doc=changed_doc),
                                                                           *rundocs[1:]]))
    assert prep.shas[rd.doc.key] == doc_sha(changed_doc, rd.view)
    state = prep.store.read()
    assert [r.doc.key for r in todo_rundocs(prep, state, keep_failed=False)] == [rd.doc.key]
    # once answered under the new hash, that answer is found although an older one comes first in the store
    writer = prep.store.writer("t")
    writer.append(GenResult(rd.doc.key, "<answer>1.0</answer>"), index=0, doc_sha=prep.shas[rd.doc.key])
    writer.close()
    state = prep.store.read()
    assert state.answer(rd.doc.key, prep.shas[rd.doc.key]).text == "<answer>1.0</answer>"
    assert todo_rundocs(prep, state, keep_failed=False) == [] and state.duplicates == 0


def test_the_resume_benchmark_runs_on_a_small_store(repo_root):
    import subprocess
    import sys

    res = subprocess.run([sys.executable, str(repo_root / "benchmarks" / "bench_resume.py"), "--n", "2000",
                          "--left", "0.1", "--pairs", "1"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    out = res.stdout
    assert "resume" in out and "(asked 200)" in out and "scratch" in out and "(asked 2000)" in out, out
    assert "noop" in out and "(asked 0)" in out and "resume / keyset: per round" in out, out
    assert "noop / walk: per round" in out, out  # the no-op rerun all in, against a from-scratch selection


def test_a_familys_own_max_tokens_wins_unless_the_flag_is_given(tmp_path, phantom_dir, clean_env):
    def budgeted(cfg):  # the record with a per-family token budget
        record = dataclasses.replace(cfg.record)
        object.__setattr__(record, "family_max_new_tokens", {"AD": 77})
        return dataclasses.replace(cfg, record=record)

    _, cfg = make_generating_runner(tmp_path, phantom_dir, CountingBackend())
    assert cfg.gen_for_task("AD").max_new_tokens == cfg.record.gen.max_new_tokens  # no budget: the model default
    cfg = budgeted(cfg)
    assert cfg.gen_for_task("AD").max_new_tokens == 77
    assert cfg.gen_for_task("TL").max_new_tokens == cfg.record.gen.max_new_tokens
    _, cfg = make_generating_runner(tmp_path, phantom_dir, CountingBackend(), "--max_new_tokens", "12")
    assert budgeted(cfg).gen_for_task("AD").max_new_tokens == 12


def test_the_weights_a_server_serves_enter_its_signature(tmp_path, phantom_dir):
    """openai-compatible with --model_hf_id: the weights named there are the run's weights (another id, another store),
    the served name kept beside them; without it the signature is what it always was (the served name)."""
    record = get_record("openai-compatible")

    def model(*extra: str) -> dict:
        argv = ["--data_dir", str(phantom_dir), "--tasks_list_json_path", str(TASKS), "--results_dir",
                str(tmp_path / "res"), "--skip_update_status", "--skip_env_setup", "--base_url", "http://127.0.0.1:9/v1",
                "--model_name", "my-endpoint", *extra]
        return build_config(build_parser(record, "test").parse_args(argv), record, argv).signature_model()

    plain = model()
    assert plain["weights"] == "my-endpoint" and "served_name" not in plain
    served = model("--model_hf_id", "Qwen/Qwen2.5-VL-7B-Instruct")
    assert served["weights"] == "Qwen/Qwen2.5-VL-7B-Instruct" and served["served_name"] == "my-endpoint"
    assert model("--model_hf_id", "Qwen/Qwen2.5-VL-32B-Instruct")["weights"] != served["weights"]


def _stores(root):
    return {p.parent.parent.name: p for p in root.glob("res/counting/*/*/results.json")}


def test_a_task_asked_in_parts_stores_scores_and_logs_what_one_part_does(tmp_path, phantom_dir, clean_env, monkeypatch):
    """lmms-eval is handed a task a bounded part at a time (its memory grows with what it is handed): a task run in
    parts of 3 samples writes the same parsed rows, metrics and per-sample log (numbered through the whole to-do) as
    the same task in one part, with one lmms-eval pass per part and no score left held between parts."""
    from medvision_bm.runner import parts as task_parts
    from medvision_bm.runner.harness import LmmsHarness

    calls: list[int] = []
    real_run = LmmsHarness.run

    def counted(self, spec):
        calls.append(len(spec.rundocs))
        return real_run(self, spec)

    monkeypatch.setattr(LmmsHarness, "run", counted)
    outcomes = {}
    for name, size in (("whole", 10_000), ("parts", 3)):
        monkeypatch.setattr(task_parts, "TASK_PART", size)
        calls.clear()
        (tmp_path / name).mkdir()
        runner, _ = make_generating_runner(tmp_path / name, phantom_dir, CountingBackend(), "--sample_limit", "8")
        outcomes[name] = (runner.run(), list(calls))
    (whole, whole_calls), (split, split_calls) = outcomes["whole"], outcomes["parts"]
    assert [o.state for o in split] == [o.state for o in whole] and all(o.state == "done" for o in split)
    assert [o.metrics for o in split] == [o.metrics for o in whole]
    n = whole[0].n_selected
    assert n > 3 and whole_calls[0] == n
    assert split_calls[:-(-n // 3)] == [3] * (n // 3) + ([n % 3] if n % 3 else []), "one lmms-eval pass per part"
    stores = _stores(tmp_path / "whole"), _stores(tmp_path / "parts")
    assert set(stores[0]) == set(stores[1]) == {o.task for o in whole}
    for task, results in stores[0].items():
        a, b = results.parent, stores[1][task].parent
        assert (a / "parsed.jsonl").read_bytes() == (b / "parsed.jsonl").read_bytes()
        logs = []
        for store in (a, b):
            (log,) = (store / "lmms_eval").glob("samples_*.jsonl")
            logs.append([json.loads(line) for line in log.read_text().splitlines()])
        assert [r["doc_id"] for r in logs[1]] == [r["doc_id"] for r in logs[0]] == list(range(len(logs[0])))
        assert [r["resps"] for r in logs[1]] == [r["resps"] for r in logs[0]]
        assert not list(b.rglob("*.tmp")), "the spooled log was renamed into place"
