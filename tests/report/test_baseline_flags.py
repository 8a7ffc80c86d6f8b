"""Flags a baseline ignores do not split its results: a baseline generates nothing, so generation
settings never enter its signature, and a rerun with them asks nothing."""

from __future__ import annotations

import json

from mvtest_support import TEST_CONTRACT_ENV
from phantom_runs import run_baseline, run_cli


def test_generation_flags_do_not_change_a_baselines_signature(tmp_path, phantom_dir, phantom_lists):
    """Before: `-- --max_new_tokens 2048` re-ran the oracle under a new signature (`oracle@1ce514, oracle@1a08ba`
    in every later report); here a sibling set of flags on the mean baseline."""
    root = tmp_path / "res"
    first = run_baseline("mean", "AD", phantom_dir, root, "--sample_limit", "2", lists=phantom_lists)
    again = run_baseline("mean", "AD", phantom_dir, root, "--sample_limit", "2", "--temperature", "0.7",
                         "--top_p", "0.9", "--stop_strings", "END", "--max_new_tokens", "99", lists=phantom_lists)
    assert all(o.state == "done" for o in first + again)
    assert sum(o.n_asked for o in first) > 0 and sum(o.n_asked for o in again) == 0
    signatures = {p.parent.name for p in root.glob("mean/*/*/signature.json")}
    assert len(signatures) == len({o.task for o in first})  # one store per task, none added


def test_the_run_says_which_flags_it_ignored_and_no_progress_shows_no_bar(tmp_path, phantom_dir, phantom_lists):
    """With --no_progress, lmms-eval's own `Postprocessing: 100%|...` bar was still printed (it
    passes disable=False explicitly, which overrides TQDM_DISABLE); --log-sys-prompt wrote only results.json."""
    tasks = json.loads((phantom_lists / "tasks_MedVision-Phantom-AD.json").read_text())
    one = tmp_path / "tasks_one.json"
    one.write_text(json.dumps({sorted(tasks)[0]: 1}))
    res = run_cli("run", "--model", "oracle", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(one),
                  "--results_dir", str(tmp_path / "r"), "--skip_env_setup", "--skip_update_status",
                  "--no_progress", "--sample_limit", "1", "--max_new_tokens", "2048", "--log-sys-prompt", env=TEST_CONTRACT_ENV,
                  timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "note: oracle is a baseline and generates nothing: --max_new_tokens change none" in res.stderr
    assert "Postprocessing" not in res.stderr and "%|" not in res.stderr + res.stdout, res.stderr[-2000:]
    # --log-sys-prompt: in every per-sample row, as upstream's page says (docsite/source/benchmarking/
    # running-evaluations.md @f1102c5: "records the system prompt, if any, in the per-sample JSONL")
    rows = [json.loads(line) for f in (tmp_path / "r").glob("oracle/*/*/lmms_eval/samples_*.jsonl")
            for line in f.read_text().splitlines() if line.strip()]
    assert rows and all("system_prompt" in r and r["system_prompt"] is None for r in rows)  # oracle has none
