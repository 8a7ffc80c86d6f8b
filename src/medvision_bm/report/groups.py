"""Upstream MedVision's aggregation on the report's sample frames: label groups, the rows across groups, and their
bootstrap replicates.

Spec with citations: docs/spec/parser-metrics.md sections 3-4 (upstream ``summarize_{detection,TL,AD}_task.py``,
master c221615 and the newer versions @825344c, @2f20f64, @286f632); the rules themselves are implemented once, in
``medvision_bm.tasks.upstream_metrics``, and this module feeds them:

* Group keys (``group`` column): detection ``label_map_regroup[label_name] @ <modality code> (<S|C|A>)`` (the
  paper-era map for rows scored with the paper rules), T/L ``label_map_rename[label_name] @ ...``, A/D
  ``<dataset>_<metric_type>_<metric_key>`` (``upstream_metrics.group_key`` / ``ad_label``; maps from
  ``data.upstream_configs``). A label upstream's map lacks keeps its own name (upstream raises; a note says so).
* Per group: upstream's keys and denominators (``aggregate_detection`` / ``aggregate_tl`` / ``aggregate_ad``), here
  computed with polars over the group's samples, each mean's sum running over the samples in the frame's order as
  upstream's loop adds them (``upstream_sum``), so the numbers equal the upstream functions' bit for bit. A/D samples whose ground truth is below 0.1 are left out first (newer
  rules: the row's ``near_zero_gt``).
* Rows across groups, per run (point estimates through the upstream functions on the per-group dicts):
  detection ``anatomy`` and ``T/L`` (``anatomy_vs_lesion``: regions under ``MINIMUM_GROUP_SIZE`` = 50 samples or
  named like ``EXCLUDED_KEYS`` left out, the rest sample-weighted), plus ``all regions`` (ours: the same weighted
  mean over every region, so that small runs get a row); T/L ``overall`` (``tl_overall``: groups without a finite
  MRE dropped, MAE/MRE/SR over the remaining samples); A/D ``Distance`` (mm) and ``Angle`` (degrees): the labels of
  one metric type with upstream's group-average rule (``calculate_group_avg``: per metric, sum(value x n) / sum(n)
  over labels with a value). On the benchmark, whose A/D tasks are Ceph-Biometrics-400 and FeTA24 only, these are
  exactly the newer summarizer's ``Distance`` and ``Angle`` rows (which it selects by those dataset names); upstream's
  ``FeTA-Distance``, ``Ceph-Distance`` and ``Ceph-Angle`` rows are added when they hold samples. Upstream's A/D
  "overall" row averages mm with degrees; it is kept only in summary.json, under ``upstream_mixed_overall``.
* Bootstrap: the samples of each task are resampled with replacement (the counts depend on the seed, the task and
  its sample count, so every run of a task shares them: paired), per-group sums are recomputed from the counts
  and the same cross-group rule is applied to each resample. The region sets of the detection rows are the point
  estimate's (a resample never moves a region in or out of ``anatomy``); the T/L rule that drops groups without a
  finite MRE is applied per resample, as in the point estimate.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard

import numpy as np
import polars as pl

from medvision_bm.data import upstream_configs as cfg
from medvision_bm.io import finite_or_none
from medvision_bm.tasks import upstream_groups as ug
from medvision_bm.tasks import upstream_metrics as um
from medvision_bm.tasks.families import family_spec

NAN = float("nan")


@dataclass(frozen=True)
class Stat:
    """One reported statistic: its upstream key, how it is averaged and which way is better.

    ``kind`` "mean": mean over the samples with a finite value (upstream's avgMAE, IoU ...); "rate": a share of all
    samples (SuccessRate, IoU>0.5, MRE<0.1 ...). ``unit``: "error" when it carries the family's error unit.
    """

    name: str
    kind: str
    higher_is_better: bool
    unit: str = ""
    newer_only: bool = False


STATS: dict[str, tuple[Stat, ...]] = {
    "detect": (
        Stat("SuccessRate", "rate", True), Stat("IoU", "mean", True), Stat("F1", "mean", True),
        Stat("Precision", "mean", True), Stat("Recall", "mean", True), Stat("avgMAE", "mean", False, "error"),
        Stat("IoU>0.5", "rate", True), Stat("F1>0.5", "rate", True),
        Stat("Acc@IoU>=0.75", "rate", True, newer_only=True), Stat(um.ACC_IOU_MEAN_KEY, "rate", True, newer_only=True),
    ),
    "TL": (
        Stat("SuccessRate", "rate", True), Stat("avgMAE", "mean", False, "error"), Stat("avgMRE", "mean", False),
        Stat("avgNMAE", "mean", False, newer_only=True), Stat("MRE<0.1", "rate", True), Stat("MRE<0.2", "rate", True),
        Stat("MRE<0.3", "rate", True),
    ),
}
STATS["AD"] = STATS["TL"]

#: The statistic each aggregate row is ranked by.
PRIMARY: dict[str, str] = {"detect": "IoU", "TL": "avgMRE", "AD": "avgMRE"}
#: Aggregate rows per family, in report order (A/D: the named upstream rows only when they hold samples).
AGGREGATES: dict[str, tuple[str, ...]] = {
    "detect": ("anatomy", "T/L", "all regions"),
    "TL": ("overall",),
    "AD": ("Distance", "Angle", "FeTA-Distance", "Ceph-Distance", "Ceph-Angle"),
}
#: Upstream's A/D group rows by label substring ([N-AD] ``print_model_summaries``), in upstream's order of tests.
AD_NAMED_ROWS: tuple[tuple[str, str], ...] = (
    ("FeTA-Distance", "FeTA24_distance"), ("Ceph-Angle", "Ceph-Biometrics-400_angle"),
    ("Ceph-Distance", "Ceph-Biometrics-400_distance"),
)
#: Unit of the error statistics (avgMAE / per-sample MAE) per family.
ERROR_UNIT: dict[str, str] = {"detect": "relative", "TL": "mm", "AD": "mm"}
UNIT_WORDS: dict[str, str] = {"relative": "relative coordinates (fraction of the image side)", "mm": "mm",
                              "degrees": "degrees", "mixed": "mm and degrees (mixed)"}


def ad_unit(metric_type: str | None) -> str:
    return "degrees" if metric_type == "angle" else "mm"


def aggregate_unit(family: str, aggregate: str) -> str:
    if family == "AD":
        return "degrees" if "Angle" in aggregate else "mm"
    return ERROR_UNIT[family]


def era(rules: str | None) -> str:
    return "paper" if rules == "paper" else "newer"


# --------------------------------------------------------------------------------------------- group keys


def _key(family: str, label_name: str | None, modality: str | None, slice_dim: int | None, rules: str | None,
         dataset: str | None, metric_type: str | None, metric_key: str | None) -> tuple[str, str | None]:
    """(upstream group key, a note when upstream's map lacks the label or the plane is unknown)."""
    if family == "AD":
        return ug.ad_label(str(dataset or ""), str(metric_type or ""), str(metric_key or "")), None
    name = str(label_name or "")
    if family == "detect":
        mapping, map_name = cfg.label_map_regroup(era(rules)), "label_map_regroup"
    else:
        mapping, map_name = cfg.label_map_rename(), "label_map_rename"
    note = None
    if name in mapping:
        mapped = mapping[name]
    else:
        mapped = name or "(no label)"
        note = f"label {name!r} is not in upstream's {map_name}; its samples are grouped under their own name"
    try:
        return ug.group_key(mapped, str(modality or ""), slice_dim), note
    except ValueError:
        return f"{mapped} @ {um.MODALITY_CODES.get(str(modality or ''), str(modality or ''))} (?)", \
            f"slice_dim {slice_dim!r} of label {name!r} is not 0, 1 or 2; its plane shows as '?'"


KEY_COLUMNS = ("label_name", "modality", "slice_dim", "rules", "dataset", "metric_type", "metric_key")


def add_group_keys(frame: pl.DataFrame, family: str) -> tuple[pl.DataFrame, list[str]]:
    """The frame with upstream's ``group`` key of every sample; and notes on labels upstream's maps lack."""
    if frame.height == 0:
        return frame.with_columns(pl.lit(None, pl.Utf8).alias("group")), []
    combos = frame.select(KEY_COLUMNS).unique(maintain_order=True)
    keys, notes = [], []
    for row in combos.iter_rows():
        key, note = _key(family, *row)
        keys.append(key)
        if note and note not in notes:
            notes.append(note)
    lookup = combos.with_columns(pl.Series("group", keys, dtype=pl.Utf8))
    fill = [pl.col(c).cast(pl.Utf8).fill_null("\x00") for c in KEY_COLUMNS]
    left = frame.with_columns([f.alias(f"_k{i}") for i, f in enumerate(fill)])
    right = lookup.select([f.alias(f"_k{i}") for i, f in enumerate(fill)] + [pl.col("group")])
    out = left.join(right, on=[f"_k{i}" for i in range(len(KEY_COLUMNS))], how="left", maintain_order="left")
    return out.drop([f"_k{i}" for i in range(len(KEY_COLUMNS))]), notes


# --------------------------------------------------------------------------------------------- per-sample stats


def _ge(name: str, t: float) -> pl.Expr:
    return (pl.col(name) >= t).fill_null(False).cast(pl.Float64)


def stat_exprs(family: str) -> list[pl.Expr]:
    """One Float64 column per statistic of ``STATS[family]``: the sample's value, null where it has none."""
    out: list[pl.Expr] = []
    for s in STATS[family]:
        if s.name == "SuccessRate":
            e = pl.col("success").cast(pl.Float64)
        elif s.name in ("IoU", "F1", "Precision", "Recall"):
            e = pl.col(s.name)
        elif s.name == "avgMAE":
            e = pl.col("MAE")
        elif s.name == "avgMRE":
            e = pl.col("MRE")
        elif s.name == "avgNMAE":
            e = pl.col("nMAE")
        elif s.name.endswith(">0.5"):
            e = _ge(s.name.split(">")[0], 0.5)
        elif s.name.startswith("Acc@IoU>="):
            e = _ge("IoU", float(s.name.split(">=")[1]))
        elif s.name == um.ACC_IOU_MEAN_KEY:
            e = pl.sum_horizontal([_ge("IoU", t) for t in um.COCO_IOU_THRESHOLDS]) / len(um.COCO_IOU_THRESHOLDS)
        elif s.name.startswith("MRE<"):
            k = round(float(s.name[4:]) * 10)
            e = ((pl.col("MRE") * 10) < k).fill_null(False).cast(pl.Float64)
        else:  # pragma: no cover - every stat is listed above
            raise ValueError(s.name)
        out.append(e.alias(s.name))
    return out


def stat_matrix(frame: pl.DataFrame, family: str) -> np.ndarray:
    """(n, J) float64: ``stat_exprs`` of every row, NaN where a sample has no value."""
    return frame.select([e.fill_null(np.nan) for e in stat_exprs(family)]).to_numpy().astype(np.float64)


# --------------------------------------------------------------------------------------------- per group (points)

_DET_OVERLAP = ("IoU", "F1", "Precision", "Recall")


def _upstream_order(family: str, rules: str) -> list[str]:
    """Upstream's key order of one group's dict (from the upstream functions themselves)."""
    if family == "detect":
        return list(um.aggregate_detection([um.DETECTION_FAILURE], rules=rules) or {})
    sample = um.MeasureSample(False, NAN, NAN, NAN, False)
    return list(family_spec(family).aggregate([sample], rules=rules) or {})


def upstream_sum(column: str) -> pl.Expr:
    """The sum of a column's values (nulls left out) added one after another in row order, as upstream's
    summarizers add a group's values in a Python loop (``sum_MAE += value``, ``summarize_TL_task.py`` @28f6c67,
    ``summarize_AD_task.py`` @286f632, ``summarize_detection_task.py``): a running sum is sequential, where
    ``sum()`` adds pairwise and changes the last bit of some means. Null for a group without a value."""
    return pl.col(column).cast(pl.Float64).drop_nulls().cum_sum().last()  # a column of nulls only: dtype Null


def _sum_exprs(family: str) -> list[pl.Expr]:
    """Counts and sums from which every upstream per-group key follows."""
    out = [pl.len().alias("n"), pl.col("success").sum().cast(pl.Int64).alias("n_success")]
    spec = family_spec(family)
    for m in spec.error_metrics:
        out += [upstream_sum(m).alias(f"{m}__s"), pl.col(m).count().alias(f"{m}__c")]
    bucket = spec.bucket_metric
    out += [((pl.col(bucket) * 10) < k).sum().alias(f"b{k}") for k in range(1, 10)]
    if family == "detect":
        for m in _DET_OVERLAP:
            out += [upstream_sum(m).alias(f"{m}__s"), pl.col(m).count().alias(f"{m}__c")]
            out += [(pl.col(m) >= t).sum().alias(f"{m}>{t:.1f}") for t in um.OVERLAP_THRESHOLDS]
        out += [(pl.col("IoU") >= t).sum().alias(um.acc_iou_key(t)) for t in um.COCO_IOU_THRESHOLDS]
    return out


def _mean(s: float | None, c: int) -> float:
    return float(s) / c if c and s is not None else NAN


def _group_dict(family: str, rules: str, r: Mapping[str, Any], order: Sequence[str]) -> dict[str, Any]:
    n = int(r["n"])
    out: dict[str, Any] = {"SuccessRate": r["n_success"] / n, "num_samples": n}
    bucket = family_spec(family).bucket_metric
    finite = int(r[f"{bucket}__c"])
    for k in range(1, 11):
        count = finite if k == 10 else int(r[f"b{k}"])
        out[f"{bucket}<{k / 10:.1f}"] = count / n
    out["avgMAE"] = _mean(r["MAE__s"], int(r["MAE__c"]))
    if family == "detect":
        for m in _DET_OVERLAP:
            out[m] = _mean(r[f"{m}__s"], int(r[f"{m}__c"]))
            for t in um.OVERLAP_THRESHOLDS:
                out[f"{m}>{t:.1f}"] = int(r[f"{m}>{t:.1f}"]) / n
        if rules == "newer":
            acc = [int(r[um.acc_iou_key(t)]) / n for t in um.COCO_IOU_THRESHOLDS]
            for t, v in zip(um.COCO_IOU_THRESHOLDS, acc):
                out[um.acc_iou_key(t)] = v
            out[um.ACC_IOU_MEAN_KEY] = float(np.mean(acc))
    else:
        out["avgMRE"] = _mean(r["MRE__s"], int(r["MRE__c"]))
        if rules == "newer":
            out["avgNMAE"] = _mean(r["nMAE__s"], int(r["nMAE__c"]))
    return {k: out[k] for k in order}


def upstream_dicts(frame: pl.DataFrame, family: str, by: Sequence[str],
                   rules_of: Callable[[tuple[Any, ...]], str]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Upstream's per-group (or per-task) metric dict for each value of ``by`` over the frame's scored rows."""
    if frame.height == 0:
        return {}
    agg = frame.group_by(list(by), maintain_order=True).agg(_sum_exprs(family))
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    orders: dict[str, list[str]] = {}
    for r in agg.iter_rows(named=True):
        key = tuple(r[b] for b in by)
        rules = rules_of(key)
        if rules not in orders:
            orders[rules] = _upstream_order(family, rules)
        out[key] = _group_dict(family, rules, r, orders[rules])
    return out


# --------------------------------------------------------------------------------------------- rows (points)


def _finite(x: Any) -> TypeGuard[float]:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def weighted_mean(groups: Mapping[str, Mapping[str, float]], names: Sequence[str]) -> dict[str, float | None]:
    """Per metric, sum(value x num_samples) / sum(num_samples) over the groups whose value is finite (the rule of
    upstream's detection group means and of its A/D ``calculate_group_avg``)."""
    out: dict[str, float | None] = {}
    for name in names:
        num = den = 0.0
        for m in groups.values():
            v, n = m.get(name), m.get("num_samples", 0)
            if _finite(v):
                num += v * n
                den += n
        out[name] = num / den if den > 0 else None
    return out


@dataclass
class RunRows:
    """One run's upstream rows: per-group dicts, the aggregate rows (stat values, n, groups), and the raw output of
    the upstream functions for summary.json."""

    per_group: dict[str, dict[str, Any]]
    rows: dict[str, dict[str, Any]]
    membership: dict[str, str]  # group key -> the aggregate it enters ("anatomy", "left out: ...")
    selections: dict[str, list[str]]  # aggregate -> the groups it averages (detection, A/D)
    upstream: dict[str, Any] = field(default_factory=dict)


_AD_FIELDS = {"MAE": "avgMAE", "MRE": "avgMRE", "nMAE": "avgNMAE", "SR": "SuccessRate"}
_TL_FIELDS = {"weighted_avg_mae": "avgMAE", "weighted_avg_mre": "avgMRE", "weighted_avg_sr": "SuccessRate",
              "weighted_avg_nmae": "avgNMAE", "weighted_mre<0.1": "MRE<0.1", "weighted_mre<0.2": "MRE<0.2",
              "weighted_mre<0.3": "MRE<0.3"}


def _stat_row(family: str, values: Mapping[str, Any], n: int, n_groups: int, rules: str) -> dict[str, Any]:
    row: dict[str, Any] = {"n": int(n), "n_groups": int(n_groups)}
    for s in STATS[family]:
        row[s.name] = None if (s.newer_only and rules == "paper") else finite_or_none(values.get(s.name))
    return row


def run_rows(family: str, per_group: dict[str, dict[str, Any]], rules: str,
             group_types: Mapping[str, str] | None = None) -> RunRows:
    """The aggregate rows of one run from its per-group dicts, through upstream's cross-group functions."""
    names = [s.name for s in STATS[family]]
    rows: dict[str, dict[str, Any]] = {}
    membership: dict[str, str] = {}
    selections: dict[str, list[str]] = {}
    upstream: dict[str, Any] = {}
    if family == "detect":
        split = ug.anatomy_vs_lesion(per_group) if per_group else {"anatomy": {"mean_metrics": {}, "regions": []},
                                                                   "T/L": {"mean_metrics": {}, "regions": []}}
        for name in ("anatomy", "T/L"):
            mm = split[name]["mean_metrics"]
            rows[name] = _stat_row(family, mm, mm.get("total_samples", 0), mm.get("num_regions", 0), rules)
            selections[name] = list(split[name]["regions"])
            membership.update(dict.fromkeys(split[name]["regions"], name))
            upstream[name] = {"mean_metrics": mm, "regions": list(split[name]["regions"])}
        for g in per_group:
            if g not in membership:
                lower = g.lower()
                why = (f"left out (name has {', '.join(k for k in um.EXCLUDED_KEYS if k in lower)})"
                       if any(k in lower for k in um.EXCLUDED_KEYS)
                       else f"left out (under {um.MINIMUM_GROUP_SIZE} samples)")
                membership[g] = why
        rows["all regions"] = _stat_row(family, weighted_mean(per_group, names),
                                        sum(m["num_samples"] for m in per_group.values()), len(per_group), rules)
        selections["all regions"] = list(per_group)
    elif family == "TL":
        overall = ug.tl_overall(per_group, rules=rules)
        kept = overall["labels"]
        values = {ours: overall.get(theirs) for theirs, ours in _TL_FIELDS.items()}
        rows["overall"] = _stat_row(family, values, overall["total_samples"], len(kept), rules)
        for g in per_group:
            membership[g] = "overall" if g in kept else "left out (no finite MRE)"
        selections["overall"] = list(kept)
        upstream["overall"] = {k: v for k, v in overall.items() if k != "labels"}
    else:
        overall = ug.ad_overall(per_group, rules=rules)
        types = group_types or {}
        for name, mtype in (("Distance", "distance"), ("Angle", "angle")):
            sel = {g: m for g, m in per_group.items() if types.get(g) == mtype}
            n = sum(m["num_samples"] for m in sel.values())
            rows[name] = _stat_row(family, weighted_mean(sel, names), n, len(sel), rules)
            selections[name] = list(sel)
            membership.update(dict.fromkeys(sel, name))
        for name, _needle in AD_NAMED_ROWS:
            avg = overall["group_averages"].get(name) or {}
            if avg.get("samples"):
                values = {ours: avg.get(theirs) for theirs, ours in _AD_FIELDS.items()}
                values.update({k: avg.get(k) for k in ("MRE<0.1", "MRE<0.2", "MRE<0.3")})
                named = [lb for lb in per_group if _named_row(lb) == name]
                rows[name] = _stat_row(family, values, avg["samples"], len(named), rules)
                selections[name] = named
        upstream["group_averages"] = overall["group_averages"]
        upstream["upstream_mixed_overall"] = {
            "note": "upstream's A/D overall row: a sample-weighted mean over every label, mixing distances (mm) and "
                    "angles (degrees); not shown in any table or plot",
            **{k: v for k, v in overall.items() if k not in ("labels", "group_averages")}}
    return RunRows(per_group, rows, membership, selections, upstream)


def _named_row(label: str) -> str | None:
    """Which of upstream's named A/D rows a label enters (the first match, as upstream's if/elif chain)."""
    for name, needle in AD_NAMED_ROWS:
        if needle in label:
            return name
    return None


# --------------------------------------------------------------------------------------------- bootstrap


@dataclass
class Replicates:
    """Bootstrap replicates of one family: per store (task) the J stats, per run the per-group and row stats."""

    stats: tuple[Stat, ...]
    store: dict[int, np.ndarray]  # store -> (B, J)
    groups: dict[str, tuple[list[str], np.ndarray]]  # run label -> (group keys, (B, G, J))
    rows: dict[str, dict[str, np.ndarray]]  # run label -> aggregate -> (B, J)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den where den > 0, else NaN (one pass; laid out as ``num``)."""
    out = np.full_like(num, np.nan, dtype=np.float64)
    return np.divide(num, den, out=out, where=den > 0)


class _Columns:
    """Layout of the summed columns: J filled stat values, then one validity mask per distinct validity pattern of
    the "mean" stats (a stat valid on every sample shares the last column, the ones: its count is N), then ones."""

    def __init__(self, stats: Sequence[Stat], values: np.ndarray) -> None:
        self.J = len(stats)
        valid = ~np.isnan(values)
        masks: list[np.ndarray] = []
        self.mask_of: dict[int, int] = {}  # mean stat -> index of its mask column; -1: the ones column
        for j, s in enumerate(stats):
            if s.kind != "mean":
                continue
            col = valid[:, j]
            if col.all():
                self.mask_of[j] = -1
                continue
            same = next((i for i, m in enumerate(masks) if np.array_equal(m, col)), None)
            if same is None:
                masks.append(col)
                same = len(masks) - 1
            self.mask_of[j] = same
        self.masks = masks
        self.width = self.J + len(masks) + 1

    def build(self, values: np.ndarray) -> np.ndarray:
        parts = [np.nan_to_num(values, nan=0.0)]
        if self.masks:
            parts.append(np.column_stack(self.masks).astype(np.float64))
        parts.append(np.ones((values.shape[0], 1)))
        return np.hstack(parts)

    def _den_index(self, j: int) -> int:
        m = self.mask_of.get(j, -1)
        return self.width - 1 if m < 0 else self.J + m

    def stats_of(self, sums: np.ndarray) -> np.ndarray:
        """(..., width) sums -> (..., J) stats: mean stats over their valid count, rates over N."""
        den = sums[..., [self._den_index(j) for j in range(self.J)]]
        return _ratio(sums[..., :self.J], den)

    def counts_of(self, sums: np.ndarray, j: int) -> np.ndarray:
        """The denominator of stat j (valid count for a mean stat, N for a rate)."""
        return sums[..., self._den_index(j)]


def _rows_from_groups(family: str, stats: Sequence[Stat], cols: _Columns, sums: np.ndarray, keys: list[str],
                      rr: RunRows) -> dict[str, np.ndarray]:
    """(B, G, width) per-group sums of one run -> per aggregate row (B, J), with the point estimate's rules."""
    v = cols.stats_of(sums)  # (B, G, J)
    w = sums[..., -1]  # (B, G)
    finite = np.isfinite(v)
    index = {g: i for i, g in enumerate(keys)}
    out: dict[str, np.ndarray] = {}

    vf = np.where(finite, v, 0.0)  # v * weight where finite, else 0: the same products, for every selection

    def weighted(sel: np.ndarray, total_for: Sequence[int] = ()) -> np.ndarray:
        ww = w * sel  # (B, G)
        num = (vf * ww[..., None]).sum(axis=1)
        den = (finite * ww[..., None]).sum(axis=1)
        if total_for:
            total = ww.sum(axis=1)
            for j in total_for:
                den[:, j] = total
        return _ratio(num, den)

    if family == "TL":
        mre = next(j for j, s in enumerate(stats) if s.name == "avgMRE")
        keep = (cols.counts_of(sums, mre) > 0) & (w > 0)
        in_rows = np.zeros(len(keys), bool)
        in_rows[[index[g] for g in rr.per_group]] = True
        mae = next(j for j, s in enumerate(stats) if s.name == "avgMAE")
        sr = next(j for j, s in enumerate(stats) if s.name == "SuccessRate")
        out["overall"] = weighted(keep & in_rows[None, :], total_for=(mae, mre, sr))
        return out
    for name, sel_keys in rr.selections.items():
        sel = np.zeros(len(keys), bool)
        sel[[index[g] for g in sel_keys if g in index]] = True
        out[name] = weighted(np.broadcast_to(sel[None, :], w.shape))
    return out


class CountBlocks(Protocol):
    """Resampling counts of a task as blocks of resamples (``bootstrap.Resampler``)."""

    @property
    def n_boot(self) -> int: ...

    def blocks(self, n: int, stream: str, order: np.ndarray | None = None) -> Iterable[np.ndarray]: ...


def replicates(family: str, frame: pl.DataFrame, store_label: Mapping[int, str], store_task: Mapping[int, str],
               run_rows_of: Mapping[str, RunRows], resampler: CountBlocks) -> Replicates:
    """Bootstrap replicates of every task, group and aggregate row of one family.

    ``frame``: the scored rows, sorted by (store, index), with the ``group`` column. ``resampler.blocks(n, stream,
    order)`` gives the (B, n) resampling counts of a task's n samples, columns in ``order``, as consecutive blocks of
    rows, B = ``resampler.n_boot`` in all (``bootstrap.Resampler``; tests pass one block of ones to get the point
    estimate back): every block is summed on its own, so memory holds one block of counts, not all of them.
    """
    stats = STATS[family]
    raw = stat_matrix(frame, family)
    cols = _Columns(stats, raw)
    values = cols.build(raw)
    store_ids = frame["store"].to_numpy()
    groups = frame["group"].to_list()
    starts = np.flatnonzero(np.r_[True, store_ids[1:] != store_ids[:-1]]) if len(store_ids) else np.array([], int)
    ends = np.r_[starts[1:], len(store_ids)]
    # runs' group keys, in first-seen order
    run_keys: dict[str, dict[str, int]] = defaultdict(dict)
    for s, e in zip(starts, ends):
        keys = run_keys[store_label[int(store_ids[s])]]
        for g in dict.fromkeys(groups[s:e]):
            keys.setdefault(g, len(keys))
    buckets: dict[tuple[Any, ...], list[tuple[int, int, int]]] = defaultdict(list)
    for s, e in zip(starts, ends):
        sid = int(store_ids[s])
        buckets[(store_task[sid], int(e - s), tuple(groups[s:e]))].append((sid, int(s), int(e)))
    # One accumulator for every run's groups, laid out (slot, B, width): a slot (a run's group) holds its sums in one
    # contiguous block. A bucket's stores (runs of one task on the same samples) are summed in one product per group
    # segment, each store's columns added in place to its slot's rows (in store order), and their task replicates
    # made in one call.
    slot_base: dict[str, int] = {}
    at = 0
    for label, keys in run_keys.items():
        slot_base[label] = at
        at += len(keys)
    width = cols.width
    n_boot = resampler.n_boot
    acc = np.zeros((at, n_boot, width)) if at else None
    store_reps: dict[int, np.ndarray] = {}
    for (task, n, gvec), members in sorted(buckets.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        codes = {g: i for i, g in enumerate(dict.fromkeys(gvec))}
        gid = np.fromiter((codes[g] for g in gvec), dtype=np.int64, count=n)
        order = np.argsort(gid, kind="stable")
        sorted_gid = gid[order]
        bounds = np.flatnonzero(np.r_[True, sorted_gid[1:] != sorted_gid[:-1]]) if n else np.array([], int)
        seg_ends = np.r_[bounds[1:], n]
        inverse = {i: g for g, i in codes.items()}
        # every store of the bucket at once: one product per group segment (wider products run much faster)
        ys = np.hstack([values[s:e][order] for _, s, e in members])
        totals = np.zeros((n_boot, ys.shape[1]))
        labels = [store_label[sid] for sid, _, _ in members]
        seg_slots = []
        for a in bounds:
            g = inverse[int(sorted_gid[a])]
            seg_slots.append([slot_base[label] + run_keys[label][g] for label in labels])
        r0 = 0
        for ks in resampler.blocks(n, f"{family}/{task}", order):  # float64, samples in group order
            r1 = r0 + ks.shape[0]
            for (a, b), slots in zip(zip(bounds, seg_ends), seg_slots):
                part = ks[:, a:b] @ ys[a:b]
                totals[r0:r1] += part
                block = part.reshape(r1 - r0, len(labels), width)
                assert acc is not None
                for i, slot in enumerate(slots):  # two stores of one run and task: both added, in order
                    acc[slot, r0:r1] += block[:, i]
            r0 = r1
        if r0 != n_boot:
            raise ValueError(f"the resampler gave {r0} resamples of {family}/{task}, not {n_boot}")
        per_store = cols.stats_of(totals.reshape(n_boot, len(members), width))  # (B, stores, J)
        for i, (sid, _, _) in enumerate(members):
            store_reps[sid] = per_store[:, i, :]
    out_groups: dict[str, tuple[list[str], np.ndarray]] = {}
    out_rows: dict[str, dict[str, np.ndarray]] = {}
    for label, keys_of in run_keys.items():
        if acc is None:
            break
        group_keys = list(keys_of)
        # (B, G, width), resamples innermost in memory: the layout every later sum over groups was made with
        run_sums = np.ascontiguousarray(acc[slot_base[label]:slot_base[label] + len(group_keys)].transpose(0, 2, 1)
                                        ).transpose(2, 0, 1)
        out_groups[label] = (group_keys, cols.stats_of(run_sums))
        if label in run_rows_of:
            out_rows[label] = _rows_from_groups(family, stats, cols, run_sums, group_keys, run_rows_of[label])
    return Replicates(stats, store_reps, out_groups, out_rows)
