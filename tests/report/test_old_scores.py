"""Scores written before scoring version 2 (a negative A/D answer was a failure, no metric path recorded) are never
mixed with new ones: summarize re-scores such a store in memory, `medvision-bm parse` rewrites it with upstream's
post-hoc rule (``summarize_AD_task.cal_metrics_AD_task``, master c221615: a negative answer is a success with its
error) and records the path; ``--metric_path eval-time`` (``process_results_BiometricsFromLandmarks``) is kept by
summarize, and stores on different paths are named in a note."""

from __future__ import annotations

import json
import os

from medvision_bm.models.base import GenResult, SyncBackend
from medvision_bm.models.registry import get_record
from medvision_bm.report.load import load
from medvision_bm.runner.args import build_parser
from medvision_bm.runner.config import build_config
from medvision_bm.score.rescore import reparse_stores
from medvision_bm.score.store_scoring import SCORING_VERSION
from medvision_bm.store.discovery import discover
from medvision_bm.tasks.scoring import target
from mvtest_support import REPO
from phantom_runs import DirectRunner

TASKS = REPO / "tasks_list" / "tasks_MedVision-Phantom-AD.json"


class NegativeEvery3rd(SyncBackend):
    """The target itself, negated on every third sample."""

    name = "negative-every-3rd"

    def answer(self, request):
        doc = request.rundoc.doc
        value = target(doc)[0] * (-1 if doc.index % 3 == 0 else 1)
        return GenResult(request.key, f"<think>measured</think><answer>{value:.4f}</answer>")


def _run(results, phantom_dir):
    record = get_record("oracle")
    argv = ["--data_dir", str(phantom_dir), "--tasks_list_json_path", str(TASKS), "--results_dir", str(results),
            "--skip_update_status", "--skip_env_setup", "--no_progress", "--model_name", "negative-model"]
    cfg = build_config(build_parser(record, "test").parse_args(argv), record, argv)
    DirectRunner(cfg, lambda cfg, data: NegativeEvery3rd()).run()
    return discover(results)[0]


def _make_old(folder) -> int:
    """Rewrite parsed.jsonl and results.json as the suite wrote them before scoring version 2; the number of
    negative answers (failures there)."""
    rows = [json.loads(line) for line in (folder / "parsed.jsonl").read_text().splitlines()]
    negative = 0
    for r in rows:
        r.pop("metric_path")
        if r["values"] and r["values"][0] < 0:
            negative += 1
            r.update(status="parse_failed", success=False, reason="negative A/D prediction",
                     metrics={"MAE": None, "MRE": None, "nMAE": None})
    (folder / "parsed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = json.loads((folder / "results.json").read_text())
    del results["metric_path"], results["scoring_version"]
    (folder / "results.json").write_text(json.dumps(results))
    later = max(os.stat(p).st_mtime for p in folder.rglob("*.jsonl")) + 5
    for name in ("parsed.jsonl", "results.json"):
        os.utime(folder / name, (later, later))
    return negative


def test_old_scores_are_rescored_never_mixed(tmp_path, phantom_dir):
    results = tmp_path / "res"
    refs = _run(results, phantom_dir)
    negatives = {}
    for ref in refs:
        rows = [json.loads(line) for line in (ref.folder / "parsed.jsonl").read_text().splitlines()]
        assert {r["metric_path"] for r in rows} == {"posthoc"}
        assert all(r["success"] for r in rows if not r["near_zero_gt"])  # negatives succeed on the post-hoc path
        negatives[ref.task] = _make_old(ref.folder)
    assert sum(negatives.values()) > 0

    # summarize: the old parsed rows are not used; the stores are re-scored in memory with the new rule
    loaded = load(refs)
    assert {s.source for s in loaded.stores} == {"re-scored in memory"}
    assert all(s.counts.success == s.counts.selected - s.counts.pending for s in loaded.stores)
    assert any("re-scored in memory" in n for n in loaded.notes)

    # parse: rewritten with the new rule and recorded; every negative answer counts as changed
    outcomes, _ = reparse_stores(refs)
    assert {o.ref.task: o.changed for o in outcomes} == negatives
    for ref in refs:
        res = json.loads((ref.folder / "results.json").read_text())
        assert (res["metric_path"], res["scoring_version"]) == ("posthoc", SCORING_VERSION)
    assert {s.source for s in load(refs).stores} == {"parsed.jsonl"}

    # eval-time: recorded, kept when summarize must re-score in memory, and named when stores differ
    ad = refs[0]
    outcomes, _ = reparse_stores([ad], metric_path="eval-time")
    assert outcomes[0].counts.success < outcomes[0].counts.selected
    docs = ad.folder / "docs.jsonl"
    later = os.stat(ad.folder / "parsed.jsonl").st_mtime + 5
    os.utime(docs, (later, later))  # docs newer than parsed.jsonl: a full in-memory re-score
    loaded = load(refs)
    info = next(s for s in loaded.stores if s.ref.folder == ad.folder)
    assert (info.source, info.metric_path) == ("re-scored in memory", "eval-time")
    assert info.counts.success == outcomes[0].counts.success
    assert any("different metric paths (eval-time: 1 store(s), posthoc:" in n for n in loaded.notes)
