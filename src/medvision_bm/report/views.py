"""What the Markdown and HTML tables show: headers and formatted cells from the summary frames (one place, so
the two renderings always agree)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import polars as pl

from medvision_bm.report.tables import DISPLAY, PRIMARY

METRIC_NAMES: dict[str, str] = {
    "success_rate": "Success", "iou": "IoU", "pixel_precision": "Pixel precision", "pixel_recall": "Pixel recall",
    "pixel_f1": "Pixel F1", "mae": "MAE", "mre": "MRE", "mae_major": "MAE major", "mae_minor": "MAE minor",
    "mre_major": "MRE major", "mre_minor": "MRE minor",
    **{f"iou_ge_{t}": f"IoU≥0.{t // 10}" for t in (50, 60, 70, 80, 90)},
}
FAMILY_NAMES: dict[str, str] = {"detect": "Detection (bounding boxes)", "TL": "Tumor/lesion size (TL)",
                                "AD": "Angle/distance (AD)"}


@dataclass
class View:
    """A table ready to render: a title, a caption, headers and string cells."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    caption: str = ""
    numeric: list[bool] = field(default_factory=list)


def fmt(v: object) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v == 0:
            return "0"
        return f"{v:.1f}" if abs(v) >= 100 else f"{v:.4g}"
    return str(v)


def with_ci(row: dict, name: str) -> str:
    lo, hi = row.get(f"{name}_lo"), row.get(f"{name}_hi")
    if lo is None and hi is None:
        return fmt(row.get(name))
    return f"{fmt(row.get(name))} [{fmt(lo)}, {fmt(hi)}]"


def _numeric(headers: Sequence[str], text_columns: int) -> list[bool]:
    return [i >= text_columns for i in range(len(headers))]


def leaderboard_view(family: str, board: pl.DataFrame, level: float) -> View:
    metrics = ["success_rate", *DISPLAY[family]]
    headers = ["Rank", "Run", "Tasks", "N", *[METRIC_NAMES[m] for m in metrics]]
    rows = []
    for r in board.iter_rows(named=True):
        partial = r["tasks_covered"] < r["tasks_total"]
        rows.append([str(r["rank"]), r["label"], f"{r['tasks_covered']}/{r['tasks_total']}" + (" *" if partial else ""),
                     str(r["n"]), *[with_ci(r, m) for m in metrics]])
    primary = PRIMARY[family]
    caption = (f"Mean over each run's tasks of the task means (errors over successful samples only); "
               f"[{level:.0%} bootstrap CI]. Ranked by {METRIC_NAMES[primary]}; * = not every task of the family.")
    return View(f"Leaderboard: {FAMILY_NAMES[family]}", headers, rows, caption, _numeric(headers, 3))


def tasks_view(family: str, tasks: pl.DataFrame, level: float) -> View:
    metrics = ["success_rate", *DISPLAY[family]]
    headers = ["Task", "Run", "Unit", "N", "Parse failed", "Request failed", "Pending",
               *[METRIC_NAMES[m] for m in metrics]]
    rows = [[r["task"], r["label"], r["unit"], str(r["n"]), str(r["n_parse_failed"]), str(r["n_request_failed"]),
             str(r["n_pending"]), *[with_ci(r, m) for m in metrics]] for r in tasks.iter_rows(named=True)]
    return View(f"Per task: {FAMILY_NAMES[family]}", headers, rows,
                f"Per run and task, [{level:.0%} bootstrap CI]; the CSV holds every metric.", _numeric(headers, 3))


def breakdown_views(family: str, bd: pl.DataFrame, min_group_size: int) -> list[View]:
    metrics = ["success_rate", *DISPLAY[family]]
    names = {"label": "label (structure)", "structure": "anatomy vs tumor/lesion", "modality": "modality",
             "plane": "slice plane", "box_area_ratio": "box-to-image area ratio"}
    views = []
    for (dim,), sub in bd.group_by("dimension", maintain_order=True):
        headers = ["Run", "Group", "Tasks", "N", *[METRIC_NAMES[m] for m in metrics]]
        rows = [[r["label"], str(r["group"]) + (" †" if r["small"] else ""), str(r["n_tasks"]), str(r["n"]),
                 *[fmt(r[m]) for m in metrics]] for r in sub.iter_rows(named=True)]
        views.append(View(f"{FAMILY_NAMES[family]} by {names.get(dim, dim)}", headers, rows,
                          f"Samples pooled over the family's tasks; † = fewer than {min_group_size} samples.",
                          _numeric(headers, 2)))
    return views


def random_box_view(table: pl.DataFrame, level: float) -> View:
    headers = ["Run", "Task", "N", "IoU", "Random-box IoU", "IoU − random", "Above random", "Samples above random"]
    rows = []
    for r in table.iter_rows(named=True):
        rows.append([r["label"], r["task"], str(r["n"]), with_ci(r, "iou"), fmt(r["random_iou"]),
                     f"{fmt(r['iou_minus_random'])} [{fmt(r['diff_lo'])}, {fmt(r['diff_hi'])}]",
                     fmt(r["above_random"]), fmt(r["share_above_random"])])
    return View("Detection against random boxes", headers, rows,
                "Random-box IoU: expected IoU of a uniformly random box per sample (seeded Monte Carlo), averaged "
                f"over the task; [{level:.0%} bootstrap CI]; above random when the CI of the difference is above 0.",
                _numeric(headers, 2))


def box_size_view(table: pl.DataFrame) -> View:
    headers = ["Run", "Area ratio group", "N", "Median ratio", "IoU", "Random-box IoU"]
    rows = [[r["label"], r["area_group"], str(r["n"]), fmt(r["median_area_ratio"]), fmt(r["iou"]),
             fmt(r["random_iou"])] for r in table.iter_rows(named=True)]
    return View("Detection IoU by box size", headers, rows,
                "Box area / image area of the target box; groups merged until each holds the minimum group size.",
                _numeric(headers, 2))


def compare_view(table: pl.DataFrame, level: float) -> View:
    a, b = table["a"][0], table["b"][0]
    headers = ["Family", "Task", "Metric", "Pairs", a, b, f"{b} − {a}", "p (bootstrap)", "Better"]
    rows = [[r["family"], r["task"], METRIC_NAMES.get(r["metric"], r["metric"]), str(r["n_pairs"]), fmt(r["mean_a"]),
             fmt(r["mean_b"]), f"{fmt(r['diff'])} [{fmt(r['diff_lo'])}, {fmt(r['diff_hi'])}]", fmt(r["p_boot"]),
             r["better"]] for r in table.iter_rows(named=True)]
    return View(f"Paired comparison: {b} vs {a}", headers, rows,
                f"Same samples, both answered; difference {b} − {a} with a {level:.0%} paired bootstrap CI; "
                "ALL = mean over the shared tasks.", _numeric(headers, 3))


def stores_view(stores: pl.DataFrame) -> View:
    headers = ["Run", "Model", "Tag", "Task", "Signature", "Scores from", "Parser", "N", "Success", "Parse failed",
               "Request failed", "Pending", "Torn lines", "Foreign lines"]
    rows = [[r["label"], r["model"], r["tag"] or "–", r["task"], r["answer_signature"][:12], r["source"],
             r["parser_version"] or "not recorded", str(r["selected"]), str(r["success"]), str(r["parse_failed"]),
             str(r["request_failed"]), str(r["pending"]), fmt(r["bad_lines"]), fmt(r["foreign_lines"])]
            for r in stores.iter_rows(named=True)]
    return View("Runs (sample stores)", headers, rows, "Every store read; a run label with @ names one of several "
                "configurations of one model (never averaged together).", _numeric(headers, 7))


def markdown(view: View) -> str:
    def cell(s: str) -> str:
        return s.replace("|", "\\|").replace("\n", " ")

    align = ["---:" if (view.numeric[i] if i < len(view.numeric) else False) else "---" for i in range(len(view.headers))]
    lines = [f"### {view.title}", ""]
    if view.caption:
        lines += [view.caption, ""]
    lines.append("| " + " | ".join(cell(h) for h in view.headers) + " |")
    lines.append("| " + " | ".join(align) + " |")
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in view.rows]
    return "\n".join(lines) + "\n"
