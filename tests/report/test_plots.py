"""The plots: what each PNG is drawn from, that every one names its units, and that the files are real images."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from medvision_bm.report.bootstrap import BootstrapSpec
from medvision_bm.report.load import load
from medvision_bm.report.plot_jobs import bar_job, error_jobs
from medvision_bm.report.plots import ERROR_PERCENTILES, FIGURES, draw
from medvision_bm.report.tables import family_tables
from medvision_bm.store.discovery import discover
from medvision_bm.tasks.families import family_spec
from phantom_runs import run_baseline
from scripted import NothingParses


def test_error_distribution_data_matches_the_samples(phantom_results: Path, tmp_path: Path) -> None:
    loaded = load(discover(phantom_results)[0])
    stores = loaded.store_frame()
    (job,) = error_jobs("TL", loaded.samples["TL"], stores, tmp_path)
    labels = job.data["labels"]
    assert labels == ["mean", "oracle", "random-box"]
    assert "(mm" in job.data["xlabel"]
    titles = [p["title"] for p in job.data["panels"]]
    assert titles == sorted(titles) and all(t.endswith("[mm]") for t in titles)
    for panel in job.data["panels"]:
        task = panel["title"].split(" [")[0]
        folder = next(phantom_results.glob(f"*/mean/{task}/*/parsed.jsonl"))
        errors = [r["metrics"]["MAE"] for r in map(json.loads, folder.read_text().splitlines()) if r["success"]]
        expected = np.quantile(errors, ERROR_PERCENTILES)
        assert panel["q"][labels.index("mean")] == pytest.approx(list(expected))
        assert panel["mean"][labels.index("mean")] == pytest.approx(np.mean(errors))
        assert panel["q"][labels.index("oracle")] == [0.0] * len(ERROR_PERCENTILES)
    (detect,) = error_jobs("detect", loaded.samples["detect"], stores, tmp_path)
    oracle = detect.data["labels"].index("oracle")
    assert all(p["q"][oracle] == pytest.approx([1.0] * len(ERROR_PERCENTILES), abs=1e-6)
               for p in detect.data["panels"])
    (ad,) = error_jobs("AD", loaded.samples["AD"], stores, tmp_path)
    units = {p["title"].split(" [")[0]: p["title"].split(" [")[1] for p in ad.data["panels"]}
    assert all(u == ("degrees]" if "_Angle_" in t else "mm]") for t, u in units.items())


def test_report_plots_are_images(report_dir: Path) -> None:
    names = sorted(p.name for p in (report_dir / "plots").glob("*.png"))
    assert names == ["box_size_iou_detect.png", "cda_SNA.png", "errors_AD.png", "errors_TL.png", "errors_detect.png",
                     "leaderboard_AD.png", "leaderboard_TL.png", "leaderboard_detect.png"]
    for name in names:
        img = np.asarray(Image.open(report_dir / "plots" / name).convert("RGB"))
        assert img.shape[0] >= 150 and img.shape[1] >= 500
        assert len(np.unique(img.reshape(-1, 3), axis=0)) > 20  # drawn, not blank


def test_leaderboard_bars_are_drawn_from_the_leaderboard(phantom_results: Path, tmp_path: Path) -> None:
    loaded = load(discover(phantom_results, families=["TL", "AD"])[0])
    ft = family_tables("TL", loaded.samples["TL"], loaded.store_frame(), BootstrapSpec(200), 20)
    job = bar_job(ft, tmp_path / "bars.png", 0.95)
    assert job is not None
    board = ft.leaderboard.filter(ft.leaderboard["aggregate"] == "overall").sort("rank")
    assert job.data["labels"] == board["label"].to_list() and job.data["labels"][0] == "oracle"
    assert [p["title"] for p in job.data["panels"]] == ["avgMRE (unitless), overall", "avgMAE (mm), overall",
                                                        "avgNMAE (unitless), overall", "SuccessRate (unitless), overall"]
    for panel, (_, stat) in zip(job.data["panels"], family_spec("TL").bar_panels):
        assert panel["value"] == board[stat].to_list()
        assert all(lo <= v <= hi for lo, v, hi in zip(panel["lo"], panel["value"], panel["hi"]))
    assert draw([job]) == [str(tmp_path / "bars.png")]
    assert Image.open(tmp_path / "bars.png").size[0] >= 500
    # A/D: distances in mm and angles in degrees are separate panels
    ad = bar_job(family_tables("AD", loaded.samples["AD"], loaded.store_frame(), BootstrapSpec(200), 20),
                 tmp_path / "ad.png", 0.95)
    titles = [p["title"] for p in ad.data["panels"]]
    assert "avgMAE (mm), Distance" in titles and "avgMAE (degrees), Angle" in titles


def test_every_run_is_marked_on_the_error_plots(phantom_dir: Path, phantom_lists: Path, results_copy: Path,
                                                tmp_path: Path) -> None:
    """A run with no parsed answer is named on the plot with why it is excluded (it used to be left out without a
    word); a perfect run, all its errors zero, is drawn as a mark inside the axes, not a line on their frame."""
    out = run_baseline("oracle", "TL", phantom_dir, results_copy / "MedVision-Phantom-TL", "--model_name",
                       "nothing-parses", lists=phantom_lists, backend=lambda cfg, data: NothingParses())
    assert all(o.state == "done" for o in out)
    loaded = load(discover(results_copy, families=["TL"])[0])
    (job,) = error_jobs("TL", loaded.samples["TL"], loaded.store_frame(), tmp_path)
    labels = job.data["labels"]
    assert labels == ["mean", "nothing-parses", "oracle", "random-box"]
    failed, oracle = labels.index("nothing-parses"), labels.index("oracle")
    for panel in job.data["panels"]:
        task = panel["title"].split(" [")[0]
        lines = next(results_copy.glob(f"*/nothing-parses/{task}/*/parsed.jsonl")).read_text().splitlines()
        assert panel["q"][failed] is None
        assert panel["excluded"][failed] == f"excluded: 0 of {len(lines)} succeeded ({len(lines)} parse failed)"
        assert panel["excluded"][oracle] is None and panel["q"][oracle] == [0.0] * len(ERROR_PERCENTILES)
    fig = FIGURES["errors"](job)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == len(job.data["panels"])
    for ax, panel in zip(axes, job.data["panels"]):
        texts = [t.get_text() for t in ax.texts]
        assert panel["excluded"][failed] in texts
        (mark,) = [ln for ln in ax.lines if ln.get_gid() == "no-spread"]
        xs, ys = mark.get_data()
        assert list(ys) == [oracle] and list(xs) == [0.0]
        lo, hi = ax.get_xlim()
        assert lo < 0.0 < hi and (hi - lo) * 0.05 < 0.0 - lo, "the perfect run sits inside the axes, off the frame"
    assert [t.get_text() for t in axes[0].get_yticklabels()] == labels
