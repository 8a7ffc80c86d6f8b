"""A rerun with nothing to do touches only what changed: docs.jsonl and parsed.jsonl stay as they are, no answer is
re-scored; a changed selection, answer or scoring version is re-scored."""

from __future__ import annotations

import json

import pytest

from medvision_bm.models.baselines import OracleBackend
from medvision_bm.models.registry import get_record
from medvision_bm.runner import loop as loop_mod
from medvision_bm.runner.args import build_parser
from medvision_bm.runner.config import build_config
from medvision_bm.runner.loop import Runner
from medvision_bm.store import samples as store_mod
from mvtest_support import REPO

pytestmark = pytest.mark.slow
TASKS = REPO / "tasks_list" / "tasks_MedVision-Phantom-AD.json"


def run(tmp_path, phantom_dir, *extra: str):
    record = get_record("oracle")
    argv = ["--data_dir", str(phantom_dir), "--tasks_list_json_path", str(TASKS), "--results_dir",
            str(tmp_path / "res"), "--skip_update_status", "--skip_env_setup", "--no_progress", *extra]
    cfg = build_config(build_parser(record, "test").parse_args(argv), record, argv)
    outcomes = Runner(cfg, lambda cfg, data: OracleBackend()).run()
    assert all(o.state == "done" for o in outcomes)
    return outcomes


def stamps(tmp_path) -> dict[str, tuple[int, int]]:
    """(inode, mtime_ns) of every docs.jsonl and parsed.jsonl: a rewrite through a rename changes the inode."""
    out = {}
    for name in ("docs.jsonl", "parsed.jsonl"):
        for p in (tmp_path / "res").glob(f"oracle/*/*/{name}"):
            st = p.stat()
            out[str(p.relative_to(tmp_path))] = (st.st_ino, st.st_mtime_ns)
    return out


def forbid(monkeypatch, *names: str) -> None:
    def boom(*a, **k):
        raise AssertionError("a rerun with nothing to do re-scored or rewrote a file")

    for mod, name in (n.split(":") for n in names):
        monkeypatch.setattr({"loop": loop_mod, "store": store_mod}[mod], name, boom)


def test_a_rerun_with_nothing_to_do_rewrites_and_rescores_nothing(tmp_path, phantom_dir, clean_env, monkeypatch):
    first = run(tmp_path, phantom_dir, "--sample_limit", "4")
    before = stamps(tmp_path)
    assert len(before) == 4
    with monkeypatch.context() as m:
        forbid(m, "loop:iter_scores", "loop:write_lines_atomic", "store:write_lines_atomic",
               "loop:usage_totals")
        second = run(tmp_path, phantom_dir, "--sample_limit", "4")
    assert stamps(tmp_path) == before
    assert [o.metrics for o in second] == [o.metrics for o in first]
    for o in second:
        res = json.loads((o.store_dir / "results.json").read_text())
        assert res["counts"]["answered"] == 4 and res["counts"]["asked_this_run"] == 0 and res["complete"]

    # a larger selection: new answers, docs merged, everything re-scored
    run(tmp_path, phantom_dir, "--sample_limit", "6")
    after = stamps(tmp_path)
    assert all(after[k] != before[k] for k in before)
    for p in (tmp_path / "res").glob("oracle/*/*/parsed.jsonl"):
        assert len(p.read_text().splitlines()) == 6
    # back to the first selection: docs.jsonl already holds it (not rewritten); the scores are of 4 samples again
    third = run(tmp_path, phantom_dir, "--sample_limit", "4")
    now = stamps(tmp_path)
    assert {k: v for k, v in now.items() if k.endswith("docs.jsonl")} == \
        {k: v for k, v in after.items() if k.endswith("docs.jsonl")}
    assert [o.metrics for o in third] == [o.metrics for o in first]
    # and again with nothing to do
    with monkeypatch.context() as m:
        forbid(m, "loop:iter_scores", "loop:write_lines_atomic", "store:write_lines_atomic")
        run(tmp_path, phantom_dir, "--sample_limit", "4")
    assert stamps(tmp_path) == now


def test_scores_are_redone_when_the_scoring_version_or_parsed_file_changes(tmp_path, phantom_dir, clean_env,
                                                                           monkeypatch):
    from medvision_bm.score import store_scoring

    run(tmp_path, phantom_dir, "--sample_limit", "3")
    before = stamps(tmp_path)
    monkeypatch.setattr(store_scoring, "SCORING_VERSION", store_scoring.SCORING_VERSION + 1)
    run(tmp_path, phantom_dir, "--sample_limit", "3")
    after = stamps(tmp_path)
    parsed = [k for k in before if k.endswith("parsed.jsonl")]
    assert all(after[k] != before[k] for k in parsed), "a new scoring version re-scores"
    assert all(after[k] == before[k] for k in before if k.endswith("docs.jsonl"))
    # parsed.jsonl edited by hand (or by `medvision-bm parse --parser ...`): written again from the store
    p = next((tmp_path / "res").glob("oracle/*/*/parsed.jsonl"))
    good = p.read_text()
    p.write_text("garbage\n")
    run(tmp_path, phantom_dir, "--sample_limit", "3")
    assert p.read_text() == good


def test_lmms_evals_per_task_clean_does_not_collect_garbage_or_drop_the_model(monkeypatch):
    """lmms-eval calls model.clean() after every task (gc.collect + CUDA cache flush: about 0.5 s a task); our model
    object serves every task of the run, so clean() leaves it and the heap alone."""
    import gc

    from medvision_bm.models.lmms_models import StreamingLMM

    def no_gc(*a, **k):
        raise AssertionError("a full garbage collection per task")

    model = StreamingLMM(OracleBackend())
    monkeypatch.setattr(gc, "collect", no_gc)
    model.clean()
    assert isinstance(model.backend, OracleBackend)
