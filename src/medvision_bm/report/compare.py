"""Paired comparison of two runs on the samples both answered: the difference in each metric with a bootstrap
interval (B minus A), per task and averaged over each family's shared tasks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from medvision_bm.errors import UserError
from medvision_bm.report.bootstrap import (
    BootstrapSpec,
    percentile_interval,
    replicate_means,
    resample_counts,
    two_sided_p,
)
from medvision_bm.report.load import Loaded
from medvision_bm.report.tables import DISPLAY
from medvision_bm.tasks.metrics import HIGHER_IS_BETTER, SAMPLE_METRICS

COMPARE_SCHEMA: dict[str, pl.DataType] = {
    "family": pl.Utf8(), "task": pl.Utf8(), "metric": pl.Utf8(), "a": pl.Utf8(), "b": pl.Utf8(),
    "n_pairs": pl.Int64(), "mean_a": pl.Float64(), "mean_b": pl.Float64(), "diff": pl.Float64(),
    "diff_lo": pl.Float64(), "diff_hi": pl.Float64(), "p_boot": pl.Float64(), "better": pl.Utf8(),
}


def _better(metric: str, lo: float | None, hi: float | None, a: str, b: str) -> str:
    if lo is None or hi is None or np.isnan(lo) or np.isnan(hi) or (lo <= 0 <= hi):
        return "no clear difference"
    b_higher = lo > 0
    return b if b_higher == HIGHER_IS_BETTER.get(metric, True) else a


def _num(x: float) -> float | None:
    return None if x is None or np.isnan(x) else float(x)


def paired_compare(loaded: Loaded, a: str, b: str, spec: BootstrapSpec,
                   metrics: Sequence[str] | None = None) -> pl.DataFrame:
    """One row per family x task x metric, plus a task "ALL" row per family and metric (mean over tasks)."""
    stores = loaded.store_frame()
    labels = set(stores["label"].to_list())
    for name in (a, b):
        if name not in labels:
            raise UserError(f"no run named {name!r} in the results; runs found: {', '.join(sorted(labels))}")
    if a == b:
        raise UserError(f"--a and --b both name {a!r}; compare two different runs")
    rows: list[dict] = []
    for family, frame in loaded.samples.items():
        chosen = ["success_rate", *(metrics or DISPLAY[family])]
        chosen = [m for m in chosen if m == "success_rate" or m in SAMPLE_METRICS[family]]
        data = frame.join(stores.select("store", "label", "task"), on="store")
        cols = [pl.col("success").cast(pl.Float64).alias("success_rate"),
                *[pl.col(m) for m in chosen if m != "success_rate"]]
        side_a = data.filter(pl.col("label") == a).select("task", "key", *cols)
        side_b = data.filter(pl.col("label") == b).select("task", "key", *cols)
        pairs = side_a.join(side_b, on=["task", "key"], suffix="_b").sort("task", "key")
        if pairs.height == 0:
            continue
        family_reps: list[np.ndarray] = []
        family_points: list[dict[str, tuple[float, float, float, int]]] = []
        for (task,), sub in pairs.group_by("task", maintain_order=True):
            va = sub.select([pl.col(m).fill_null(np.nan) for m in chosen]).to_numpy().astype(np.float64)
            vb = sub.select([pl.col(f"{m}_b").fill_null(np.nan) for m in chosen]).to_numpy().astype(np.float64)
            both = ~np.isnan(va) & ~np.isnan(vb)
            diff = np.where(both, vb - va, np.nan)
            reps = replicate_means(resample_counts(sub.height, spec, f"paired/{family}/{task}"), diff)
            lo, hi = percentile_interval(reps, spec.level)
            p = two_sided_p(reps)
            points = {}
            for j, m in enumerate(chosen):
                n = int(both[:, j].sum())
                ma = float(va[both[:, j], j].mean()) if n else np.nan
                mb = float(vb[both[:, j], j].mean()) if n else np.nan
                points[m] = (ma, mb, mb - ma, n)
                rows.append({"family": family, "task": task, "metric": m, "a": a, "b": b, "n_pairs": n,
                             "mean_a": _num(ma), "mean_b": _num(mb), "diff": _num(mb - ma),
                             "diff_lo": _num(lo[j]), "diff_hi": _num(hi[j]), "p_boot": _num(p[j]),
                             "better": _better(m, _num(lo[j]), _num(hi[j]), a, b)})
            family_reps.append(reps)
            family_points.append(points)
        stack = np.stack(family_reps)
        valid = ~np.isnan(stack)
        macro = np.where(valid.any(axis=0), np.where(valid, stack, 0).sum(axis=0) / np.maximum(valid.sum(axis=0), 1),
                         np.nan)
        lo, hi = percentile_interval(macro, spec.level)
        p = two_sided_p(macro)
        for j, m in enumerate(chosen):
            vals = [pt[m] for pt in family_points if pt[m][3]]
            ma = float(np.mean([v[0] for v in vals])) if vals else np.nan
            mb = float(np.mean([v[1] for v in vals])) if vals else np.nan
            rows.append({"family": family, "task": "ALL", "metric": m, "a": a, "b": b,
                         "n_pairs": int(sum(v[3] for v in vals)), "mean_a": _num(ma), "mean_b": _num(mb),
                         "diff": _num(mb - ma), "diff_lo": _num(lo[j]), "diff_hi": _num(hi[j]),
                         "p_boot": _num(p[j]), "better": _better(m, _num(lo[j]), _num(hi[j]), a, b)})
    if not rows:
        raise UserError(f"runs {a!r} and {b!r} share no sample (no task with the same sample keys); "
                        "compare runs evaluated on the same tasks")
    return pl.DataFrame(rows, schema=COMPARE_SCHEMA)
