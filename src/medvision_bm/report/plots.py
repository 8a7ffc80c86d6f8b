"""PNG plots with matplotlib's Agg backend (no pyplot state): upstream's leaderboard rows as bars with CI whiskers,
per-task error distributions, detection IoU against box size, and ours against the published leaderboard. Each plot is a ``PlotJob`` of plain numbers, built
from the summary frames elsewhere, so that drawing needs nothing but matplotlib. Every axis or panel title names its
unit (mm, degrees, relative coordinates) or says the quantity is unitless."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from medvision_bm.io import atomic_path

#: Per family: the leaderboard panels drawn as bars, as (aggregate row, upstream statistic).
BAR_PANELS: dict[str, tuple[tuple[str, str], ...]] = {
    "detect": (("anatomy", "IoU"), ("T/L", "IoU"), ("all regions", "IoU"), ("all regions", "SuccessRate")),
    "TL": (("overall", "avgMRE"), ("overall", "avgMAE"), ("overall", "avgNMAE"), ("overall", "SuccessRate")),
    "AD": (("Distance", "avgMAE"), ("Angle", "avgMAE"), ("Distance", "avgMRE"), ("Angle", "avgMRE"),
           ("Distance", "SuccessRate"), ("Angle", "SuccessRate")),
}
#: The per-sample quantity whose distribution is plotted per task (upstream's per-sample metric names).
ERROR_METRIC: dict[str, str] = {"detect": "IoU", "TL": "MAE", "AD": "MAE"}
#: Percentiles drawn per run: whiskers, box and median.
ERROR_PERCENTILES: tuple[float, ...] = (0.05, 0.25, 0.5, 0.75, 0.95)
#: Task panels per row, and per image, of the error-distribution plots.
ERROR_COLUMNS = 4
ERROR_PANELS_PER_IMAGE = 16


@dataclass(frozen=True)
class PlotJob:
    """One PNG to draw: its kind ("bars", "errors", "box_size"), its path and the numbers it shows."""

    kind: str
    path: str
    title: str
    data: dict[str, Any]


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def _nan(values: Sequence[float | None]) -> list[float]:
    return [float("nan") if v is None else float(v) for v in values]


def draw_bars(job: PlotJob) -> None:
    """data: labels, and per metric name: {"title", "value", "lo", "hi"} lists in label order."""
    import numpy as np

    labels = job.data["labels"]
    panels = job.data["panels"]
    width, height = 1.0 + 3.6 * len(panels), max(2.0, 0.34 * len(labels) + 1.2)
    fig = _figure(width, height)
    y = np.arange(len(labels))
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, panel in zip(axes, panels):
        val = np.array(_nan(panel["value"]))
        lo, hi = np.array(_nan(panel["lo"])), np.array(_nan(panel["hi"]))
        err = np.clip(np.vstack([np.nan_to_num(val - lo), np.nan_to_num(hi - val)]), 0, None)
        ax.barh(y, np.nan_to_num(val), xerr=err, color="#4C78A8", ecolor="#222222", capsize=3)
        ax.set_title(panel["title"], fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(y, labels)
    axes[0].invert_yaxis()
    fig.suptitle(job.title, fontsize=10, y=1 - 0.08 / height, va="top")
    left = min(0.5, (0.3 + 0.075 * max((len(x) for x in labels), default=1)) / width)  # room for the run names
    fig.subplots_adjust(left=left, right=0.98, top=1 - 0.6 / height, bottom=0.45 / height, wspace=0.08)
    _save(fig, job.path, 90)


def draw_errors(job: PlotJob) -> None:
    """data: labels (the runs, top to bottom), xlabel, and panels: one per task, {"title", "q" (per run the
    ERROR_PERCENTILES values, None where the run lacks the task), "mean"}. Runs share the rows of every panel,
    so their names are drawn once per row of panels."""
    import numpy as np
    from matplotlib.ticker import MaxNLocator
    from matplotlib.transforms import blended_transform_factory

    labels, panels = job.data["labels"], job.data["panels"]
    cols = min(ERROR_COLUMNS, len(panels))
    rows = -(-len(panels) // cols)
    row_h = max(1.5, 0.17 * len(labels) + 0.8)
    height = rows * row_h + 0.6
    fig = _figure(1.6 + 2.8 * cols, height)
    axes = fig.subplots(rows, cols, squeeze=False)
    y = np.arange(len(labels))
    for i, ax in enumerate(axes.ravel()):
        if i >= len(panels):
            ax.set_visible(False)
            continue
        p = panels[i]
        q = np.array([_nan(v) if v is not None else [float("nan")] * len(ERROR_PERCENTILES) for v in p["q"]])
        ax.hlines(y, q[:, 0], q[:, 4], color="#333333", linewidth=1)
        ax.barh(y, q[:, 3] - q[:, 1], left=q[:, 1], height=0.6, color="#9ecae1", edgecolor="#333333")
        ax.vlines(q[:, 2], y - 0.3, y + 0.3, color="#d62728", linewidth=2)
        ax.plot(_nan(p["mean"]), y, "k.", markersize=3)
        ax.set_title(p["title"], fontsize=7)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(4))
        if i // cols == rows - 1 or i + cols >= len(panels):
            ax.set_xlabel(job.data["xlabel"], fontsize=7)
        ax.set_yticks([])  # run names as plain texts on the first column: far cheaper than shared tick labels
        ax.set_ylim(len(labels) - 0.5, -0.5)
        if i % cols == 0:
            names = blended_transform_factory(ax.transAxes, ax.transData)
            for yy, label in zip(y, labels):
                ax.text(-0.03, yy, label, transform=names, ha="right", va="center", fontsize=7)
    fig.suptitle(job.title, fontsize=9, y=1 - 0.08 / height, va="top")
    fig.subplots_adjust(left=1.5 / (1.6 + 2.8 * cols), right=0.98, top=1 - 0.55 / height, bottom=0.45 / height,
                        wspace=0.12, hspace=0.75 / row_h)
    _save(fig, job.path, 80)


def draw_box_size(job: PlotJob) -> None:
    """data: series: [{label, x, iou}], random: {x, iou}."""
    fig = _figure(6.4, 3.6)
    ax = fig.add_subplot(1, 1, 1)
    for s in job.data["series"]:
        ax.plot(_nan(s["x"]), _nan(s["iou"]), marker="o", label=s["label"])
    rnd = job.data["random"]
    ax.plot(_nan(rnd["x"]), _nan(rnd["iou"]), linestyle="--", color="grey", label="random box (expected)")
    ax.set_xscale("log")
    ax.set_xlabel("box area / image area, median of the group (unitless)")
    ax.set_ylabel("IoU (unitless; failures count 0)")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title(job.title, fontsize=10)
    fig.subplots_adjust(left=0.1, right=0.98, top=0.9, bottom=0.15)
    _save(fig, job.path, 90)


def draw_against(job: PlotJob) -> None:
    """data: panels: [{"title": statistic and unit, "points": [{label, x: published, y: ours, lo, hi}]}]; one panel per
    statistic, ours (y, with its CI as a bar) against the published value (x), and the y = x line. Axes are
    logarithmic where every value is positive and they span more than two decades (MAE and MRE do)."""
    import numpy as np

    panels = job.data["panels"]
    fig = _figure(0.6 + 3.4 * len(panels), 3.9)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    labels = sorted({p["label"] for panel in panels for p in panel["points"]})
    colours = {lb: f"C{i % 10}" for i, lb in enumerate(labels)}
    for ax, panel in zip(axes, panels):
        pts = panel["points"]
        x = np.array(_nan([p["x"] for p in pts]))
        y = np.array(_nan([p["y"] for p in pts]))
        lo = np.array(_nan([p["lo"] if p["lo"] is not None else p["y"] for p in pts]))
        hi = np.array(_nan([p["hi"] if p["hi"] is not None else p["y"] for p in pts]))
        for i, p in enumerate(pts):
            err = np.clip([[y[i] - lo[i]], [hi[i] - y[i]]], 0, None)
            ax.errorbar([x[i]], [y[i]], yerr=np.nan_to_num(err), fmt="o", color=colours[p["label"]], capsize=3,
                        markersize=4, label=p["label"])
        both = np.concatenate([x, lo, hi, y])
        both = both[np.isfinite(both)]
        lo_lim, hi_lim = (float(both.min()), float(both.max())) if both.size else (0.0, 1.0)
        log = both.size and lo_lim > 0 and hi_lim / lo_lim > 100
        if log:
            ax.set_xscale("log")
            ax.set_yscale("log")
        pad = (hi_lim - lo_lim) * 0.05 or 0.05
        line = [lo_lim / 1.5, hi_lim * 1.5] if log else [lo_lim - pad, hi_lim + pad]
        ax.plot(line, line, linestyle="--", color="grey", linewidth=1, label="y = x")
        ax.set_title(panel["title"], fontsize=9)
        ax.set_xlabel("published", fontsize=8)
        ax.set_ylabel("ours", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    handles, names = axes[0].get_legend_handles_labels()
    seen: dict[str, Any] = {}
    for h, n in zip(handles, names):
        seen.setdefault(n, h)
    if len(seen) <= 14:
        fig.legend(list(seen.values()), list(seen), fontsize=6, loc="lower center", ncol=min(4, len(seen)),
                   frameon=False)
    fig.suptitle(job.title, fontsize=9)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.86, bottom=0.3, wspace=0.35)
    _save(fig, job.path, 90)


def _save(fig, path, dpi: int) -> None:
    """A reader (the report page) sees the old PNG or the new one, never a partial one."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")


_DRAW = {"bars": draw_bars, "errors": draw_errors, "box_size": draw_box_size, "against": draw_against}


def draw(jobs: Sequence[PlotJob]) -> list[str]:
    """Draw the jobs; returns the paths written."""
    for job in jobs:
        _DRAW[job.kind](job)
    return [job.path for job in jobs]
