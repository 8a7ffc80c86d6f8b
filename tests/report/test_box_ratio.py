"""Detection by box-to-image ratio, held to upstream's rules (YongchengYAO/MedVision
src/medvision_bm/benchmark/analyze_detection_task_boxsize.py and analyze_detection_task_boxsize_vs_random.py:
``group_by_boxImgRatio``'s 5% bins, ``_random_bboxes``; skills/medvision/sub-skills/analysis/references/
detection-target-size.md @39dd6bf), and as summarize writes it for the phantom baselines."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from medvision_bm.report import box_ratio as br


def test_bins_are_upstreams() -> None:
    names = br.bin_names()
    assert len(names) == 19 and names[0] == "Box/Image < 5%" and names[1] == "5% <= Box/Image < 10%"
    assert names[17] == "85% <= Box/Image < 90%" and names[18] == "Box/Image >= 90%"
    assert br.label_bin_names()[:2] == ["<0.05", "0.05~0.10"] and br.label_bin_names()[-1] == ">=0.90"
    ratios = pl.DataFrame({"r": [0.0, 0.0499, 0.05, 0.1, 0.4499, 0.8999, 0.9, 1.0]})
    got = ratios.select(br.bin_index(pl.col("r")))["r"].to_list()
    assert got == [0, 0, 1, 2, 8, 17, 18, 18]  # a ratio at an edge belongs to the bin above it (``< edge``)


def test_random_boxes_follow_upstreams_rule() -> None:
    """Whole-pixel widths 1..W, heights 1..H and a corner where the box fits: on a 4 x 4 image against the whole
    image, precision is 1, recall is the box's share, whose mean is (5/8)^2."""
    full = np.array([[0.0, 0.0, 1.0, 1.0]])
    m = br.random_metrics(full, np.array([[4, 4]]), 40_000, 1024)[0]
    mae, iou, f1, precision, recall = m
    assert precision == pytest.approx(1.0) and iou == pytest.approx(recall) and f1 >= iou and mae > 0
    assert recall == pytest.approx((5 / 8) ** 2, abs=0.01)
    small = br.random_metrics(np.array([[0.0, 0.0, 0.25, 0.25]]), np.array([[4, 4]]), 40_000, 1024)[0]
    assert small[1] < iou  # a small target gets less overlap for free
    again = br.random_metrics(full, np.array([[4, 4]]), 100, 1024)
    assert np.array_equal(again, br.random_metrics(full, np.array([[4, 4]]), 100, 1024))  # seeded


def _per_target(targets: np.ndarray, image_hw: np.ndarray, draws: int, seed: int) -> np.ndarray:
    """The random baseline one target at a time, as upstream's loop computes it."""
    rng = np.random.default_rng(seed)
    out = np.empty((len(targets), 5))
    for i, (t, (h, w)) in enumerate(zip(targets, image_hw)):
        h, w = max(int(h), 1), max(int(w), 1)
        bw = rng.integers(1, w + 1, draws)
        bh = rng.integers(1, h + 1, draws)
        x0 = rng.integers(0, w - bw + 1)
        y0 = rng.integers(0, h - bh + 1)
        p = np.stack([x0 / w, y0 / h, (x0 + bw) / w, (y0 + bh) / h], axis=1)
        g = np.asarray(t, dtype=np.float64)
        ix = np.clip(np.minimum(p[:, 2], g[2]) - np.maximum(p[:, 0], g[0]), 0, None)
        iy = np.clip(np.minimum(p[:, 3], g[3]) - np.maximum(p[:, 1], g[1]), 0, None)
        inter = ix * iy
        area_p = (p[:, 2] - p[:, 0]) * (p[:, 3] - p[:, 1])
        area_g = abs(g[2] - g[0]) * abs(g[3] - g[1])
        with np.errstate(invalid="ignore", divide="ignore"):
            iou = np.where(area_p + area_g - inter > 0, inter / (area_p + area_g - inter), 0.0)
            f1 = 2 * inter / (area_p + area_g)
            precision = inter / area_p
            recall = inter / area_g if area_g > 0 else np.zeros(draws)
        out[i] = [np.abs(p - g).mean(axis=1).mean(), iou.mean(), f1.mean(), precision.mean(), recall.mean()]
    return out


@pytest.mark.parametrize("chunk", [4096, 3])
def test_random_boxes_of_all_targets_at_once_are_the_per_target_ones_to_the_bit(chunk: int, monkeypatch) -> None:
    """The baseline computed for many targets at once draws the same boxes in the same order and gives each
    target's means to the last bit: degenerate and flipped boxes, tiny and missing image sizes too, and targets
    split over several chunks (the generator carried across them)."""
    monkeypatch.setattr(br, "RANDOM_CHUNK_TARGETS", chunk)
    rng = np.random.default_rng(5)
    for n in (0, 1, 7, 40):
        targets = rng.random((n, 4))
        targets[:, 2:] = np.maximum(targets[:, 2:], targets[:, :2])
        if n >= 3:
            targets[:3] = [[0.2, 0.2, 0.2, 0.5], [0.9, 0.1, 0.1, 0.3], [0.0, 0.0, 1.0, 1.0]]
        hw = rng.integers(0, 600, (n, 2))
        got, want = br.random_metrics(targets, hw, 100, 1024), _per_target(targets, hw, 100, 1024)
        assert got.shape == want.shape and np.array_equal(got.view(np.uint64), want.view(np.uint64))


def test_report_writes_the_bins_and_the_baseline(report_dir: Path) -> None:
    summary = json.loads((report_dir / "summary.json").read_text())["detect_by_box_ratio"]
    runs, random = summary["runs"], summary["random"]
    assert {"oracle", "mean", "random-box"} <= set(runs)
    oracle = runs["oracle"]
    assert set(oracle) <= set(br.bin_names()) and all(d["IoU"] > 0.99 for d in oracle.values())
    assert set(random) == set(oracle)  # the baseline has every bin the targets fall in
    assert all(0 < d["IoU"] < 0.9 for d in random.values())
    folder = report_dir / "upstream" / "Detect"
    per_bin = json.loads((folder / "oracle" / "parsed" / br.METRICS_FILE).read_text())
    assert per_bin == oracle and sum(d["num_samples"] for d in per_bin.values()) > 0
    rows = list(csv.DictReader(io.StringIO((folder / "oracle" / "parsed" / br.LABEL_FILE).read_text())))
    assert rows and list(rows[0]) == ["box_img_group", "label", "IoU", "sample_size", "F1", "Precision", "Recall"]
    assert sum(int(r["sample_size"]) for r in rows) == sum(d["num_samples"] for d in per_bin.values())
    assert json.loads((folder / br.RANDOM_MODEL / br.METRICS_FILE).read_text()) == random
    assert "Detection by box-to-image ratio" in (report_dir / "index.html").read_text()
