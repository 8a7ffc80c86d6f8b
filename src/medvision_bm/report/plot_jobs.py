"""The plots of a summary as ``PlotJob``s of plain numbers, built from the summary frames: upstream's rows as bars,
the per-task error distributions (every run marked, with why it has none), detection IoU against box size."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from medvision_bm.jsontypes import JsonMapping
from medvision_bm.report.groups import AGGREGATES, UNIT_WORDS, aggregate_unit
from medvision_bm.report.plots import (
    ERROR_PANELS_PER_IMAGE,
    ERROR_PERCENTILES,
    PlotJob,
)
from medvision_bm.report.tables import FamilyTables
from medvision_bm.report.views import FAMILY_NAMES, stat_header
from medvision_bm.tasks.families import family_spec


def bar_job(ft: FamilyTables, path: Path, level: float) -> PlotJob | None:
    """Bars per run for upstream's aggregate rows (``FamilySpec.bar_panels``); None when no panel has a value."""
    board = ft.leaderboard
    labels: list[str] = []
    for agg in AGGREGATES[ft.family]:  # runs in the rank order of the first row that has them
        for label in board.filter(pl.col("aggregate") == agg).sort("rank", nulls_last=True)["label"].to_list():
            if label not in labels:
                labels.append(label)
    panels = []
    for agg, stat in family_spec(ft.family).bar_panels:
        sub = {r["label"]: r for r in board.filter(pl.col("aggregate") == agg).iter_rows(named=True)}
        if not any(r.get(stat) is not None for r in sub.values()):
            continue
        unit = aggregate_unit(ft.family, agg)
        title = f"{stat_header(stat, unit)}, {agg}" if stat == "avgMAE" else f"{stat} (unitless), {agg}"
        panels.append({"title": title, "value": [sub.get(lb, {}).get(stat) for lb in labels],
                       "lo": [sub.get(lb, {}).get(f"{stat}_lo") for lb in labels],
                       "hi": [sub.get(lb, {}).get(f"{stat}_hi") for lb in labels]})
    if not panels:
        return None
    return PlotJob("bars", str(path), f"{FAMILY_NAMES[ft.family]}: upstream's rows across label groups, "
                   f"{level:.0%} bootstrap CI", {"labels": labels, "panels": panels})


def box_size_job(ft: FamilyTables, path: Path) -> PlotJob:
    assert ft.box_size is not None
    series = [{"label": label, "x": sub["median_area_ratio"].to_list(), "iou": sub["IoU"].to_list()}
              for (label,), sub in ft.box_size.group_by("label", maintain_order=True)]
    groups = ft.box_size.unique("area_group", keep="first", maintain_order=True)
    return PlotJob("box_size", str(path), "Detection: IoU against box size",
                   {"series": series, "random": {"x": groups["median_area_ratio"].to_list(),
                                                 "iou": groups["random_iou"].to_list()}})


def _task_units(family: str, frame: pl.DataFrame) -> dict[str, str]:
    if not family_spec(family).per_metric:
        return {}
    out = {}
    for (task,), sub in frame.group_by("task"):
        types = sorted({t for t in sub["metric_type"].to_list() if t})
        out[task] = ("degrees" if types == ["angle"] else "mm") if len(types) <= 1 else "mixed"
    return out


#: The sample states that leave a run's sample out of the error plots, as the reason names them.
_EXCLUDED = {"parse_failed": "parse failed", "request_failed": "request failed", "missing": "pending"}


def excluded_reason(row: JsonMapping | None) -> str:
    """Why a run has no distribution in a task's panel: it lacks the task, or none of its samples succeeded (and
    how many failed how)."""
    if row is None:
        return "excluded: task not run"
    why = ", ".join(f"{row[s]} {word}" for s, word in _EXCLUDED.items() if row[s])
    return f"excluded: 0 of {row['n']} succeeded" + (f" ({why})" if why else "")


def error_jobs(family: str, frame: pl.DataFrame, stores: pl.DataFrame, folder: Path) -> list[PlotJob]:
    """Per task, the percentiles of each run's per-sample error (IoU for detection) over its successful samples;
    one image per up to ERROR_PANELS_PER_IMAGE tasks."""
    m = family_spec(family).distribution_metric
    units = _task_units(family, frame)
    ok = pl.col("success") & pl.col("scored")
    q = frame.filter(pl.col("scored")).group_by("store").agg(
        *[pl.col(m).filter(ok).quantile(p, "linear").alias(f"q{i}") for i, p in enumerate(ERROR_PERCENTILES)],
        pl.col(m).filter(ok).mean().alias("mean"), ok.sum().alias("n_ok"), pl.len().alias("n"),
        *[(pl.col("status") == s).sum().alias(s) for s in _EXCLUDED]).join(
        stores.select("store", "label", "task"), on="store")
    labels = sorted(q["label"].unique().to_list())  # every run, those without a successful sample too
    panels = []
    for (task,), sub in q.sort("task").group_by("task", maintain_order=True):
        by_label = {r["label"]: r for r in sub.iter_rows(named=True)}
        unit = "unitless" if family_spec(family).has_boxes else UNIT_WORDS[units.get(task, "mm")]
        shown = {lb: r for lb, r in by_label.items() if r["n_ok"]}
        panels.append({"title": f"{task} [{unit}]",
                       "q": [[shown[lb][f"q{i}"] for i in range(len(ERROR_PERCENTILES))] if lb in shown
                             else None for lb in labels],
                       "mean": [shown[lb]["mean"] if lb in shown else None for lb in labels],
                       "excluded": [None if lb in shown else excluded_reason(by_label.get(lb)) for lb in labels]})
    if family_spec(family).has_boxes:
        xlabel = "IoU (unitless, higher is better)"
    elif family_spec(family).axes:
        xlabel = "absolute error, mean of the two axes (mm, lower is better)"
    else:
        xlabel = "absolute error (unit in each panel's title; lower is better)"
    jobs: list[PlotJob] = []
    if not panels or not q["n_ok"].sum():  # no run of the family has a successful sample (every request failed, ...)
        return jobs
    n_images = -(-len(panels) // ERROR_PANELS_PER_IMAGE)
    size = -(-len(panels) // max(n_images, 1))  # balanced: 17 tasks -> 9 + 8 panels, not 16 + 1
    chunks = [panels[i:i + size] for i in range(0, len(panels), size)]
    what = "IoU" if family_spec(family).has_boxes else "absolute error"
    for n, chunk in enumerate(chunks, start=1):
        suffix = f"_{n}" if len(chunks) > 1 else ""
        title = f"{FAMILY_NAMES[family]}: per-sample {what} of successful samples per run and task " \
                f"(5–95 %, 25–75 %, median, mean)" + (f", part {n} of {len(chunks)}" if suffix else "")
        jobs.append(PlotJob("errors", str(folder / f"errors_{family}{suffix}.png"), title,
                            {"labels": labels, "panels": chunk, "xlabel": xlabel}))
    return jobs
