"""One record per task family: what scoring, grouping and comparison look up instead of branching on the family.

Every entry is upstream's: the numbers an answer holds (the parsers' k), the per-sample metric names in report
order, the units of the error metrics, the task-level aggregation and the label-group summary
(``tasks.upstream_metrics``; spec: docs/spec/parser-metrics.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from medvision_bm.data.docs import FAMILY_TASK_TYPE, Family
from medvision_bm.tasks import upstream_metrics as um
from medvision_bm.tasks.metrics import metric_spec
from medvision_bm.tasks.upstream_parse import K_PER_FAMILY


@dataclass(frozen=True, slots=True)
class FamilySpec:
    """A task family as the benchmark defines it."""

    family: Family
    task_type: str  # the task-name token (BoxCoordinate, TumorLesionSize, BiometricsFromLandmarks)
    arity: int  # numbers a parsed answer holds
    sample_metrics: tuple[str, ...]  # per-sample metric names, in report order
    units: Mapping[str, str]  # unit of each error metric
    aggregate: Callable[..., dict[str, float] | None]  # upstream's task metrics from per-sample records
    measure: bool  # T/L and A/D: measurements (MeasureSample); detection: boxes (DetectionSample)
    #: A/D: each sample measures one named metric (its biometric profile's type and key, a distance or an angle), by
    #: which upstream groups, keys and (newer rules) leaves out near-zero ground truths
    per_metric: bool
    error_metrics: tuple[str, ...]  # the error metrics upstream averages per group
    bucket_metric: str  # the metric of upstream's "<k/10" rate buckets (MAE<0.1 ... or MRE<0.1 ...)

    def upstream_sample(self, row: Mapping[str, Any]) -> Any:
        """A parsed row (``SampleScore.to_json``) as upstream's per-sample record for the aggregation."""
        m = row["metrics"]
        nan = float("nan")

        def val(name: str) -> float:
            v = m.get(name)
            return nan if v is None else float(v)

        if not self.measure:
            return um.DetectionSample(bool(row["success"]), val("MAE"), val("IoU"), val("F1"), val("Precision"),
                                      val("Recall"))
        return um.MeasureSample(bool(row["success"]), val("MAE"), val("MRE"), val("nMAE"),
                                m.get("nMAE") is not None, bool(row.get("near_zero_gt")))


def _spec(family: Family, metrics: Sequence[str], unit: str, aggregate: Callable[..., Any]) -> FamilySpec:
    for name in metrics:  # every metric of a family has its record (direction, unit): a KeyError at import if not
        metric_spec(name)
    measure = family != Family.DETECT
    return FamilySpec(family, FAMILY_TASK_TYPE[family], K_PER_FAMILY[family], tuple(metrics),
                      MappingProxyType({"MAE": unit, "avgMAE": unit}), aggregate, measure, family == Family.AD,
                      ("MAE", "MRE", "nMAE") if measure else ("MAE",), "MRE" if measure else "MAE")


FAMILY_SPECS: Mapping[Family, FamilySpec] = MappingProxyType({
    Family.DETECT: _spec(Family.DETECT, ("IoU", "F1", "Precision", "Recall", "MAE"), "relative",
                         um.aggregate_detection),
    Family.TL: _spec(Family.TL, ("MAE", "MRE", "nMAE"), "mm", um.aggregate_tl),
    Family.AD: _spec(Family.AD, ("MAE", "MRE", "nMAE"), "mm | degree", um.aggregate_ad),
})

def family_spec(family: str) -> FamilySpec:
    """The spec of ``family`` (a ``Family`` or its value); a ValueError names the known ones."""
    try:
        return FAMILY_SPECS[Family(family)]
    except ValueError:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(Family)}") from None


def per_metric(family: str) -> bool:
    """Whether ``family``'s samples each measure one named metric (A/D); False for a family no spec names (a
    damaged row's)."""
    spec = FAMILY_SPECS.get(family)  # type: ignore[call-overload]
    return spec is not None and spec.per_metric
