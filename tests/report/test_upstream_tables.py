"""Upstream's aggregation through the summarize path: small mixed sets computed by hand, and on the phantom runs the
per-group numbers against upstream_metrics.summarize_*_groups and the bootstrap engine against the point estimates.

Rules (docs/spec/parser-metrics.md sections 3-4): per group upstream's denominators (summarize_*_task.py
``_calculate_final_metrics_*``); detection ``group_anatomy_vs_tumor_lesion`` (MINIMUM_GROUP_SIZE = 50, EXCLUDED_KEYS,
sample-weighted); T/L ``print_model_summaries`` (groups without a finite MRE dropped); A/D ``calculate_group_avg``
(newer summarize_AD_task.py @286f632: Distance and Angle rows).
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from medvision_bm.data import upstream_configs as cfg
from medvision_bm.report import groups as G
from medvision_bm.report.load import load
from medvision_bm.report.replicates import replicates
from medvision_bm.score.store_scoring import SCORING_VERSION
from medvision_bm.store.discovery import discover
from medvision_bm.tasks import upstream_groups as ug
from medvision_bm.tasks import upstream_metrics as um
from medvision_bm.tasks.families import family_spec
from phantom_runs import run_baseline, run_cli
from upstream_filter import is_listed, listed_keys

DETECT_OK = {"IoU": 0.8, "F1": 0.9, "Precision": 0.85, "Recall": 0.95, "MAE": 0.02}
DETECT_FAIL = {"IoU": 0.0, "F1": 0.0, "Precision": 0.0, "Recall": 0.0, "MAE": None}
MEASURE_FAIL = {"MAE": None, "MRE": None, "nMAE": None}


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def row(family: str, task: str, i: int, metrics: dict[str, Any], *, status: str = "ok", label_name: str = "",
        modality: str = "CT", slice_dim: int = 2, dataset: str = "Hand", metric_type: str | None = None,
        metric_key: str | None = None, near_zero: bool = False) -> dict[str, Any]:
    """One parsed.jsonl row as the runner writes it (score/store_scoring.score_store)."""
    k = {"detect": 4, "TL": 2, "AD": 1}[family]
    out = {"index": i, "family": family, "task": task, "rules": "newer", "dataset": dataset, "label": 1,
           "label_name": label_name or None, "modality": modality, "slice_dim": slice_dim, "key": f"{task}:{i}",
           "status": status, "success": status == "ok", "values": [0.5] * k if status == "ok" else None,
           "target": [0.1, 0.1, 0.5, 0.5] if family == "detect" else [1.0] * k, "metrics": metrics,
           "parser": "strict-1", "reason": "", "near_zero_gt": near_zero, "metric_path": "posthoc"}
    if family == "AD":
        out.update(metric_type=metric_type, metric_key=metric_key)
    return out


def write_store(root: Path, model: str, task: str, family: str, rows: list[dict[str, Any]]) -> None:
    """A sample store holding only what summarize reads: signature, docs.jsonl (empty: no browser), parsed rows,
    results.json (as the runner writes them under the current protocol)."""
    folder = root / model / task / ("0" * 12)
    folder.mkdir(parents=True)
    inputs = {"task": task, "task_version": f"current-{family}-1", "protocol": "current", "model": {"record": model}}
    (folder / "signature.json").write_text(json.dumps({"answer_signature": "0" * 64, "inputs": inputs, "schema": 1}))
    (folder / "docs.jsonl").write_text("")
    (folder / "parsed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "results.json").write_text(json.dumps({
        "schema": "medvision-results/1", "model_name": model, "task": task, "family": family, "protocol": "current",
        "parser_version": "strict-1", "metric_rules": "newer", "metric_path": "posthoc",
        "scoring_version": SCORING_VERSION, "selection": {"all": len(rows)},
        "counts": {"store_bad_lines": 0, "store_foreign_lines": 0, "store_duplicates": 0}}))


def summarize(root: Path, out: Path) -> None:
    res = run_cli("summarize", "--results_dir", str(root), "--output_dir", str(out), "--no_plots", "--n_boot", "200",
                  "--browse_per_task", "0")
    assert res.returncode == 0, res.stderr


def f(text: str) -> float | None:
    return None if text == "" else float(text)


def check_ci(r: dict[str, str], name: str) -> None:
    v, lo, hi = f(r[name]), f(r[f"{name}_lo"]), f(r[f"{name}_hi"])
    assert lo <= v + 1e-12 and v <= hi + 1e-12, (name, lo, v, hi)


def test_tl_groups_and_overall_by_hand(tmp_path: Path) -> None:
    a, b = "HandCT_TumorLesionSize_Task01_Axial", "HandMR_TumorLesionSize_Task01_Coronal"
    liver = dict(label_name="liver tumor")
    rows_a = [row("TL", a, 0, {"MAE": 1.0, "MRE": 0.05, "nMAE": 0.01}, **liver),
              row("TL", a, 1, {"MAE": 3.0, "MRE": 0.25, "nMAE": 0.03}, **liver),
              row("TL", a, 2, MEASURE_FAIL, status="parse_failed", **liver),
              row("TL", a, 3, MEASURE_FAIL, status="request_failed", label_name="kidney cyst"),
              row("TL", a, 4, MEASURE_FAIL, status="request_failed", label_name="kidney cyst")]
    rows_b = [row("TL", b, 0, {"MAE": 5.0, "MRE": 0.5, "nMAE": 0.05}, label_name="enhancing brain tumor",
                  modality="MRI", slice_dim=1)]
    root = tmp_path / "results"
    write_store(root, "m1", a, "TL", rows_a)
    write_store(root, "m1", b, "TL", rows_b)
    out = tmp_path / "out"
    summarize(root, out)
    groups = {r["group"]: r for r in read_csv(out / "groups_TL.csv")}
    # label_map_rename[label] @ modality code (plane letter)
    assert set(groups) == {"liver tumor @ CT (A)", "kidney cyst @ CT (A)", "enhancing brain tumor @ MR (C)"}
    g1, g2, g3 = groups["liver tumor @ CT (A)"], groups["enhancing brain tumor @ MR (C)"], groups["kidney cyst @ CT (A)"]
    # per group: SR over all N, error means over the successes, MRE<k over all N
    assert (g1["n"], f(g1["SuccessRate"]), f(g1["avgMAE"])) == ("3", pytest.approx(2 / 3), 2.0)
    assert f(g1["avgMRE"]) == pytest.approx(0.15) and f(g1["avgNMAE"]) == pytest.approx(0.02)
    assert (f(g1["MRE<0.1"]), f(g1["MRE<0.2"]), f(g1["MRE<0.3"]), f(g1["MRE<1.0"])) == pytest.approx(
        (1 / 3, 1 / 3, 2 / 3, 2 / 3))
    assert (f(g2["avgMAE"]), f(g2["MRE<0.5"]), f(g2["MRE<0.6"])) == (5.0, 0.0, 1.0)
    assert (g3["n"], f(g3["SuccessRate"]), g3["avgMAE"], g3["avgMRE"]) == ("2", 0.0, "", "")
    assert (g1["enters"], g2["enters"], g3["enters"]) == ("overall", "overall", "left out (no finite MRE)")
    # the model row: the group without a finite MRE leaves the total too (N = 3 + 1)
    (overall,) = read_csv(out / "leaderboard_TL.csv")
    assert (overall["aggregate"], overall["n"], overall["n_groups"], overall["unit"]) == ("overall", "4", "2", "mm")
    assert f(overall["avgMAE"]) == pytest.approx((2.0 * 3 + 5.0) / 4)  # 2.75 mm
    assert f(overall["avgMRE"]) == pytest.approx((0.15 * 3 + 0.5) / 4)
    assert f(overall["SuccessRate"]) == pytest.approx((2 / 3 * 3 + 1.0) / 4)
    assert f(overall["avgNMAE"]) == pytest.approx((0.02 * 3 + 0.05) / 4)
    assert (f(overall["MRE<0.1"]), f(overall["MRE<0.3"])) == pytest.approx((1 / 4, 2 / 4))
    for name in ("avgMAE", "avgMRE", "SuccessRate", "MRE<0.3"):
        check_ci(overall, name)
    # per task: upstream's task metrics over the task's rows (results.json's numbers)
    tasks = {r["task"]: r for r in read_csv(out / "tasks_TL.csv")}
    assert (tasks[a]["num_samples"], f(tasks[a]["SuccessRate"]), f(tasks[a]["avgMAE"])) == ("5", 0.4, 2.0)
    assert (tasks[a]["n_parse_failed"], tasks[a]["n_request_failed"]) == ("1", "2")
    # the same through upstream's functions
    summary = json.loads((out / "summary.json").read_text())
    up = summary["families"]["TL"]["upstream"]["m1"]["overall"]
    assert up["weighted_avg_mae"] == pytest.approx(2.75) and up["total_samples"] == 4


def test_detection_anatomy_vs_lesion_by_hand(tmp_path: Path) -> None:
    task = "HandCT_BoxCoordinate_Task01_Axial"
    rows: list[dict[str, Any]] = []

    def add(n: int, label: str, metrics: dict[str, Any], status: str = "ok") -> None:
        rows.extend(row("detect", task, len(rows), metrics, status=status, label_name=label) for _ in range(n))

    add(49, "liver", DETECT_OK)
    add(1, "liver", DETECT_FAIL, "parse_failed")  # 50 samples: enters the anatomy row
    add(60, "kidney tumor", {"IoU": 0.5, "F1": 0.6, "Precision": 0.7, "Recall": 0.55, "MAE": 0.1})
    add(10, "spleen", {"IoU": 0.1, "F1": 0.2, "Precision": 0.3, "Recall": 0.2, "MAE": 0.2})  # under 50: left out
    add(55, "sternum", {"IoU": 0.3, "F1": 0.4, "Precision": 0.5, "Recall": 0.4, "MAE": 0.15})  # "Others": excluded
    root = tmp_path / "results"
    write_store(root, "m1", task, "detect", rows)
    out = tmp_path / "out"
    summarize(root, out)
    groups = {r["group"]: r for r in read_csv(out / "groups_detect.csv")}
    assert {g: r["enters"] for g, r in groups.items()} == {
        "Liver @ CT (A)": "anatomy", "Kidney Tumor/Lesion @ CT (A)": "T/L",
        "Spleen @ CT (A)": "left out (under 50 samples)", "Others @ CT (A)": "left out (name has others)"}
    liver = groups["Liver @ CT (A)"]
    # a failure counts 0 in the overlap means (over N = 50) and is left out of avgMAE
    assert (f(liver["IoU"]), f(liver["F1"]), f(liver["SuccessRate"]), f(liver["avgMAE"])) == pytest.approx(
        (49 * 0.8 / 50, 49 * 0.9 / 50, 49 / 50, 0.02))
    # thresholds count >= (upstream's "IoU>0.5" key), Acc@IoU over the COCO grid 0.50..0.95
    assert (f(liver["IoU>0.5"]), f(liver["Acc@IoU>=0.75"]), f(liver["Acc@IoU>=0.80"]), f(liver["Acc@IoU>=0.85"])) \
        == pytest.approx((49 / 50, 49 / 50, 49 / 50, 0.0))
    assert f(liver["Acc@IoU[0.50:0.95]"]) == pytest.approx(49 * 0.7 / 50)  # 7 of 10 thresholds <= 0.8
    kidney = groups["Kidney Tumor/Lesion @ CT (A)"]
    assert (f(kidney["IoU>0.5"]), f(kidney["Acc@IoU[0.50:0.95]"])) == pytest.approx((1.0, 0.1))
    board = {r["aggregate"]: r for r in read_csv(out / "leaderboard_detect.csv")}
    assert (board["anatomy"]["n"], board["anatomy"]["n_groups"]) == ("50", "1")
    assert f(board["anatomy"]["IoU"]) == pytest.approx(0.784) and f(board["T/L"]["IoU"]) == pytest.approx(0.5)
    assert (board["T/L"]["n"], f(board["T/L"]["SuccessRate"])) == ("60", 1.0)
    total = 50 + 60 + 10 + 55
    assert board["all regions"]["n"] == str(total) and board["all regions"]["n_groups"] == "4"
    assert f(board["all regions"]["IoU"]) == pytest.approx((0.784 * 50 + 0.5 * 60 + 0.1 * 10 + 0.3 * 55) / total)
    assert f(board["all regions"]["avgMAE"]) == pytest.approx((0.02 * 50 + 0.1 * 60 + 0.2 * 10 + 0.15 * 55) / total)
    assert f(board["all regions"]["SuccessRate"]) == pytest.approx((total - 1) / total)
    assert {r["unit"] for r in board.values()} == {"relative"}
    for agg in ("anatomy", "T/L", "all regions"):
        for name in ("IoU", "SuccessRate", "avgMAE", "Acc@IoU[0.50:0.95]"):
            check_ci(board[agg], name)
    md = (out / "leaderboard_detect.md").read_text()
    assert "avgMAE (relative)" in md and "at least 50 samples" in md


def test_ad_distance_and_angle_rows_by_hand(tmp_path: Path) -> None:
    dist = "Ceph-Biometrics-400_BiometricsFromLandmarks_Distance_Task01_Sagittal"
    ang = "Ceph-Biometrics-400_BiometricsFromLandmarks_Angle_Task01_Sagittal"
    feta = "FeTA24_BiometricsFromLandmarks_Task01_Sagittal"
    ceph = dict(dataset="Ceph-Biometrics-400", modality="X-ray", slice_dim=0)

    def d(i: int, key: str, metrics: dict, **kw: Any) -> dict[str, Any]:
        return row("AD", dist, i, metrics, metric_type="distance", metric_key=key, **{**ceph, **kw})

    root = tmp_path / "results"
    write_store(root, "m1", dist, "AD", [
        d(0, "L-1-2", {"MAE": 1.0, "MRE": 0.04, "nMAE": 0.01}), d(1, "L-1-2", {"MAE": 3.0, "MRE": 0.12, "nMAE": 0.03}),
        d(2, "L-1-2", {"MAE": 9.0, "MRE": 99.0, "nMAE": 0.5}, near_zero=True),  # ground truth < 0.1: left out
        d(3, "L-3-4", {"MAE": 2.0, "MRE": 0.5, "nMAE": 0.04}), d(4, "L-3-4", MEASURE_FAIL, status="parse_failed")])
    write_store(root, "m1", ang, "AD", [
        row("AD", ang, 0, {"MAE": 10.0, "MRE": 0.2, "nMAE": None}, metric_type="angle", metric_key="A-1", **ceph),
        row("AD", ang, 1, {"MAE": 20.0, "MRE": 0.6, "nMAE": None}, metric_type="angle", metric_key="A-1", **ceph)])
    write_store(root, "m1", feta, "AD", [
        row("AD", feta, 0, {"MAE": 4.0, "MRE": 0.08, "nMAE": 0.05}, metric_type="distance", metric_key="L-5-6",
            dataset="FeTA24", modality="", slice_dim=0)])
    out = tmp_path / "out"
    summarize(root, out)
    groups = {r["group"]: r for r in read_csv(out / "groups_AD.csv")}
    assert {g: (r["n"], r["unit"], r["enters"]) for g, r in groups.items()} == {
        "Ceph-Biometrics-400_distance_L-1-2": ("2", "mm", "Distance"),
        "Ceph-Biometrics-400_distance_L-3-4": ("2", "mm", "Distance"),
        "Ceph-Biometrics-400_angle_A-1": ("2", "degrees", "Angle"),
        "FeTA24_distance_L-5-6": ("1", "mm", "Distance")}
    assert f(groups["Ceph-Biometrics-400_distance_L-1-2"]["avgMAE"]) == 2.0  # the near-zero sample is not counted
    board = {r["aggregate"]: r for r in read_csv(out / "leaderboard_AD.csv")}
    assert set(board) == {"Distance", "Angle", "FeTA-Distance", "Ceph-Distance", "Ceph-Angle"}
    dist_row, angle = board["Distance"], board["Angle"]
    assert (dist_row["unit"], dist_row["n"], angle["unit"], angle["n"]) == ("mm", "5", "degrees", "2")
    assert f(dist_row["avgMAE"]) == pytest.approx((2.0 * 2 + 2.0 * 2 + 4.0) / 5)
    assert f(dist_row["avgMRE"]) == pytest.approx((0.08 * 2 + 0.5 * 2 + 0.08) / 5)
    assert f(dist_row["SuccessRate"]) == pytest.approx((2 + 1 + 1) / 5)
    assert f(dist_row["avgNMAE"]) == pytest.approx((0.02 * 2 + 0.04 * 2 + 0.05) / 5)
    assert f(dist_row["MRE<0.1"]) == pytest.approx((0.5 * 2 + 0 + 1.0) / 5)
    assert (f(angle["avgMAE"]), f(angle["avgMRE"]), angle["avgNMAE"]) == (15.0, pytest.approx(0.4), "")
    assert (f(board["FeTA-Distance"]["avgMAE"]), f(board["Ceph-Distance"]["avgMAE"]),
            f(board["Ceph-Angle"]["avgMAE"])) == (4.0, 2.0, 15.0)
    for agg in ("Distance", "Angle"):
        check_ci(board[agg], "avgMAE")
    tasks = {r["task"]: r for r in read_csv(out / "tasks_AD.csv")}
    assert (tasks[dist]["num_samples"], tasks[dist]["n_near_zero_gt"], tasks[dist]["unit"]) == ("4", "1", "mm")
    assert tasks[ang]["unit"] == "degrees"
    # upstream's own rows agree (its newer Distance/Angle rows select these datasets by name), and its overall row,
    # which averages mm with degrees, is kept in summary.json only
    summary = json.loads((out / "summary.json").read_text())
    up = summary["families"]["AD"]["upstream"]["m1"]
    assert up["group_averages"]["Distance"]["MAE"] == pytest.approx(f(dist_row["avgMAE"]))
    assert up["group_averages"]["Angle"]["MAE"] == pytest.approx(15.0)
    assert up["upstream_mixed_overall"]["weighted_avg_mae"] == pytest.approx((2 * 2 + 2 * 2 + 15 * 2 + 4) / 7)
    assert "weighted_avg_mae" not in (out / "leaderboard_AD.csv").read_text()


# ------------------------------------------------------------------------------------- on the phantom runs


def _records(results: Path, family: str, data_dir: Path) -> dict[str, list[ug.GroupRecord]]:
    """Upstream's records of every parsed row; T/L without the samples upstream's removed-samples lists name, as
    its leaderboard summarizes them (upstream_filter.py: summarize_TL_task.py @28f6c67)."""
    lists = listed_keys(data_dir)
    out: dict[str, list[ug.GroupRecord]] = {}
    for path in results.glob("*/*/*/*/parsed.jsonl"):
        model = path.parents[2].name
        for r in map(json.loads, path.read_text().splitlines()):
            if r["family"] != family or (family == "TL" and is_listed(lists, r["task"], r["key"])):
                continue
            s = family_spec(family).upstream_sample(r)
            rec = (ug.GroupRecord("AD", r["metric_key"], s, dataset=r["dataset"], metric_type=r["metric_type"])
                   if family == "AD" else ug.GroupRecord(family, r["label_name"], s, r["modality"], r["slice_dim"]))
            out.setdefault(model, []).append(rec)
    return out


def _same(a: Any, b: Any) -> bool:
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return b is None or (isinstance(b, float) and math.isnan(b))
    return b is not None and abs(a - b) <= 1e-12 * max(1.0, abs(a))


def _exact(a: Any, b: Any) -> bool:
    """The same float to the last bit (NaN and a missing value alike)."""
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return b is None or (isinstance(b, float) and math.isnan(b))
    return b is not None and a == b


@pytest.mark.parametrize("family", ["detect", "TL", "AD"])
def test_groups_equal_upstreams_functions(report_dir: Path, phantom_results: Path, phantom_dir: Path,
                                          family: str) -> None:
    """Per-group dicts and rows of summary.json = upstream_metrics.summarize_*_groups on the same parsed rows, to the
    last bit: every mean's sum runs over the samples in upstream's order."""
    summary = json.loads((report_dir / "summary.json").read_text())
    for model, records in _records(phantom_results, family, phantom_dir).items():
        if family == "detect":
            up = ug.summarize_detection_groups(records, label_map=cfg.label_map_regroup("newer"))
        elif family == "TL":
            up = ug.summarize_tl_groups(records, label_map=cfg.label_map_rename())
        else:
            up = ug.summarize_ad_groups(records)
        mine = summary["families"][family]["upstream"][model]
        assert list(up["groups"]) and set(up["groups"]) == set(mine["groups"])
        for g, d in up["groups"].items():
            assert set(d) == set(mine["groups"][g])
            assert all(_exact(v, mine["groups"][g][k]) for k, v in d.items()), (model, g)
        if family == "TL":
            assert all(_exact(v, mine["overall"][k]) for k, v in up["overall"].items() if k != "labels")
        if family == "AD":
            for name, row in up["overall"]["group_averages"].items():
                assert all(_exact(v, mine["group_averages"][name][k]) for k, v in row.items()), name


def _bootstrap_inputs(phantom_results: Path, family: str) -> tuple[pl.DataFrame, dict[Any, Any], tuple[Any, ...]]:
    """The phantom runs' scored rows of a family, upstream's per-group dicts of them, and the bootstrap's inputs as
    the summary makes them (family, rows, store labels, store tasks, each run's aggregate rows)."""
    loaded = load(discover(phantom_results, families=[family])[0])
    stores = loaded.store_frame()
    frame = loaded.samples[family].join(stores.select("store", "label"), on="store", maintain_order="left")
    scored = frame.filter(pl.col("scored"))
    per = G.upstream_dicts(scored, family, ("label", "group"), lambda key: "newer")
    by_run: dict[str, dict[str, dict]] = {}
    for (label, group), d in per.items():
        by_run.setdefault(label, {})[group] = d
    types = dict(scored.select("group", "metric_type").unique().iter_rows())
    rows = {label: G.run_rows(family, groups, "newer", types) for label, groups in by_run.items()}
    return scored, per, (family, scored, dict(zip(stores["store"], stores["label"])),
                         dict(zip(stores["store"], stores["task"])), rows)


@pytest.mark.parametrize("family", ["detect", "TL", "AD"])
def test_replicates_drawn_in_blocks_are_the_one_block_replicates(phantom_results: Path, family: str) -> None:
    """The summary's bootstrap with its counts drawn a few resamples at a time (as for a task of a million samples)
    gives the replicates and intervals of the one-block computation, up to the last bits of the sums."""
    from medvision_bm.report.bootstrap import BootstrapSpec, Resampler, intervals_of

    scored, _per, args = _bootstrap_inputs(phantom_results, family)
    spec = BootstrapSpec(n_boot=300, seed=5)
    one = replicates(*args, Resampler(spec))
    n_max = int(scored.group_by("store").len()["len"].max())
    blocked = replicates(*args, Resampler(spec, max_cells=7 * n_max))  # 7 resamples per block, or fewer

    def close(a: np.ndarray, b: np.ndarray) -> bool:
        return a.shape == b.shape and np.allclose(a, b, rtol=1e-12, atol=1e-300, equal_nan=True)

    assert one.store.keys() == blocked.store.keys() and one.store
    assert all(close(one.store[k], blocked.store[k]) for k in one.store)
    for label, (keys, arr) in one.groups.items():
        assert blocked.groups[label][0] == keys and close(blocked.groups[label][1], arr)
    for label, aggs in one.rows.items():
        assert aggs.keys() == blocked.rows[label].keys()
        assert all(close(aggs[a], blocked.rows[label][a]) for a in aggs)
    ci_one, ci_blocked = intervals_of(one.store, 0.95), intervals_of(blocked.store, 0.95)
    assert all(close(ci_one[k][i], ci_blocked[k][i]) for k in ci_one for i in (0, 1))


@pytest.mark.parametrize("family", ["detect", "TL", "AD"])
def test_intervals_taken_inside_the_bootstrap_are_those_of_its_replicates(phantom_results: Path, family: str) -> None:
    """Given a level, the bootstrap hands back each store's and each run group's percentile intervals, bit for bit
    those of the replicates it hands back without one, and keeps only the asked columns of the store replicates."""
    from medvision_bm.report.bootstrap import BootstrapSpec, Resampler, intervals_of

    _scored, _per, inputs = _bootstrap_inputs(phantom_results, family)
    args = (*inputs, Resampler(BootstrapSpec(n_boot=200, seed=3)))
    whole = replicates(*args)
    taken = replicates(*args, 0.9, store_columns=[1])
    assert whole.store and taken.store_cis.keys() == whole.store.keys() and not taken.groups

    def same(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> bool:
        return all(x.tobytes() == y.tobytes() for x, y in zip(a, b))

    expected = intervals_of(whole.store, 0.9)
    assert all(same(taken.store_cis[k], expected[k]) for k in expected)
    assert all(taken.store[k].shape == (200, 1) and taken.store[k][:, 0].tobytes() == whole.store[k][:, 1].tobytes()
               for k in whole.store)
    assert taken.group_cis.keys() == whole.groups.keys()
    for label, (keys, arr) in whole.groups.items():
        groups = intervals_of({g: arr[:, i, :] for i, g in enumerate(keys)}, 0.9)
        assert taken.group_cis[label].keys() == groups.keys() and all(same(taken.group_cis[label][g], groups[g])
                                                                      for g in groups)
    assert all(a.tobytes() == taken.rows[label][agg].tobytes() for label, aggs in whole.rows.items()
               for agg, a in aggs.items())


class _UnitCounts:
    """One resample holding every sample once: the replicate is the point estimate."""

    n_boot = 1

    def blocks(self, n: int, stream: str, order: np.ndarray | None = None) -> list[np.ndarray]:
        return [np.ones((1, n))]


@pytest.mark.parametrize("family", ["detect", "TL", "AD"])
def test_bootstrap_engine_at_unit_counts_is_the_point_estimate(phantom_results: Path, family: str) -> None:
    """The resampling engine, given counts of one (the sample itself), gives back every point estimate: per task,
    per group and per aggregate row, so the intervals are intervals of the very statistic shown."""
    scored, per, args = _bootstrap_inputs(phantom_results, family)
    rows = args[4]
    reps = replicates(*args, _UnitCounts())
    names = [s.name for s in G.STATS[family]]
    checked = 0
    for label, rr in rows.items():
        for agg, values in rr.rows.items():
            for j, name in enumerate(names):
                assert _same(values[name], None if np.isnan(reps.rows[label][agg][0, j])
                             else float(reps.rows[label][agg][0, j])), (label, agg, name)
                checked += 1
        keys, arr = reps.groups[label]
        for gi, g in enumerate(keys):
            for j, name in enumerate(names):
                v = rr.per_group[g].get(name)
                assert _same(v, None if np.isnan(arr[0, gi, j]) else float(arr[0, gi, j])), (label, g, name)
    order = (list(um.aggregate_detection([um.DETECTION_FAILURE]) or {}) if family == "detect" else
             list(um.aggregate_tl([um.MeasureSample(False, math.nan, math.nan, math.nan, False)]) or {})
             if family == "TL" else list(um.aggregate_ad([um.MeasureSample(False, math.nan, math.nan, math.nan,
                                                                           False)]) or {}))
    assert all(list(d) == order for d in per.values())  # upstream's key order
    tasks = G.upstream_dicts(scored, family, ("store",), lambda key: "newer")
    for (sid,), d in tasks.items():
        for j, name in enumerate(names):
            v = float(reps.store[sid][0, j])
            assert _same(d.get(name), None if np.isnan(v) else v), (sid, name)
    assert checked


def test_group_keys_follow_the_rules_era() -> None:
    """Detection regroups with the paper-era map for rows scored by the paper rules (knee labels differ)."""
    newer, paper = cfg.label_map_regroup("newer"), cfg.label_map_regroup("paper")
    label = next(k for k in newer if k in paper and newer[k] != paper[k])
    frame = pl.DataFrame({"label_name": [label, label], "modality": ["MRI", "MRI"], "slice_dim": [0, 0],
                          "rules": ["newer", "paper"], "dataset": ["X", "X"], "metric_type": [None, None],
                          "metric_key": [None, None]},
                         schema={"label_name": pl.Utf8, "modality": pl.Utf8, "slice_dim": pl.Int64, "rules": pl.Utf8,
                                 "dataset": pl.Utf8, "metric_type": pl.Utf8, "metric_key": pl.Utf8})
    out, notes = G.add_group_keys(frame, "detect")
    assert out["group"].to_list() == [f"{newer[label]} @ MR (S)", f"{paper[label]} @ MR (S)"] and not notes
    unknown, notes = G.add_group_keys(frame.with_columns(pl.lit("no such label").alias("label_name")), "detect")
    assert unknown["group"].to_list()[0] == "no such label @ MR (S)" and "label_map_regroup" in notes[0]


def test_paper_protocol_runs_beside_current_ones(phantom_results: Path, phantom_dir: Path, phantom_lists: Path,
                                                 tmp_path: Path) -> None:
    """A model run under both protocols is two runs; the paper one is parsed with lastk-1 and aggregated with the
    paper-era rules (no nMAE, no Acc@IoU), and each run's row names its protocol and parser."""
    root = tmp_path / "results"
    for fam in ("TL", "detect"):
        src = phantom_results / f"MedVision-Phantom-{fam}" / "mean"
        shutil.copytree(src, root / f"MedVision-Phantom-{fam}" / "mean")
        outcomes = run_baseline("mean", fam, phantom_dir, root / f"MedVision-Phantom-{fam}", "--protocol", "paper",
                                lists=phantom_lists)
        assert all(o.state == "done" for o in outcomes), outcomes
    out = tmp_path / "out"
    summarize(root, out)
    board = {(r["label"], r["aggregate"]): r for r in read_csv(out / "leaderboard_TL.csv")}
    paper, current = board[("mean@paper", "overall")], board[("mean@current", "overall")]
    assert (paper["protocol"], paper["parser"], paper["rules"]) == ("paper", "lastk-1", "paper")
    assert (current["protocol"], current["parser"], current["rules"]) == ("current", "strict-1", "newer")
    assert paper["avgNMAE"] == "" and current["avgNMAE"] != ""  # nMAE is newer-only
    assert f(paper["avgMAE"]) == pytest.approx(f(current["avgMAE"]))  # the mean baseline answers the same numbers
    det = {(r["label"], r["aggregate"]): r for r in read_csv(out / "leaderboard_detect.csv")}
    assert det[("mean@paper", "all regions")]["Acc@IoU[0.50:0.95]"] == ""
    assert det[("mean@current", "all regions")]["Acc@IoU[0.50:0.95]"] != ""
    summary = json.loads((out / "summary.json").read_text())
    assert summary["protocols"] == ["current", "paper"] and summary["parsers"] == ["lastk-1", "strict-1"]
    assert summary["families"]["TL"]["upstream"]["mean@paper"]["rules"] == "paper"


def _upstream_loop_mean(values: list[float | None]) -> float:
    """A group mean as upstream's summarizers form it: ``sum_MAE = 0``, then ``sum_MAE += value`` for each finite
    value in file order, divided by their count (``_update_mae_counters`` / ``_calculate_final_metrics_TL_task``,
    YongchengYAO/MedVision src/medvision_bm/benchmark/summarize_TL_task.py @28f6c67)."""
    total: float = 0
    count = 0
    for v in values:
        if v is not None and math.isfinite(v):
            total += v
            count += 1
    return total / count if count else math.nan


@pytest.mark.parametrize("family", ["TL", "AD"])
def test_group_means_sum_in_upstreams_order(family: str) -> None:
    """Groups of thousands of values whose pairwise sum differs from the running one in the last bit: the per-group
    means are upstream's running sums, to the last bit, and follow the rows' order."""
    rng = np.random.default_rng(7)
    n = 6000
    group = rng.choice(["a", "b", "c"], n)
    cols: dict[str, Any] = {"label": ["run"] * n, "group": group.tolist(), "success": (rng.random(n) > 0.1).tolist()}
    for m in family_spec(family).error_metrics:
        v = rng.random(n) * rng.choice([1e-3, 1.0, 1e3], n)
        cols[m] = [float(x) if ok else None for x, ok in zip(v, cols["success"])]
    frame = pl.DataFrame(cols)
    per = G.upstream_dicts(frame, family, ("label", "group"), lambda key: "newer")
    moved = 0
    for (_, g), d in per.items():
        rows = frame.filter(pl.col("group") == g)
        for m, key in (("MAE", "avgMAE"), ("MRE", "avgMRE"), ("nMAE", "avgNMAE")):
            values = rows[m].to_list()
            assert d[key] == _upstream_loop_mean(values), (g, key)
            kept = [v for v in values if v is not None]
            moved += d[key] != math.fsum(kept) / len(kept) or d[key] != rows[m].sum() / len(kept)
        # the same rows in another order: another running sum, upstream's in that order
        back = G.upstream_dicts(rows.reverse(), family, ("label", "group"), lambda key: "newer")[("run", g)]
        assert back["avgMAE"] == _upstream_loop_mean(rows["MAE"].to_list()[::-1])
    assert moved  # the order matters on these inputs: a pairwise or exact sum would differ somewhere


@pytest.mark.parametrize("family", ["detect", "AD"])
def test_stores_of_one_run_and_task_add_to_one_group(phantom_results: Path, family: str) -> None:
    """Every run's stores taken as one run's: the stores of a task then add their parts to the same group, one
    after the other; at counts of one each group is the point estimate over all of them."""
    scored, _per, (fam, _rows, labels, tasks, _runs) = _bootstrap_inputs(phantom_results, family)
    scored = scored.with_columns(pl.lit("all").alias("label"))
    per = G.upstream_dicts(scored, family, ("label", "group"), lambda key: "newer")
    types = dict(scored.select("group", "metric_type").unique().iter_rows())
    groups = {g: d for (_label, g), d in per.items()}
    runs = {"all": G.run_rows(family, groups, "newer", types)}
    assert max(scored.group_by("task").agg(pl.col("store").n_unique())["store"]) > 1  # a task of several stores
    reps = replicates(fam, scored, dict.fromkeys(labels, "all"), tasks, runs, _UnitCounts())
    keys, arr = reps.groups["all"]
    names = [s.name for s in G.STATS[family]]
    assert sorted(keys) == sorted(groups)
    for gi, g in enumerate(keys):
        for j, name in enumerate(names):
            v = groups[g].get(name)
            assert _same(v, None if np.isnan(arr[0, gi, j]) else float(arr[0, gi, j])), (g, name)
