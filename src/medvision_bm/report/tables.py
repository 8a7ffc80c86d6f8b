"""The summary tables of one family: per run x task (with bootstrap CIs), leaderboard, breakdowns, area-ratio
groups and the random-box comparison for detection. Every table is a polars frame; nothing here writes files.

Means are built from per-store sums and counts (one pass over the samples), so a run of a million samples costs
a few group-bys; only the bootstrap touches every sample, as matrix products.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from medvision_bm.report.bootstrap import BootstrapSpec, percentile_interval, replicate_means, resample_counts
from medvision_bm.report.load import TARGET_COLUMNS
from medvision_bm.tasks.metrics import HIGHER_IS_BETTER, SAMPLE_METRICS

#: The metrics shown (with CIs) in Markdown and HTML tables; CSV and JSON hold every metric.
DISPLAY: dict[str, tuple[str, ...]] = {
    "detect": ("iou", "pixel_f1", "mae", "mre", "iou_ge_50"),
    "TL": ("mae", "mre", "mae_major", "mae_minor"),
    "AD": ("mae", "mre"),
}
#: The metric the leaderboard is ranked by.
PRIMARY: dict[str, str] = {"detect": "iou", "TL": "mre", "AD": "mre"}
#: Starting edges of the box-to-image area-ratio groups; neighbours merge until each holds min_group_size docs.
AREA_EDGES: tuple[float, ...] = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 1.0)
BREAKDOWN_DIMS: tuple[tuple[str, str], ...] = (
    ("label", "label_name"), ("structure", "structure_kind"), ("modality", "modality"), ("plane", "plane"))
RANDOM_BOX_DRAWS = 256


def ci_columns(metric: str) -> tuple[str, str]:
    return f"{metric}_lo", f"{metric}_hi"


def stat_columns(family: str) -> list[str]:
    """success_rate then the family's metrics: the columns that get a value and an interval."""
    return ["success_rate", *SAMPLE_METRICS[family]]


@dataclass
class FamilyTables:
    """Everything summarized for one family."""

    family: str
    tasks: pl.DataFrame
    leaderboard: pl.DataFrame
    breakdown: pl.DataFrame
    random_box: pl.DataFrame | None = None
    box_size: pl.DataFrame | None = None
    area_edges: list[float] = field(default_factory=list)


def _sum_exprs(family: str) -> list[pl.Expr]:
    """Counts, and per metric the sum and count of its values (non-successful samples carry none)."""
    metrics = SAMPLE_METRICS[family]
    return [pl.len().alias("n"), pl.col("success").sum().cast(pl.Int64).alias("n_success"),
            *[pl.col(m).sum().alias(f"{m}__s") for m in metrics],
            *[pl.col(m).count().cast(pl.Int64).alias(f"{m}__c") for m in metrics]]


def _mean_exprs(family: str) -> list[pl.Expr]:
    out = [(pl.col("n_success") / pl.col("n")).alias("success_rate")]
    for m in SAMPLE_METRICS[family]:
        out.append(pl.when(pl.col(f"{m}__c") > 0).then(pl.col(f"{m}__s") / pl.col(f"{m}__c")).otherwise(None)
                   .alias(m))
    return out


def _drop_sums(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.drop([c for c in frame.columns if c.endswith("__s") or c.endswith("__c")])


def _combine(per_store: pl.DataFrame, stores: pl.DataFrame, family: str, by: list[str]) -> pl.DataFrame:
    """Per-store sums -> per (label, *by) means; n_tasks counts the stores (one per task for a label)."""
    metrics = SAMPLE_METRICS[family]
    agg = per_store.join(stores.select("store", "label"), on="store").group_by("label", *by).agg(
        pl.len().alias("n_tasks"), pl.col("n").sum(), pl.col("n_success").sum(),
        *[pl.col(f"{m}__s").sum() for m in metrics], *[pl.col(f"{m}__c").sum() for m in metrics])
    return _drop_sums(agg.with_columns(_mean_exprs(family)))


def _unit(family: str, measure: str | None) -> str:
    if family == "detect":
        return "relative"
    if family == "TL":
        return "mm"
    return "degrees" if measure == "angle" else "mm"


def task_table(family: str, frame: pl.DataFrame, stores: pl.DataFrame,
               spec: BootstrapSpec) -> tuple[pl.DataFrame, dict[int, np.ndarray]]:
    """One row per run (label) x task: counts, success rate and mean metrics, each with a bootstrap interval.

    ``frame`` must be sorted by (store, index), as ``load`` returns it."""
    cols = stat_columns(family)
    per_store = frame.group_by("store").agg(
        *_sum_exprs(family),
        (pl.col("status") == "parse_failed").sum().cast(pl.Int64).alias("n_parse_failed"),
        (pl.col("status") == "request_failed").sum().cast(pl.Int64).alias("n_request_failed"),
        (pl.col("status") == "missing").sum().cast(pl.Int64).alias("n_pending"),
        pl.col("measure").drop_nulls().first().cast(pl.Utf8).alias("measure"))
    points = _drop_sums(per_store.with_columns(_mean_exprs(family))).join(
        stores.select("store", "label", "task"), on="store")
    points = points.with_columns(pl.col("measure").map_elements(lambda m: _unit(family, m), return_dtype=pl.Utf8)
                                 .alias("unit")) if family == "AD" else points.with_columns(
        pl.lit(_unit(family, None)).alias("unit"))
    values = frame.select(pl.col("success").cast(pl.Float64).alias("success_rate"),
                          *[pl.col(m).fill_null(np.nan) for m in SAMPLE_METRICS[family]]).to_numpy()
    store_ids = frame["store"].to_numpy()
    task_of = dict(zip(stores["store"].to_list(), stores["task"].to_list()))
    starts = np.flatnonzero(np.r_[True, store_ids[1:] != store_ids[:-1]]) if len(store_ids) else np.array([], int)
    ends = np.r_[starts[1:], len(store_ids)]
    by_task_n: dict[tuple[str, int], list[tuple[int, int, int]]] = defaultdict(list)
    for s, e in zip(starts, ends):
        sid = int(store_ids[s])
        by_task_n[(task_of[sid], int(e - s))].append((sid, int(s), int(e)))
    reps: dict[int, np.ndarray] = {}
    k = len(cols)
    ci: dict[str, list] = {"store": [], **{c: [] for name in cols for c in ci_columns(name)}}
    for (task, n), members in sorted(by_task_n.items()):
        counts = resample_counts(n, spec, f"{family}/{task}")
        rep = replicate_means(counts, np.hstack([values[s:e] for _, s, e in members]))
        lo, hi = percentile_interval(rep, spec.level)
        for j, (sid, _, _) in enumerate(members):
            reps[sid] = rep[:, j * k:(j + 1) * k]
            ci["store"].append(sid)
            for c, name in enumerate(cols):
                ci[f"{name}_lo"].append(_f(lo[j * k + c]))
                ci[f"{name}_hi"].append(_f(hi[j * k + c]))
    ci_frame = pl.DataFrame(ci, schema={"store": pl.Int64, **{c: pl.Float64 for name in cols
                                                               for c in ci_columns(name)}})
    table = points.join(ci_frame, on="store", how="left")
    ordered = ["label", "task", "store", "unit", "n", "n_success", "n_parse_failed", "n_request_failed", "n_pending"]
    for name in cols:
        ordered += [name, *ci_columns(name)]
    return table.select(ordered).with_columns(pl.col("n").cast(pl.Int64)).sort("task", "label"), reps


def _nanmean0(stack: np.ndarray) -> np.ndarray:
    """Mean over the first axis ignoring NaN; NaN where every entry is NaN (no warning)."""
    valid = ~np.isnan(stack)
    total = np.where(valid, stack, 0.0).sum(axis=0)
    n = valid.sum(axis=0)
    return np.where(n > 0, total / np.maximum(n, 1), np.nan)


def _f(x: float) -> float | None:
    return None if x is None or np.isnan(x) else float(x)


def leaderboard(family: str, tasks: pl.DataFrame, reps: dict[int, np.ndarray], spec: BootstrapSpec) -> pl.DataFrame:
    """Per run: the mean over its tasks of each task mean (every task weighs the same), with an interval from
    the tasks' independent resamples; tasks_covered says how many of the family's tasks the run has."""
    cols = stat_columns(family)
    all_tasks = tasks["task"].n_unique()
    rows = []
    for (label,), sub in tasks.group_by("label", maintain_order=True):
        store_ids = sub["store"].to_list()
        point = sub.select([pl.col(c).mean() for c in cols]).row(0, named=True)
        lo, hi = percentile_interval(_nanmean0(np.stack([reps[s] for s in store_ids])), spec.level)
        row = {"label": label, "tasks_covered": len(store_ids), "tasks_total": all_tasks,
               "n": int(sub["n"].sum()), "n_success": int(sub["n_success"].sum())}
        for j, c in enumerate(cols):
            row[c], row[f"{c}_lo"], row[f"{c}_hi"] = point[c], _f(lo[j]), _f(hi[j])
        rows.append(row)
    schema = {"label": pl.Utf8, "tasks_covered": pl.Int64, "tasks_total": pl.Int64, "n": pl.Int64,
              "n_success": pl.Int64, **{k: pl.Float64 for c in cols for k in (c, *ci_columns(c))}}
    board = pl.DataFrame(rows, schema=schema)
    primary = PRIMARY[family]
    board = board.sort([pl.col("tasks_covered"), pl.col(primary), pl.col("label")],
                       descending=[True, HIGHER_IS_BETTER[primary], False], nulls_last=True)
    return board.with_columns(pl.int_range(1, board.height + 1).alias("rank")).select(["rank", *board.columns])


def area_edges(ratios: Sequence[float | None], min_group_size: int, start: Sequence[float] = AREA_EDGES) -> list[float]:
    """Group edges over the box-to-image area ratios of the distinct docs: neighbours merge until every group
    holds at least ``min_group_size`` docs (a single group when there are fewer docs than that)."""
    arr = np.asarray([r for r in ratios if r is not None and np.isfinite(r)], dtype=np.float64)
    edges = list(start)
    if arr.size and arr.max() >= edges[-1]:
        edges[-1] = float(arr.max()) * (1 + 1e-9) + 1e-12
    counts = np.histogram(arr, bins=edges)[0].tolist() if arr.size else [0] * (len(edges) - 1)
    while len(counts) > 1:
        small = [i for i, c in enumerate(counts) if c < min_group_size]
        if not small:
            break
        i = small[0]
        j = i + 1 if i + 1 < len(counts) else i - 1  # merge into the right neighbour (the last one: left)
        a, b = min(i, j), max(i, j)
        counts[a:b + 1] = [counts[a] + counts[b]]
        del edges[b]
    return edges


def area_group_label(lo: float, hi: float) -> str:
    return f"{lo * 100:.3g}–{hi * 100:.3g}%"


def area_group_expr(edges: Sequence[float]) -> pl.Expr:
    labels = [area_group_label(a, b) for a, b in itertools.pairwise(edges)]
    inner = list(edges[1:-1])
    if not inner:
        return pl.when(pl.col("box_area_ratio").is_not_null()).then(pl.lit(labels[0])).otherwise(None) \
            .alias("area_group")
    return pl.col("box_area_ratio").cut(inner, labels=labels, left_closed=True).cast(pl.Utf8).alias("area_group")


def breakdown(family: str, frame: pl.DataFrame, stores: pl.DataFrame, min_group_size: int,
              edges: Sequence[float] | None) -> pl.DataFrame:
    """Per run and group (label, anatomy vs lesion, modality, plane, and for detection the area-ratio group):
    samples pooled over the family's tasks. Groups under ``min_group_size`` samples are flagged ``small``."""
    dims = list(BREAKDOWN_DIMS)
    data = frame
    if family == "detect" and edges:
        data = frame.with_columns(area_group_expr(edges))
        dims.append(("box_area_ratio", "area_group"))
    parts = []
    for i, (dim, col) in enumerate(dims):
        per_store = data.group_by("store", col).agg(_sum_exprs(family))
        part = _combine(per_store, stores, family, [col]).rename({col: "group"})
        parts.append(part.with_columns(pl.col("group").cast(pl.Utf8).fill_null("unknown"),
                                       pl.lit(dim).alias("dimension"), pl.lit(i).alias("_o")))
    out = pl.concat(parts, how="vertical_relaxed")
    group_order = ({area_group_label(a, b): i for i, (a, b) in enumerate(itertools.pairwise(edges))}
                   if family == "detect" and edges else {})
    out = out.with_columns((pl.col("n") < min_group_size).alias("small"),
                           pl.col("group").replace_strict(group_order, default=-1, return_dtype=pl.Int64).alias("_g"),
                           pl.col("n").cast(pl.Int64), pl.col("n_tasks").cast(pl.Int64))
    cols = ["label", "dimension", "group", "n_tasks", "n", "n_success", "small", "success_rate", *SAMPLE_METRICS[family]]
    return out.sort("_o", "label", "_g", "group").select(cols)


def random_box_iou(targets: np.ndarray, draws: int, seed: int) -> np.ndarray:
    """Expected IoU of a uniformly random box (corners sorted per axis, as the random-box baseline draws them)
    with each target box [x0, y0, x1, y1], by Monte Carlo: one seeded point set, shifted modulo 1 by a seeded
    offset per target, so that each estimate is unbiased and their errors average out over a task."""
    rng = np.random.default_rng([seed, 0x5B0C])
    base = rng.random((draws, 4), dtype=np.float32)
    shifts = rng.random((len(targets), 4), dtype=np.float32)
    targets = np.asarray(targets, dtype=np.float32)
    out = np.empty(len(targets))
    step = max(1, 262_144 // max(draws, 1))
    for start in range(0, len(targets), step):
        pts = (base[None, :, :] + shifts[start:start + step, None, :]) % 1.0
        x0, x1 = np.minimum(pts[..., 0], pts[..., 1]), np.maximum(pts[..., 0], pts[..., 1])
        y0, y1 = np.minimum(pts[..., 2], pts[..., 3]), np.maximum(pts[..., 2], pts[..., 3])
        t = targets[start:start + step][:, None, :]
        ix = np.clip(np.minimum(t[..., 2], x1) - np.maximum(t[..., 0], x0), 0, None)
        iy = np.clip(np.minimum(t[..., 3], y1) - np.maximum(t[..., 1], y0), 0, None)
        inter = ix * iy
        area_t = np.clip(t[..., 2] - t[..., 0], 0, None) * np.clip(t[..., 3] - t[..., 1], 0, None)
        union = area_t + (x1 - x0) * (y1 - y0) - inter
        out[start:start + step] = np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0).mean(axis=1)
    return out


def with_random_iou(docs: pl.DataFrame, seed: int) -> pl.DataFrame:
    """The docs frame with each distinct (task, key)'s expected random-box IoU (null without a target)."""
    distinct = docs.filter(pl.col("tx0").is_not_null()).unique(["task", "key"], keep="first").sort("task", "key")
    targets = distinct.select(TARGET_COLUMNS).to_numpy().astype(np.float64)
    values = distinct.select("task", "key").with_columns(
        pl.Series("random_iou", random_box_iou(targets, RANDOM_BOX_DRAWS, seed)))
    return docs.join(values, on=["task", "key"], how="left")


def random_box_table(frame: pl.DataFrame, docs: pl.DataFrame, tasks: pl.DataFrame, reps: dict[int, np.ndarray],
                     spec: BootstrapSpec) -> pl.DataFrame:
    """Per run x task (and per run over all its tasks): IoU against the expected IoU of a random box."""
    per_task_random = docs.unique(["task", "key"], keep="first").group_by("task").agg(pl.col("random_iou").mean())
    above = frame.filter(pl.col("success")).join(docs.select("docs", "index", "random_iou"), on=["docs", "index"]) \
        .group_by("store").agg((pl.col("iou") > pl.col("random_iou")).mean().alias("share_above_random"))
    iou_j = stat_columns("detect").index("iou")
    t = tasks.select("label", "task", "store", "n", "n_success", "iou", "iou_lo", "iou_hi") \
        .join(per_task_random, on="task", how="left").join(above, on="store", how="left")
    rows = []
    for r in t.iter_rows(named=True):
        rnd = r["random_iou"]
        diff = reps[r["store"]][:, iou_j] - (rnd if rnd is not None else np.nan)
        lo, hi = percentile_interval(diff[:, None], spec.level)
        rows.append({**r, "iou_minus_random": None if r["iou"] is None or rnd is None else r["iou"] - rnd,
                     "diff_lo": _f(lo[0]), "diff_hi": _f(hi[0])})
    for label in t["label"].unique(maintain_order=True).to_list():
        sub = [r for r in rows if r["label"] == label and r["random_iou"] is not None]
        if not sub:
            continue
        lo, hi = percentile_interval(_nanmean0(np.stack([reps[r["store"]][:, iou_j] - r["random_iou"]
                                                          for r in sub]))[:, None], spec.level)
        ious = [r["iou"] for r in sub if r["iou"] is not None]
        iou = float(np.mean(ious)) if ious else None
        rnd = float(np.mean([r["random_iou"] for r in sub]))
        rows.append({"label": label, "task": "ALL", "store": -1, "n": sum(r["n"] for r in sub),
                     "n_success": sum(r["n_success"] for r in sub), "iou": iou, "iou_lo": None, "iou_hi": None,
                     "random_iou": rnd, "share_above_random": None,
                     "iou_minus_random": None if iou is None else iou - rnd, "diff_lo": _f(lo[0]),
                     "diff_hi": _f(hi[0])})
    out = pl.DataFrame(rows, schema={"label": pl.Utf8, "task": pl.Utf8, "store": pl.Int64, "n": pl.Int64,
                                     "n_success": pl.Int64, "iou": pl.Float64, "iou_lo": pl.Float64,
                                     "iou_hi": pl.Float64, "random_iou": pl.Float64,
                                     "share_above_random": pl.Float64, "iou_minus_random": pl.Float64,
                                     "diff_lo": pl.Float64, "diff_hi": pl.Float64})
    return out.with_columns((pl.col("diff_lo") > 0).alias("above_random")).drop("store")


def box_size_table(frame: pl.DataFrame, docs: pl.DataFrame, stores: pl.DataFrame, edges: Sequence[float]) -> pl.DataFrame:
    """Per run and area-ratio group: mean IoU over successful samples, beside the group's median ratio and
    random-box expectation over its distinct docs."""
    per_store = frame.with_columns(area_group_expr(edges)).filter(pl.col("area_group").is_not_null()) \
        .group_by("store", "area_group").agg(_sum_exprs("detect"))
    runs = _combine(per_store, stores, "detect", ["area_group"]).select("label", "area_group", "n", "n_success", "iou")
    groups = docs.unique(["task", "key"], keep="first").with_columns(area_group_expr(edges)) \
        .filter(pl.col("area_group").is_not_null()).group_by("area_group").agg(
            pl.col("box_area_ratio").median().alias("median_area_ratio"), pl.col("random_iou").mean())
    order = {area_group_label(a, b): i for i, (a, b) in enumerate(itertools.pairwise(edges))}
    return runs.join(groups, on="area_group", how="left").with_columns(
        pl.col("area_group").replace_strict(order, default=-1, return_dtype=pl.Int64).alias("_g"),
        pl.col("n").cast(pl.Int64)).sort("label", "_g").drop("_g")


def family_tables(family: str, frame: pl.DataFrame, docs: pl.DataFrame, stores: pl.DataFrame, spec: BootstrapSpec,
                  min_group_size: int) -> FamilyTables:
    tasks, reps = task_table(family, frame, stores, spec)
    board = leaderboard(family, tasks, reps, spec)
    edges: list[float] = []
    random_tab = size_tab = None
    if family == "detect":
        edges = area_edges(docs.unique(["task", "key"], keep="first")["box_area_ratio"].to_list(), min_group_size)
        docs = with_random_iou(docs, spec.seed)
        random_tab = random_box_table(frame, docs, tasks, reps, spec)
        size_tab = box_size_table(frame, docs, stores, edges)
    bd = breakdown(family, frame, stores, min_group_size, edges)
    return FamilyTables(family, tasks, board, bd, random_tab, size_tab, edges)
