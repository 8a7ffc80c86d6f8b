"""The plots: what each PNG is drawn from, and that the files are real images."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from medvision_bm.report.bootstrap import BootstrapSpec
from medvision_bm.report.load import load
from medvision_bm.report.plots import BAR_METRICS, ERROR_PERCENTILES, draw
from medvision_bm.report.stores import discover
from medvision_bm.report.summarize import bar_job, error_jobs
from medvision_bm.report.tables import family_tables


def test_error_distribution_data_matches_the_samples(phantom_results: Path, tmp_path: Path) -> None:
    loaded = load(discover(phantom_results)[0])
    stores = loaded.store_frame()
    (job,) = error_jobs("TL", loaded.samples["TL"], stores, tmp_path)
    labels = job.data["labels"]
    assert labels == ["mean", "oracle", "random-box"]
    assert [p["title"] for p in job.data["panels"]] == sorted(p["title"] for p in job.data["panels"])
    for panel in job.data["panels"]:
        folder = next(phantom_results.glob(f"*/mean/{panel['title']}/*/parsed.jsonl"))
        errors = [r["metrics"]["mae"] for r in map(json.loads, folder.read_text().splitlines()) if r["success"]]
        expected = np.quantile(errors, ERROR_PERCENTILES)
        assert panel["q"][labels.index("mean")] == pytest.approx(list(expected))
        assert panel["mean"][labels.index("mean")] == pytest.approx(np.mean(errors))
        assert panel["q"][labels.index("oracle")] == [0.0] * len(ERROR_PERCENTILES)
    (detect,) = error_jobs("detect", loaded.samples["detect"], stores, tmp_path)
    oracle = detect.data["labels"].index("oracle")
    assert all(p["q"][oracle] == [1.0] * len(ERROR_PERCENTILES) for p in detect.data["panels"])


def test_report_plots_are_images(report_dir: Path) -> None:
    names = sorted(p.name for p in (report_dir / "plots").glob("*.png"))
    assert names == ["box_size_iou_detect.png", "errors_AD.png", "errors_TL.png", "errors_detect.png",
                     "leaderboard_AD.png", "leaderboard_TL.png", "leaderboard_detect.png"]
    for name in names:
        img = np.asarray(Image.open(report_dir / "plots" / name).convert("RGB"))
        assert img.shape[0] >= 150 and img.shape[1] >= 500
        assert len(np.unique(img.reshape(-1, 3), axis=0)) > 20  # drawn, not blank


def test_leaderboard_bars_are_drawn_from_the_leaderboard(phantom_results: Path, tmp_path: Path) -> None:
    loaded = load(discover(phantom_results, families=["TL"])[0])
    ft = family_tables("TL", loaded.samples["TL"], loaded.docs["TL"], loaded.store_frame(), BootstrapSpec(200), 20)
    job = bar_job(ft, tmp_path / "bars.png", 0.95)
    assert job.data["labels"] == ft.leaderboard["label"].to_list() and job.data["labels"][0] == "oracle"
    assert [p["title"] for p in job.data["panels"]] == ["MRE", "MAE", "Success"]
    for panel, metric in zip(job.data["panels"], BAR_METRICS["TL"]):
        assert panel["value"] == ft.leaderboard[metric].to_list()
        assert all(lo <= v <= hi for lo, v, hi in zip(panel["lo"], panel["value"], panel["hi"]))
    assert draw([job]) == [str(tmp_path / "bars.png")]
    assert Image.open(tmp_path / "bars.png").size[0] >= 500
