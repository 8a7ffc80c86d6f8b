"""Upstream MedVision's per-sample metrics, denominators and aggregation, as pure functions.

Which upstream file each rule follows: ``docs/benchmark-definition.md`` and ``docs/spec/scoring-rules.md``. Metric and
key names are upstream's (``avgMAE``, ``IoU``, ``MRE<0.1``, ``Acc@IoU>=0.50``, ``weighted_avg_mae`` ...). Two rule sets
where upstream's generations differ:

``rules="newer"`` (default)  ``utils/parse_utils.py`` @2f20f64 and the newer ``benchmark/summarize_{detection,TL}_task.py``
                             (codebase release v1.1.1 and later), ``summarize_AD_task.py`` @286f632: box corners sorted
                             before the overlap metrics, overlap values clamped to <= 1, nMAE, Acc@IoU, A/D
                             Distance/Angle rows.
``rules="paper"``            master c221615: corners used as given, no clamp, no nMAE, no Acc@IoU keys, A/D group rows
                             FeTA-Distance / Ceph-Angle / Ceph-Distance only.

Numbers: a prediction is rounded to float32 (upstream reads it with ``numpy.float32``), targets stay float64, and the
box overlap arithmetic keeps upstream's numpy scalar types (numpy 2 promotion rules). Sums are float64; upstream may
sum float32 Precision/Recall values partly in float32 (numpy-version dependent), a difference below 1e-6 relative.

Failures score as upstream: detection MAE NaN and IoU/F1/Precision/Recall 0; T/L and A/D MAE/MRE/nMAE NaN. Means of
errors run over successes, overlap means and every threshold/bucket fraction over all N samples.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from medvision_bm.data import upstream_configs as _configs
from medvision_bm.tasks.upstream_parse import UpstreamParse

NAN = float("nan")
RULES: tuple[str, ...] = ("newer", "paper")

#: Added to the target in every relative error (upstream ``(target_metrics + 1e-15)``).
RELATIVE_ERROR_EPS = 1e-15
#: Thresholds of ``IoU>k``, ``F1>k``, ``Precision>k``, ``Recall>k`` (compared with ``>=``).
OVERLAP_THRESHOLDS: tuple[float, ...] = (0.5, 0.6, 0.7, 0.8, 0.9)
#: COCO grid of ``Acc@IoU>=t`` (upstream ``[round(0.50 + 0.05 * k, 2) for k in range(10)]``).
COCO_IOU_THRESHOLDS: tuple[float, ...] = tuple(round(0.50 + 0.05 * k, 2) for k in range(10))
ACC_IOU_MEAN_KEY = "Acc@IoU[0.50:0.95]"
#: Upstream's summary constants (``utils/configs.py``), read from the one copy of upstream's config data: A/D samples
#: whose ground truth is below AD_NEAR_ZERO_GT_THRESHOLD are dropped by the summarizer (eval time: failures); the
#: detection anatomy-vs-T/L split leaves out regions under MINIMUM_GROUP_SIZE samples or named with an EXCLUDED_KEYS
#: entry, and puts regions named with a TUMOR_LESION_GROUP_KEYS entry in "T/L".
AD_NEAR_ZERO_GT_THRESHOLD: float = _configs.ad_near_zero_gt_threshold()
MINIMUM_GROUP_SIZE: int = _configs.minimum_group_size()
EXCLUDED_KEYS: tuple[str, ...] = tuple(_configs.excluded_keys())
TUMOR_LESION_GROUP_KEYS: tuple[str, ...] = tuple(_configs.tumor_lesion_group_keys())
#: Modality codes in group keys; any other modality string is used unchanged.
MODALITY_CODES: dict[str, str] = {"MRI": "MR", "CT": "CT", "ultrasound": "US", "X-ray": "XR", "PET": "PET"}
#: Plane letters in group keys, by slice_dim.
PLANE_CODES: dict[int, str] = {0: "S", 1: "C", 2: "A"}
_PLANE_NAMES: dict[str, str] = {"s": "S", "sagittal": "S", "c": "C", "coronal": "C", "a": "A", "axial": "A"}


def acc_iou_key(threshold: float) -> str:
    """``Acc@IoU>=0.50`` style key."""
    return f"Acc@IoU>={threshold:.2f}"


def _check_rules(rules: str) -> None:
    if rules not in RULES:
        raise ValueError(f"rules must be one of {RULES}, got {rules!r}")


# --------------------------------------------------------------------------------------------- per sample


@dataclass(frozen=True)
class DetectionSample:
    """Upstream ``cal_metrics_detection_task`` for one sample (MAE on relative coordinates)."""

    success: bool
    MAE: float
    IoU: float
    F1: float
    Precision: float
    Recall: float


@dataclass(frozen=True)
class MeasureSample:
    """Upstream T/L or A/D scoring of one sample. ``near_zero_gt``: A/D ground truth below 0.1."""

    success: bool
    MAE: float
    MRE: float
    nMAE: float
    nMAE_success: bool
    near_zero_gt: bool = False


DETECTION_FAILURE = DetectionSample(success=False, MAE=NAN, IoU=0.0, F1=0.0, Precision=0.0, Recall=0.0)


def _measure_failure(near_zero_gt: bool = False) -> MeasureSample:
    return MeasureSample(success=False, MAE=NAN, MRE=NAN, nMAE=NAN, nMAE_success=False, near_zero_gt=near_zero_gt)


def _pred_float32(pred: UpstreamParse | Sequence[float] | None, k: int) -> list[float] | None:
    """The prediction as float32-rounded floats, or None when it is not exactly k readable numbers."""
    if isinstance(pred, UpstreamParse):
        pred = pred.values if pred.ok else None
    if pred is None or isinstance(pred, str | bytes):
        return None
    try:
        items = list(pred)
        if len(items) != k:
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return [float(np.float32(v)) for v in items]
    except (TypeError, ValueError, OverflowError):
        return None


def negative_prediction(value: float) -> bool:
    """Upstream's eval-time A/D test ``pred_metrics < 0`` on the float32 prediction (-0.0 and NaN are not negative)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bool(np.float32(value) < 0)


def _target(gt: Sequence[float] | float, k: int) -> list[float]:
    values = [float(v) for v in np.asarray(gt, dtype=np.float64).ravel()]
    if len(values) != k:
        raise ValueError(f"target must hold {k} numbers, got {len(values)}")
    return values


def _box_overlap(p: Sequence[np.floating], g: Sequence[np.floating], sort_corners: bool
                 ) -> tuple[np.floating, np.floating, np.floating] | None:
    """(intersection, predicted area, target area), or None when the boxes do not overlap (upstream's early 0)."""
    px1, py1, px2, py2 = p
    tx1, ty1, tx2, ty2 = g
    if sort_corners:
        px1, px2 = sorted([px1, px2])
        py1, py2 = sorted([py1, py2])
        tx1, tx2 = sorted([tx1, tx2])
        ty1, ty2 = sorted([ty1, ty2])
    ix1, iy1 = max(px1, tx1), max(py1, ty1)
    ix2, iy2 = min(px2, tx2), min(py2, ty2)
    if ix1 >= ix2 or iy1 >= iy2:
        return None
    return (ix2 - ix1) * (iy2 - iy1), (px2 - px1) * (py2 - py1), (tx2 - tx1) * (ty2 - ty1)


def _clamp(value: float | np.floating) -> float:
    return float(value) if math.isnan(value) else float(min(value, 1.0))


def detection_sample(
    pred: UpstreamParse | Sequence[float] | None, gt: Sequence[float], *, rules: str = "newer"
) -> DetectionSample:
    """Score one box. ``pred``/``gt`` are relative ``[x0, y0, x1, y1]`` (lower-left origin); None = failure.

    Arithmetic types follow upstream (numpy scalars): newer IoU/F1 in float64, Precision/Recall (and all four in
    the paper rules) with the float32 prediction against the float64 target.
    """
    _check_rules(rules)
    g = _target(gt, 4)
    p = _pred_float32(pred, 4)
    if p is None:
        return DETECTION_FAILURE
    newer = rules == "newer"
    p32 = [np.float32(v) for v in p]
    g64 = [np.float64(v) for v in g]
    with np.errstate(all="ignore"):
        mae = float(np.mean(np.abs(np.array(p32) - np.array(g64))))
        mixed = _box_overlap(p32, g64, sort_corners=newer)
        if mixed is None:
            return DetectionSample(success=True, MAE=mae, IoU=0.0, F1=0.0, Precision=0.0, Recall=0.0)
        exact = _box_overlap([np.float64(v) for v in p32], g64, True) if newer else mixed
        assert exact is not None  # the same boxes as ``mixed``, which overlap
        inter, area_p, area_g = exact
        union = area_p + area_g - inter
        iou = inter / union if union > 0 else 0.0
        f1 = (2.0 * inter) / (area_p + area_g) if (area_p + area_g) > 0 else NAN
        inter, area_p, area_g = mixed
        precision = inter / area_p if area_p > 0 else NAN
        if newer and area_g <= 0:  # upstream cal_Recall raises -> the whole sample is a failure (unreachable)
            return DETECTION_FAILURE
        recall = inter / area_g if (newer or area_g > 0) else NAN
    if newer:
        return DetectionSample(True, mae, _clamp(iou), _clamp(f1), _clamp(precision), _clamp(recall))
    return DetectionSample(True, mae, float(iou), float(f1), float(precision), float(recall))


def inplane_pixel_size(zooms: Sequence[float], slice_dim: int) -> tuple[float, float]:
    """(height, width) of a pixel of a slice along ``slice_dim`` from the volume's voxel size (NIfTI zooms)."""
    if slice_dim == 0:
        return float(zooms[1]), float(zooms[2])
    if slice_dim == 1:
        return float(zooms[0]), float(zooms[2])
    if slice_dim == 2:
        return float(zooms[0]), float(zooms[1])
    raise ValueError(f"slice_dim must be 0, 1 or 2, got {slice_dim!r}")


def slice_diagonal_mm(image_hw: Sequence[int], pixel_hw_mm: Sequence[float],
                      scale_hw: Sequence[float] = (1.0, 1.0)) -> float:
    """nMAE's denominator: ``sqrt((H * px_h * s_h)^2 + (W * px_w * s_w)^2)`` of the native slice (``image_size_2d``);
    the factors are the scaledPS ones (1 for every other variant; a product with 1.0 is exact)."""
    (h, w), (px_h, px_w), (s_h, s_w) = image_hw, pixel_hw_mm, scale_hw
    return float(np.sqrt((h * float(px_h) * float(s_h)) ** 2 + (w * float(px_w) * float(s_w)) ** 2))


def _nmae(mae: float, diagonal_mm: float | None) -> tuple[float, bool]:
    if diagonal_mm is None:
        return NAN, False
    try:
        d = float(diagonal_mm)
    except (TypeError, ValueError):
        return NAN, False
    if not math.isfinite(d) or d <= 0:  # no real slice; upstream: a zero diagonal raises, caught as NaN nMAE
        return NAN, False
    return mae / d, True


def _errors(p: Sequence[float], g: Sequence[float], eps: float = RELATIVE_ERROR_EPS) -> tuple[float, float]:
    with np.errstate(all="ignore"):
        target = np.array(g, dtype=np.float64)
        ae = np.abs(np.array(p, dtype=np.float64) - target)
        return float(np.mean(ae)), float(np.mean(ae / (target + eps) if eps else ae / target))


def tl_sample(
    pred: UpstreamParse | Sequence[float] | None, gt: Sequence[float], diagonal_mm: float | None = None, *,
    relative_eps: float = RELATIVE_ERROR_EPS,
) -> MeasureSample:
    """Score one T/L answer: ``pred``/``gt`` = (major, minor) in mm; ``diagonal_mm`` from ``slice_diagonal_mm``.

    ``relative_eps`` is added to the target in the relative error: upstream's 1e-15 everywhere except master's
    eval-time ``process_results_TumorLesionSize`` (c221615), which divides by the target itself (``relative_eps=0``).
    """
    g = _target(gt, 2)
    p = _pred_float32(pred, 2)
    if p is None:
        return _measure_failure()
    mae, mre = _errors(p, g, relative_eps)
    nmae, nmae_ok = _nmae(mae, diagonal_mm)
    return MeasureSample(success=True, MAE=mae, MRE=mre, nMAE=nmae, nMAE_success=nmae_ok)


def ad_sample(
    pred: UpstreamParse | Sequence[float] | float | None,
    gt: float | Sequence[float],
    metric_type: str,
    diagonal_mm: float | None = None,
    *,
    reject_negative: bool = False,
    near_zero_gt_failure: bool = False,
) -> MeasureSample:
    """Score one A/D answer (``metric_type`` "distance" in mm or "angle" in degrees).

    Defaults = ``parse_utils.cal_metrics`` @2f20f64 and the summarizers (``summarize_AD_task.cal_metrics_AD_task``,
    master c221615 and @286f632): no negative check, a negative prediction is a success with its error; the
    near-zero filter is applied when aggregating. Eval time (``process_results_BiometricsFromLandmarks``):
    ``reject_negative=True`` (every generation) and ``near_zero_gt_failure=True`` (newer). nMAE only for distances.
    """
    g = _target(gt, 1)
    near_zero = g[0] < AD_NEAR_ZERO_GT_THRESHOLD
    if near_zero_gt_failure and near_zero:
        return _measure_failure(near_zero_gt=True)
    if isinstance(pred, bool):
        pred = None  # no number: a failure, as _pred_float32 scores any non-sequence
    elif isinstance(pred, int | float):
        pred = [pred]
    p = _pred_float32(pred, 1)
    if p is None or (reject_negative and p[0] < 0):
        return _measure_failure(near_zero_gt=near_zero)
    mae, mre = _errors(p, g)
    nmae, nmae_ok = _nmae(mae, diagonal_mm) if metric_type == "distance" else (NAN, False)
    return MeasureSample(success=True, MAE=mae, MRE=mre, nMAE=nmae, nMAE_success=nmae_ok, near_zero_gt=near_zero)


# --------------------------------------------------------------------------------------------- per task / group


def _finite(x: float) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def sequential_sum(values: np.ndarray) -> float:
    """``values`` added one after another from 0.0, as upstream's summarizers add them in a Python loop (numpy's
    ``sum`` adds pairwise, which changes the last bits)."""
    if not values.size:
        return 0.0
    return float(np.add.accumulate(np.concatenate(([0.0], np.asarray(values, dtype=np.float64))))[-1])


def _buckets(values: np.ndarray) -> list[int]:
    """Upstream's cumulative-bucket counter over finite values: index ``min(int(value * 10), 9)`` of a list of ten
    (a negative index counts from the end, as a Python list does), last bucket ``[0.9, inf)``."""
    idx = np.minimum(np.trunc(values * 10), 9).astype(np.int64) if values.size else np.zeros(0, np.int64)
    if idx.size and idx.min() < -10:
        raise IndexError("list index out of range")  # what upstream's counter does with such a value
    return np.bincount(np.where(idx < 0, idx + 10, idx), minlength=10).tolist()


def _cumulative(buckets: Sequence[int], prefix: str, n: int) -> dict[str, float]:
    return {f"{prefix}<{k / 10:.1f}": (sum(buckets[0:k]) / n if n > 0 else 0.0) for k in range(1, 11)}


def _f64(values: Iterable[float]) -> np.ndarray:
    return np.fromiter((v if _finite(v) else NAN for v in values), dtype=np.float64)


def aggregate_detection(samples: Sequence[DetectionSample], *, rules: str = "newer") -> dict[str, float] | None:
    """One group's (or task's) detection metrics, as upstream's summarizer writes them; None when empty."""
    return detection_columns(np.fromiter((bool(s.success) for s in samples), dtype=bool, count=len(samples)),
                             _f64(s.MAE for s in samples), _f64(s.IoU for s in samples), _f64(s.F1 for s in samples),
                             _f64(s.Precision for s in samples), _f64(s.Recall for s in samples), rules=rules)


def detection_columns(success: np.ndarray, mae: np.ndarray, iou: np.ndarray, f1: np.ndarray, precision: np.ndarray,
                      recall: np.ndarray, *, rules: str = "newer") -> dict[str, float] | None:
    """``aggregate_detection`` over per-sample columns (NaN: no value): the same numbers, sums in sample order."""
    _check_rules(rules)
    n = len(success)
    if n == 0:
        return None
    ok_mae = np.isfinite(mae)
    out: dict[str, float] = {"avgMAE": sequential_sum(mae[ok_mae]) / int(ok_mae.sum()) if ok_mae.any() else NAN}
    over: dict[str, list[int]] = {}
    acc: list[int] = []
    for name, col in (("IoU", iou), ("F1", f1), ("Precision", precision), ("Recall", recall)):
        vals = col[np.isfinite(col)]
        out[name] = sequential_sum(vals) / len(vals) if len(vals) else NAN
        over[name] = [int(np.count_nonzero(vals >= t)) for t in OVERLAP_THRESHOLDS]
        if name == "IoU":
            acc = [int(np.count_nonzero(vals >= t)) for t in COCO_IOU_THRESHOLDS]
    out["SuccessRate"] = int(np.count_nonzero(success)) / n
    out["num_samples"] = n
    out.update(_cumulative(_buckets(mae[ok_mae]), "MAE", n))
    for name in ("IoU", "F1", "Precision", "Recall"):
        for i, t in enumerate(OVERLAP_THRESHOLDS):
            out[f"{name}>{t:.1f}"] = over[name][i] / n
    if rules == "newer":
        acc_values = [count / n for count in acc]
        for t, value in zip(COCO_IOU_THRESHOLDS, acc_values):
            out[acc_iou_key(t)] = value
        out[ACC_IOU_MEAN_KEY] = float(np.mean(acc_values))
    return out


def measure_columns(success: np.ndarray, mae: np.ndarray, mre: np.ndarray, nmae: np.ndarray, nmae_success: np.ndarray,
                    family: str, rules: str) -> dict[str, float] | None:
    """One T/L group's or A/D label's metrics over per-sample columns (NaN: no value), sums in sample order."""
    _check_rules(rules)
    n = len(success)
    if n == 0:
        return None
    mae_v, mre_v = mae[np.isfinite(mae)], mre[np.isfinite(mre)]
    nmae_v = nmae[nmae_success & np.isfinite(nmae)]
    avg_mae = sequential_sum(mae_v) / len(mae_v) if len(mae_v) else NAN
    avg_mre = sequential_sum(mre_v) / len(mre_v) if len(mre_v) else NAN
    avg_nmae = sequential_sum(nmae_v) / len(nmae_v) if len(nmae_v) else NAN
    sr = int(np.count_nonzero(success)) / n
    if rules == "paper":
        out = {"avgMAE": avg_mae, "avgMRE": avg_mre, "SuccessRate": sr, "num_samples": n}
    elif family == "TL":
        out = {"avgMAE": avg_mae, "avgMRE": avg_mre, "SuccessRate": sr, "avgNMAE": avg_nmae, "num_samples": n}
    else:
        out = {"avgMAE": avg_mae, "avgMRE": avg_mre, "avgNMAE": avg_nmae, "SuccessRate": sr, "num_samples": n}
    out.update(_cumulative(_buckets(mre_v), "MRE", n))
    return out


def _measure_arrays(
    samples: Sequence[MeasureSample],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n = len(samples)
    return (np.fromiter((bool(s.success) for s in samples), dtype=bool, count=n), _f64(s.MAE for s in samples),
            _f64(s.MRE for s in samples), _f64(s.nMAE for s in samples),
            np.fromiter((bool(s.nMAE_success) for s in samples), dtype=bool, count=n))


def _aggregate_measure(samples: Sequence[MeasureSample], family: str, rules: str) -> dict[str, float] | None:
    return measure_columns(*_measure_arrays(samples), family, rules)


def aggregate_tl(samples: Sequence[MeasureSample], *, rules: str = "newer") -> dict[str, float] | None:
    """One T/L group's metrics (``avgMAE, avgMRE, SuccessRate, avgNMAE, num_samples, MRE<0.1..1.0``)."""
    _check_rules(rules)
    return _aggregate_measure(samples, "TL", rules)


def aggregate_ad(
    samples: Sequence[MeasureSample], *, drop_near_zero_gt: bool | None = None, rules: str = "newer"
) -> dict[str, float] | None:
    """One A/D label's metrics. ``drop_near_zero_gt`` (default: True for newer rules, False for paper rules) drops
    samples whose ground truth is below 0.1 before counting, as the newer summarizer does."""
    _check_rules(rules)
    if drop_near_zero_gt is None:
        drop_near_zero_gt = rules == "newer"
    if drop_near_zero_gt:
        samples = [s for s in samples if not s.near_zero_gt]
    return _aggregate_measure(samples, "AD", rules)


def _parse_outputs_re_bucket(value: float) -> int | None:
    """parse_outputs' unclamped buckets: ``< 0.1``, ``< 0.2`` ... ``< 1.0``, else none."""
    for i, t in enumerate((0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)):
        if value < t:
            return i
    return None


def parse_outputs_summary(
    samples: Sequence[DetectionSample] | Sequence[MeasureSample], family: str, *, rules: str = "newer"
) -> dict[str, str | float] | None:
    """The ``results[<task>]`` entries parse_outputs writes into ``parsed/<ts>_results.json``; None when empty.

    Means skip NaN only (an inf MAE makes the mean inf); ``MRE<k`` counts over N with unclamped buckets; no
    near-zero filter. Paper rules: a detection failure has IoU NaN there, so ``avgIoU`` is over successes.
    """
    _check_rules(rules)
    n = len(samples)
    if n == 0:
        return None
    sum_mae = sum_mre = sum_iou = 0.0
    n_mae = n_mre = n_iou = n_success = 0
    buckets = [0] * 10
    for s in samples:
        if not math.isnan(s.MAE):
            sum_mae += s.MAE
            n_mae += 1
        if isinstance(s, MeasureSample) and not math.isnan(s.MRE):
            sum_mre += s.MRE
            n_mre += 1
            i = _parse_outputs_re_bucket(s.MRE)
            if i is not None:
                buckets[i] += 1
        if isinstance(s, DetectionSample) and (s.success or rules == "newer") and not math.isnan(s.IoU):
            sum_iou += s.IoU
            n_iou += 1
        n_success += bool(s.success)
    detect = family == "detect"
    out: dict[str, str | float] = {
        "avgMAE,none": str(sum_mae / n_mae if n_mae > 0 else NAN),
        "avgMRE,none": str(NAN if detect or n_mre == 0 else sum_mre / n_mre),
        "avgIoU,none": str(sum_iou / n_iou if detect and n_iou > 0 else NAN),
        "SuccessRate,none": n_success / n,
    }
    for k in range(1, 11):
        out[f"MRE<{k / 10:.1f}"] = "N/A" if detect else sum(buckets[0:k]) / n
    return out
