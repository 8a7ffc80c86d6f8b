"""Every plot is laid out so each title, label and unit reads: no text outside the image, no two texts
on each other, no legend over the data, and a run without a value says so instead of leaving a gap.

The figures are measured as matplotlib draws them (text extents from the renderer), on the shapes that broke the
first layout: A/D error panels with two long task names side by side, six leaderboard panels, long run names, log
ticks, a legend in the corner where the oracle's points are, and a run whose every answer failed."""

from __future__ import annotations

from itertools import combinations

import pytest

from medvision_bm.report.plots import FIGURES, PlotJob

LONG_RUNS = ["oracle", "random-box", "mean", "Qwen2.5-VL-72B-Instruct-AWQ@3fa9c1", "all-failed-run"]


def _texts(fig):
    """Every text matplotlib drew, with its extent in pixels."""
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    drawn = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for axis in (ax.xaxis, ax.yaxis):
            for tick in axis._update_ticks():  # the ticks inside the view: the ones drawn
                drawn += [tick.label1, tick.label2]
            drawn.append(axis.label)
        drawn += [ax.title, ax._left_title, ax._right_title, *ax.texts]
        if ax.get_legend() is not None:
            drawn += ax.get_legend().get_texts()
    for legend in fig.legends:
        drawn += legend.get_texts()
    drawn += [t for t in fig.texts if isinstance(t, Text)]  # the suptitle among them
    out, seen = [], set()
    for t in drawn:
        if id(t) not in seen and t.get_visible() and t.get_text().strip():
            seen.add(id(t))
            out.append((t.get_text(), t.get_window_extent(renderer)))
    return out, renderer


def layout_problems(fig) -> list[str]:
    texts, renderer = _texts(fig)
    box = fig.bbox
    problems = []
    for text, ext in texts:
        if ext.x0 < box.x0 - 0.5 or ext.x1 > box.x1 + 0.5 or ext.y0 < box.y0 - 0.5 or ext.y1 > box.y1 + 0.5:
            problems.append(f"cut off by the image edge: {text!r}")
    for (a, ea), (b, eb) in combinations(texts, 2):
        ea_in, eb_in = ea.expanded(0.98, 0.9), eb.expanded(0.98, 0.9)  # glyph boxes touch at their padding
        if ea_in.overlaps(eb_in):
            problems.append(f"texts on each other: {a!r} / {b!r}")
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    for legend in legends:
        ext = legend.get_window_extent(renderer)
        for ax in fig.axes:
            for line in ax.lines:
                for x, y in line.get_transform().transform(line.get_xydata()):
                    if ext.contains(x, y):
                        problems.append(f"the legend covers a point of {line.get_label()!r}")
                        break
    return problems


def _bars_job() -> PlotJob:
    panels = []
    for agg, stat, unit in (("Distance", "avgMAE", "mm"), ("Angle", "avgMAE", "degrees"),
                            ("Distance", "avgMRE", "unitless"), ("Angle", "avgMRE", "unitless"),
                            ("Distance", "SuccessRate", "unitless"), ("Angle", "SuccessRate", "unitless")):
        ok = stat == "SuccessRate"
        panels.append({"title": f"{stat} ({unit}), {agg}",
                       "value": [1.0 if ok else 0.0, 0.4, 0.6, 0.55, 0.0 if ok else None],
                       "lo": [1.0 if ok else 0.0, 0.3, 0.5, 0.5, 0.0 if ok else None],
                       "hi": [1.0 if ok else 0.0, 0.5, 0.7, 0.6, 0.0 if ok else None]})
    return PlotJob("bars", "unused.png", "Angle/distance (AD): upstream's rows across label groups, 95% bootstrap CI",
                   {"labels": LONG_RUNS, "panels": panels})


def _errors_job(n_tasks: int) -> PlotJob:
    names = ["PhantomXR_BiometricsFromLandmarks_Angle_Task01_Sagittal [degrees]",
             "PhantomXR_BiometricsFromLandmarks_Distance_Task01_Sagittal [mm]",
             "PhantomFetal_BiometricsFromLandmarks_Task01_Coronal [mm]",
             "PhantomCT_TumorLesionSize_Task02_Sagittal-CoT [mm]"]
    panels = [{"title": names[i % len(names)],
               "q": [[0.0] * 5, [1.0, 2.0, 3.0, 40.0, 62.5], [30.0, 31.0, 32.0, 33.0, 35.0], None, None],
               "mean": [0.0, 12.0, 32.0, None, None]} for i in range(n_tasks)]
    return PlotJob("errors", "unused.png", "Angle/distance (AD): per-sample absolute error of successful samples per "
                   "run and task (5–95 %, 25–75 %, median, mean)",
                   {"labels": LONG_RUNS, "panels": panels,
                    "xlabel": "absolute error (unit in each panel's title; lower is better)"})


def _box_size_job() -> PlotJob:
    x = [0.015, 0.04, 0.065, 0.14, 0.28]
    series = [{"label": "mean", "x": x, "iou": [0.02, 0.25, 0.27, 0.36, 0.33]},
              {"label": "oracle", "x": x, "iou": [1.0] * 5},
              {"label": "random-box", "x": x, "iou": [0.02, 0.04, 0.07, 0.1, 0.07]}]
    return PlotJob("box_size", "unused.png", "Detection: IoU against box size",
                   {"series": series, "random": {"x": x, "iou": [0.02, 0.045, 0.07, 0.1, 0.11]}})


@pytest.mark.parametrize("job", [_bars_job(), _errors_job(2), _errors_job(7), _box_size_job()],
                         ids=["bars-AD", "errors-AD-2", "errors-7", "box-size"])
def test_every_text_reads(job):
    fig = FIGURES[job.kind](job)
    assert layout_problems(fig) == []


def test_a_run_without_a_value_says_so():
    fig = FIGURES["bars"](_bars_job())
    texts = [t for t, _ in _texts(fig)[0]]
    assert texts.count("no value") == 4  # the all-failed run in the four panels whose statistic needs a success


def test_bars_wrap_into_rows_that_fit_a_page():
    fig = FIGURES["bars"](_bars_job())
    width_px = fig.get_figwidth() * 90  # the dpi the report writes them at
    assert width_px <= 1300  # the page (1280 px) shows it at its own size, so its 10-point text reads
