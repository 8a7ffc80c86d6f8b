"""One record per metric: its per-sample function, unit, direction, report statistic and families, looked up by name.

The per-sample values and the task aggregation are upstream's (``tasks.upstream_metrics``): a metric upstream
defines reads its value off upstream's per-sample record of the family. Every place that needs a fact of a metric
(scoring's parsed rows, the report's statistics and units, ``compare``'s directions and defaults) reads it here,
so adding a metric is its record here (with its function) and its test: its families' lists, their score columns,
the report and ``compare`` follow from the record. Columns are always found by name, never by position.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from medvision_bm.io import finite_or_none
from medvision_bm.tasks.upstream_metrics import DetectionSample, MeasureSample


@dataclass(frozen=True, slots=True)
class SampleContext:
    """What a per-sample metric function reads for one sample.

    ``upstream``: upstream's per-sample record of the family (``DetectionSample`` or ``MeasureSample``; its failure
    values when the answer did not parse); ``values``: the parsed answer's numbers (None when it did not parse);
    ``target``: the numbers a perfect answer gives.
    """

    upstream: DetectionSample | MeasureSample
    values: tuple[float, ...] | None
    target: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Stat:
    """One reported statistic: its key, how it is averaged and which way is better.

    ``kind`` "mean": mean over the samples with a finite value of ``column`` (upstream's avgMAE, IoU ...); "rate": a
    share of all samples (SuccessRate, IoU>0.5, MRE<0.1 ...). ``unit``: "error" when it carries the family's error
    unit. ``newer_only``: upstream's newer rules only (empty under the paper rules).
    """

    name: str
    kind: str
    higher_is_better: bool
    unit: str = ""
    newer_only: bool = False
    column: str = ""  # the per-sample metric a "mean" statistic averages


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """A per-sample metric as the benchmark reports it."""

    name: str
    unit: str  # "unitless", or "error" for the family's error unit (FamilySpec.error_unit)
    higher_is_better: bool
    families: tuple[str, ...]  # the families whose samples carry it ("*" for every family)
    #: The sample's value (None: it has none); no function: the sample's success (SuccessRate), not a metric column
    value: Callable[[SampleContext], float | None] | None = None
    stat: str = ""  # the report's statistic of its mean ("" for the metric's own name)
    newer_only: bool = False  # its report statistic exists under upstream's newer rules only
    compared: bool = True  # compared by default (``compare`` without --metrics)

    @property
    def report_stat(self) -> Stat:
        """The report's statistic of this metric: the mean of its column, or the success rate."""
        unit = "error" if self.unit == "error" else ""
        if self.value is None:
            return Stat(self.stat or self.name, "rate", self.higher_is_better, unit, self.newer_only)
        return Stat(self.stat or self.name, "mean", self.higher_is_better, unit, self.newer_only, self.name)


def upstream_field(name: str, finite: bool = True) -> Callable[[SampleContext], float | None]:
    """The value upstream's per-sample record holds under ``name`` (NaN or infinity as None when ``finite``)."""
    if finite:
        return lambda c: finite_or_none(getattr(c.upstream, name))
    return lambda c: getattr(c.upstream, name)


def _nmae(c: SampleContext) -> float | None:
    """Upstream's nMAE where it succeeded (it needs the slice's physical size), else none."""
    u = c.upstream
    assert isinstance(u, MeasureSample)  # nMAE is a T/L and A/D metric, whose records are MeasureSamples
    return finite_or_none(u.nMAE) if u.nMAE_success else None


#: Every metric, by name, in the order its families' rows and the report list them; a metric not here is an error
#: where a fact of it is needed. Upstream's overlap metrics are written as upstream computes them (never NaN).
METRICS: dict[str, MetricSpec] = {m.name: m for m in (
    MetricSpec("SuccessRate", "unitless", True, ("*",)),
    MetricSpec("IoU", "unitless", True, ("detect",), upstream_field("IoU", finite=False)),
    MetricSpec("F1", "unitless", True, ("detect",), upstream_field("F1", finite=False)),
    MetricSpec("Precision", "unitless", True, ("detect",), upstream_field("Precision", finite=False), compared=False),
    MetricSpec("Recall", "unitless", True, ("detect",), upstream_field("Recall", finite=False), compared=False),
    MetricSpec("MAE", "error", False, ("detect", "TL", "AD"), upstream_field("MAE"), stat="avgMAE"),
    MetricSpec("MRE", "unitless", False, ("TL", "AD"), upstream_field("MRE"), stat="avgMRE"),
    MetricSpec("nMAE", "unitless", False, ("TL", "AD"), _nmae, stat="avgNMAE", newer_only=True),
)}


def metric_spec(name: str) -> MetricSpec:
    """The record of ``name``; a KeyError names the known metrics."""
    try:
        return METRICS[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; known: {', '.join(METRICS)}") from None


def family_metrics(family: str) -> tuple[MetricSpec, ...]:
    """The per-sample metric columns of ``family``'s rows, in the registry's order."""
    return tuple(m for m in METRICS.values() if m.value is not None and family in m.families)


def higher_is_better(names: Mapping[str, MetricSpec] | None = None) -> dict[str, bool]:
    """Name -> direction of every registered metric."""
    return {n: m.higher_is_better for n, m in (names or METRICS).items()}


def error_names() -> frozenset[str]:
    """The metrics and report statistics that carry their family's error unit (``MAE``, ``avgMAE``)."""
    return frozenset(n for m in METRICS.values() if m.unit == "error" for n in (m.name, m.report_stat.name))


def unitless_text() -> str:
    """The report's line on units: the per-sample metrics without one, in the registry's order."""
    names = [m.name for m in METRICS.values() if m.value is not None and m.unit == "unitless"]
    return f"{', '.join(names)} and every rate are unitless"
