"""One record per task family: what scoring, grouping and comparison look up instead of branching on the family.

Every entry is upstream's: the numbers an answer holds (the parsers' k), the units of the error metrics, the
task-level aggregation, the label-group summary and its rates (``tasks.upstream_metrics``; spec:
docs/spec/parser-metrics.md). A family's per-sample metrics are the metric records naming it (``tasks.metrics``),
read at each lookup, so a metric registered later is part of its families at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

from medvision_bm.data.docs import FAMILY_TASK_TYPE, Family
from medvision_bm.tasks import upstream_metrics as um
from medvision_bm.tasks.metrics import METRICS, Stat, family_metrics
from medvision_bm.tasks.upstream_parse import K_PER_FAMILY


@dataclass(frozen=True, slots=True)
class FamilySpec:
    """A task family as the benchmark defines it."""

    family: Family
    task_type: str  # the task-name token (BoxCoordinate, TumorLesionSize, BiometricsFromLandmarks)
    arity: int  # numbers a parsed answer holds
    #: unit of the error metrics by a sample's metric type ("" for every other sample: its default); a family whose
    #: samples measure in more than one unit names each type (A/D: distance, angle), as the report's unit texts say
    error_units: Mapping[str, str]
    aggregate: Callable[..., dict[str, float] | None]  # upstream's task metrics from per-sample records
    measure: bool  # T/L and A/D: measurements (MeasureSample); detection: boxes (DetectionSample)
    #: A/D: each sample measures one named metric (its biometric profile's type and key, a distance or an angle), by
    #: which upstream groups, keys and (newer rules) leaves out near-zero ground truths
    per_metric: bool
    error_metrics: tuple[str, ...]  # the error metrics upstream averages per group
    bucket_metric: str  # the metric of upstream's "<k/10" rate buckets (MAE<0.1 ... or MRE<0.1 ...)
    upstream_metrics: tuple[str, ...]  # the per-sample metrics upstream's aggregation averages (others: ours)
    rates: tuple[Stat, ...]  # the report's rate statistics of upstream's aggregation (IoU>0.5, MRE<0.1 ...)
    primary: str  # the report statistic each aggregate row is ranked by
    short: str  # the family in running text ("detection", "T/L", "A/D")
    rank_metric: str  # the per-sample metric answers are ranked by (the browser's worst answer, the vision check)
    #: the per-sample metric whose distribution the report plots per task and run (upstream's per-sample name)
    distribution_metric: str
    #: the leaderboard rows the report's overview shows, each with the ``primary`` statistic (detection's "all
    #: regions" holds every region whatever its size; A/D's two rows keep mm and degrees apart)
    overview_rows: tuple[str, ...]
    #: the statistics the plot against the published numbers draws (where both sides have them), in panel order
    published_plot_stats: tuple[str, ...]
    #: upstream's aggregate rows of the family, in report order (A/D: the named rows only when they hold samples)
    aggregates: tuple[str, ...]
    #: the leaderboard panels the report draws as bars, as (aggregate row, statistic), in panel order
    bar_panels: tuple[tuple[str, str], ...]
    title: str  # the family as a heading ("Detection (bounding boxes)")
    upstream_folder: str  # upstream's results folder of the family (``Paper-results-backup/<folder>``)
    upstream_name: str  # upstream's name of the family in its report headings ("JUDGE REPORT: Detection")

    @property
    def ranked_by(self) -> tuple[str, bool]:
        """``rank_metric`` and whether higher is better (its record's direction)."""
        return self.rank_metric, METRICS[self.rank_metric].higher_is_better

    @property
    def has_boxes(self) -> bool:
        """Detection: an answer and its target are a box (its samples carry boxes, not measurements)."""
        return not self.measure

    @property
    def axes(self) -> bool:
        """T/L: an answer is a major and a minor axis length (the family upstream's removed-samples lists, label
        groups by name and axis-endpoint reasoning steps concern)."""
        return self.measure and not self.per_metric

    @property
    def sample_metrics(self) -> tuple[str, ...]:
        """Per-sample metric names (the metric records naming the family), in report order."""
        return tuple(m.name for m in family_metrics(self.family))

    @property
    def stats(self) -> tuple[Stat, ...]:
        """The report's statistics: the success rate, each metric's mean, then upstream's rates."""
        return (METRICS["SuccessRate"].report_stat, *(m.report_stat for m in family_metrics(self.family)),
                *self.rates)

    @property
    def compared(self) -> tuple[str, ...]:
        """The metrics ``compare`` compares without --metrics (SuccessRate is always added)."""
        return tuple(m.name for m in family_metrics(self.family) if m.compared)

    @property
    def heading(self) -> str:
        """``short`` as the first word of a line or a column ("Detection", "T/L")."""
        return self.short[:1].upper() + self.short[1:]

    @property
    def named_units(self) -> tuple[tuple[str, str], ...]:
        """(metric type, unit) of a family whose samples measure in more than one unit (A/D: distance in mm, angle
        in degrees); empty for a family of one unit."""
        return tuple((k, u) for k, u in self.error_units.items() if k)

    def error_unit(self, metric_type: str | None = None) -> str:
        """The unit of the error metrics (MAE, avgMAE) of a sample of ``metric_type`` (A/D: angle or distance)."""
        return self.error_units.get(metric_type or "", self.error_units[""])

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


_RATE_STATS = {  # upstream's rates per family: IoU>0.5 ... (all rules), Acc@IoU (newer rules)
    "detect": (Stat("IoU>0.5", "rate", True), Stat("F1>0.5", "rate", True),
               Stat("Acc@IoU>=0.75", "rate", True, newer_only=True), Stat(um.ACC_IOU_MEAN_KEY, "rate", True,
                                                                         newer_only=True)),
    "measure": (Stat("MRE<0.1", "rate", True), Stat("MRE<0.2", "rate", True), Stat("MRE<0.3", "rate", True)),
}


_SHORT = {Family.DETECT: "detection", Family.TL: "T/L", Family.AD: "A/D"}


def _spec(family: Family, units: Mapping[str, str], aggregate: Callable[..., Any], *, distribution_metric: str,
          overview_rows: tuple[str, ...], published_plot_stats: tuple[str, ...], aggregates: tuple[str, ...],
          bar_panels: tuple[tuple[str, str], ...], title: str, upstream_folder: str,
          upstream_name: str) -> FamilySpec:
    measure = family != Family.DETECT
    upstream = ("MAE", "MRE", "nMAE") if measure else ("IoU", "F1", "Precision", "Recall", "MAE")
    return FamilySpec(family, FAMILY_TASK_TYPE[family], K_PER_FAMILY[family], MappingProxyType(dict(units)),
                      aggregate, measure, family == Family.AD, ("MAE", "MRE", "nMAE") if measure else ("MAE",),
                      "MRE" if measure else "MAE", upstream, _RATE_STATS["measure" if measure else "detect"],
                      "avgMRE" if measure else "IoU", _SHORT[family],
                      "MRE" if measure else "IoU", distribution_metric, overview_rows, published_plot_stats, aggregates,
                      bar_panels, title, upstream_folder, upstream_name)


FAMILY_SPECS: Mapping[Family, FamilySpec] = MappingProxyType({
    Family.DETECT: _spec(Family.DETECT, {"": "relative"}, um.aggregate_detection, distribution_metric="IoU",
                         overview_rows=("all regions",), published_plot_stats=("IoU", "F1", "SuccessRate", "Recall"),
                         aggregates=("anatomy", "T/L", "all regions"),
                         bar_panels=(("anatomy", "IoU"), ("T/L", "IoU"), ("all regions", "IoU"),
                                     ("all regions", "SuccessRate")),
                         title="Detection (bounding boxes)", upstream_folder="Detect", upstream_name="Detection"),
    Family.TL: _spec(Family.TL, {"": "mm"}, um.aggregate_tl, distribution_metric="MAE", overview_rows=("overall",),
                     published_plot_stats=("avgMRE", "avgMAE", "SuccessRate", "MRE<0.3"), aggregates=("overall",),
                     bar_panels=(("overall", "avgMRE"), ("overall", "avgMAE"), ("overall", "avgNMAE"),
                                 ("overall", "SuccessRate")),
                     title="Tumor/lesion size (TL)", upstream_folder="TL", upstream_name="TL"),
    Family.AD: _spec(Family.AD, {"": "mm", "distance": "mm", "angle": "degrees"}, um.aggregate_ad,
                     distribution_metric="MAE", overview_rows=("Distance", "Angle"),
                     published_plot_stats=("avgMRE", "avgMAE", "SuccessRate", "MRE<0.3"),
                     aggregates=("Distance", "Angle", "FeTA-Distance", "Ceph-Distance", "Ceph-Angle"),
                     bar_panels=(("Distance", "avgMAE"), ("Angle", "avgMAE"), ("Distance", "avgMRE"),
                                 ("Angle", "avgMRE"), ("Distance", "SuccessRate"), ("Angle", "SuccessRate")),
                     title="Angle/distance (AD)", upstream_folder="AD", upstream_name="AD"),
})

_BY_NAME: dict[str, FamilySpec] = {f.value: s for f, s in FAMILY_SPECS.items()}
T = TypeVar("T")


class FamilyView(Mapping[str, T]):
    """Family name -> one fact of its record, read from the records at each lookup (a metric registered later is
    seen); an unknown family is a KeyError, as a dict's."""

    def __init__(self, fact: Callable[[FamilySpec], T]) -> None:
        self._fact = fact

    def __getitem__(self, family: str) -> T:
        return self._fact(_BY_NAME[family])

    def __iter__(self) -> Iterator[str]:
        return iter(f.value for f in FAMILY_SPECS)

    def __len__(self) -> int:
        return len(FAMILY_SPECS)


#: Per-sample metric names per family, in report order (the metric records naming the family).
SAMPLE_METRICS: Mapping[str, tuple[str, ...]] = FamilyView(lambda s: s.sample_metrics)


def family_spec(family: str) -> FamilySpec:
    """The spec of ``family`` (a ``Family`` or its value); a ValueError names the known ones."""
    spec = _BY_NAME.get(family)  # a Family is its value (a StrEnum): one dict lookup for either
    if spec is None:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(Family)}")
    return spec


def per_metric(family: str) -> bool:
    """Whether ``family``'s samples each measure one named metric (A/D); False for a family no spec names (a
    damaged row's)."""
    spec = FAMILY_SPECS.get(family)  # type: ignore[call-overload]
    return spec is not None and spec.per_metric
