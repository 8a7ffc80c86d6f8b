"""Coordinate conventions and measurements shared by the planner, the targets and the metrics.

Pixel frame: origin at the top-left corner, x = column, y = row (downwards), pixel edges at integers.
Answer frame (detection): relative coordinates in [0, 1], origin at the lower-left corner, y upwards; a box is
``[x_min, y_min, x_max, y_max]`` = lower-left corner, then upper-right corner.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def box_from_mask(mask2d: np.ndarray) -> list[float] | None:
    """Tight box on pixel edges [x_min, y_min, x_max, y_max] (top-left origin) around the nonzero pixels."""
    rows = np.flatnonzero(mask2d.any(axis=1))
    cols = np.flatnonzero(mask2d.any(axis=0))
    if rows.size == 0:
        return None
    return [float(cols[0]), float(rows[0]), float(cols[-1] + 1), float(rows[-1] + 1)]


def box_px_to_relative(box_px: Sequence[float], image_hw: tuple[int, int]) -> list[float]:
    """Top-left-origin pixel box -> lower-left-origin relative box (lower-left corner first)."""
    h, w = image_hw
    x_min, y_min, x_max, y_max = box_px
    return [x_min / w, (h - y_max) / h, x_max / w, (h - y_min) / h]


def box_iou(a: Sequence[float], b: Sequence[float]) -> float:
    """IoU of two [x_min, y_min, x_max, y_max] boxes; a box with max < min has zero area."""
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    area_a = max(0.0, a[2] - a[0]) * max(0.0, a[3] - a[1])
    area_b = max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])
    union = area_a + area_b - inter
    return inter / union if union > 0 else 0.0


def rasterize_relative_box(box_rel: Sequence[float], image_hw: tuple[int, int]) -> tuple[int, int, int, int]:
    """The pixels a relative box covers on an image grid: (col0, row0, col1, row1), half-open, clipped.

    Edges are rounded to the nearest pixel edge, so a box whose edges lie on pixel edges is reproduced exactly.
    """
    h, w = image_hw
    x0, y0, x1, y1 = box_rel
    c0, c1 = round(min(x0, x1) * w), round(max(x0, x1) * w)
    r0, r1 = round((1.0 - max(y0, y1)) * h), round((1.0 - min(y0, y1)) * h)
    c0, c1 = min(max(c0, 0), w), min(max(c1, 0), w)
    r0, r1 = min(max(r0, 0), h), min(max(r1, 0), h)
    return c0, r0, c1, r1


def pixel_overlap(pred: tuple[int, int, int, int], target: tuple[int, int, int, int]) -> tuple[float, float, float]:
    """Pixel precision, recall and F1 of a predicted pixel box against a target pixel box."""
    def area(b):
        return max(0, b[2] - b[0]) * max(0, b[3] - b[1])

    inter = area((max(pred[0], target[0]), max(pred[1], target[1]), min(pred[2], target[2]), min(pred[3], target[3])))
    ap, at = area(pred), area(target)
    precision = inter / ap if ap else 0.0
    recall = inter / at if at else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def ellipse_axes_mm(mask2d: np.ndarray, pixel_hw_mm: tuple[float, float]) -> tuple[float, float, list[float], float]:
    """Fit an ellipse by second moments of the mask's pixel centres in mm.

    Returns (major_mm, minor_mm, centre_xy_px, angle_deg): full axis lengths 4*sqrt(eigenvalue) of the
    covariance, the centre in display pixels and the major axis angle from the x axis (counter-clockwise, y up).
    """
    rows, cols = np.nonzero(mask2d)
    if rows.size < 3:
        raise ValueError("an ellipse needs at least 3 pixels")
    ph, pw = pixel_hw_mm
    x = (cols + 0.5) * pw
    y = (rows + 0.5) * ph
    cov = np.cov(np.vstack([x, y]), bias=True)
    evals, evecs = np.linalg.eigh(cov)
    evals = np.clip(evals, 0.0, None)
    major = 4.0 * math.sqrt(evals[1])
    minor = 4.0 * math.sqrt(evals[0])
    vx, vy = evecs[:, 1]
    angle = math.degrees(math.atan2(-vy, vx)) % 180.0
    return major, minor, [float(cols.mean() + 0.5), float(rows.mean() + 0.5)], angle


def distance_mm(p: Sequence[float], q: Sequence[float], pixel_hw_mm: tuple[float, float]) -> float:
    ph, pw = pixel_hw_mm
    return math.hypot((p[0] - q[0]) * pw, (p[1] - q[1]) * ph)


def line_angle_deg(a: Sequence[float], b: Sequence[float], c: Sequence[float], d: Sequence[float],
                   pixel_hw_mm: tuple[float, float]) -> float:
    """Angle in [0, 90] degrees between the undirected lines AB and CD, measured in physical (mm) space."""
    ph, pw = pixel_hw_mm
    u = ((b[0] - a[0]) * pw, (b[1] - a[1]) * ph)
    v = ((d[0] - c[0]) * pw, (d[1] - c[1]) * ph)
    nu, nv = math.hypot(*u), math.hypot(*v)
    if nu == 0 or nv == 0:
        raise ValueError("a line needs two distinct points")
    cos = abs(u[0] * v[0] + u[1] * v[1]) / (nu * nv)
    return math.degrees(math.acos(min(1.0, cos)))
