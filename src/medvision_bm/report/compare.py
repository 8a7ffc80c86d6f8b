"""Paired comparison of two runs on the same samples: the difference in each of upstream's per-sample metrics with
a bootstrap interval (B minus A), per task and averaged over each family's shared tasks.

Per metric, a pair counts when both runs have a value: IoU, F1, Precision and Recall count a failure as 0 (as
upstream's means do), so every shared sample pairs; MAE, MRE and nMAE exist only for successes; SuccessRate is the
0/1 success of every shared sample. A/D tasks are compared per metric type (a task holds distances in mm or angles
in degrees), and the ``ALL`` rows average tasks of one unit only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from medvision_bm.errors import UserError
from medvision_bm.report.bootstrap import (
    BootstrapSpec,
    blocked_replicate_means,
    percentile_interval,
    two_sided_p,
)
from medvision_bm.report.load import Loaded
from medvision_bm.tasks.families import SAMPLE_METRICS, FamilyView, family_spec
from medvision_bm.tasks.metrics import METRICS

#: The metrics compared when --metrics is not given (the records' ``compared``; SuccessRate is always added).
DEFAULT_METRICS: Mapping[str, tuple[str, ...]] = FamilyView(lambda s: s.compared)
COMPARE_SCHEMA: dict[str, pl.DataType] = {
    "family": pl.Utf8(), "task": pl.Utf8(), "metric": pl.Utf8(), "unit": pl.Utf8(), "a": pl.Utf8(), "b": pl.Utf8(),
    "n_pairs": pl.Int64(), "mean_a": pl.Float64(), "mean_b": pl.Float64(), "diff": pl.Float64(),
    "diff_lo": pl.Float64(), "diff_hi": pl.Float64(), "p_boot": pl.Float64(), "better": pl.Utf8(),
}


def known_metrics() -> dict[str, str]:
    """Lower-case name -> upstream's spelling, of every comparable metric (every metric record)."""
    return {m.lower(): m for m in METRICS}


def canonical_metrics(names: Sequence[str] | None) -> list[str] | None:
    """--metrics spelled any case -> upstream's spelling; unknown names are left as given (the caller reports them)."""
    if names is None:
        return None
    known = known_metrics()
    return [known.get(n.lower(), n) for n in names]


def _better(metric: str, lo: float | None, hi: float | None, a: str, b: str) -> str:
    if lo is None or hi is None or np.isnan(lo) or np.isnan(hi) or (lo <= 0 <= hi):
        return "no clear difference"
    b_higher = lo > 0
    if metric not in METRICS:
        raise UserError(f"{metric!r} is not a metric with a known direction; choose from {', '.join(METRICS)}")
    return b if b_higher == METRICS[metric].higher_is_better else a


def _num(x: float) -> float | None:
    return None if x is None or np.isnan(x) else float(x)


def _unit(family: str, metric: str, metric_type: str | None) -> str:
    if METRICS[metric].unit != "error":
        return "unitless"
    return family_spec(family).error_unit(metric_type)


def paired_compare(loaded: Loaded, a: str, b: str, spec: BootstrapSpec,
                   metrics: Sequence[str] | None = None) -> pl.DataFrame:
    """One row per family x task x metric, plus an "ALL" row per family, metric (and A/D metric type): the mean
    over tasks."""
    stores = loaded.store_frame()
    labels = set(stores["label"].to_list())
    for name in (a, b):
        if name not in labels:
            raise UserError(f"no run named {name!r} in the results; runs found: {', '.join(sorted(labels))}")
    if a == b:
        raise UserError(f"--a and --b both name {a!r}; compare two different runs")
    unknown = [m for m in metrics or () if m not in METRICS]
    if unknown:
        raise UserError(f"{unknown[0]!r} is not a metric with a record; choose from {', '.join(METRICS)}")
    rows: list[dict[str, Any]] = []
    for family, frame in loaded.samples.items():
        chosen = ["SuccessRate", *(metrics or DEFAULT_METRICS[family])]
        chosen = list(dict.fromkeys(m for m in chosen if m == "SuccessRate" or m in SAMPLE_METRICS[family]))
        data = frame.filter(pl.col("scored")).join(stores.select("store", "label"), on="store") \
            .with_columns(pl.col("metric_type").fill_null("").alias("_type") if family_spec(family).per_metric
                          else pl.lit("").alias("_type"))
        cols = [pl.col("success").cast(pl.Float64).alias("SuccessRate"),
                *[pl.col(m) for m in chosen if m != "SuccessRate"]]
        side_a = data.filter(pl.col("label") == a).select("task", "_type", "key", *cols)
        side_b = data.filter(pl.col("label") == b).select("task", "_type", "key", *cols)
        pairs = side_a.join(side_b, on=["task", "_type", "key"], suffix="_b").sort("task", "_type", "key")
        if pairs.height == 0:
            continue
        per_type: dict[str, tuple[list[np.ndarray], list[dict[str, tuple[float, float, float, int]]]]] = {}
        for (task, mtype), sub in pairs.group_by("task", "_type", maintain_order=True):
            va = sub.select([pl.col(m).fill_null(np.nan) for m in chosen]).to_numpy().astype(np.float64)
            vb = sub.select([pl.col(f"{m}_b").fill_null(np.nan) for m in chosen]).to_numpy().astype(np.float64)
            both = ~np.isnan(va) & ~np.isnan(vb)
            diff = np.where(both, vb - va, np.nan)
            stream = f"paired/{family}/{task}" + (f"/{mtype}" if mtype else "")
            reps = blocked_replicate_means(sub.height, spec, stream, diff)
            lo, hi = percentile_interval(reps, spec.level)
            p = two_sided_p(reps)
            points = {}
            for j, m in enumerate(chosen):
                n = int(both[:, j].sum())
                ma = float(va[both[:, j], j].mean()) if n else np.nan
                mb = float(vb[both[:, j], j].mean()) if n else np.nan
                points[m] = (ma, mb, mb - ma, n)
                rows.append({"family": family, "task": task, "metric": m, "unit": _unit(family, m, mtype), "a": a,
                             "b": b, "n_pairs": n, "mean_a": _num(ma), "mean_b": _num(mb), "diff": _num(mb - ma),
                             "diff_lo": _num(lo[j]), "diff_hi": _num(hi[j]), "p_boot": _num(p[j]),
                             "better": _better(m, _num(lo[j]), _num(hi[j]), a, b)})
            reps_list, points_list = per_type.setdefault(mtype, ([], []))
            reps_list.append(reps)
            points_list.append(points)
        for mtype, (family_reps, family_points) in per_type.items():
            stack = np.stack(family_reps)
            valid = ~np.isnan(stack)
            macro = np.where(valid.any(axis=0),
                             np.where(valid, stack, 0).sum(axis=0) / np.maximum(valid.sum(axis=0), 1), np.nan)
            lo, hi = percentile_interval(macro, spec.level)
            p = two_sided_p(macro)
            task_name = f"ALL ({mtype})" if mtype else "ALL"
            for j, m in enumerate(chosen):
                vals = [pt[m] for pt in family_points if pt[m][3]]
                ma = float(np.mean([v[0] for v in vals])) if vals else np.nan
                mb = float(np.mean([v[1] for v in vals])) if vals else np.nan
                rows.append({"family": family, "task": task_name, "metric": m, "unit": _unit(family, m, mtype),
                             "a": a, "b": b, "n_pairs": int(sum(v[3] for v in vals)), "mean_a": _num(ma),
                             "mean_b": _num(mb), "diff": _num(mb - ma), "diff_lo": _num(lo[j]),
                             "diff_hi": _num(hi[j]), "p_boot": _num(p[j]),
                             "better": _better(m, _num(lo[j]), _num(hi[j]), a, b)})
    if not rows:
        raise UserError(f"runs {a!r} and {b!r} share no sample (no task with the same sample keys); "
                        "compare runs evaluated on the same tasks")
    return pl.DataFrame(rows, schema=COMPARE_SCHEMA)
