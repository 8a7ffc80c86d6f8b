"""PNG plots with matplotlib's Agg backend (no pyplot state): upstream's leaderboard rows as bars with CI whiskers,
per-task error distributions, detection IoU against box size, ours against the published leaderboard, and the
confusion matrices of clinical decision agreement. Each plot is a ``PlotJob`` of plain numbers, built
from the summary frames elsewhere, so that drawing needs nothing but matplotlib. Every axis or panel title names its
unit (mm, degrees, relative coordinates) or says the quantity is unitless."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from medvision_bm.io import atomic_path

if TYPE_CHECKING:  # matplotlib loads only where a picture is drawn
    from matplotlib.artist import Artist
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

#: Percentiles drawn per run: whiskers, box and median.
ERROR_PERCENTILES: tuple[float, ...] = (0.05, 0.25, 0.5, 0.75, 0.95)
#: Task panels per row, and per image, of the error-distribution plots.
ERROR_COLUMNS = 4
ERROR_PANELS_PER_IMAGE = 16
#: Confusion-matrix panels (runs) per row of a CDA picture.
CONFUSION_COLUMNS = 4


@dataclass(frozen=True)
class PlotJob:
    """One PNG to draw: its kind ("bars", "errors", "box_size", "against", "confusion"), its path and the numbers it shows."""

    kind: str
    path: str
    title: str
    data: dict[str, Any]


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


#: Most bar panels side by side; more wrap onto further rows (a row of six made a 2,000-pixel-wide image that the
#: page shrinks until no label reads).
BAR_COLUMNS = 3


def _figure(width: float, height: float) -> Figure:
    """A figure whose layout engine keeps every title, label and legend inside it and off each other."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def wrap(text: str, width_in: float, fontsize: float) -> str:
    """``text`` broken into lines that fit ``width_in`` inches at ``fontsize`` points, at spaces and underscores
    (task names are long words of ``_``-joined parts)."""
    per_line = max(8, int(width_in * 72 / (0.6 * fontsize)))
    lines: list[str] = []
    line = ""
    for token in re.findall(r"[^ _]+_?|\s+", text):
        if line and len(line) + len(token.rstrip()) > per_line:
            lines.append(line.rstrip())
            line = token.lstrip()
        else:
            line += token
    if line.strip():
        lines.append(line.rstrip())
    return "\n".join(lines)


def _nan(values: Sequence[float | None]) -> list[float]:
    return [float("nan") if v is None else float(v) for v in values]


def bars_figure(job: PlotJob) -> Figure:
    """data: labels, and panels: {"title", "value", "lo", "hi"} lists in label order. A run without a value in a
    panel (every answer failed, say) is written there as "no value" instead of leaving a silent gap."""
    import numpy as np

    labels = job.data["labels"]
    panels = job.data["panels"]
    cols = min(BAR_COLUMNS, len(panels))
    rows = -(-len(panels) // cols)
    name_in = 0.3 + 0.075 * max((len(x) for x in labels), default=1)
    panel_h = max(1.4, 0.3 * len(labels) + 0.9)
    fig = _figure(name_in + 3.4 * cols, rows * panel_h + 0.5)
    axes = fig.subplots(rows, cols, squeeze=False)
    y = np.arange(len(labels))
    for i, ax in enumerate(axes.ravel()):
        if i >= len(panels):
            ax.set_visible(False)
            continue
        panel = panels[i]
        val = np.array(_nan(panel["value"]))
        lo, hi = np.array(_nan(panel["lo"])), np.array(_nan(panel["hi"]))
        err = np.clip(np.vstack([np.nan_to_num(val - lo), np.nan_to_num(hi - val)]), 0, None)
        ax.barh(y, np.nan_to_num(val), xerr=err, color="#4C78A8", ecolor="#222222", capsize=3)
        for yy in y[np.isnan(val)]:
            ax.text(0.02, yy, "no value", transform=ax.get_yaxis_transform(), va="center", fontsize=8,
                    color="#8a1c1c", style="italic")
        ax.set_title(wrap(panel["title"], 3.2, 10), fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        ax.set_yticks(y, labels if i % cols == 0 else [""] * len(labels))
        ax.set_ylim(len(labels) - 0.5, -0.5)
        ax.xaxis.set_major_locator(_ticks(4))
    fig.suptitle(wrap(job.title, name_in + 3.4 * cols, 10), fontsize=10)
    return fig


def _ticks(n: int) -> MaxNLocator:
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(n)


def draw_bars(job: PlotJob) -> None:
    _save(bars_figure(job), job.path, 90)


def errors_figure(job: PlotJob) -> Figure:
    """data: labels (the runs, top to bottom), xlabel, and panels: one per task, {"title", "q" (per run the
    ERROR_PERCENTILES values, None where the run has no successful sample there), "mean", "excluded" (per run the
    reason it has no distribution, written in its row; None where it has one)}. Runs share the rows of every panel,
    so their names are drawn once per row of panels; a run whose samples all share one value is drawn as a diamond
    inside the padded axis, never as a hairline on its frame."""
    import numpy as np

    labels, panels = job.data["labels"], job.data["panels"]
    cols = min(ERROR_COLUMNS, len(panels))
    rows = -(-len(panels) // cols)
    name_in = 0.3 + 0.065 * max((len(x) for x in labels), default=1)
    panel_w = 2.9
    row_h = max(1.9, 0.17 * len(labels) + 1.3)
    fig = _figure(name_in + panel_w * cols, rows * row_h + 0.8)
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
        flat = np.isfinite(q[:, 2]) & (q[:, 4] - q[:, 0] <= 1e-9 * np.maximum(1.0, np.abs(q[:, 2])))
        ax.plot(q[flat, 2], y[flat], "D", color="#d62728", markersize=5, markeredgecolor="#333333",
                gid="no-spread")  # every sample the same value (a perfect run): a mark, not a hairline
        excluded = p.get("excluded") or [None] * len(labels)
        for yy in y[np.isnan(q[:, 2])]:  # no successful sample of that run in the task: say why
            ax.text(0.02, yy, excluded[yy] or "no value", transform=ax.get_yaxis_transform(), va="center",
                    fontsize=6, color="#8a1c1c", style="italic")
        ax.set_xlim(*_padded(np.concatenate([q.ravel(), _nan(p["mean"])])))
        ax.set_title(wrap(p["title"], panel_w - 0.2, 7), fontsize=7)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_locator(_ticks(4))
        if i // cols == rows - 1 or i + cols >= len(panels):
            ax.set_xlabel(wrap(job.data["xlabel"], panel_w - 0.2, 7), fontsize=7)
        ax.set_yticks(y, labels if i % cols == 0 else [""] * len(labels))
        ax.set_ylim(len(labels) - 0.5, -0.5)
    fig.suptitle(wrap(job.title, name_in + panel_w * cols - 0.2, 9), fontsize=9)
    return fig


def _padded(values: Iterable[float]) -> tuple[float, float]:
    """Axis limits 8% wider than the finite values (0.5 either side when they are all equal), so that a run at
    the edge, a perfect run's zero error included, is drawn inside the axes rather than on their frame."""
    finite = [float(v) for v in values if v == v and abs(v) != float("inf")]
    if not finite:
        return 0.0, 1.0
    lo, hi = min(finite), max(finite)
    pad = (hi - lo) * 0.08 or max(abs(hi) * 0.08, 0.5)
    return lo - pad, hi + pad


def draw_errors(job: PlotJob) -> None:
    _save(errors_figure(job), job.path, 80)


def box_size_figure(job: PlotJob) -> Figure:
    """data: series: [{label, x, iou}], random: {x, iou}. The legend sits beside the axes, never over the data."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fig = _figure(7.6, 3.8)
    ax = fig.add_subplot(1, 1, 1)
    for s in job.data["series"]:
        ax.plot(_nan(s["x"]), _nan(s["iou"]), marker="o", label=s["label"])
    rnd = job.data["random"]
    ax.plot(_nan(rnd["x"]), _nan(rnd["iou"]), linestyle="--", color="grey", label="random box (expected)")
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0), numticks=12))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))  # 0.02, 0.05, 0.1: short, plain
    ax.xaxis.set_minor_formatter(NullFormatter())  # the minor labels (2x10^-2, 3x10^-2 ...) ran into each other
    ax.set_xlabel("box area / image area, median of the group (unitless)")
    ax.set_ylabel("IoU (unitless; failures count 0)")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    fig.legend(fontsize=7, loc="outside right upper")
    ax.set_title(job.title, fontsize=10)
    return fig


def draw_box_size(job: PlotJob) -> None:
    _save(box_size_figure(job), job.path, 90)


def against_figure(job: PlotJob) -> Figure:
    """data: panels: [{"title": statistic and unit, "points": [{label, x: published, y: ours, lo, hi, comparable}]}];
    one panel per statistic, ours (y, with its CI as a bar) against the published value (x), and the y = x line; a
    point that is not comparable is drawn hollow (its legend entry says so). Axes are logarithmic where every value
    is positive and they span more than two decades (MAE and MRE do)."""
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
            hollow = not p.get("comparable", True)
            ax.errorbar([x[i]], [y[i]], yerr=np.nan_to_num(err), fmt="o", color=colours[p["label"]], capsize=3,
                        markersize=5 if hollow else 4, mfc="none" if hollow else colours[p["label"]],
                        label=p["label"], gid="not-comparable" if hollow else "comparable")
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
    seen: dict[str, Artist] = {}
    for h, n in zip(handles, names):
        seen.setdefault(n, h)
    if len(seen) <= 14:
        fig.legend(list(seen.values()), list(seen), fontsize=6, loc="outside lower center", ncol=min(4, len(seen)),
                   frameon=False)
    hollow = any(not p.get("comparable", True) for panel in panels for p in panel["points"])
    fig.suptitle(job.title + ("\nhollow: not comparable (no verdict; see the table for why)" if hollow else ""),
                 fontsize=9)
    return fig


def draw_against(job: PlotJob) -> None:
    _save(against_figure(job), job.path, 90)


def confusion_figure(job: PlotJob) -> Figure:
    """data: labels (the categories in order), xlabel, ylabel, panels: [{"title", "matrix" (counts, reference by
    row, prediction by column)}]; one panel per run, each cell shaded by its share of the row and printed as a
    count."""
    import numpy as np

    labels, panels = job.data["labels"], job.data["panels"]
    cols = min(CONFUSION_COLUMNS, len(panels))
    rows = -(-len(panels) // cols)
    side = 1.0 + 0.55 * len(labels)
    fig = _figure(side * cols + 0.6, side * rows + 0.8)
    axes = fig.subplots(rows, cols, squeeze=False)
    short = [wrap(lb, 1.2, 6) for lb in labels]
    for i, ax in enumerate(axes.ravel()):
        if i >= len(panels):
            ax.set_visible(False)
            continue
        m = np.asarray(panels[i]["matrix"], dtype=float)
        totals = m.sum(axis=1, keepdims=True)
        share = np.divide(m, totals, out=np.zeros_like(m), where=totals > 0)
        ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
        for (r, c), v in np.ndenumerate(m):
            ax.text(c, r, f"{int(v)}", ha="center", va="center", fontsize=7,
                    color="white" if share[r, c] > 0.6 else "black")
        ax.set_xticks(range(len(labels)), short, fontsize=6, rotation=30, ha="right")
        ax.set_yticks(range(len(labels)), short, fontsize=6)
        ax.set_title(wrap(panels[i]["title"], side - 0.2, 7), fontsize=7)
        if i % cols == 0:
            ax.set_ylabel(job.data["ylabel"], fontsize=7)
        if i // cols == rows - 1 or i + cols >= len(panels):
            ax.set_xlabel(job.data["xlabel"], fontsize=7)
    fig.suptitle(wrap(job.title, side * cols, 9), fontsize=9)
    return fig


def draw_confusion(job: PlotJob) -> None:
    _save(confusion_figure(job), job.path, 90)


def _save(fig: Figure, path: str, dpi: int) -> None:
    """A reader (the report page) sees the old PNG or the new one, never a partial one."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")


_DRAW = {"bars": draw_bars, "errors": draw_errors, "box_size": draw_box_size, "against": draw_against,
         "confusion": draw_confusion}
#: The figure of each kind, unsaved (the layout tests measure it).
FIGURES = {"bars": bars_figure, "errors": errors_figure, "box_size": box_size_figure,
           "confusion": confusion_figure, "against": against_figure}


def draw(jobs: Sequence[PlotJob]) -> list[str]:
    """Draw the jobs; returns the paths written."""
    for job in jobs:
        _DRAW[job.kind](job)
    return [job.path for job in jobs]
