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
* Bootstrap (``report.replicates``): the samples of each task are resampled with replacement (the counts depend on the seed, the task and
  its sample count, so every run of a task shares them: paired), per-group sums are recomputed from the counts
  and the same cross-group rule is applied to each resample. The region sets of the detection rows are the point
  estimate's (a resample never moves a region in or out of ``anatomy``); the T/L rule that drops groups without a
  finite MRE is applied per resample, as in the point estimate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import numpy as np
import polars as pl

from medvision_bm.data import upstream_configs as cfg
from medvision_bm.io import finite_or_none
from medvision_bm.tasks import upstream_groups as ug
from medvision_bm.tasks import upstream_metrics as um
from medvision_bm.tasks.families import FamilyView, family_spec
from medvision_bm.tasks.metrics import Stat

NAN = float("nan")


#: The report's statistics of each family (``FamilySpec.stats``: the success rate, each metric record's mean, then
#: upstream's rates) and the statistic its aggregate rows are ranked by; the error unit is ``FamilySpec.error_unit``.
STATS: Mapping[str, tuple[Stat, ...]] = FamilyView(lambda s: s.stats)
PRIMARY: Mapping[str, str] = FamilyView(lambda s: s.primary)
#: Aggregate rows per family, in report order (``FamilySpec.aggregates``).
AGGREGATES: Mapping[str, tuple[str, ...]] = FamilyView(lambda s: s.aggregates)
#: Upstream's A/D group rows by label substring ([N-AD] ``print_model_summaries``), in upstream's order of tests.
AD_NAMED_ROWS: tuple[tuple[str, str], ...] = (
    ("FeTA-Distance", "FeTA24_distance"), ("Ceph-Angle", "Ceph-Biometrics-400_angle"),
    ("Ceph-Distance", "Ceph-Biometrics-400_distance"),
)
UNIT_WORDS: dict[str, str] = {"relative": "relative coordinates (fraction of the image side)", "mm": "mm",
                              "degrees": "degrees", "mixed": "mm and degrees (mixed)"}
#: A unit's name in a title or a running line, where it differs from its key.
UNIT_NAMES: dict[str, str] = {"relative": "relative coordinates"}


def unit_name(unit: str) -> str:
    return UNIT_NAMES.get(unit, unit)


def units_line(family: str) -> str:
    """The error unit of ``family`` in ``summary.json`` ("mm", "mm (distance) or degrees (angle)")."""
    spec = family_spec(family)
    named = spec.named_units
    return " or ".join(f"{UNIT_WORDS[u]} ({k})" for k, u in named) if named else UNIT_WORDS[spec.error_unit()]


def units_title(family: str) -> str:
    """The error unit of ``family`` in a plot title ("mm", "mm for distances, degrees for angles")."""
    spec = family_spec(family)
    named = spec.named_units
    return ", ".join(f"{unit_name(u)} for {k}s" for k, u in named) if named else unit_name(spec.error_unit())


def ad_unit(metric_type: str | None) -> str:
    return family_spec("AD").error_unit(metric_type)


def aggregate_unit(family: str, aggregate: str) -> str:
    """The error unit of an aggregate row (A/D: its metric type, named in the row: Distance, Ceph-Angle ...)."""
    spec = family_spec(family)
    return spec.error_unit("angle" if spec.per_metric and "Angle" in aggregate else None)


def era(rules: str | None) -> str:
    return "paper" if rules == "paper" else "newer"


# --------------------------------------------------------------------------------------------- group keys


def _map_name(family: str) -> str:
    """Upstream's label map a region group of ``family`` is named by (detection regroups, T/L renames)."""
    return "label_map_regroup" if family_spec(family).has_boxes else "label_map_rename"


def key_recipe(family: str) -> str:
    """How ``_key`` names a group of ``family`` (the group table's caption)."""
    if family_spec(family).per_metric:
        return "<dataset>_<metric_type>_<metric_key>"
    return f"{_map_name(family)}[label] @ modality (plane)"


def _key(family: str, label_name: str | None, modality: str | None, slice_dim: int | None, rules: str | None,
         dataset: str | None, metric_type: str | None, metric_key: str | None) -> tuple[str, str | None]:
    """(upstream group key, a note when upstream's map lacks the label or the plane is unknown)."""
    if family_spec(family).per_metric:
        return ug.ad_label(str(dataset or ""), str(metric_type or ""), str(metric_key or "")), None
    name = str(label_name or "")
    map_name = _map_name(family)
    mapping = cfg.label_map_regroup(era(rules)) if family_spec(family).has_boxes else cfg.label_map_rename()
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
        elif s.kind == "mean":
            e = pl.col(s.column)
        elif s.name.endswith(">0.5"):
            e = _ge(s.name.split(">")[0], 0.5)
        elif s.name.startswith("Acc@IoU>="):
            e = _ge("IoU", float(s.name.split(">=")[1]))
        elif s.name == um.ACC_IOU_MEAN_KEY:
            e = pl.sum_horizontal([_ge("IoU", t) for t in um.COCO_IOU_THRESHOLDS]) / len(um.COCO_IOU_THRESHOLDS)
        elif s.name.startswith("MRE<"):
            k = round(float(s.name[4:]) * 10)
            e = ((pl.col("MRE") * 10) < k).fill_null(False).cast(pl.Float64)
        else:  # pragma: no cover - every rate of the family records is listed above
            raise ValueError(s.name)
        out.append(e.alias(s.name))
    return out


def stat_matrix(frame: pl.DataFrame, family: str) -> np.ndarray:
    """(n, J) float64: ``stat_exprs`` of every row, NaN where a sample has no value."""
    return frame.select([e.fill_null(np.nan) for e in stat_exprs(family)]).to_numpy().astype(np.float64)


# --------------------------------------------------------------------------------------------- per group (points)

def _overlap(family: str) -> tuple[str, ...]:
    """The metrics upstream averages per group besides its error metrics (detection's IoU, F1, Precision, Recall)."""
    spec = family_spec(family)
    return tuple(m for m in spec.upstream_metrics if m not in spec.error_metrics)


def ours(family: str) -> list[Stat]:
    """The family's mean statistics of metrics upstream's aggregation lacks: ours, the mean over the samples with a
    value, in each group and (sample-weighted over groups) in each aggregate row."""
    spec = family_spec(family)
    return [s for s in spec.stats if s.kind == "mean" and s.column not in spec.upstream_metrics]


def _upstream_order(family: str, rules: str) -> list[str]:
    """Upstream's key order of one group's dict (from the upstream functions themselves)."""
    spec = family_spec(family)
    sample = um.MeasureSample(False, NAN, NAN, NAN, False) if spec.measure else um.DETECTION_FAILURE
    return list(spec.aggregate([sample], rules=rules) or {})


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
    for m in _overlap(family):
        out += [upstream_sum(m).alias(f"{m}__s"), pl.col(m).count().alias(f"{m}__c")]
        out += [(pl.col(m) >= t).sum().alias(f"{m}>{t:.1f}") for t in um.OVERLAP_THRESHOLDS]
    if not spec.measure:
        out += [(pl.col("IoU") >= t).sum().alias(um.acc_iou_key(t)) for t in um.COCO_IOU_THRESHOLDS]
    for st in ours(family):
        out += [upstream_sum(st.column).alias(f"{st.column}__s"), pl.col(st.column).count().alias(f"{st.column}__c")]
    return out


#: Upstream's metric dict of one group (or task): its keys in upstream's order, each a number (NaN: no value).
GroupDict = dict[str, float]
#: An aggregate row of a run: per statistic its value (None: none), with its ``n`` and ``n_groups``.
StatRow = dict[str, float | None]


class _GroupDictRecipe:
    """How upstream's dict of one group follows from its sums row (``_sum_exprs``) under one family's rules: the
    key names worked out once, then ``of`` for many groups (the same quotients, in the same order, as upstream's)."""

    def __init__(self, family: str, rules: str) -> None:
        spec = family_spec(family)
        self.rules = rules
        self.measure = spec.measure
        bucket = spec.bucket_metric
        self.finite_key = f"{bucket}__c"
        self.bucket_keys = [(f"{bucket}<{k / 10:.1f}", None if k == 10 else f"b{k}") for k in range(1, 11)]
        self.overlap = [(m, f"{m}__s", f"{m}__c", [f"{m}>{t:.1f}" for t in um.OVERLAP_THRESHOLDS])
                        for m in _overlap(family)]
        self.acc_keys = [um.acc_iou_key(t) for t in um.COCO_IOU_THRESHOLDS]
        self.order = _upstream_order(family, rules)
        self.ours = [(st.name, f"{st.column}__s", f"{st.column}__c") for st in ours(family)
                     if not (st.newer_only and rules == "paper")]

    def of(self, sums: pl.DataFrame) -> list[GroupDict]:
        """Upstream's dict of each group (a row of ``sums``, in its order), its quotients worked out a column at a
        time (each the division of the same two numbers as one group's alone; counts stay ints; a mean over no
        value, or over a missing sum, is NaN)."""
        if sums.height == 0:
            return []

        def count(key: str) -> np.ndarray:
            return sums[key].cast(pl.Int64).to_numpy()

        def mean(sum_key: str, count_key: str) -> np.ndarray:
            total = sums[sum_key].cast(pl.Float64).to_numpy()  # NaN where null: NaN / c
            c = count(count_key)
            return np.where(c != 0, total / np.where(c != 0, c, 1), NAN)

        n = count("n")
        out: dict[str, Any] = {"SuccessRate": count("n_success") / n, "num_samples": n.tolist()}
        finite = count(self.finite_key)
        for key, count_key in self.bucket_keys:
            out[key] = (finite if count_key is None else count(count_key)) / n
        out["avgMAE"] = mean("MAE__s", "MAE__c")
        if not self.measure:
            for m, sum_key, count_key, above_keys in self.overlap:
                out[m] = mean(sum_key, count_key)
                for key in above_keys:
                    out[key] = count(key) / n
            if self.rules == "newer":
                acc = [count(key) / n for key in self.acc_keys]
                for key, v in zip(self.acc_keys, acc):
                    out[key] = v
                out[um.ACC_IOU_MEAN_KEY] = np.mean(np.column_stack(acc), axis=1)  # per row, as np.mean of its list
        else:
            out["avgMRE"] = mean("MRE__s", "MRE__c")
            if self.rules == "newer":
                out["avgNMAE"] = mean("nMAE__s", "nMAE__c")
        names = [*self.order, *(name for name, _, _ in self.ours)]
        for name, sum_key, count_key in self.ours:  # after upstream's keys, which stay upstream's
            out[name] = mean(sum_key, count_key)
        columns = [v if isinstance(v, list) else v.tolist() for v in (out[k] for k in names)]
        return [dict(zip(names, row)) for row in zip(*columns)]


#: The values of the ``by`` columns of one group (labels, task names, bins), of whatever types those columns hold.
GroupKey = tuple[Any, ...]


def upstream_dicts(frame: pl.DataFrame, family: str, by: Sequence[str],
                   rules_of: Callable[[GroupKey], str]) -> dict[GroupKey, GroupDict]:
    """Upstream's per-group (or per-task) metric dict for each value of ``by`` over the frame's scored rows."""
    if frame.height == 0:
        return {}
    agg = frame.group_by(list(by), maintain_order=True).agg(_sum_exprs(family))
    keys = list(zip(*(agg[b].to_list() for b in by)))
    rules = [rules_of(key) for key in keys]
    dicts: list[GroupDict] = [{} for _ in keys]
    for era_rules in dict.fromkeys(rules):  # the groups of each rules, a column at a time
        at = [i for i, r in enumerate(rules) if r == era_rules]
        for i, d in zip(at, _GroupDictRecipe(family, era_rules).of(agg[at])):
            dicts[i] = d
    return dict(zip(keys, dicts))


# --------------------------------------------------------------------------------------------- rows (points)


def _finite(x: object) -> TypeGuard[float]:
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

    per_group: dict[str, GroupDict]
    rows: dict[str, StatRow]
    membership: dict[str, str]  # group key -> the aggregate it enters ("anatomy", "left out: ...")
    selections: dict[str, list[str]]  # aggregate -> the groups it averages (detection, A/D)
    upstream: dict[str, object] = field(default_factory=dict)


_AD_FIELDS = {"MAE": "avgMAE", "MRE": "avgMRE", "nMAE": "avgNMAE", "SR": "SuccessRate"}
_TL_FIELDS = {"weighted_avg_mae": "avgMAE", "weighted_avg_mre": "avgMRE", "weighted_avg_sr": "SuccessRate",
              "weighted_avg_nmae": "avgNMAE", "weighted_mre<0.1": "MRE<0.1", "weighted_mre<0.2": "MRE<0.2",
              "weighted_mre<0.3": "MRE<0.3"}


def _stat_row(family: str, values: Mapping[str, object], n: float, n_groups: int, rules: str) -> StatRow:
    row: StatRow = {"n": int(n), "n_groups": int(n_groups)}
    for s in STATS[family]:
        row[s.name] = None if (s.newer_only and rules == "paper") else finite_or_none(values.get(s.name))
    return row


def run_rows(family: str, per_group: dict[str, GroupDict], rules: str,
             group_types: Mapping[str, str] | None = None) -> RunRows:
    """The aggregate rows of one run from its per-group dicts, through upstream's cross-group functions."""
    names = [s.name for s in STATS[family]]
    rows: dict[str, StatRow] = {}
    membership: dict[str, str] = {}
    selections: dict[str, list[str]] = {}
    upstream: dict[str, object] = {}
    if family_spec(family).has_boxes:
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
    elif family_spec(family).axes:
        overall = ug.tl_overall(per_group, rules=rules)
        kept = overall["labels"]
        values = {our: overall.get(theirs) for theirs, our in _TL_FIELDS.items()}
        values.update(weighted_mean({g: per_group[g] for g in kept}, [st.name for st in ours(family)]))
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
                values = {our: avg.get(theirs) for theirs, our in _AD_FIELDS.items()}
                values.update({k: avg.get(k) for k in ("MRE<0.1", "MRE<0.2", "MRE<0.3")})
                named = [lb for lb in per_group if _named_row(lb) == name]
                values.update(weighted_mean({g: per_group[g] for g in named}, [st.name for st in ours(family)]))
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
