"""The clinical decision agreement of MedVision-V0-7B as the paper publishes it, from V0's published per-sample
values: every number of its rows of ``Paper-results-backup/CDA/CDA_REPORT_llm-parsed-gemma-4-31b.md`` (accuracy,
coverage-adjusted accuracy, both kappas, the bootstrap CI over whole imaging volumes and the one-sided p), and its
``summary_metrics_CDA_Task[_filtered].json`` byte for byte (YongchengYAO/MedVision @755a7bb; the rules:
``script/analyze/clinical-decision-analysis/`` @2beef50). Inputs: fixtures/cda_v0 (README there)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from medvision_bm.report import cda

FIX = Path(__file__).parent / "fixtures" / "cda_v0"
ANGLE_TASK = "Ceph-Biometrics-400_BiometricsFromLandmarks_Angle_Task01_Sagittal-CoT"
MODEL = "MedVision-V0 (7B)"

#: V0's rows of the published report's three tables, as printed.
PUBLISHED = {
    "SNA maxillary position":
        "| MedVision-V0 (7B) | 0.458 | 0.458 | 0.183 | 0.332 | [0.163, 0.484] | <0.001 | 120 | 120 |",
    "SNB mandibular position":
        "| MedVision-V0 (7B) | 0.483 | 0.483 | 0.227 | 0.439 | [0.292, 0.575] | <0.001 | 120 | 120 |",
    "AJCC renal T category (greatest dimension)":
        "| MedVision-V0 (7B) | 0.657 | 0.657 | 0.379 | 0.726 | [0.428, 0.858] | <0.001 | 1025 | 1025 |",
}


def _rows(name: str) -> list[dict[str, str]]:
    with open(FIX / name, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _proxy(family: str, task: str, dataset: str | None, metric_key: str | None) -> cda.Proxy:
    (p,) = cda.proxies_for(family, task, dataset, metric_key)
    return p


@pytest.fixture(scope="module")
def v0() -> cda.Analysis:
    """V0's samples in upstream's record order, through the suite's routing, categories and aggregation."""
    ad = cda.RunCda(MODEL, "AD")
    for r in _rows("ceph_angles.csv"):
        s = cda.make_sample(_proxy("AD", ANGLE_TASK, "Ceph-Biometrics-400", r["metric_key"]), "Ceph-Biometrics-400",
                            r["metric_key"], float(r["gt_value"]), float(r["pred_value"]), r["image_file"], 0, 0)
        assert s is not None
        ad.add(s)
    tl = cda.RunCda(MODEL, "TL")
    for r in _rows("renal_T_filtered.csv"):
        task = f"{r['dataset']}_TumorLesionSize_Task01_Axial-CoT"
        s = cda.make_sample(_proxy("TL", task, r["dataset"], None), r["dataset"], None, float(r["gt_value"]),
                            float(r["pred_value"]), r["image_file"], 2, None)
        assert s is not None
        tl.add(s)
    return cda.Analysis({"AD": [ad], "TL": [tl]}, [])


@pytest.mark.parametrize("proxy", list(PUBLISHED))
def test_report_rows_match_the_paper(v0: cda.Analysis, proxy: str) -> None:
    (p,) = [x for x in cda.proxies() if x.name == proxy]
    (row,) = cda.table_rows(v0, p)
    assert "| " + " | ".join(row.cells()) + " |" == PUBLISHED[proxy]


def test_bootstrap_numbers_and_recorded_resampling(v0: cda.Analysis) -> None:
    """The uncertainty file's rows at full precision (upstream's printed CI ends and p agree) and its resampling."""
    doc = cda.uncertainty_file([*v0.runs["AD"], *v0.runs["TL"]])
    assert (doc["n_boot"], doc["seed"]) == (4000, 1024)
    rows = {r["proxy"]: r for r in doc["rows"]}
    renal = rows["AJCC renal T category (greatest dimension)"]
    assert (renal["n"], renal["n_clusters"], renal["statistic"], renal["n_boot_valid"]) == (1025, 118,
                                                                                             "weighted_kappa", 4000)
    assert round(renal["ci_lower"], 3) == 0.428 and round(renal["ci_upper"], 3) == 0.858
    assert renal["p_kappa_gt_zero"] == 1 / 4001  # no replicate <= 0
    sna = rows["SNA maxillary position"]
    assert (sna["n"], sna["n_clusters"], sna["low_n"]) == (120, 120, False)
    assert list(rows) == ["SNB mandibular position", "SNA maxillary position",
                          "AJCC renal T category (greatest dimension)"]  # first parsed sample's order


@pytest.mark.parametrize(("family", "name"), [("AD", "summary_metrics_CDA_Task.json"),
                                              ("TL", "summary_metrics_CDA_Task_filtered.json")])
def test_metrics_file_is_upstreams_byte_for_byte(v0: cda.Analysis, tmp_path: Path, family: str, name: str) -> None:
    written = cda.write_files(tmp_path, v0, "llm-parsed_gemma-4-31b", "the judged parse", "Results", family == "TL")
    folder = {"AD": "AD", "TL": "TL"}[family]
    rel = f"{folder}/{MODEL}/llm-parsed_gemma-4-31b/{name}"
    assert rel in written
    assert (tmp_path / rel).read_text() == (FIX / name).read_text()
    assert f"{folder}/summary_CDA_uncertainty_llm-parsed-gemma-4-31b{'_filtered' if family == 'TL' else ''}.json" \
        in written
    assert f"{folder}/summary_CDA_task_llm-parsed-gemma-4-31b{'_filtered' if family == 'TL' else ''}_canonical.txt" \
        in written


def test_report_markdown_holds_the_published_rows(v0: cda.Analysis, tmp_path: Path) -> None:
    cda.write_files(tmp_path, v0, "llm-parsed_gemma-4-31b", "the judged parse", "Results", True)
    text = (tmp_path / "CDA" / "CDA_REPORT_llm-parsed-gemma-4-31b.md").read_text()
    for proxy, row in PUBLISHED.items():
        assert f"### {proxy}" in text and row in text
    assert "_Data: KiPA22, KiTS23_" in text and "_Data: Ceph-Biometrics-400_" in text
    assert "4000 bootstrap resamples, seed 1024, resampling whole imaging volumes" in text


def test_values_file_keeps_upstreams_records(v0: cda.Analysis, tmp_path: Path) -> None:
    cda.write_files(tmp_path, v0, "llm-parsed_gemma-4-31b", "the judged parse", "Results", True)
    recs = json.loads((tmp_path / "AD" / MODEL / "llm-parsed_gemma-4-31b" / "summary_values_CDA_Task.json")
                      .read_text())
    # the first records of the published file (206.nii.gz: SNB then SNA) and the boundary cases it holds
    assert recs[0] == {"proxy": "SNB mandibular position", "dataset": "Ceph-Biometrics-400",
                       "metric_key": "A-L_1_2-L_2_6", "gt_value": 70.0625, "pred_value": 78.449,
                       "gt_category": "retrusive mandible", "pred_category": "normal mandible",
                       "image_file": "206.nii.gz", "slice_dim": 0, "slice_idx": 0}
    by_value = {(r["metric_key"], r["gt_value"]): r["gt_category"] for r in recs}
    assert by_value[("A-L_1_2-L_2_6", 78.0)] == "normal mandible"  # 101.nii.gz: on the band's lower edge
    assert by_value[("A-L_1_2-L_2_5", 80.0)] == "normal maxilla"  # 238.nii.gz
    assert by_value[("A-L_1_2-L_2_5", 84.0)] == "normal maxilla"  # 241.nii.gz: on the upper edge
    assert len(recs) == 240


def test_values_text_is_jsons_indented_dump(v0: cda.Analysis) -> None:
    """The values file is written record by record; it is the text of upstream's ``json.dump(..., indent=2)``,
    failures (no prediction) and a NaN included."""
    run = v0.runs["TL"][0]
    (renal,) = [p for p in cda.proxies() if p.key == "renal_T"]
    extra = [cda.make_sample(renal, "KiTS23", None, 55.5, None, None, None, None),
             cda.make_sample(renal, "KiTS23", None, 12.25, float("nan"), "case_00001.nii.gz", 2, 7)]
    samples = [*run.samples[:5], *[s for s in extra if s is not None]]
    assert len(samples) == 7
    assert cda.values_text(samples) == json.dumps([s.to_upstream() for s in samples], indent=2)
    assert cda.values_text([]) == json.dumps([], indent=2)


def test_canonical_text_prints_v0_as_upstream(v0: cda.Analysis) -> None:
    """V0's lines of ``Paper-results-backup/TL/summary_CDA_task_llm-parsed-gemma-4-31b_filtered_canonical.txt``
    @755a7bb (upstream's ``print_model_summaries``): the header, V0's leaderboard row and V0's block, to the
    character."""
    run = v0.runs["TL"][0]
    text = cda.canonical_text([(run.label, run.metrics())])
    name = "AJCC renal T category (greatest dimension)"
    rule = "-" * 133
    head = f"{'Proxy':<56} | Acc      | Kappa    | wKappa   | Flip     | AccCov   | Nparsed  | Ntotal  "
    published = "\n".join([
        "\n\n========== CLINICAL DECISION AGREEMENT (CDA) — MODEL SUMMARIES ==========\n",
        "Acc = agreement on parsed samples; Kappa = Cohen's kappa; wKappa = quadratic-weighted kappa (ordinal proxies "
        "only);",
        "Flip = decision-flip rate (parsed); AccCov = coverage-adjusted accuracy (parse failures = disagreement).",
        f"\n### Leaderboard (config order): {name}",
        "Model                      | Acc      | Kappa    | wKappa   | Flip     | AccCov   | Nparsed  | Ntotal  ",
        "-" * 102,
        "MedVision-V0 (7B)          | 0.6566   | 0.3789   | 0.7264   | 0.3434   | 0.6566   | 1025     | 1025    ",
        "\nModel: MedVision-V0 (7B)", "\nOverall (per proxy):", head, rule,
        f"{name:<56} | 0.6566   | 0.3789   | 0.7264   | 0.3434   | 0.6566   | 1025     | 1025    ",
        "\nBy dataset (per proxy x dataset):", head, rule,
        f"{name + ' @ KiPA22':<56} | 0.5818   | 0.0748   | 0.0748   | 0.4182   | 0.5818   | 385      | 385     ",
        f"{name + ' @ KiTS23':<56} | 0.7016   | 0.5138   | 0.7919   | 0.2984   | 0.7016   | 640      | 640     ",
        "\n" + "=" * 100 + "\n"])
    assert text == published
