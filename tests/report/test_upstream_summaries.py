"""Upstream's summary texts written by summarize: the scripted model's stored answers, summarized, give exactly the
hand-made golden files (fixtures/upstream_summaries/README.md works every number out from upstream's
summarize_TL_task.py @28f6c67, summarize_AD_task.py @286f632 and summarize_detection_task.py print code)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from medvision_bm.report import upstream_summaries as us
from phantom_runs import run_baseline, run_cli
from scripted import LIMIT, MODEL, TASKS, scripted_factory

GOLDEN = Path(__file__).parent / "fixtures" / "upstream_summaries"
FILES = {"TL": "TL/summary_TL_task_filtered.txt", "AD": "AD/summary_AD_task.txt",
         "detect": "Detect/summary_detection_task.txt"}


@pytest.fixture(scope="module")
def scripted_report(phantom_dir: Path, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("scripted")
    for fam, tasks in TASKS.items():
        lists = root / "lists"
        lists.mkdir(exist_ok=True)
        (lists / f"tasks_{fam}.json").write_text(json.dumps(tasks))
        out = run_baseline("oracle", fam, phantom_dir, root / "results", "--model_name", MODEL, "--sample_limit",
                           str(LIMIT[fam]), lists=lists, backend=scripted_factory,
                           tasks_json=lists / f"tasks_{fam}.json")
        assert all(o.state == "done" for o in out), out
    report = root / "report"
    res = run_cli("summarize", "--results_dir", str(root / "results"), "--output_dir", str(report), "--data_dir",
                  str(phantom_dir), "--no_plots", "--n_boot", "100", "--browse_per_task", "0")
    assert res.returncode == 0, res.stderr
    return report


@pytest.mark.parametrize("family", ["TL", "AD", "detect"])
def test_texts_equal_the_golden_files(scripted_report: Path, family: str) -> None:
    ours = (scripted_report / "upstream" / FILES[family]).read_text()
    golden = (GOLDEN / Path(FILES[family]).name).read_text()
    assert ours == golden


def test_per_model_jsons_are_upstreams(scripted_report: Path) -> None:
    """The per-group JSONs upstream writes beside the texts: its key order, NaN spelled NaN, its file names."""
    base = scripted_report / "upstream"
    tl = json.loads((base / "TL" / MODEL / "parsed" / "summary_metrics_TL_Task_filtered.json").read_text())
    kid = tl["kidney tumor @ CT (A)"]
    assert list(kid)[:5] == ["avgMAE", "avgMRE", "SuccessRate", "avgNMAE", "num_samples"]
    assert (kid["num_samples"], kid["SuccessRate"], kid["avgMAE"]) == (5, 0.8, 0.5)
    ad_text = (base / "AD" / MODEL / "parsed" / "summary_metrics_AD_Task.json").read_text()
    ad = json.loads(ad_text)
    assert list(ad["PhantomXR_angle_A-L_1_2-L_3_4"])[:5] == ["avgMAE", "avgMRE", "avgNMAE", "SuccessRate",
                                                               "num_samples"]
    assert '"avgNMAE": NaN' in ad_text and math.isnan(ad["PhantomXR_angle_A-L_1_2-L_3_4"]["avgNMAE"])
    grouped = json.loads((base / "Detect" / MODEL / "parsed" /
                          "summary_metrics_anatomy_vs_lesion_detect_Task.json").read_text())
    assert grouped["anatomy"]["mean_metrics"]["total_samples"] == 65 and grouped["T/L"]["mean_metrics"] == {}
    assert list(grouped["anatomy"]) == ["mean_metrics", "regions", "detailed_data"]
    everyone = json.loads((base / "Detect" / "summary_metrics_all_models_detect_Task.json").read_text())
    assert everyone[MODEL]["anatomy"]["num_regions"] == 1 and everyone[MODEL]["T/L"]["total_samples"] == 0


def test_texts_read_back_to_the_report_numbers(scripted_report: Path) -> None:
    """Our reader of upstream's texts (the generator of the published numbers uses it) gets the leaderboard's
    numbers back at the printed precision."""
    summary = json.loads((scripted_report / "summary.json").read_text())
    tl = us.read_tl_text((scripted_report / "upstream" / FILES["TL"]).read_text())[MODEL]
    board = {r["aggregate"]: r for r in summary["families"]["TL"]["leaderboard"] if r["label"] == MODEL}
    assert tl["overall"]["Samples"] == board["overall"]["n"] == 14
    for col, stat in (("MAE", "avgMAE"), ("MRE", "avgMRE"), ("SR", "SuccessRate"), ("nMAE", "avgNMAE")):
        assert abs(tl["overall"][col] - board["overall"][stat]) <= 5e-5
    det = us.read_detection_text((scripted_report / "upstream" / FILES["detect"]).read_text())[MODEL]
    assert (det["anatomy"]["regions"], det["anatomy"]["samples"]) == (1, 65) and math.isnan(det["T/L"]["IoU"])


def test_names_of_upstreams_files() -> None:
    """docs/spec/upstream-summary-files.md: the judged suffix and the T/L filter marker."""
    assert us.judged_dir("google/gemma-4-31B-it") == "llm-parsed_gemma-4-31b"  # Paper-results-backup @755a7bb
    judged = us.file_names("TL", "llm-parsed_gemma-4-31b", filtered=True)
    assert judged == {"text": "summary_TL_task_filtered__llm-parsed_gemma-4-31b.txt",
                      "metrics": "summary_metrics_TL_Task_filtered__llm-parsed_gemma-4-31b.json"}
    assert us.file_names("AD", "llm-parsed_gemma-4-31b")["text"] == "summary_AD_task__llm-parsed_gemma-4-31b.txt"
    assert us.file_names("AD", "llm-parsed_gemma-4-31b")["metrics"] == "summary_metrics_AD_Task.json"
    det = us.file_names("detect")
    assert (det["text"], det["all_models"]) == ("summary_detection_task.txt",
                                                "summary_metrics_all_models_detect_Task.json")
