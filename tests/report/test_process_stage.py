"""Process and equation accuracy end to end: -CoT runs on the phantom (a scripted model that writes upstream's
reasoning steps from the ground truth, sometimes swapped, off by one or without steps), summarized: upstream's
per-sample and summary files and the report's section (docs/spec/process-and-equation-accuracy.md)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from medvision_bm.data.plan_files import plan_files
from medvision_bm.data.plans import read_task
from medvision_bm.data.task_meta import load_task_meta, resolve_ad_names
from medvision_bm.models.base import GenRequest, GenResult, SyncBackend
from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.records import DocRow, JudgeFile
from medvision_bm.tasks.scaled_ps import slice_landmarks
from medvision_bm.tasks.scoring import target
from phantom_runs import run_baseline, run_cli

MODEL = "stepwise"
TL_TASK = "PhantomCT_TumorLesionSize_Task02_Axial"
AD_DIST = "PhantomXR_BiometricsFromLandmarks_Distance_Task01_Sagittal"
AD_ANGLE = "PhantomXR_BiometricsFromLandmarks_Angle_Task01_Sagittal"
TASKS = {"TL": {f"{TL_TASK}-CoT": 6, f"{TL_TASK}-CoT-scaledPS": 6}, "AD": {f"{AD_DIST}-CoT": 6, f"{AD_ANGLE}-CoT": 6}}


def _num(v: float) -> str:
    return np.format_float_positional(float(v), unique=True, trim="-")


def _xy(row_col: tuple[float, float], hw: tuple[int, int]) -> tuple[float, float]:
    return row_col[1] / hw[1], 1.0 - row_col[0] / hw[0]


def _pair(p: tuple[float, float]) -> str:
    return f"({p[0]:.6f}, {p[1]:.6f})"


def _ad_keys(root: Path, doc) -> tuple[str, ...]:
    plans = plan_files(root / "Datasets" / doc.dataset_name)["biometry"]
    header = read_task(plans[max(plans)], int(doc.taskID) - 1).header
    return resolve_ad_names(load_task_meta(root, doc.dataset_name, "AD", doc.taskID, header),
                            doc.biometric_profile).point_keys


def exact_steps(rd) -> tuple[list[tuple[float, float]], list[float]]:
    """The points (relative x, y) and the measurements a perfect answer reports."""
    doc, root = rd.doc, Path(rd.data_root)
    points = slice_landmarks(root / "Datasets" / doc.landmark_file, doc.slice_dim, doc.slice_idx)
    keys = ("P1", "P2", "P3", "P4") if doc.family == "TL" else _ad_keys(root, doc)
    return [_xy(points[k], doc.image_size_2d) for k in keys], list(target(doc, rd.view))


def stepwise_answer(rd) -> str:
    """Sample ``index % 3``: 0 every step exact (endpoints in upstream's order, the formula giving the answer);
    1 the first two points swapped, each length one more than the truth, the formula's value not the answer;
    2 prose without steps."""
    doc = rd.doc
    kind = doc.index % 3
    if kind == 2:
        return "The structure is not measurable here."
    xy, _ = exact_steps(rd)
    if kind == 1:
        xy[0], xy[1] = xy[1], xy[0]
    values = [v + (1.0 if kind == 1 else 0.0) for v in target(doc, rd.view)]
    if doc.family == "TL":
        groups, lengths = [(xy[0], xy[1]), (xy[2], xy[3])], values
        first = 3
    elif len(xy) == 2:
        groups, lengths, first = [(xy[0],), (xy[1],)], values, 3
    else:
        groups, lengths, first = [(xy[0], xy[1]), (xy[2], xy[3])], values, 3
    parts = []
    for k, pts in enumerate(groups, start=1):
        parts.append(f"<step-{k}-reasoning>locate</step-{k}-reasoning><step-{k}-answer>"
                     f"{', '.join(_pair(p) for p in pts)}</step-{k}-answer>")
    for k, value in enumerate(lengths, start=first):
        angle = doc.family == "AD" and len(xy) == 4
        formula = f"arccos({math.cos(math.radians(value - (kind == 1)))!r})" if angle else \
            f"sqrt(({_num(value - (kind == 1))})^2 + 0^2)"
        parts.append(f"<step-{k}-reasoning>L = {formula}</step-{k}-reasoning><step-{k}-answer>{_num(value)}"
                     f"</step-{k}-answer>")
    return "".join(parts) + f"<answer>{', '.join(_num(v) for v in values)}</answer>"


class StepwiseBackend(SyncBackend):
    name = MODEL

    def answer(self, request: GenRequest) -> GenResult:
        return GenResult(request.key, stepwise_answer(request.rundoc), finish_reason="stop")


@pytest.fixture(scope="module")
def stepwise_report(phantom_dir: Path, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("stepwise")
    lists = root / "lists"
    lists.mkdir()
    for fam, tasks in TASKS.items():
        (lists / f"tasks_{fam}.json").write_text(json.dumps(tasks))
        out = run_baseline("oracle", fam, phantom_dir, root / "results" / f"MedVision-{fam}-CoT", "--model_name",
                           MODEL, "--sample_limit", "6", lists=lists, backend=lambda cfg, data: StepwiseBackend(),
                           tasks_json=lists / f"tasks_{fam}.json")
        assert all(o.state == "done" for o in out), out
    _judged_steps(next((root / "results").glob(f"MedVision-TL-CoT/{MODEL}/{TL_TASK}-CoT/*/docs.jsonl")).parent,
                  phantom_dir)
    report = root / "report"
    res = run_cli("summarize", "--results_dir", str(root / "results"), "--output_dir", str(report), "--data_dir",
                  str(phantom_dir), "--no_plots", "--n_boot", "100", "--browse_per_task", "0")
    assert res.returncode == 0, res.stderr
    return report


def _judged_steps(store: Path, data_dir: Path) -> None:
    """A judged parse of ``store`` whose judge extracted every step exactly, the prose answers' too (as a judge
    reading steps written in another form would)."""
    folder = StoreLayout(store).judged_parse("0123456789abcdef")
    (folder.folder / "answers").mkdir(parents=True)
    JudgeFile("0123456789abcdef", {"judge_model": "fake", "weights": "fake/judge"}).write(folder.judge_file)
    folder.parsed.write_text("")
    lines = []
    for line in (store / "docs.jsonl").read_text().splitlines():
        rd = dataclasses.replace(DocRow.from_json(json.loads(line)).rundoc(), data_root=str(data_dir))
        xy, values = exact_steps(rd)
        steps = [{"index": 1, "status": "present", "span": "", "values": [*xy[0], *xy[1]]},
                 {"index": 2, "status": "present", "span": "", "values": [*xy[2], *xy[3]]},
                 {"index": 3, "status": "present", "span": "", "values": [values[0]]},
                 {"index": 4, "status": "present", "span": "", "values": [values[1]]}]
        lines.append(json.dumps({"key": rd.doc.key, "judge_signature": "0123456789abcdef", "status": "ok",
                                 "steps": steps, "time": 1.0}))
    (folder.folder / "answers" / "fake.jsonl").write_text("\n".join(lines) + "\n")


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_tl_per_sample_files_score_each_step(stepwise_report: Path) -> None:
    base = stepwise_report / "upstream" / "MedVision-TL-CoT" / MODEL / "parsed"
    proc = _lines(base / f"samples_{TL_TASK}-CoT_proc_acc_filtered.jsonl")
    eq = _lines(base / f"samples_{TL_TASK}-CoT_eq_acc_filtered.jsonl")
    assert proc and len(proc) == len(eq)
    for p, e in zip(proc, eq):
        assert "error" not in p, p
        kind = p["doc_id"] % 3
        if kind == 2:
            assert p["step1_normL2"] is None and p["step3_MRE"] is None and e["step3_raw_expr"] is None
            continue
        assert p["step1_normL2"] < 1e-5 and p["step2_normL2"] < 1e-5  # a swapped pair is not punished
        off = 1.0 if kind == 1 else 0.0
        assert p["step3_MRE"] == pytest.approx(off / p["gt_major_length"])
        diagonal = math.hypot(p["image_size_2d"][0] * p["pixel_size"][0], p["image_size_2d"][1] * p["pixel_size"][1])
        assert p["step4_nMAE"] == pytest.approx(off / diagonal)
        assert e["step3_raw_expr"].startswith("sqrt(")
        assert e["step3_equation_MRE"] == pytest.approx(off / (e["step3_model_answer"] - off), abs=1e-12)


def test_ad_files_and_summary(stepwise_report: Path) -> None:
    folder = stepwise_report / "upstream" / "MedVision-AD-CoT"
    proc = _lines(folder / MODEL / "parsed" / f"samples_{AD_ANGLE}-CoT_proc_acc.jsonl")
    eq = _lines(folder / MODEL / "parsed" / f"samples_{AD_ANGLE}-CoT_eq_acc.jsonl")
    for p, e in zip(proc, eq):
        assert p["metric_type"] == "angle" and "step3_nMAE" not in p
        if p["doc_id"] % 3 == 0:
            assert p["step1_normL2"] < 1e-5 and p["step3_MRE"] == pytest.approx(0.0, abs=1e-12)
            assert e["step3_raw_expr"].startswith("arccos(") and e["step3_equation_MRE"] < 1e-9
    metrics = json.loads((folder / MODEL / "parsed" / "summary_proc_acc_AD_metrics.json").read_text())
    for key, row in metrics.items():
        if "_angle_" not in key:
            continue
        mine = [p for p in proc if key.endswith(p["metric_key"])]
        assert row["n_samples"] == len(mine) and row["success_rate"] == sum(p["doc_id"] % 3 != 2 for p in mine) / len(
            mine)
        assert math.isnan(row["step3_avg_nMAE"])
    assert sum(row["n_samples"] for key, row in metrics.items() if "_angle_" in key) == len(proc)
    task_text = (folder / "summary_proc_acc_AD_task.txt").read_text()
    assert task_text.startswith("\n\n========== MODEL SUMMARIES (Process Accuracy - AD Task) ==========\n")
    assert f"\nModel: {MODEL}\nWeighted Average → Step1_normL2: " in task_text
    assert (folder / MODEL / "summary_eq_acc_AD_model.txt").read_text().startswith(f"\nModel: {MODEL}\n")


def test_scaled_pixel_size_runs_score_against_the_scaled_truth(stepwise_report: Path) -> None:
    folder = stepwise_report / "upstream" / "MedVision-TL-CoT-scaledPS" / MODEL / "parsed"
    proc = _lines(folder / f"samples_{TL_TASK}-CoT-scaledPS_proc_acc_filtered.jsonl")
    assert proc and all(p["step3_MRE"] == pytest.approx(0.0, abs=1e-12) for p in proc if p["doc_id"] % 3 == 0)
    assert (stepwise_report / "upstream" / "MedVision-TL-CoT-scaledPS" / "summary_proc_acc_TL_task_filtered.txt"
            ).is_file()


def test_report_shows_the_section(stepwise_report: Path) -> None:
    page = (stepwise_report / "index.html").read_text()
    for title in ("Process accuracy of -CoT answers: T/L", "Equation accuracy of -CoT answers: A/D",
                  "Scaled pixel size: T/L"):
        assert title in page
    summary = json.loads((stepwise_report / "summary.json").read_text())
    tl = summary["process_accuracy"]["TL"]
    assert set(tl) == {"-CoT", "-CoT-scaledPS"} and MODEL in tl["-CoT"]


def test_the_judges_step_extractions_are_scored_too(stepwise_report: Path) -> None:
    """Where a judged parse stored per-step extractions, the same rules run over them: here the judge read every
    step exactly, the prose answers' too, so every step is read and every error is ~0, unlike the raw answers."""
    runs = json.loads((stepwise_report / "summary.json").read_text())["process_accuracy"]["TL"]
    cot = runs["-CoT"][MODEL]
    raw, judged = cot["process"]["kidney tumor @ CT (A)"], cot["process_judge_steps"]["kidney tumor @ CT (A)"]
    assert raw["n_samples"] == judged["n_samples"] and raw["success_rate"] < 1.0 == judged["success_rate"]
    assert judged["step3_avg_MRE"] == pytest.approx(0.0, abs=1e-12) and raw["step3_avg_MRE"] > 0.01
    assert judged["step1_avg_normL2"] < 1e-5
    assert "process_judge_steps" not in runs["-CoT-scaledPS"][MODEL]  # no judged parse there
    assert "-CoT (judge&#x27;s steps)" in (stepwise_report / "index.html").read_text()


def test_tl_by_major_axis_is_written_for_the_runs(stepwise_report: Path) -> None:
    summary = json.loads((stepwise_report / "summary.json").read_text())["tl_by_major_axis"][MODEL]
    assert sum(b["metrics"]["num_samples"] for b in summary["per_bin"] if b["metrics"]) == \
        summary["all"]["num_samples"]
    text = (stepwise_report / "upstream" / "TL" / "summary_TL_by_major_axis.txt").read_text()
    assert text.startswith(f"Model: {MODEL}\n") and "Above threshold (GT major axis > t mm)" in text
    assert "T/L by ground-truth major axis" in (stepwise_report / "index.html").read_text()


def test_browser_shows_the_reasoning_step_tables(stepwise_report: Path) -> None:
    """The HTML report as a user sees it (headless Chromium, as tests/report/test_html_report.py renders it)."""
    from test_html_report import CHROMIUM, render_dom

    if not CHROMIUM:
        pytest.skip("chromium is not installed")
    dom = render_dom(stepwise_report / "index.html")
    proc = next(rows for ident, rows in dom.tables.items() if ident.startswith("process-accuracy-of-cot-answers-t-l"))
    assert proc[0][:3] == ["Run", "Variant", "N"]
    variants = {row[1] for row in proc[1:]}
    assert {"-CoT", "-CoT-scaledPS", "-CoT (judge's steps)"} <= variants
    scaled = next(rows for ident, rows in dom.tables.items() if ident.startswith("scaled-pixel-size-t-l"))
    assert [row[1] for row in scaled[1:4]] == ["step 1 normL2", "step 2 normL2",
                                               "step 3 MRE (against each variant's own truth)"]
    assert any(ident.startswith("t-l-by-ground-truth-major-axis") for ident in dom.tables)
