"""T/L by ground-truth major axis, held to upstream's rule (YongchengYAO/MedVision
script/analyze/tl-major-axis/analyze_TL_by_major_axis.py @45fa8e5: (lo, hi] bins at 2, 5, 10, 20, 50, 100 mm, every
sample above each edge, all samples, each pooled into summarize_TL_task's group dict) on generated samples."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from medvision_bm.report import tl_major_axis as mx

RNG = np.random.default_rng(3)


def _store(tmp: Path, sid: int, label: str, majors: list[float], scaled: dict[int, float]) -> SimpleNamespace:
    folder = tmp / f"store{sid}"
    folder.mkdir()
    rows = []
    for i, m in enumerate(majors):
        view = {"scaled_target": [scaled[i], 1.0]} if i in scaled else {}
        rows.append(json.dumps({"key": f"k{i}", "index": i, "doc": {"biometric_profile": {
            "metric_value_major_axis": [m], "metric_value_minor_axis": [1.0]}}, "view": view}))
    (folder / "docs.jsonl").write_text("\n".join(rows) + "\n")
    return SimpleNamespace(id=sid, ref=SimpleNamespace(folder=folder, label=label, family="TL"))


def _frame(sid: int, n: int) -> pl.DataFrame:
    success = RNG.random(n) > 0.2
    mae = np.where(success, RNG.uniform(0, 5, n), np.nan)
    mre = np.where(success, RNG.uniform(0, 1.2, n), np.nan)
    return pl.DataFrame({"store": [sid] * n, "key": [f"k{i}" for i in range(n)], "scored": [True] * n,
                         "rules": ["newer"] * n, "success": success.tolist(), "dataset": ["D"] * n,
                         "MAE": [None if math.isnan(v) else float(v) for v in mae],
                         "MRE": [None if math.isnan(v) else float(v) for v in mre],
                         "nMAE": [None if math.isnan(v) else float(v) / 300 for v in mae]})


def _expected(frame: pl.DataFrame, majors: np.ndarray, keep: np.ndarray) -> dict | None:
    """summarize_TL_task's group dict over the kept samples: means over the successes, SuccessRate over all."""
    sub = frame.filter(pl.Series(keep))
    if sub.height == 0:
        return None
    ok = sub.filter(pl.col("success"))
    return {"num_samples": sub.height, "SuccessRate": ok.height / sub.height,
            "avgMAE": float(ok["MAE"].mean()) if ok.height else math.nan,
            "MRE<0.2": float((ok["MRE"] < 0.2).sum()) / sub.height}


def test_bins_and_thresholds_are_upstreams(tmp_path: Path) -> None:
    n = 300
    majors = np.round(RNG.choice([1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 35.0, 50.0, 80.0, 100.0, 140.0], n), 1)
    scaled = {0: 60.0, 1: 4.0}  # a -CoT-scaledPS sample is binned by its scaled target
    store = _store(tmp_path, 7, "run-a", majors.tolist(), scaled)
    frame = _frame(7, n)
    effective = majors.copy()
    for i, v in scaled.items():
        effective[i] = v
    res = mx.by_major_axis(frame, [store], {7: "run-a"})["run-a"]
    assert [b["bin"] for b in res["per_bin"]] == ["<=2 mm", "2-5 mm", "5-10 mm", "10-20 mm", "20-50 mm", "50-100 mm",
                                                  ">100 mm"]
    bounds = [(None, 2), (2, 5), (5, 10), (10, 20), (20, 50), (50, 100), (100, None)]
    for entry, (lo, hi) in zip(res["per_bin"], bounds):
        keep = np.ones(n, bool)
        if lo is not None:
            keep &= effective > lo
        if hi is not None:
            keep &= effective <= hi  # (lo, hi]: an edge value goes to the lower bin
        exp = _expected(frame, effective, keep)
        got = entry["metrics"]
        assert got["num_samples"] == exp["num_samples"] and got["SuccessRate"] == pytest.approx(exp["SuccessRate"])
        assert got["avgMAE"] == pytest.approx(exp["avgMAE"]) and got["MRE<0.2"] == pytest.approx(exp["MRE<0.2"])
    for entry, t in zip(res["above_threshold"], (2, 5, 10, 20, 50, 100)):
        assert entry["bin"] == f">{t} mm" and entry["metrics"]["num_samples"] == int((effective > t).sum())
    assert res["all"]["num_samples"] == n and list(res["all"])[:5] == ["avgMAE", "avgMRE", "SuccessRate", "avgNMAE",
                                                                       "num_samples"]


def test_empty_bin_and_printout(tmp_path: Path) -> None:
    store = _store(tmp_path, 1, "m", [30.0, 40.0, 45.0], {})
    res = mx.by_major_axis(_frame(1, 3), [store], {1: "m"})
    assert res["m"]["per_bin"][0]["metrics"] is None  # no sample at or under 2 mm
    text = mx.text(res, {"m": ["D"]}, {"m": 1})
    lines = text.splitlines()
    assert lines[:4] == ["Model: m", "Path : m", "Files: 1 (D)", ""]
    assert lines[4] == "Per bin (GT major axis in (lo, hi] mm)"
    assert lines[5].startswith("Major axis     |  Samples |  Share |      MAE |      MRE |       SR |")
    assert lines[7] == "<=2 mm         |        0 |  0.000 | " + " | ".join(["       -"] * 7)
    assert any(line.startswith("20-50 mm       |        3 |  1.000 | ") for line in lines)
    view = mx.view(res)
    assert view.rows[0][:3] == ["m", "<=2 mm", "0"] and len(view.rows) == 7 + 6 + 1


def test_paper_rules_have_no_nmae(tmp_path: Path) -> None:
    """A run scored under the paper's rules has no avgNMAE in its group dict: the printout shows nan there."""
    store = _store(tmp_path, 2, "p", [30.0, 3.0], {})
    res = mx.by_major_axis(_frame(2, 2).with_columns(pl.lit("paper").alias("rules")), [store], {2: "p"})
    assert "avgNMAE" not in res["p"]["all"]
    row = next(line for line in mx.text(res, {}, {}).splitlines() if line.startswith("All "))
    assert row.split(" | ")[6].strip() == "nan"
