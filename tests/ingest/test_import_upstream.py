"""`medvision-bm import`: an upstream-format results folder (built here from the phantom, as upstream's vendored
lmms-eval 0.3.0 writes it) imports, parses and summarizes to the numbers upstream's own ``_results.json`` records.

Upstream's writer (master c221615): ``lmms_eval/evaluator.py`` l.494-542 builds each record (``doc_id, doc, target,
arguments, resps, filtered_resps, doc_hash, prompt_hash, target_hash`` + the per-sample metric dicts of the task's
``process_results``); ``lmms_eval/loggers/evaluation_tracker.py`` ``save_results_samples`` writes them one per line
(``input`` = the prompt, ``resps``/``filtered_resps`` ``str()``-ed, ``target`` ``str()``-ed, NaN as ``NaN``) to
``<output_path>/<model_name_sanitized>/<date_id>_samples_<task>.jsonl`` and ``save_results_aggregated`` the
``<date_id>_results.json``. The eval-time numbers in ``results[<task>]`` come from the task YAML's aggregations,
``medvision_utils.py`` (master c221615) ``aggregate_results_avgMAE`` / ``_avgMRE`` / ``_MAE`` / ``_MRE``: the mean over
entries whose ``success`` is true (NaN if none), and ``aggregate_results_SuccessRate``: successes / entries
(l.944-1024); per sample ``process_results_*`` parse the whole answer with ``parser_last_k_nums`` (our ``lastk-1``),
fail a negative A/D value, and score with float32 predictions (l.833-941). The fixture below computes those numbers
with our ``tasks/upstream_metrics.py`` per-sample functions and upstream's aggregation rule. Our default parse follows
upstream's post-hoc scorers instead (a negative A/D value is a success with its error: ``summarize_AD_task``, master
c221615); ``medvision-bm parse --metric_path eval-time`` gives the ``_results.json`` numbers.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from medvision_bm.data.layout import DataDir
from medvision_bm.data.planner import DatasetContract
from medvision_bm.io import iter_jsonl
from medvision_bm.tasks import upstream_metrics as um
from medvision_bm.tasks.scoring import target
from medvision_bm.tasks.upstream_parse import K_PER_FAMILY, parse_upstream
from mvtest_support import run_cli
from upstream_results import SANITIZED, write_samples

MODEL = "Qwen2.5-VL-7B-Instruct"  # upstream launcher's --model_name (script/benchmark-*/eval__Qwen2.5-VL__*.sh)
DETECT = "PhantomMR_BoxCoordinate_Task01_Sagittal"
TL = "PhantomMR_TumorLesionSize_Task01_Coronal"
AD_D = "PhantomXR_BiometricsFromLandmarks_Distance_Task01_Sagittal"
AD_A = "PhantomXR_BiometricsFromLandmarks_Angle_Task01_Sagittal"
TS_OLD, TS_NEW = "20250101_100000", "20250102_093000"
#: upstream's eval-time metric names per family (the task YAMLs' metric_list, master c221615)
EVAL_METRICS = {"detect": ("avgMAE", "avgMRE", "SuccessRate"), "TL": ("avgMAE", "avgMRE", "SuccessRate"),
                "AD": ("MAE", "MRE", "SuccessRate")}
#: ours (results.json "metrics") for upstream's eval-time names (detection avgMRE is not one of ours)
OURS = {"avgMAE": "avgMAE", "avgMRE": "avgMRE", "MAE": "avgMAE", "MRE": "avgMRE", "SuccessRate": "SuccessRate"}


def answer(doc, i: int, salt: int) -> str:
    """A deterministic answer: mostly the target scaled, sometimes no number, a negative value or a wrong count."""
    tgt = target(doc)
    kind = (i + salt) % 7
    if kind == 3:
        return "I cannot determine this from the image."
    if kind == 5 and doc.family == "AD":
        return f"The value is <answer>{-tgt[0]:.3f}</answer>"  # negative: an eval-time failure
    if kind == 6:
        return f"<answer>{', '.join('1.5' for _ in tgt[:-1]) or 'x'}</answer>"  # too few numbers
    scale = 1.0 + 0.07 * (((i + salt) % 5) - 2)
    vals = ", ".join(f"{v * scale:.4f}" for v in tgt)
    return f"Step 1 looks at the slice. <answer>{vals}</answer>"


def upstream_process_results(doc, text: str, eval_time: bool = True) -> dict:
    """The per-sample dicts of upstream's eval-time ``process_results_*`` (master c221615), from our metric code
    (``eval_time=False``: the post-hoc ``cal_metrics_*_task`` rule for A/D, no negative check)."""
    parsed = parse_upstream(text, K_PER_FAMILY[doc.family], "lastk-1")
    tgt = target(doc)
    if doc.family == "detect":
        s = um.detection_sample(parsed, tgt, rules="paper")
        mre = float("nan")
        if s.success:
            p = np.array([np.float32(v) for v in parsed.values])
            with np.errstate(all="ignore"):
                mre = float(np.mean(np.abs(p - np.array(tgt)) / np.array(tgt)))
        return {"avgMAE": {"MAE": s.MAE, "success": s.success}, "avgMRE": {"MRE": mre, "success": s.success},
                "SuccessRate": {"success": s.success}}
    if doc.family == "TL":
        s = um.tl_sample(parsed, tgt)
        return {"avgMAE": {"MAE": s.MAE, "success": s.success}, "avgMRE": {"MRE": s.MRE, "success": s.success},
                "SuccessRate": {"success": s.success}}
    s = um.ad_sample(parsed, tgt[0], str(doc.metric_type), reject_negative=eval_time)
    return {"MAE": {"AE": s.MAE, "success": s.success}, "MRE": {"RE": s.MRE, "success": s.success},
            "SuccessRate": {"success": s.success}}


def upstream_aggregate(family: str, per_sample: list[dict]) -> dict:
    """``results[<task>]`` as lmms-eval writes it with upstream's ``aggregate_results_*`` (see the module doc)."""
    out: dict = {}
    for metric in EVAL_METRICS[family]:
        entries = [d[metric] for d in per_sample]
        if metric == "SuccessRate":
            value = sum(1 for e in entries if e["success"]) / len(entries)
        else:
            inner = {"avgMAE": "MAE", "avgMRE": "MRE", "MAE": "AE", "MRE": "RE"}[metric]
            ok = [e[inner] for e in entries if e["success"]]
            value = sum(ok) / len(ok) if ok else float("nan")
        out[f"{metric},none"] = value
        out[f"{metric}_stderr,none"] = "N/A"
    return out


def record(doc, doc_id: int, text: str, data_root: Path, prompt: str) -> dict:
    row = doc.upstream_row(data_root)
    rec = {"doc_id": doc_id, "doc": row, "target": str(target(doc) if doc.family != "AD" else target(doc)[0]),
           "arguments": {"0": {"max_new_tokens": 1024, "temperature": 0}}, "resps": [[text]],
           "filtered_resps": [text], "doc_hash": "h", "prompt_hash": "p", "target_hash": "t", "input": prompt}
    rec.update(upstream_process_results(doc, text))
    return rec


def write_run(folder: Path, ts: str, task: str, recs: list[dict], extra_lines: dict[int, str] | None = None) -> None:
    """One upstream timestamp of one task: the samples file and its results file."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r) for r in recs]  # Python's json: NaN/Infinity as upstream writes them
    for at, text in sorted((extra_lines or {}).items()):
        lines.insert(at - 1, text)
    (folder / f"{ts}_samples_{task}.jsonl").write_text("\n".join(lines) + "\n")
    family = recs[0]["doc"]["taskType"]
    fam = {"Box-Size": "detect", "Tumor-Lesion-Size": "TL"}.get(family, "AD")
    results = {
        "results": {task: {"alias": task, **upstream_aggregate(fam, recs)}},
        "group_subtasks": {task: []},
        "configs": {task: {"task": task, "generation_kwargs": {"max_new_tokens": 1024, "temperature": 0},
                           "lmms_eval_specific_kwargs": {"model": "qwen2_5_vl"}, "metadata": [{"version": "1.0.0"}]}},
        "versions": {task: "Yaml"}, "n-shot": {task: 0},
        "n-samples": {task: {"original": len(recs), "effective": len(recs)}},
        "config": {"model": "vllm_qwen25vl", "model_args": "pretrained=Qwen/Qwen2.5-VL-7B-Instruct,tensor_parallel_size=1",
                   "batch_size": "1", "limit": 1000.0, "gen_kwargs": ""},
        "git_hash": "c221615", "date": ts, "model_name": "Qwen/Qwen2.5-VL-7B-Instruct",
        "model_name_sanitized": SANITIZED,
    }
    (folder / f"{ts}_results.json").write_text(json.dumps(results, indent=2))


PROMPT = "Task:\nGiven the input medical image ... Format requirement:\nreturn the numbers only"  # paper era: no tags


@pytest.fixture(scope="module")
def upstream(phantom_dir, tmp_path_factory):
    """Upstream Results/ with a detect, a T/L and an A/D tag; returns (root, expected results[<task>] per task,
    the texts answered per task and key, what the fixture planted)."""
    root = tmp_path_factory.mktemp("upstream") / "Results"
    data = DataDir(DatasetContract.resolve(phantom_dir))
    expected: dict[str, dict] = {}
    answered: dict[str, dict[str, str]] = {}
    # detection, master layout (<model>/<sanitized>/), records in reverse order with doc_ids that are NOT positions,
    # plus one record whose doc is none of ours
    docs = data.samples(DETECT).docs()
    recs = [record(d, 1000 + i, answer(d, i, 0), phantom_dir, PROMPT) for i, d in enumerate(docs)]
    answered[DETECT] = {d.key: answer(d, i, 0) for i, d in enumerate(docs)}
    expected[DETECT] = upstream_aggregate("detect", recs)
    stray = json.loads(json.dumps(recs[0]))
    stray["doc"]["slice_idx"] = 9999
    write_run(root / "MedVision-detect" / MODEL / SANITIZED, TS_OLD, DETECT, [*reversed(recs), stray])
    # T/L, newer layout (files in the model folder): an old full run and a newer partial rerun of the first half
    docs = data.samples(TL).docs()
    old = [record(d, i, answer(d, i, 1), phantom_dir, PROMPT) for i, d in enumerate(docs)]
    half = len(docs) // 2
    new = [record(d, i, answer(d, i, 4), phantom_dir, PROMPT) for i, d in enumerate(docs[:half])]
    write_run(root / "MedVision-TL" / MODEL, TS_OLD, TL, old)
    write_run(root / "MedVision-TL" / MODEL, TS_NEW, TL, new)
    merged = new + old[half:]
    answered[TL] = {d.key: (answer(d, i, 4) if i < half else answer(d, i, 1)) for i, d in enumerate(docs)}
    expected[TL] = upstream_aggregate("TL", merged)
    expected[f"{TL}@{TS_NEW}"] = upstream_aggregate("TL", new)
    # A/D: one malformed line in the distance file; the angle file's numpy scalars written as str() (as
    # handle_non_serializable does for anything but numpy ints)
    for task, salt in ((AD_D, 2), (AD_A, 3)):
        docs = data.samples(task).docs()
        recs = [record(d, i, answer(d, i, salt), phantom_dir, PROMPT) for i, d in enumerate(docs)]
        if task == AD_A:
            for r in recs:
                r["doc"]["pixel_size"] = [str(np.float16(v)) for v in r["doc"]["pixel_size"]]
                r["doc"]["slice_idx"] = str(r["doc"]["slice_idx"])
        answered[task] = {d.key: answer(d, i, salt) for i, d in enumerate(docs)}
        expected[task] = upstream_aggregate("AD", recs)
        expected[f"{task}@posthoc"] = upstream_aggregate(
            "AD", [upstream_process_results(d, answer(d, i, salt), eval_time=False) for i, d in enumerate(docs)])
        assert expected[f"{task}@posthoc"]["SuccessRate,none"] > expected[task]["SuccessRate,none"]  # negatives
        write_run(root / "MedVision-AD" / MODEL / SANITIZED, TS_OLD, task, recs,
                  extra_lines={3: '{"doc_id": 2, "doc": {"dataset_name": "PhantomXR"'} if task == AD_D else None)
    planted = {"malformed": f"{TS_OLD}_samples_{AD_D}.jsonl:3", "unmatched": 1, "superseded": half}
    return root, expected, answered, planted


def _stores(results: Path) -> dict[str, Path]:
    return {p.parent.parent.name: p.parent for p in results.glob(f"{MODEL}/*/*/signature.json")}


def _check_numbers(store: Path, task: str, want: dict) -> None:
    metrics = json.loads((store / "results.json").read_text())["metrics"]
    fam = json.loads((store / "results.json").read_text())["family"]
    for metric in EVAL_METRICS[fam]:
        if fam == "detect" and metric == "avgMRE":
            continue  # eval-time only upstream (divides by coordinates that can be 0); not one of ours
        up = want[f"{metric},none"]
        ours = metrics[OURS[metric]]
        if isinstance(up, float) and math.isnan(up):
            assert ours is None, (task, metric, ours)
        else:
            assert ours == pytest.approx(up, rel=1e-9, abs=1e-12), (task, metric, ours, up)


def test_upstream_folder_imports_parses_and_summarizes_to_upstream_numbers(upstream, phantom_dir, tmp_path):
    """The import round trip: the results.json numbers the fixture writes are computed with ``tasks.upstream_metrics``
    (upstream's per-sample and aggregation rules, each pinned against medvision_utils.py @c221615 in
    tests/tasks/test_upstream_metrics.py), so this holds import, matching and re-scoring to them; it does not re-check the
    metrics themselves."""
    root, expected, answered, planted = upstream
    results = tmp_path / "Results"
    res = run_cli("import", "--upstream_results", str(root), "--results_dir", str(results),
                  "--data_dir", str(phantom_dir))
    assert res.returncode == 0, res.stderr[-3000:]
    # the malformed line is reported with file:line and the import went on; the stray record is counted
    assert f"{planted['malformed']}: not JSON" in res.stderr
    assert res.stderr.count("unmatched: ") == planted["unmatched"] and "slice_idx 9999" in res.stderr
    assert f"{planted['superseded']} superseded by newer timestamps" in res.stdout
    assert "1 malformed line(s)" in res.stdout and "1 unmatched" in res.stdout
    stores = _stores(results)
    assert set(stores) == {DETECT, TL, AD_D, AD_A}  # the T/L timestamps share one store (same settings)

    # every answer is keyed to the doc it answered (not to doc_id) and the newest timestamp won
    for task, store in stores.items():
        recs = list(iter_jsonl(store / "samples" / "upstream-import.jsonl"))
        assert {r["key"]: r["text"] for r in recs} == answered[task], task
        sig = json.loads((store / "signature.json").read_text())
        assert sig["inputs"]["imported"] == "upstream-lmms-eval" and sig["inputs"]["protocol"] == "paper"
        assert sig["inputs"]["model"]["model_args"].startswith("pretrained=Qwen/Qwen2.5-VL-7B-Instruct")
        assert sig["inputs"]["docs_from"] == "data"
        for src in sig["import"]["sources"]:
            assert Path(src["path"]).is_file() and len(src["sha256"]) == 64 and src["git_hash"] == "c221615"
    assert len(json.loads((stores[TL] / "signature.json").read_text())["import"]["sources"]) == 2

    # parse and summarize treat the imported stores as runs; the numbers are upstream's: its post-hoc summarizers'
    # by default, its eval-time _results.json on the eval-time metric path
    res = run_cli("parse", "--results_dir", str(results))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "(metric path: posthoc)" in res.stdout
    for task, store in stores.items():
        _check_numbers(store, task, expected.get(f"{task}@posthoc", expected[task]))
    res = run_cli("parse", "--results_dir", str(results), "--metric_path", "eval-time")
    assert res.returncode == 0, res.stderr[-3000:]
    for task, store in stores.items():
        _check_numbers(store, task, expected[task])
        assert json.loads((store / "results.json").read_text())["metric_path"] == "eval-time"
    # the merged T/L answers differ from either timestamp's own results file
    assert json.loads((stores[TL] / "results.json").read_text())["metrics"]["avgMAE"] != pytest.approx(
        expected[f"{TL}@{TS_NEW}"]["avgMAE,none"])
    out = tmp_path / "report"
    res = run_cli("summarize", "--results_dir", str(results), "--output_dir", str(out), "--no_plots")
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    rows = {r["task"]: r for fam in summary["families"].values() for r in fam["tasks"] if r.get("label") == MODEL}
    assert set(rows) == set(stores)
    assert rows[TL]["avgMAE"] == pytest.approx(expected[TL]["avgMAE,none"], rel=1e-9)
    assert rows[AD_D]["SuccessRate"] == pytest.approx(expected[AD_D]["SuccessRate,none"], rel=1e-12)

    # importing the same files again adds nothing and rewrites no answer
    before = {t: (s / "samples" / "upstream-import.jsonl").read_bytes() for t, s in stores.items()}
    again = run_cli("import", "--upstream_results", str(root), "--results_dir", str(results),
                    "--data_dir", str(phantom_dir))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "0 answer(s) new or replaced" in again.stdout and "nothing new" in again.stdout
    assert {t: (s / "samples" / "upstream-import.jsonl").read_bytes() for t, s in stores.items()} == before
    assert _stores(results) == stores


def test_a_newer_timestamp_imported_later_replaces_the_older_answers(upstream, phantom_dir, tmp_path):
    """Import the old T/L timestamp, then the folder with the newer one: the same store, the newer answers win."""
    root, expected, answered, planted = upstream
    only_old = tmp_path / "old" / MODEL
    only_old.mkdir(parents=True)
    src = root / "MedVision-TL" / MODEL
    for name in (f"{TS_OLD}_samples_{TL}.jsonl", f"{TS_OLD}_results.json"):
        (only_old / name).write_bytes((src / name).read_bytes())
    results = tmp_path / "Results"
    first = run_cli("import", "--upstream_results", str(only_old), "--results_dir", str(results),
                    "--data_dir", str(phantom_dir))
    assert first.returncode == 0, first.stderr[-2000:]
    second = run_cli("import", "--upstream_results", str(src), "--results_dir", str(results),
                     "--data_dir", str(phantom_dir))
    assert second.returncode == 0, second.stderr[-2000:]
    assert f"replaced={planted['superseded']}  unchanged={len(answered[TL]) - planted['superseded']}" in second.stdout
    assert f"{planted['superseded']} superseded by newer timestamps" in second.stdout
    (store,) = _stores(results).values()
    recs = list(iter_jsonl(store / "samples" / "upstream-import.jsonl"))
    assert {r["key"]: r["text"] for r in recs} == answered[TL]
    _check_numbers(store, TL, expected[TL])  # scored at import time already


def test_import_without_a_data_folder_builds_docs_from_the_records(upstream, tmp_path, monkeypatch):
    root, expected, answered, _ = upstream
    results = tmp_path / "Results"
    res = run_cli("import", "--upstream_results", str(root / "MedVision-AD"), "--results_dir", str(results),
                  env={"MedVision_DATA_DIR": ""})
    assert res.returncode == 0, res.stderr[-3000:]
    assert "docs are built from the upstream records" in res.stderr
    stores = _stores(results)
    assert set(stores) == {AD_D, AD_A}
    for task, store in stores.items():
        sig = json.loads((store / "signature.json").read_text())
        assert sig["inputs"]["docs_from"] == "records" and sig["inputs"]["plan_version"] is None
        recs = list(iter_jsonl(store / "samples" / "upstream-import.jsonl"))
        assert {r["key"]: r["text"] for r in recs} == answered[task]  # the same keys as the data's docs
        _check_numbers(store, task, expected[f"{task}@posthoc"])  # scored at import time on the default path


def test_an_import_keeps_of_each_record_only_what_keys_it_once_it_is_matched(upstream, phantom_dir, tmp_path,
                                                                               monkeypatch):
    """Records are read one at a time and each, once keyed to a doc, is cut to the fields that identify it: the
    full rows of a task are never held together (upstream's largest tasks hold about 900k records; holding them
    whole took about 18 KB a record). With and without a data folder, every record read, bar the unmatched ones,
    keeps only ``key_fields`` of its row and no target text."""
    import medvision_bm.ingest.upstream as up_mod
    from medvision_bm.ingest.upstream_files import KEY_FIELDS

    root, _, _, _ = upstream
    real = up_mod.iter_samples
    seen: list = []
    full_when_read: list[int] = []

    def spy(*args, **kwargs):
        for cand in real(*args, **kwargs):
            full_when_read.append(sum(1 for c in seen if "image_size_2d" in c.doc))
            seen.append(cand)
            yield cand

    monkeypatch.setattr(up_mod, "iter_samples", spy)
    for name, kwargs in (("data", {"data": DataDir(DatasetContract.resolve(phantom_dir))}),
                         ("records", {"use_data": False})):
        seen.clear()
        full_when_read.clear()
        report = up_mod.import_upstream(root / "MedVision-detect", tmp_path / name, **kwargs)
        (ti,) = report.tasks
        assert ti.added > 0 and len(seen) == ti.records
        full = [c for c in seen if "image_size_2d" in c.doc]
        assert len(full) == len(ti.unmatched), (name, len(full), ti.unmatched)
        assert max(full_when_read) <= len(ti.unmatched)
        assert all(set(c.doc) <= {*KEY_FIELDS, "biometric_profile"} and c.target is None
                   for c in seen if c not in full)


def test_the_imports_streamed_score_writes_what_a_held_rescore_writes(upstream, phantom_dir, tmp_path):
    """The import scores its stores one sample at a time (``rescore_streamed``: docs.jsonl rows read back one by
    one, parsed.jsonl written by ``score.follow``). Every store's parsed.jsonl, metrics and counts are those of
    ``write_rescored(rescore(...))``, the whole-store re-score `medvision-bm parse` makes, on a copy of the store."""
    import shutil

    from medvision_bm.ingest.upstream import import_upstream
    from medvision_bm.score.rescore import rescore, write_rescored
    from medvision_bm.store.discovery import discover

    root, _, _, _ = upstream
    results = tmp_path / "Results"
    import_upstream(root, results, data=DataDir(DatasetContract.resolve(phantom_dir)))
    refs, _ = discover(results)
    assert len(refs) >= 4
    for ref in refs:
        copy = tmp_path / "held" / ref.folder.relative_to(results)
        shutil.copytree(ref.folder, copy)
        (copy / "parsed.jsonl").unlink()
        write_rescored(rescore(dataclasses.replace(ref, folder=copy)))
        assert (ref.folder / "parsed.jsonl").read_bytes() == (copy / "parsed.jsonl").read_bytes(), ref.task
        streamed, held = (json.loads((f / "results.json").read_text()) for f in (ref.folder, copy))
        for key in ("metrics", "counts", "complete", "parser_version", "metric_rules", "metric_path", "protocol"):
            assert streamed[key] == held[key], (ref.task, key)


def test_a_docs_row_the_streamed_score_cannot_read_is_a_store_problem_not_a_traceback(upstream, phantom_dir,
                                                                                       tmp_path):
    """A docs.jsonl row that is JSON but no doc this version reads is met only when its sample is scored: the
    streamed score then stops with the store's one-line problem (as the whole-store re-score words it) and leaves
    parsed.jsonl as it was."""
    from medvision_bm.ingest.upstream import import_upstream
    from medvision_bm.score.rescore import StoreProblem, rescore_streamed
    from medvision_bm.store.discovery import discover

    root, _, _, _ = upstream
    results = tmp_path / "Results"
    import_upstream(root / "MedVision-TL", results, data=DataDir(DatasetContract.resolve(phantom_dir)))
    ref = discover(results)[0][0]
    docs = ref.folder / "docs.jsonl"
    lines = docs.read_text().splitlines()
    row = json.loads(lines[1])
    row["doc"] = {"key": row["key"]}  # a row whose doc lacks every field a sample needs
    docs.write_text("\n".join([lines[0], json.dumps(row), *lines[2:]]) + "\n")
    (ref.folder / ".parsed.index").unlink()  # the rows are scored again, this one included
    (ref.folder / ".docs.sums").unlink()  # no sums to tell the edited row by: the streamed score reads it
    before = (ref.folder / "parsed.jsonl").read_bytes()
    with pytest.raises(StoreProblem, match=rf"docs.jsonl row '{re.escape(row['key'])}' is not a doc this version "
                                           "reads"):
        rescore_streamed(ref)
    assert (ref.folder / "parsed.jsonl").read_bytes() == before


def test_bad_upstream_folder_is_one_line_error(tmp_path):
    res = run_cli("import", "--upstream_results", str(tmp_path / "nope"), "--results_dir", str(tmp_path / "R"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().count("\n") == 0 and "--upstream_results" in res.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    res = run_cli("import", "--upstream_results", str(empty), "--results_dir", str(tmp_path / "R"))
    assert res.returncode == 1 and "no upstream samples files" in res.stderr


def test_a_doc_answered_twice_in_one_file_keeps_the_first_line(phantom_dir, tmp_path):
    """Within one samples file the first record of a doc counts, as upstream's remove_duplicate_samples.py keeps the
    first line per doc_id (src/medvision_bm/benchmark/remove_duplicate_samples.py @bfcf773)."""
    data = DataDir(DatasetContract.resolve(phantom_dir))
    docs = data.samples(DETECT).docs()
    recs = [record(d, i, answer(d, i, 0), phantom_dir, PROMPT) for i, d in enumerate(docs)]
    again = record(docs[0], 0, answer(docs[0], 0, 7), phantom_dir, PROMPT)  # a second answer, later in the file
    assert again["resps"] != recs[0]["resps"]
    root = tmp_path / "Results"
    write_run(root / "MedVision-detect" / MODEL / SANITIZED, TS_OLD, DETECT, [*recs, again])
    results = tmp_path / "ours"
    res = run_cli("import", "--upstream_results", str(root), "--results_dir", str(results),
                  "--data_dir", str(phantom_dir))
    assert res.returncode == 0, res.stderr[-3000:]
    stored = {r["key"]: r["text"] for r in iter_jsonl(_stores(results)[DETECT] / "samples" / "upstream-import.jsonl")}
    assert stored[docs[0].key] == answer(docs[0], 0, 0) != answer(docs[0], 0, 7)


def test_an_import_that_matches_no_record_fails(phantom_dir, tmp_path):
    """Records of other data (no doc of ours): nothing stored, said, and the exit status is 1."""
    data = DataDir(DatasetContract.resolve(phantom_dir))
    docs = data.samples(DETECT).docs()
    recs = [record(d, i, answer(d, i, 0), phantom_dir, PROMPT) for i, d in enumerate(docs[:3])]
    for r in recs:
        r["doc"]["slice_idx"] = 9999
    root = tmp_path / "Results"
    write_run(root / "MedVision-detect" / MODEL / SANITIZED, TS_OLD, DETECT, recs)
    res = run_cli("import", "--upstream_results", str(root), "--results_dir", str(tmp_path / "ours"),
                  "--data_dir", str(phantom_dir))
    assert res.returncode == 1 and "Traceback" not in res.stderr and "3 unmatched" in res.stdout, res.stdout


TL_SCALED = "PhantomCT_TumorLesionSize_Task01_Axial-CoT-scaledPS"
DIST_SCALED = "PhantomXR_BiometricsFromLandmarks_Distance_Task01_Sagittal-CoT-scaledPS"


def records_of_store(store: Path, data_root: Path, prompt: str = "Answer in <answer></answer> tags.") -> list[dict]:
    """Upstream-format records of one of our stores: upstream's loader row of each doc, the target the view states
    (upstream's ``str(doc_to_target(doc))``), the stored raw answer."""
    from medvision_bm.data.docs import Doc

    texts = {r["key"]: r["text"] for seg in (store / "samples").glob("*.jsonl") for r in iter_jsonl(seg)
             if r.get("status") == "ok"}
    out = []
    for i, row in enumerate(iter_jsonl(store / "docs.jsonl")):
        doc = Doc.from_json(row["doc"])
        tgt = row["view"].get("scaled_target") or target(doc)
        out.append({"doc_id": i, "doc": doc.upstream_row(data_root), "target": str(tgt if len(tgt) > 1 else tgt[0]),
                    "resps": [[texts[row["key"]]]], "filtered_resps": [texts[row["key"]]], "input": prompt})
    return out


@pytest.mark.slow
def test_scaled_ps_runs_import_against_their_scaled_targets(phantom_dir, tmp_path):
    """A -CoT-scaledPS record states the scaled target (upstream ``medvision_utils.py`` @0a4c5e2
    ``create_doc_to_target_*_scaledPS``: factors from ``_get_pixel_size_scale_factor`` over the doc's image path as
    the loader wrote it, in the range of ``MEDVISION_SCALED_PS_LOW/HIGH``, which its files do not record): the
    import keys such records to our docs by that target, in the range given to it, and scores them against it."""
    tl = tmp_path / "tasks.json"
    tl.write_text(json.dumps({TL_SCALED: 0, DIST_SCALED: 0}))
    ours = tmp_path / "ours"
    r = run_cli("run", "--model", "oracle", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tl),
                "--skip_update_status", "--skip_env_setup", "--sample_limit", "4", "--results_dir", str(ours))
    assert r.returncode == 0, r.stderr[-2000:]
    root = tmp_path / "Results"
    for store in (p.parent for p in ours.rglob("signature.json")):
        task = store.parent.name
        write_samples(root / "MedVision-scaledPS" / MODEL, TS_OLD, task, records_of_store(store, phantom_dir))
    results = tmp_path / "imported"
    res = run_cli("import", "--upstream_results", str(root), "--results_dir", str(results),
                  "--data_dir", str(phantom_dir))
    assert res.returncode == 0 and "unmatched: " not in res.stderr, res.stderr[-3000:]
    stores = _stores(results)
    assert set(stores) == {TL_SCALED, DIST_SCALED}
    for task, store in stores.items():
        out = json.loads((store / "results.json").read_text())
        assert out["metrics"]["n"] == 4 and out["metrics"]["SuccessRate"] == 1.0, (task, out["metrics"])
        assert out["metrics"]["avgMAE"] == pytest.approx(0.0, abs=1e-5), (task, out["metrics"])  # the oracle's
        assert out["signature_inputs"]["scaled_ps_range"] == [0.5, 3.0]
    # another factor range states other targets: nothing matches, and the message says what to pass
    res = run_cli("import", "--upstream_results", str(root), "--results_dir", str(tmp_path / "other"),
                  "--data_dir", str(phantom_dir), "--scaled_ps_low", "1", "--scaled_ps_high", "1")
    assert res.returncode == 1 and "8 unmatched" in res.stdout, res.stdout
    assert "--scaled_ps_low/--scaled_ps_high" in res.stderr and "Traceback" not in res.stderr
    # the T/L records alone, without a data folder: the docs come from the records, the factors from their paths
    res = run_cli("import", "--upstream_results", str(root), "--results_dir", str(tmp_path / "nodata"),
                  "--tasks_list_json_path", str(_list(tmp_path, [TL_SCALED])), env={"MedVision_DATA_DIR": ""})
    assert res.returncode == 0 and "unmatched: " not in res.stderr, res.stderr[-3000:]
    (store,) = _stores(tmp_path / "nodata").values()
    assert json.loads((store / "results.json").read_text())["metrics"]["SuccessRate"] == 1.0


def _list(folder: Path, tasks: list[str]) -> Path:
    path = folder / "only.json"
    path.write_text(json.dumps(dict.fromkeys(tasks, 0)))
    return path
