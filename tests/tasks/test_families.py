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


def _replaced(monkeypatch: pytest.MonkeyPatch, family: str, **facts: object) -> None:
    """``family``'s record with ``facts`` replaced, for one test (every lookup reads it: ``family_spec`` and the
    report's per-family views)."""
    import dataclasses

    from medvision_bm.tasks import families

    monkeypatch.setitem(families._BY_NAME, family, dataclasses.replace(family_spec(family), **facts))


def test_the_reports_rows_panels_and_headings_are_read_from_the_record(monkeypatch: pytest.MonkeyPatch) -> None:
    import polars as pl

    from medvision_bm.report import overview
    from medvision_bm.report.groups import AGGREGATES
    from medvision_bm.report.views import FAMILY_NAMES, leaderboard_views

    _replaced(monkeypatch, "AD", aggregates=("Angle", "Distance"), title="Measurements", short="lengths")
    assert AGGREGATES["AD"] == ("Angle", "Distance") and FAMILY_NAMES["AD"] == "Measurements"
    board = pl.DataFrame([{"label": "m", "aggregate": agg, "unit": "mm", "n": 3, "n_groups": 1, "SuccessRate": 1.0,
                           "rank": 1, "protocol": "current", "parser": "strict-1", "tasks_covered": 1,
                           "tasks_total": 1} for agg in ("Distance", "Angle", "Ceph-Angle")])
    assert [v.title for v in leaderboard_views("AD", board, 0.95)] == ["Measurements: Angle", "Measurements: Distance"]
    assert family_spec("AD").heading == "Lengths" and overview.breakdown_view(
        "AD", pl.DataFrame(schema={"label": pl.Utf8, "task": pl.Utf8}), 0.95).title.startswith("Per dataset: Measurements")


def test_the_units_the_report_names_are_the_records_units_by_metric_type(monkeypatch: pytest.MonkeyPatch) -> None:
    from medvision_bm.report.groups import units_line, units_title

    assert units_line("TL") == "mm" and units_title("detect") == "relative coordinates"
    assert units_line("AD") == "mm (distance) or degrees (angle)"
    assert units_title("AD") == "mm for distances, degrees for angles"
    _replaced(monkeypatch, "TL", error_units={"": "mm", "volume": "degrees"})
    assert units_line("TL") == "degrees (volume)" and units_title("TL") == "degrees for volumes"
    _replaced(monkeypatch, "AD", error_units={"": "degrees"})
    assert (units_line("AD"), units_title("AD"), family_spec("AD").error_unit("angle")) == ("degrees",) * 3


def test_upstreams_folder_and_report_name_of_a_family_are_read_from_the_record(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from medvision_bm.report import judge_report
    from medvision_bm.report.upstream_summaries import write_family

    _replaced(monkeypatch, "TL", upstream_folder="Lesions", upstream_name="Lesion size")
    written = write_family(tmp_path, "TL", [("run/a", {})])
    assert written and all(p.startswith("Lesions/") for p in written) and (tmp_path / written[-1]).is_file()
    rep = judge_report.JudgeReport("TL", "parsed_judge")
    assert judge_report.text(rep, "tasks").startswith("========== JUDGE REPORT: Lesion size ==========")
    assert judge_report.write_files(rep, tmp_path, "tasks") == ["Lesions/summary_judge_task__parsed_judge.txt"]


def test_a_cda_prediction_holds_the_records_count_of_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream's CDA reads a prediction only from an answer of the family's k numbers (one angle); the count is the
    record's arity."""
    from medvision_bm.report import cda
    from medvision_bm.store.parsed_row import ParsedRow
    from medvision_bm.tasks.upstream_parse import SampleStatus

    assert cda.proxy_families() == ("AD", "TL")  # the proxies' own order (upstream's report rows)
    proxy = next(p for p in cda.proxies() if p.family == "AD")
    task = f"Ceph-Biometrics-400_{proxy.task_marker}_Task01_Sagittal"

    def predicted(values: list[float | None]) -> list[float | None]:
        run = cda.RunCda("m", "AD")
        cda.add_row(run, task, ParsedRow(
            index=0, family="AD", task=task, rules="current", key="", status=SampleStatus.OK, success=True,
            values=values, target=[82.0], metrics={}, parser="strict-1", dataset="Ceph-Biometrics-400",
            metric_key=(proxy.metric_keys or ("",))[0], slice_dim=2))
        return [s.pred_value for s in run.samples]

    assert predicted([83.0]) == [83.0] and predicted([83.0, 1.0]) == [None]
    _replaced(monkeypatch, "AD", arity=2)
    assert predicted([83.0]) == [None] and predicted([83.0, 1.0]) == [83.0]


def test_the_bar_panels_are_the_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every bar panel is an aggregate row and a report statistic of its family; the panels drawn are the record's."""
    from medvision_bm.report import plot_jobs

    for spec in FAMILY_SPECS.values():
        assert {a for a, _ in spec.bar_panels} <= set(spec.aggregates)
        assert {st for _, st in spec.bar_panels} <= {st.name for st in spec.stats}
    import types

    import polars as pl

    board = pl.DataFrame([{"label": "m", "aggregate": "overall", "rank": 1, "SuccessRate": 1.0, "avgMRE": 0.5,
                           "avgMAE": 2.0, "avgNMAE": 0.1}])
    tables = types.SimpleNamespace(family="TL", leaderboard=board)

    def titles() -> list[str]:
        job = plot_jobs.bar_job(tables, "bars.png", 0.95)  # type: ignore[arg-type]
        return [p["title"] for p in job.data["panels"]] if job is not None else []

    assert titles() == [f"{st} ({'mm' if st == 'avgMAE' else 'unitless'}), overall"
                        for _, st in family_spec("TL").bar_panels]
    _replaced(monkeypatch, "TL", bar_panels=(("overall", "SuccessRate"), ("overall", "avgMRE")))
    assert titles() == ["SuccessRate (unitless), overall", "avgMRE (unitless), overall"]
