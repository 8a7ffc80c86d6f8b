"""A rerun with nothing to do touches only what changed: docs.jsonl and parsed.jsonl stay as they are, no answer is
re-scored; a changed selection, answer or scoring version is re-scored, and a resume scores exactly the answers that
are new or changed (each once), with the numbers of a full re-score."""

from __future__ import annotations

import json

import pytest

from medvision_bm.models.base import GenResult, RequestError, SyncBackend
from medvision_bm.models.baselines import OracleBackend
from medvision_bm.models.registry import get_record
from medvision_bm.runner import loop as loop_mod
from medvision_bm.runner.args import build_parser
from medvision_bm.runner.config import build_config
from medvision_bm.runner.loop import Runner
from medvision_bm.score import follow as follow_mod
from medvision_bm.store import samples as store_mod
from mvtest_support import REPO

pytestmark = pytest.mark.slow
TASKS = REPO / "tasks_list" / "tasks_MedVision-Phantom-AD.json"


class FailingOne(SyncBackend):
    """The oracle, except that the request of sample ``index`` of every task fails."""

    name = "oracle-failing-one"

    def __init__(self, index: int) -> None:
        self.index, self.oracle = index, OracleBackend()

    def answer(self, request):
        if request.rundoc.doc.index == self.index:
            return GenResult(request.key, None, RequestError("http", "HTTP 503 Service Unavailable", 503, True))
        return self.oracle.answer(request)


def run(tmp_path, phantom_dir, *extra: str, backend=None, state: str = "done"):
    record = get_record("oracle")
    argv = ["--data_dir", str(phantom_dir), "--tasks_list_json_path", str(TASKS), "--results_dir",
            str(tmp_path / "res"), "--skip_update_status", "--skip_env_setup", "--no_progress", *extra]
    cfg = build_config(build_parser(record, "test").parse_args(argv), record, argv)
    outcomes = Runner(cfg, lambda cfg, data: backend or OracleBackend()).run()  # lmms-eval's loop and hooks
    assert all(o.state == state for o in outcomes), [o.state for o in outcomes]
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
        monkeypatch.setattr({"loop": loop_mod, "store": store_mod, "follow": follow_mod}[mod], name, boom)


def test_a_rerun_with_nothing_to_do_rewrites_and_rescores_nothing(tmp_path, phantom_dir, clean_env, monkeypatch):
    first = run(tmp_path, phantom_dir, "--sample_limit", "4")
    before = stamps(tmp_path)
    assert len(before) == 4
    with monkeypatch.context() as m:
        forbid(m, "follow:score_sample", "follow:_write_parsed", "follow:write_index", "store:write_lines_atomic")
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
    # back to the first selection: all answered inside the finished 6, so nothing is rewritten and the store keeps
    # reporting its 6 samples (a smaller selection never shrinks a finished store)
    third = run(tmp_path, phantom_dir, "--sample_limit", "4")
    now = stamps(tmp_path)
    assert now == after
    assert [(o.state, o.n_selected, o.n_asked) for o in third] == [("done", 4, 0)] * len(third)
    for p in (tmp_path / "res").glob("oracle/*/*/parsed.jsonl"):
        assert len(p.read_text().splitlines()) == 6
    # and again with nothing to do
    with monkeypatch.context() as m:
        forbid(m, "follow:score_sample", "follow:_write_parsed", "follow:write_index", "store:write_lines_atomic")
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


def _parses(monkeypatch) -> list[str]:
    """The answer texts parsed from now on (every score of an answer parses it once: tasks.scoring.score_answer)."""
    from medvision_bm.tasks import scoring

    texts: list[str] = []
    real = scoring.parse_upstream
    monkeypatch.setattr(scoring, "parse_upstream", lambda text, *a, **k: texts.append(text) or real(text, *a, **k))
    return texts


def _assert_full_rescore_equal(tmp_path) -> None:
    """Every store's parsed.jsonl and results.json metrics equal a re-score of the whole store from its answers."""
    from medvision_bm.score.rescore import rescore
    from medvision_bm.store.discovery import discover

    refs, _ = discover(tmp_path / "res")
    assert refs
    for ref in refs:
        full = rescore(ref)
        stored = [json.loads(line) for line in (ref.folder / "parsed.jsonl").read_text().splitlines()]
        assert [r.to_json() for r in full.rows] == stored
        assert json.loads((ref.folder / "results.json").read_text())["metrics"] == full.metrics


def _stored_text(store_dir, index: int) -> str:
    for seg in sorted((store_dir / "samples").glob("*.jsonl")):
        for line in seg.read_text().splitlines():
            rec = json.loads(line)
            if rec["index"] == index and rec["status"] == "ok":
                return rec["text"]
    raise AssertionError(f"no answer of sample {index} in {store_dir}")


def test_a_resume_scores_exactly_the_new_or_changed_answers_with_the_numbers_of_a_full_rescore(
        tmp_path, phantom_dir, clean_env, monkeypatch):
    first = run(tmp_path, phantom_dir, "--sample_limit", "4", backend=FailingOne(2), state="incomplete")
    assert all(o.metrics["n_request_failed"] == 1 for o in first)
    # the resume asks the failed sample of each task: that answer is parsed once (lmms-eval's hook scores it, the
    # task's scoring takes that score), every other row is kept
    parsed = _parses(monkeypatch)
    second = run(tmp_path, phantom_dir, "--sample_limit", "4")
    assert sorted(parsed) == sorted(_stored_text(o.store_dir, 2) for o in second)
    for o in second:
        counts = json.loads((o.store_dir / "results.json").read_text())["counts"]
        assert counts["asked_this_run"] == 1 and counts["scored_this_run"] == 1 and o.metrics["SuccessRate"] == 1.0
    _assert_full_rescore_equal(tmp_path)
    # an answer changed in its segment (nothing to ask): that answer alone is scored again
    store = second[0].store_dir
    seg = next(p for p in (store / "samples").glob("*.jsonl") if '"index":1,' in p.read_text())
    lines = seg.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if json.loads(line)["index"] == 1 and json.loads(line)["status"] == "ok")
    rec = json.loads(lines[at])
    rec["text"] = "<answer>7.25</answer>"
    lines[at] = json.dumps(rec, sort_keys=True, separators=(",", ":")) + "\n"
    seg.write_text("".join(lines))
    parsed.clear()
    third = run(tmp_path, phantom_dir, "--sample_limit", "4")
    assert parsed == ["<answer>7.25</answer>"]
    assert [o.n_asked for o in third] == [0] * len(third)
    assert third[0].metrics != second[0].metrics and [o.metrics for o in third[1:]] == [o.metrics for o in second[1:]]
    _assert_full_rescore_equal(tmp_path)


class _CountingRows(list):
    """A list that counts the passes over it."""

    passes = 0

    def __iter__(self):
        type(self).passes += 1
        return super().__iter__()


def test_a_rescore_walks_a_stores_rows_a_fixed_number_of_times_not_once_per_sample(
        tmp_path, phantom_dir, clean_env, monkeypatch):
    """`parse`, `import` and `judge` re-score through ``rescore``: the doc hash of each row is looked up by key, so
    the map of them is built once per store. It was rebuilt for every row (a property), which made the re-score of a
    store quadratic in its samples: minutes for 20k samples, hours for upstream's 900k-sample tasks."""
    from medvision_bm.score import rescore as rescore_mod
    from medvision_bm.store.discovery import discover

    run(tmp_path, phantom_dir, "--sample_limit", "8")
    real = rescore_mod.store_docs

    def counted(ref):
        sd = real(ref)
        sd.chosen = _CountingRows(sd.chosen)
        return sd

    monkeypatch.setattr(rescore_mod, "store_docs", counted)
    refs, _ = discover(tmp_path / "res")
    for ref in refs:
        _CountingRows.passes = 0
        res = rescore_mod.rescore(ref)
        assert len(res.rows) >= 4
        assert _CountingRows.passes <= 2, (ref.task, _CountingRows.passes, len(res.rows))
