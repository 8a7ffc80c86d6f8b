"""lmms-eval imported while a local model loads, and its git lookups asked once per process: a run of a local model
does the same work as before, and stores, scores and logs the same bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from medvision_bm.runner.harness import _cache_run_constants
from mvtest_support import REPO, TEST_CONTRACT_ENV

pytestmark = pytest.mark.slow
TASKS = REPO / "tasks_list" / "tasks_MedVision-Phantom-AD.json"

#: One run of the ``hf`` record (answers from the oracle, so the same in every run) in a fresh interpreter: whether
#: lmms-eval was imported while the backend loaded, how often lmms-eval's evaluator asked git, and the run's files.
SCRIPT = r"""
import json, sys, time
from pathlib import Path
from medvision_bm.models.baselines import OracleBackend
from medvision_bm.models.registry import get_record
from medvision_bm.runner import harness, loop
from medvision_bm.runner.args import build_parser
from medvision_bm.runner.config import build_config

mode, data, tasks, results = sys.argv[1:5]
if mode == "plain":  # the harness imports lmms-eval itself, after the load
    loop.preload_lmms = lambda: None
seen = {}

def factory(cfg, data_dir):
    deadline = time.monotonic() + 120
    while mode == "preload" and "lmms_eval.evaluator" not in sys.modules and time.monotonic() < deadline:
        time.sleep(0.01)  # a load that takes as long as the import
    seen["imported_while_loading"] = "lmms_eval.evaluator" in sys.modules
    seen["main_thread_imported"] = harness._preload is None
    return OracleBackend()

record = get_record("hf")
argv = ["--model_hf_id", "test/oracle", "--processor_resize", "none", "--data_dir", data, "--tasks_list_json_path",
        tasks, "--results_dir", results, "--skip_env_setup", "--skip_update_status", "--no_progress",
        "--sample_limit", "3"]
cfg = build_config(build_parser(record, "test").parse_args(argv), record, argv)
outcomes = loop.Runner(cfg, factory).run()
from lmms_eval import evaluator
seen["states"] = [o.state for o in outcomes]
seen["git"] = {name: getattr(evaluator, name).cache_info()._asdict() for name in
               ("get_git_commit_hash", "get_git_branch_name", "get_lmms_eval_version_string")}
print("SEEN " + json.dumps(seen))
"""


def _run(mode: str, phantom_dir: Path, out: Path) -> dict:
    argv = [sys.executable, "-c", SCRIPT, mode, str(phantom_dir), str(TASKS), str(out)]
    env = {**os.environ, **TEST_CONTRACT_ENV, "PYTHONPATH": str(REPO / "src")}
    res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("SEEN "))
    return json.loads(line.removeprefix("SEEN "))


def _files(results: Path) -> dict[str, bytes]:
    """What a run leaves that must not depend on when lmms-eval was imported: lmms-eval's per-sample logs, the parsed
    rows, signatures, docs and each stored answer's text and outcome (the records also hold times)."""
    out: dict[str, bytes] = {}
    answers: dict[str, list[tuple]] = {}
    for path in sorted(results.rglob("*.json*")):
        rel = str(path.relative_to(results))
        if path.name.startswith("samples_") and path.suffix == ".jsonl":  # (the file is named by its time)
            out[f"{path.parent.relative_to(results)}/lmms-log"] = path.read_bytes()
        elif path.name in ("parsed.jsonl", "signature.json", "docs.jsonl"):
            out[rel] = path.read_bytes()
        elif path.parent.name == "samples" and path.suffix == ".jsonl":  # (segments are named by process)
            recs = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
            answers.setdefault(str(path.parent.parent.relative_to(results)), []).extend(
                (r["index"], r["doc_sha"], r["text"], r["error"], r["status"]) for r in recs)
    out.update({f"{store}/answers": json.dumps(sorted(recs)).encode() for store, recs in answers.items()})
    return out


def test_lmms_eval_loads_beside_a_local_model_and_the_run_leaves_the_same_files(tmp_path, phantom_dir) -> None:
    plain = _run("plain", phantom_dir, tmp_path / "plain")
    pre = _run("preload", phantom_dir, tmp_path / "pre")
    assert plain["states"] == pre["states"] == ["done", "done"]
    assert plain["imported_while_loading"] is False and plain["main_thread_imported"] is True
    assert pre["imported_while_loading"] is True and pre["main_thread_imported"] is False
    a, b = _files(tmp_path / "plain"), _files(tmp_path / "pre")
    assert sum(k.endswith("lmms-log") for k in a) == sum(k.endswith("/answers") for k in a) == 2
    assert sum(k.endswith("parsed.jsonl") for k in a) == 2
    assert a == b
    for seen in (plain, pre):  # two tasks: git asked for the first, the answers kept for the second
        for info in seen["git"].values():
            assert info["misses"] == 1 and info["hits"] >= 1, seen["git"]


def test_run_constants_are_asked_once_and_wrapped_once() -> None:
    calls: list[str] = []
    mod = types.ModuleType("fake_evaluator")
    mod.get_git_commit_hash = lambda: calls.append("hash") or "abc123"
    mod.get_git_branch_name = lambda: calls.append("branch") or "main"
    _cache_run_constants(mod)
    wrapped = mod.get_git_commit_hash
    _cache_run_constants(mod)  # a second task's harness run: the same wrapper, its answer kept
    assert mod.get_git_commit_hash is wrapped
    assert [mod.get_git_commit_hash() for _ in range(3)] == ["abc123"] * 3
    assert [mod.get_git_branch_name() for _ in range(2)] == ["main"] * 2
    assert calls == ["hash", "branch"]
    assert not hasattr(mod, "get_lmms_eval_version_string")  # a name lmms-eval lacks is not made up
