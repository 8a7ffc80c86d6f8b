"""The family records hold upstream's per-family rules: each record's entries are the ones upstream's parser and
aggregation use (``parse_utils.py`` @2f20f64: k = 4 box corners, 2 axes, 1 measurement;
``summarize_{detection,TL,AD}_task.py``: the per-sample metric names and the rate buckets), and the family values
are upstream's folder spellings (``tasks_MedVision-{detect,TL,AD}*.json``)."""

from __future__ import annotations

import json

import pytest

from medvision_bm.data.docs import FAMILIES, Family
from medvision_bm.tasks.families import FAMILY_SPECS, family_spec
from medvision_bm.tasks.upstream_metrics import MeasureSample

UPSTREAM = {  # family: (k numbers, per-sample metrics, rate bucket)
    "detect": (4, ("IoU", "F1", "Precision", "Recall", "MAE"), "MAE"),
    "TL": (2, ("MAE", "MRE", "nMAE"), "MRE"),
    "AD": (1, ("MAE", "MRE", "nMAE"), "MRE"),
}


@pytest.mark.parametrize("family", list(UPSTREAM))
def test_each_family_record_is_upstreams(family: str) -> None:
    spec = family_spec(family)
    k, metrics, bucket = UPSTREAM[family]
    assert (spec.arity, spec.sample_metrics, spec.bucket_metric) == (k, metrics, bucket)
    assert spec.family == family and str(spec.family) == family and f"{spec.family}" == family


def test_families_are_the_upstream_spellings_everywhere() -> None:
    assert FAMILIES == ("detect", "TL", "AD") and set(FAMILY_SPECS) == set(Family)
    assert json.dumps({Family.TL: [Family.AD]}) == '{"TL": ["AD"]}'
    assert {"detect": 1}[Family.DETECT] == 1  # a family looks up string-keyed tables
    with pytest.raises(ValueError, match="unknown family 'MaskSize'; known: detect, TL, AD"):
        family_spec("MaskSize")


def test_a_measure_record_reads_a_parsed_row_as_upstreams_sample() -> None:
    row = {"success": True, "near_zero_gt": True, "metrics": {"MAE": 1.5, "MRE": 0.25, "nMAE": None}}
    s = family_spec("TL").upstream_sample(row)
    assert isinstance(s, MeasureSample) and s.success and s.MAE == 1.5 and s.MRE == 0.25
    assert s.nMAE != s.nMAE and not s.nMAE_success  # no nMAE: NaN and not counted, as upstream


def test_each_family_is_one_of_boxes_axes_or_one_measurement_and_its_units_follow() -> None:
    kinds = {f: (s.has_boxes, s.axes, s.per_metric) for f, s in FAMILY_SPECS.items()}
    assert kinds == {"detect": (True, False, False), "TL": (False, True, False), "AD": (False, False, True)}
    assert [family_spec(f).error_unit() for f in ("detect", "TL", "AD")] == ["relative", "mm", "mm"]
    assert family_spec("AD").error_unit("angle") == "degrees" and family_spec("AD").error_unit("distance") == "mm"
    assert family_spec("TL").error_unit("angle") == "mm"  # only A/D samples measure angles


def test_ranking_and_report_statistics_follow_the_metric_records(temporary_metric) -> None:
    import dataclasses

    from medvision_bm.tasks.metrics import METRICS

    assert family_spec("detect").ranked_by == ("IoU", True) and family_spec("TL").ranked_by == ("MRE", False)
    assert [s.name for s in family_spec("TL").stats][:4] == ["SuccessRate", "avgMAE", "avgMRE", "avgNMAE"]
    temporary_metric(dataclasses.replace(METRICS["MRE"], higher_is_better=True))  # the record replaced in place
    assert family_spec("AD").ranked_by == ("MRE", True)
    assert next(s for s in family_spec("AD").stats if s.name == "avgMRE").higher_is_better


@pytest.mark.parametrize("family", list(UPSTREAM))
def test_the_reports_per_family_facts_are_facts_of_the_record(family: str) -> None:
    """The plotted per-sample metric is one of the family's samples' metrics, the overview's rows are leaderboard
    rows of the family, and the statistics plotted against the published numbers are report statistics of it."""
    from medvision_bm.report.groups import AGGREGATES

    spec = family_spec(family)
    assert spec.distribution_metric in spec.sample_metrics
    assert spec.overview_rows and set(spec.overview_rows) <= set(AGGREGATES[family])
    names = {s.name for s in spec.stats}
    assert spec.published_plot_stats and set(spec.published_plot_stats) <= names


def test_the_report_reads_its_per_family_facts_from_the_record(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    import polars as pl

    from medvision_bm.report import overview
    from medvision_bm.report.against_published import plot_job
    from medvision_bm.tasks import families

    spec = family_spec("AD")
    monkeypatch.setitem(families._BY_NAME, "AD", dataclasses.replace(spec, overview_rows=("Angle",),
                                                                      published_plot_stats=("SuccessRate",)))
    assert overview._headline("AD") == [("Angle", spec.primary)]
    rows = pl.DataFrame([{"family": "AD", "kind": "aggregate", "metric": m, "ours": 0.5, "published": 0.4,
                          "model": "m", "group": "Distance", "ci_low": 0.4, "ci_high": 0.6, "comparable": True}
                         for m in ("avgMRE", "SuccessRate")])
    job = plot_job(rows, "AD", "p.png", 0.95, "the paper")
    assert job is not None and [p["title"] for p in job.data["panels"]] == ["SuccessRate (unitless)"]
