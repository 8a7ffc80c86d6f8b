"""Targets, per-sample metrics and task aggregation for the three families (DESIGN.md section 1).

Success means the answer parsed into the family's count of finite numbers. Error metrics average over
successful samples only; the success rate is always reported beside them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from medvision_bm.data.docs import Doc, View
from medvision_bm.geometry import (
    box_iou,
    box_px_to_relative,
    pixel_overlap,
    rasterize_relative_box,
)
from medvision_bm.tasks.parse import ParseResult, parse_answer
from medvision_bm.tasks.prompts import ANSWER_ARITY

IOU_THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)

#: Per-sample metric names per family, in report order. "success" is added for all.
SAMPLE_METRICS: dict[str, tuple[str, ...]] = {
    "detect": ("iou", "pixel_precision", "pixel_recall", "pixel_f1", "mae", "mre",
               *(f"iou_ge_{int(t * 100)}" for t in IOU_THRESHOLDS)),
    "TL": ("mae", "mre", "mae_major", "mae_minor", "mre_major", "mre_minor"),
    "AD": ("mae", "mre"),
}
#: Whether a higher value is better, per metric name.
HIGHER_IS_BETTER: dict[str, bool] = {
    "iou": True, "pixel_precision": True, "pixel_recall": True, "pixel_f1": True,
    **{f"iou_ge_{int(t * 100)}": True for t in IOU_THRESHOLDS},
    "mae": False, "mre": False, "mae_major": False, "mae_minor": False, "mre_major": False, "mre_minor": False,
    "success": True,
}


def target(doc: Doc) -> list[float]:
    """The numbers a perfect answer gives (independent of resizing: relative coordinates, mm, degrees)."""
    ann = doc.annotation
    if doc.family == "detect":
        return box_px_to_relative(ann["box_px"], doc.image_hw)
    if doc.family == "TL":
        return [float(ann["major_axis_mm"]), float(ann["minor_axis_mm"])]
    return [float(ann["value"])]


def format_answer(values: Sequence[float]) -> str:
    """Numbers written so that parsing them back gives the same floats exactly."""
    return "<answer>" + ", ".join(repr(float(v)) for v in values) + "</answer>"


def _rel_err(pred: float, true: float) -> float | None:
    return abs(pred - true) / abs(true) if true != 0 else None


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def sample_metrics(doc: Doc, view: View, values: Sequence[float]) -> dict[str, float | None]:
    """Metrics of one successfully parsed answer."""
    tgt = target(doc)
    if doc.family == "detect":
        iou = box_iou(values, tgt)  # a box given with max < min has zero area
        p, r, f1 = pixel_overlap(rasterize_relative_box(values, view.seen_hw),
                                 rasterize_relative_box(tgt, view.seen_hw))
        out: dict[str, float | None] = {
            "iou": iou, "pixel_precision": p, "pixel_recall": r, "pixel_f1": f1,
            "mae": sum(abs(a - b) for a, b in zip(values, tgt)) / 4.0,
            # coordinates whose target is exactly 0 (box on the image edge) are left out of the relative error
            "mre": _mean(_rel_err(a, b) for a, b in zip(values, tgt)),
        }
        for t in IOU_THRESHOLDS:
            out[f"iou_ge_{int(t * 100)}"] = 1.0 if iou >= t - 1e-12 else 0.0
        return out
    if doc.family == "TL":
        ea, eb = abs(values[0] - tgt[0]), abs(values[1] - tgt[1])
        ra, rb = _rel_err(values[0], tgt[0]), _rel_err(values[1], tgt[1])
        return {"mae": (ea + eb) / 2.0, "mre": _mean([ra, rb]), "mae_major": ea, "mae_minor": eb,
                "mre_major": ra, "mre_minor": rb}
    return {"mae": abs(values[0] - tgt[0]), "mre": _rel_err(values[0], tgt[0])}


@dataclass(frozen=True)
class SampleScore:
    key: str
    status: str  # "ok" | "parse_failed" | "request_failed" | "missing"
    values: tuple[float, ...] | None
    target: tuple[float, ...]
    metrics: dict[str, float | None] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "status": self.status, "success": self.success,
                "values": list(self.values) if self.values is not None else None,
                "target": list(self.target), "metrics": self.metrics}


def score_answer(doc: Doc, view: View, text: str | None) -> SampleScore:
    """Parse one raw answer and score it against the doc's target."""
    tgt = tuple(target(doc))
    if text is None:
        return SampleScore(doc.key, "missing", None, tgt)
    parsed: ParseResult = parse_answer(text, ANSWER_ARITY[doc.family])
    if not parsed.ok:
        return SampleScore(doc.key, parsed.status, None, tgt)
    assert parsed.values is not None
    return SampleScore(doc.key, "ok", parsed.values, tgt, sample_metrics(doc, view, parsed.values))


def aggregate(family: str, scores: Sequence[SampleScore]) -> dict[str, Any]:
    """Task metrics: means of each metric over successful samples, success rate over all samples."""
    n = len(scores)
    ok = [s for s in scores if s.success]
    out: dict[str, Any] = {"n": n, "n_success": len(ok), "success_rate": (len(ok) / n) if n else None,
                           "n_parse_failed": sum(s.status == "parse_failed" for s in scores),
                           "n_request_failed": sum(s.status == "request_failed" for s in scores)}
    for name in SAMPLE_METRICS[family]:
        out[name] = _mean(s.metrics.get(name) for s in ok)
    return out
