"""One record per metric: its unit, its direction and the families it belongs to, looked up by name.

The per-sample values and the task aggregation are upstream's (``tasks.upstream_metrics``); this module only says
what each named column is, so comparison and aggregation find a metric by its name, never by its position.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """A per-sample metric as the benchmark reports it."""

    name: str
    unit: str  # "unitless", or "error" for the family's error unit (FamilySpec.units)
    higher_is_better: bool
    families: tuple[str, ...]  # the families whose samples carry it ("*" for every family)


#: Every comparable metric, by name; a metric not here is an error where a direction is needed.
METRICS: dict[str, MetricSpec] = {m.name: m for m in (
    MetricSpec("SuccessRate", "unitless", True, ("*",)),
    MetricSpec("IoU", "unitless", True, ("detect",)),
    MetricSpec("F1", "unitless", True, ("detect",)),
    MetricSpec("Precision", "unitless", True, ("detect",)),
    MetricSpec("Recall", "unitless", True, ("detect",)),
    MetricSpec("MAE", "error", False, ("detect", "TL", "AD")),
    MetricSpec("MRE", "unitless", False, ("TL", "AD")),
    MetricSpec("nMAE", "unitless", False, ("TL", "AD")),
)}


def metric_spec(name: str) -> MetricSpec:
    """The record of ``name``; a KeyError names the known metrics."""
    try:
        return METRICS[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; known: {', '.join(METRICS)}") from None


def higher_is_better(names: Mapping[str, MetricSpec] | None = None) -> dict[str, bool]:
    """Name -> direction of every registered metric."""
    return {n: m.higher_is_better for n, m in (names or METRICS).items()}


def unitless_text(order: tuple[str, ...] = ("nMAE", "MRE", "IoU", "F1", "Precision", "Recall")) -> str:
    """The report's line on units: the per-sample metrics without one (each must hold a unitless record)."""
    names = [n for n in order if metric_spec(n).unit == "unitless"]
    return f"{', '.join(names)} and every rate are unitless"
