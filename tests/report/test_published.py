"""The published leaderboard as data: `medvision-bm published`, values held against the upstream files read by hand,
the generator's checks, and reference files in the same format.

Values below were read by hand from YongchengYAO/MedVision ``Paper-results-backup/`` @755a7bb (file named per value)."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
from pathlib import Path

import pytest

from medvision_bm.models.registry import REGISTRY
from medvision_bm.report import published as P
from medvision_bm.report import upstream_summaries as us
from mvtest_support import REPO, run_cli

TL_TXT = "Paper-results-backup/TL/summary_TL_task_filtered__llm-parsed_gemma-4-31b.txt"
AD_TXT = "Paper-results-backup/AD/summary_AD_task__llm-parsed_gemma-4-31b.txt"
DET_TXT = "Paper-results-backup/Detect/summary_detection_task__llm-parsed_gemma-4-31b.txt"
TL_OOD = "Paper-results-backup/TL-OOD/taskOOD/summary_TL_task_filtered__llm-parsed_gemma-4-31b.txt"

#: (source file, upstream folder, group, metric, value as printed, n): read by hand from the files at 755a7bb.
BY_HAND = [
    (TL_TXT, "lingshu-32b", "overall", "avgMAE", 35.7035, 2008),
    (TL_TXT, "lingshu-32b", "overall", "avgNMAE", 0.0831, 2008),
    (TL_TXT, "Qwen2.5-VL-7B-Instruct", "kidney tumor @ CT (A)", "avgMRE", 46.8226, 1025),
    (TL_TXT, "MedGemma-27b-it-Budget8k", "overall", "SuccessRate", 0.5702, 2008),
    (TL_TXT, "GLM-4.6V", "metastatic lymph node @ MR (A)", "MRE<0.2", 0.1270, 63),
    (TL_TXT, "medgemma-4b-it", "liver tumor @ CT (A)", "avgMAE", 2841252.3606, 256),
    (AD_TXT, "MedVision__fullRFT__qwen25vl-7b-fullSFT__AD-TL-D__512x512__PRxAnswer_s250", "Distance", "avgMAE",
     3.6135, 1100),
    (AD_TXT, "Qwen2.5-VL-32B-Instruct", "Ceph-Angle", "SuccessRate", 0.9916, 957),
    (AD_TXT, "gemma-4-31B-it", "FeTA24_distance_L-7-8", "avgNMAE", 0.0574, 20),
    (AD_TXT, "HealthGPT-L14_bugfix-2eb7706", "Angle", "avgNMAE", None, 957),  # printed nan: angles have no nMAE
    (DET_TXT, "gemma-4-31B-it", "anatomy", "IoU", 0.167, 13421),
    (DET_TXT, "MedVision__fullSFT__Qwen2.5VL-7B__D110k-AD5k-TL5k__CoT__512x512__v2", "anatomy", "SuccessRate", 0.955,
     12421),
    (DET_TXT, "Llama-3.2-11B-Vision-Instruct-Budget16k", "T/L", "Acc@IoU[0.50:0.95]", 0.000, 8533),
    (TL_OOD, "MedVision-V0-7B-ds1.1.1", "overall", "avgMRE", 0.3468, 764),
]


def _csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_cli_csv_lists_the_19_models_of_each_family() -> None:
    res = run_cli("published", "--format", "csv")
    assert res.returncode == 0, res.stderr
    rows = _csv_rows(res.stdout)
    assert list(rows[0]) == list(P.COLUMNS)
    main = [r for r in rows if r["split"] == "main"]
    for fam in ("detect", "TL", "AD"):
        models = {r["model"] for r in main if r["family"] == fam}
        names = {r["name"] for r in main if r["family"] == fam}
        assert len(models) == 19 and len(names) == 19, fam
    assert {r["record"] for r in rows} <= set(REGISTRY)
    assert {(r["planner_version"], r["task_variant"], r["sample_limit"], r["parse"]) for r in main} == \
        {("1.0.0", "-CoT", "1000", "judged:gemma-4-31b")}
    assert {r["commit"] for r in rows} == {P.SOURCE_COMMIT}
    assert {r["tl_filter"] for r in rows if r["family"] == "TL"} == {"True"}


@pytest.mark.parametrize("source,model,group,metric,value,n", BY_HAND)
def test_values_read_by_hand_from_the_upstream_files(source: str, model: str, group: str, metric: str,
                                                     value: float | None, n: int) -> None:
    (row,) = [r for r in P.published_rows() if r.model == model and r.group == group and r.metric == metric
              and r.source_file == source]
    assert row.value == value and row.n == n


def test_models_map_to_registry_records_and_budgets() -> None:
    rows = P.published_rows()
    by = {(r.model, r.family): r for r in rows}
    assert by[("MedGemma-27b-it-Budget8k", "TL")].record == "medgemma_27b"
    assert by[("MedGemma-27b-it-Budget8k", "AD")].max_new_tokens == 8000
    assert "8k" in by[("MedGemma-27b-it-Budget8k", "AD")].note
    assert by[("medgemma-27b-it", "detect")].max_new_tokens == REGISTRY["medgemma_27b"].max_new_tokens_for("detect")
    assert by[("Llama-3.2-11B-Vision-Instruct-Budget16k", "detect")].max_new_tokens == 16000
    assert by[("GLM-4.6V-Flash-Budget16k", "AD")].weights == "zai-org/GLM-4.6V-Flash"
    assert by[("Qwen2.5-VL-32B-Instruct", "TL")].weights == "Qwen/Qwen2.5-VL-32B-Instruct"
    assert {r.engine for r in rows if r.record == "lingshu"} == {"hf"}
    # our results folder name for a record's default weights finds the published model
    assert P.select(rows, model="Lingshu-32b", family="TL", split="main")
    assert {r.model for r in P.select(rows, model="medgemma_27b")} == {"medgemma-27b-it", "MedGemma-27b-it-Budget8k"}


def test_cli_filters_formats_and_refuses_unknown_models() -> None:
    res = run_cli("published", "--model", "Lingshu (32B)", "--family", "AD", "--format", "json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert rows and {r["model"] for r in rows} == {"lingshu-32b"} and {r["family"] for r in rows} == {"AD"}
    table = run_cli("published", "--model", "lingshu-32b", "--family", "TL", "--split", "main")
    assert table.returncode == 0 and "35.7035" in table.stdout and table.stdout.splitlines()[0].startswith("name")
    bad = run_cli("published", "--model", "no-such-model")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    (line,) = bad.stderr.strip().splitlines()
    assert "no published numbers match" in line


def _generator():
    spec = importlib.util.spec_from_file_location("make_published", REPO / "script" / "make_published.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_backup(root: Path) -> None:
    """A Paper-results-backup/ made with our writer of upstream's format, named as upstream's folders."""
    tl = {"kidney tumor @ CT (A)": {"avgMAE": 2.0, "avgMRE": 0.25, "SuccessRate": 0.75, "avgNMAE": 0.02,
                                     "num_samples": 4, "MRE<0.1": 0.25, "MRE<0.2": 0.5, "MRE<0.3": 0.75},
          "brain tumor @ MR (A)": {"avgMAE": 1.0, "avgMRE": 0.125, "SuccessRate": 1.0, "avgNMAE": 0.01,
                                   "num_samples": 12, "MRE<0.1": 0.5, "MRE<0.2": 0.75, "MRE<0.3": 1.0}}
    ad = {"Ceph-Biometrics-400_distance_L-1-2": {"avgMAE": 3.0, "avgMRE": 0.1, "avgNMAE": 0.01, "SuccessRate": 1.0,
                                                 "num_samples": 10, "MRE<0.1": 0.4, "MRE<0.2": 0.9, "MRE<0.3": 1.0},
          "Ceph-Biometrics-400_angle_A-L_1_2-L_2_5": {"avgMAE": 5.0, "avgMRE": 0.2, "avgNMAE": float("nan"),
                                                      "SuccessRate": 0.5, "num_samples": 6, "MRE<0.1": 0.0,
                                                      "MRE<0.2": 0.5, "MRE<0.3": 0.5}}
    gen = _generator()
    for family, _split, rel, _pin, _limit in gen.FILES:
        runs = [("lingshu-32b", tl if family == "TL" else ad if family == "AD" else {})]
        text = us.tl_text(runs) if family == "TL" else us.ad_text(runs) if family == "AD" else \
            us.detection_text([("InternVL3-38B", {})], "x.json")
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_generator_round_trips_our_writer_and_refuses_a_damaged_copy(tmp_path: Path) -> None:
    gen = _generator()
    backup = tmp_path / "Paper-results-backup"
    _fake_backup(backup)
    out = tmp_path / "published.json"
    assert gen.main(["--backup", str(backup), "--out", str(out)]) == 0
    rows = P.read_rows(out)
    got = {(r.family, r.group, r.metric): (r.value, r.n) for r in rows if r.split == "main" and r.family == "TL"}
    assert got[("TL", "overall", "avgMAE")] == (1.25, 16)  # (2.0 x 4 + 1.0 x 12) / 16
    assert got[("TL", "kidney tumor @ CT (A)", "MRE<0.2")] == (0.5, 4)
    ad = {(r.group, r.metric): (r.value, r.n) for r in rows if r.family == "AD"}
    assert ad[("Distance", "avgMAE")] == (3.0, 10) and ad[("Angle", "avgNMAE")] == (None, 6)
    assert gen.main(["--backup", str(backup), "--out", str(out), "--check"]) == 0
    tl = backup / gen.FILES[1][2]
    tl.write_text(tl.read_text().replace("| 1.0000   | 0.0100   |", "| 1.0000   | 0.0700   |"))  # a mistyped digit
    assert gen.main(["--backup", str(backup), "--out", str(out)]) == 2
    assert P.read_rows(out) == rows  # nothing written


def test_reference_files_in_the_published_format(tmp_path: Path) -> None:
    rows = P.select(P.published_rows(), model="lingshu-32b", family="TL", split="main")[:3]
    csv_path, json_path = tmp_path / "ref.csv", tmp_path / "ref.json"
    csv_path.write_text(P.to_csv(rows))
    json_path.write_text(json.dumps([r.to_json() for r in rows]))
    assert P.read_rows(csv_path) == rows and P.read_rows(json_path) == rows
    minimal = tmp_path / "mine.csv"
    minimal.write_text("model,family,group,metric,value\nmy-model,TL,overall,avgMAE,1.5\n")
    (r,) = P.read_rows(minimal)
    assert (r.model, r.name, r.value, r.split, r.kind, r.planner_version) == ("my-model", "my-model", 1.5, "main",
                                                                               "aggregate", None)
    broken = tmp_path / "broken.csv"
    broken.write_text("model,family,group,metric,value\nm,TL,overall,avgMAE,abc\n")
    with pytest.raises(Exception, match="not a number"):
        P.read_rows(broken)
