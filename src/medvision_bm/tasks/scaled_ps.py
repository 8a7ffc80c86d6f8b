"""Upstream's ``-CoT-scaledPS`` variant beyond its prompt: the factor range, the scaled target and the landmarks it
is computed from (``medvision_utils.py`` @0a4c5e2: ``create_doc_to_target_TumorLesionSize_scaledPS``,
``create_doc_to_target_BiometricsFromLandmarks_scaledPS``, ``_compute_physical_diagonal``; the landmark file rule of
``sft_utils._get_landmarks_coords``).

The prompt states the pixel size times per-sample factors (s_h, s_w) drawn in [low, high] (``upstream_prompts.
scaled_ps_factors``); the answer a model should give changes with them: a T/L axis length is the stored one times S
(one factor for both axes), an A/D distance or angle is recomputed from the slice's landmarks with the pixel height
and width multiplied by s_h and s_w, and nMAE divides by the slice diagonal under the same factors.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from medvision_bm.data.docs import Doc, View
from medvision_bm.data.landmarks import slice_landmarks
from medvision_bm.data.task_meta import TaskMeta, resolve_ad_names
from medvision_bm.errors import UserError
from medvision_bm.tasks.families import family_spec
from medvision_bm.tasks.upstream_prompts import SCALED_PS_HIGH, SCALED_PS_LOW, scaled_ps_factors

VARIANT = "-CoT-scaledPS"
DEFAULT_RANGE: tuple[float, float] = (SCALED_PS_LOW, SCALED_PS_HIGH)


def check_range(low: float | None, high: float | None) -> tuple[float, float]:
    """The factor range of ``--scaled_ps_low``/``--scaled_ps_high`` (upstream's defaults 0.5 and 3.0 when unset)."""
    lo = SCALED_PS_LOW if low is None else float(low)
    hi = SCALED_PS_HIGH if high is None else float(high)
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
        raise UserError(f"--scaled_ps_low {lo:g} / --scaled_ps_high {hi:g}: the pixel-size factors must be a range "
                        "of positive numbers with low <= high (upstream's default: 0.5 and 3.0)")
    return lo, hi


def tl_target(biometric_profile: Mapping[str, Any], factors: tuple[float, float]) -> tuple[float, float]:
    """The stored major and minor axis lengths times the uniform factor S."""
    s = factors[0]
    major, minor = biometric_profile["metric_value_major_axis"][0], biometric_profile["metric_value_minor_axis"][0]
    return ((math.nan if major is None else float(major)) * s, (math.nan if minor is None else float(minor)) * s)


def ad_target(metric_type: str, points: Mapping[str, tuple[float, float]], keys: Sequence[str],
              pixel_hw: tuple[float, float], factors: tuple[float, float]) -> float:
    """A distance (2 landmark keys) or the acute angle in degrees between two lines (4 keys) in physical space, each
    pixel step times the native pixel size times its factor (upstream's order of operations, in float64)."""
    px_h, px_w = float(pixel_hw[0]), float(pixel_hw[1])
    s_h, s_w = float(factors[0]), float(factors[1])
    missing = [k for k in keys if k not in points]
    if missing:
        raise UserError(f"landmark {missing[0]} is not on the slice's landmark entry; re-download the dataset")
    p = {k: np.asarray(points[k], dtype=np.float64) for k in keys}
    if metric_type == "distance":
        dh, dw = p[keys[0]][0] - p[keys[1]][0], p[keys[0]][1] - p[keys[1]][1]
        return float(np.sqrt((dh * px_h * s_h) ** 2 + (dw * px_w * s_w) ** 2))
    if metric_type == "angle":
        def vec(a: str, b: str) -> np.ndarray:
            dh, dw = p[b][0] - p[a][0], p[b][1] - p[a][1]
            return np.array([dh * px_h * s_h, dw * px_w * s_w], dtype=np.float64)

        v1, v2 = vec(keys[0], keys[1]), vec(keys[2], keys[3])
        cos = np.abs(np.dot(v1, v2)) / (np.linalg.norm(v1) * np.linalg.norm(v2))
        return float(np.degrees(np.arccos(float(np.clip(cos, 0.0, 1.0)))))
    raise ValueError(f"unknown metric_type {metric_type!r}")


def scaled_view(view: View, doc: Doc, data_root: str | Path | None, scaled_ps: tuple[float, float], meta: TaskMeta | None,
                factors: tuple[float, float] | None = None) -> View:
    """``view`` with a -CoT-scaledPS sample's factors and target: the factors from the doc's absolute image path as
    upstream's loader writes it (so they depend on where the data lies), unless ``factors`` are given (an imported
    upstream record's, drawn from the path upstream's loader wrote); A/D needs ``meta`` (the task metadata: it names
    the metric's landmarks) and the landmark file in ``data_root``."""
    root = Path(data_root) / "Datasets" if data_root is not None else None
    if factors is None:
        if root is None:
            raise ValueError("scaled_view needs the data folder or the factors")
        factors = scaled_ps_factors(str(root / doc.image_file), doc.slice_dim, doc.slice_idx, doc.taskID, doc.label,
                                    doc.family, *scaled_ps)
    bp = doc.biometric_profile or {}
    if family_spec(doc.family).axes:
        scaled: tuple[float, ...] = tl_target(bp, factors)
    else:
        if meta is None or not doc.landmark_file or root is None:
            raise UserError(f"task {doc.task}: a -CoT-scaledPS A/D sample needs its task metadata and landmark file "
                            "(the target is recomputed from the landmarks): give the data folder (--data_dir)")
        points = slice_landmarks(root / doc.landmark_file, doc.slice_dim, doc.slice_idx)
        keys = resolve_ad_names(meta, bp).point_keys
        scaled = (ad_target(str(doc.metric_type), points, keys, view.header_pixel_hw, factors),)
    return dataclasses.replace(view, pixel_scale_hw=factors, scaled_target=scaled)
