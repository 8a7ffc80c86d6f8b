"""Upstream MedVision's label-group aggregation: group keys, the weighted group means, anatomy vs lesion, the T/L
and A/D overall rows (upstream ``summarize_{detection,TL,AD}_task.py``; spec: docs/spec/parser-metrics.md sections
3-4). The per-sample and per-task metrics these group are in ``upstream_metrics``."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from medvision_bm.tasks.upstream_metrics import (
    _PLANE_NAMES,
    EXCLUDED_KEYS,
    MINIMUM_GROUP_SIZE,
    MODALITY_CODES,
    NAN,
    PLANE_CODES,
    TUMOR_LESION_GROUP_KEYS,
    DetectionSample,
    MeasureSample,
    _check_rules,
    _finite,
    aggregate_ad,
    aggregate_detection,
    aggregate_tl,
)


@dataclass(frozen=True)
class GroupRecord:
    """One scored sample with what upstream groups it by.

    Detection/T/L: ``label`` = the label name from the dataset plan's ``labels_map`` (regrouped or renamed through
    ``label_map`` when one is given), ``modality`` = the plan's ``image_modality``, ``plane`` = ``slice_dim``
    (0/1/2) or a plane name/letter. A/D: ``label`` = ``metric_key``, plus ``dataset`` and ``metric_type``.
    """

    family: str
    label: str
    sample: DetectionSample | MeasureSample
    modality: str = ""
    plane: int | str | None = None
    dataset: str = ""
    metric_type: str = ""


def plane_code(plane: int | str | None) -> str:
    """``S``/``C``/``A`` from a slice_dim or a plane name."""
    if isinstance(plane, int) and not isinstance(plane, bool) and plane in PLANE_CODES:
        return PLANE_CODES[plane]
    if isinstance(plane, str) and plane.strip().lower() in _PLANE_NAMES:
        return _PLANE_NAMES[plane.strip().lower()]
    raise ValueError(f"Unknown slice dimension: {plane!r}")


def group_key(label: str, modality: str, plane: int | str | None) -> str:
    """``"<label> @ <modality code> (<S|C|A>)"``, e.g. ``"Kidney @ CT (A)"``."""
    return f"{label} @ {MODALITY_CODES.get(modality, modality)} ({plane_code(plane)})"


_Sample = TypeVar("_Sample", DetectionSample, MeasureSample)


def _group(records: Iterable[GroupRecord], family: str, key_of: Callable[[GroupRecord], str],
           kind: type[_Sample]) -> dict[str, list[_Sample]]:
    groups: dict[str, list[_Sample]] = {}
    for r in records:
        if r.family != family:
            raise ValueError(f"record of family {r.family!r} given to the {family} aggregation")
        sample = r.sample
        if not isinstance(sample, kind):
            raise ValueError(f"record of family {family!r} holds a {type(sample).__name__}, not a {kind.__name__}")
        groups.setdefault(key_of(r), []).append(sample)
    return groups


def _of_group(metrics: dict[str, float] | None) -> dict[str, float]:
    """A group's aggregate: never None, since every group holds a sample (None is the aggregate of none)."""
    assert metrics is not None
    return metrics


def _mapped(label: str, label_map: Mapping[str, str] | None, map_name: str) -> str:
    if label_map is None:
        return label
    if label not in label_map:
        raise ValueError(f"Label '{label}' not found in {map_name}")
    return label_map[label]


def _weighted_group_mean(group: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Sample-weighted mean of every metric over regions (NaN/inf values skipped per metric)."""
    if not group:
        return {}
    values: dict[str, list[float]] = {}
    weights: dict[str, list[float]] = {}
    total: float = 0
    for metrics in group.values():
        n = metrics.get("num_samples", 0)
        for name, value in metrics.items():
            if name == "num_samples":
                total += value
            elif _finite(value):
                values.setdefault(name, []).append(value)
                weights.setdefault(name, []).append(n)
    out: dict[str, float] = {}
    for name, vals in values.items():
        w = np.array(weights[name])
        if np.sum(w) <= 0:
            raise ValueError(f"No valid samples for metric {name}")
        out[name] = float(np.sum(np.array(vals) * w) / np.sum(w))
    out["total_samples"] = total
    out["num_regions"] = len(group)
    return out


def anatomy_vs_lesion(per_group: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, Any]]:
    """Upstream's detection split of region rows into ``anatomy`` and ``T/L`` with sample-weighted means."""
    anatomy: dict[str, Mapping[str, float]] = {}
    lesion: dict[str, Mapping[str, float]] = {}
    for region, metrics in per_group.items():
        lower = region.lower()
        if any(key in lower for key in EXCLUDED_KEYS) or metrics["num_samples"] < MINIMUM_GROUP_SIZE:
            continue
        (lesion if any(key in lower for key in TUMOR_LESION_GROUP_KEYS) else anatomy)[region] = metrics
    return {
        name: {"mean_metrics": _weighted_group_mean(group), "regions": list(group), "detailed_data": dict(group)}
        for name, group in (("anatomy", anatomy), ("T/L", lesion))
    }


def summarize_detection_groups(
    records: Iterable[GroupRecord], *, label_map: Mapping[str, str] | None = None, rules: str = "newer"
) -> dict[str, Any]:
    """Per-region rows keyed ``"<group> @ <mod> (<plane>)"`` (``label_map`` = upstream ``label_map_regroup``)
    and the anatomy / T/L rows: ``{"groups": {...}, "anatomy": {...}, "T/L": {...}}``."""
    _check_rules(rules)
    groups = _group(
        records, "detect", lambda r: group_key(_mapped(r.label, label_map, "label_map_regroup"), r.modality, r.plane),
        DetectionSample,
    )
    per_group = {key: _of_group(aggregate_detection(samples, rules=rules)) for key, samples in groups.items()}
    return {"groups": per_group, **anatomy_vs_lesion(per_group)}


def _wsum(rows: Iterable[tuple[float | None, float]]) -> tuple[float, float]:
    """Sequential sum of value*n and of n over rows whose value is neither None nor NaN."""
    total: float = 0.0
    weight: float = 0
    for value, n in rows:
        if value is not None and not math.isnan(value):
            total += value * n
            weight += n
    return total, weight


def _wavg(rows: Iterable[tuple[float | None, float]]) -> float | None:
    total, weight = _wsum(rows)
    return total / weight if weight > 0 else None


_MRE_HEAD = ("MRE<0.1", "MRE<0.2", "MRE<0.3")


def tl_overall(per_group: Mapping[str, Mapping[str, float]], *, rules: str = "newer") -> dict[str, Any]:
    """The T/L model row: groups without a finite ``avgMRE`` are dropped entirely, the rest sample-weighted."""
    _check_rules(rules)
    labels: dict[str, dict[str, Any]] = {}
    for label, m in per_group.items():
        mre, n = m.get("avgMRE"), m.get("num_samples", 0)
        if mre is None or math.isnan(mre) or n <= 0:
            continue
        labels[label] = {"mae": m.get("avgMAE"), "mre": mre, "sr": m.get("SuccessRate"), "samples": n}
        if rules == "newer":
            labels[label]["nmae"] = m.get("avgNMAE")
        labels[label].update({key: m.get(key) for key in _MRE_HEAD})
    total = 0
    sum_mae = sum_mre = sum_sr = 0.0
    for row in labels.values():
        if row["mae"] is not None and not math.isnan(row["mae"]):
            sum_mae += row["mae"] * row["samples"]
        sum_mre += row["mre"] * row["samples"]
        sum_sr += row["sr"] * row["samples"]
        total += row["samples"]
    out: dict[str, Any] = {
        "total_samples": total,
        "weighted_avg_mae": sum_mae / total if total > 0 else None,
        "weighted_avg_mre": sum_mre / total if total > 0 else None,
        "weighted_avg_sr": sum_sr / total if total > 0 else None,
    }
    if rules == "newer":
        out["weighted_avg_nmae"] = _wavg((row["nmae"], row["samples"]) for row in labels.values())
    for key in _MRE_HEAD:
        out[f"weighted_{key.lower()}"] = _wavg((row[key], row["samples"]) for row in labels.values())
    out["labels"] = labels
    return out


def summarize_tl_groups(
    records: Iterable[GroupRecord], *, label_map: Mapping[str, str] | None = None, rules: str = "newer"
) -> dict[str, Any]:
    """Per-label rows keyed ``"<label> @ <mod> (<plane>)"`` (``label_map`` = upstream ``label_map_rename``)
    and the sample-weighted model row: ``{"groups": {...}, "overall": {...}}``."""
    _check_rules(rules)
    groups = _group(
        records, "TL", lambda r: group_key(_mapped(r.label, label_map, "label_map_rename"), r.modality, r.plane),
        MeasureSample,
    )
    per_group = {key: _of_group(aggregate_tl(samples, rules=rules)) for key, samples in groups.items()}
    return {"groups": per_group, "overall": tl_overall(per_group, rules=rules)}


_AD_GROUP_FIELDS = ("MAE", "MRE", "nMAE", "SR", *_MRE_HEAD)


def _ad_group_avg(rows: list[dict[str, Any]], fields: Sequence[str]) -> dict[str, Any]:
    total = sum(row["samples"] for row in rows)
    if not rows or total == 0:
        return {**dict.fromkeys(fields, NAN), "samples": 0}
    out: dict[str, Any] = {}
    for field in fields:
        value = _wavg((row.get(field), row["samples"]) for row in rows)
        out[field] = NAN if value is None else value
    out["samples"] = total
    return out


def ad_overall(per_label: Mapping[str, Mapping[str, float]], *, rules: str = "newer") -> dict[str, Any]:
    """The A/D model row and its group rows (FeTA-Distance, Ceph-Angle, Ceph-Distance; newer: Distance, Angle).

    The overall ``weighted_avg_mae/mre/sr`` divide by every label's samples, NaN labels included, and mix mm with
    degrees, as upstream does; the group rows are the ones to read.
    """
    _check_rules(rules)
    newer = rules == "newer"
    labels: dict[str, dict[str, Any]] = {}
    for label, m in per_label.items():
        n = m.get("num_samples", 0)
        if n is None or n <= 0:
            continue
        row: dict[str, Any] = {"MAE": m.get("avgMAE"), "MRE": m.get("avgMRE")}
        if newer:
            row["nMAE"] = m.get("avgNMAE")
        row.update({"SR": m.get("SuccessRate"), "samples": n, "task_type": "A/D"})
        row.update({key: m.get(key) for key in _MRE_HEAD})
        labels[label] = row
    total = sum(row["samples"] for row in labels.values())
    out: dict[str, Any] = {"total_samples": total}
    for field, key in (("MAE", "weighted_avg_mae"), ("MRE", "weighted_avg_mre"), ("SR", "weighted_avg_sr")):
        weighted, _ = _wsum((row[field], row["samples"]) for row in labels.values())
        out[key] = weighted / total if total > 0 else None
    if newer:
        out["weighted_avg_nmae"] = _wavg((row["nMAE"], row["samples"]) for row in labels.values())
    for key in _MRE_HEAD:
        out[f"weighted_{key.lower()}"] = _wavg((row[key], row["samples"]) for row in labels.values())
    feta_d, ceph_a, ceph_d = [], [], []
    for label, row in labels.items():
        if "FeTA24_distance" in label:
            feta_d.append(row)
        elif "Ceph-Biometrics-400_angle" in label:
            ceph_a.append(row)
        elif "Ceph-Biometrics-400_distance" in label:
            ceph_d.append(row)
    fields = _AD_GROUP_FIELDS if newer else tuple(f for f in _AD_GROUP_FIELDS if f != "nMAE")
    groups = {
        "FeTA-Distance": _ad_group_avg(feta_d, fields),
        "Ceph-Angle": _ad_group_avg(ceph_a, fields),
        "Ceph-Distance": _ad_group_avg(ceph_d, fields),
    }
    if newer:
        groups["Distance"] = _ad_group_avg(feta_d + ceph_d, fields)
        groups["Angle"] = _ad_group_avg(ceph_a, fields)
    out["group_averages"] = groups
    out["labels"] = labels
    return out


def ad_label(dataset: str, metric_type: str, metric_key: str) -> str:
    """Upstream's A/D label: ``"<dataset>_<metric_type>_<metric_key>"``."""
    return f"{dataset}_{metric_type}_{metric_key}"


def summarize_ad_groups(
    records: Iterable[GroupRecord], *, drop_near_zero_gt: bool | None = None, rules: str = "newer"
) -> dict[str, Any]:
    """Per-label rows keyed ``"<dataset>_<metric_type>_<metric_key>"`` and the model/group rows:
    ``{"groups": {...}, "overall": {...}}`` (``overall["group_averages"]`` separates distances and angles)."""
    _check_rules(rules)
    groups = _group(records, "AD", lambda r: ad_label(r.dataset, r.metric_type, r.label), MeasureSample)
    per_label = {}
    for label, samples in groups.items():
        metrics = aggregate_ad(samples, drop_near_zero_gt=drop_near_zero_gt, rules=rules)
        if metrics is not None:  # a label left empty by the near-zero filter is omitted
            per_label[label] = metrics
    return {"groups": per_label, "overall": ad_overall(per_label, rules=rules)}
