"""The report's first screen: one row per run across the three families with each family's headline statistic and
its CI, above the notes and the family sections, and the per-dataset breakdown folded below it."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import polars as pl
from test_html_report import Dom

from medvision_bm.report.bootstrap import BootstrapSpec
from medvision_bm.report.load import load
from medvision_bm.report.overview import NOT_RUN, overview_view
from medvision_bm.report.tables import family_tables
from medvision_bm.report.views import NO_SUCCESS
from medvision_bm.store.discovery import discover
from phantom_runs import run_baseline
from scripted import NothingParses


def _dom(index: Path) -> Dom:
    dom = Dom()
    dom.feed(index.read_text())
    return dom


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _plain(cell: str) -> str:
    return re.sub(r"\s+", " ", cell).strip()


def test_the_overview_opens_the_report_with_one_row_per_run(report_dir: Path) -> None:
    html = (report_dir / "index.html").read_text()
    at = html.index('<section id="overview">')
    assert at < html.index('id="notes"') and at < html.index('id="family-detect"')
    assert html.index('href="#overview"') < html.index('href="#family-detect"')
    md = (report_dir / "summary.md").read_text()
    assert md.index("### Overview: one row per run") < md.index("### Detection (bounding boxes): anatomy")
    rows = _dom(report_dir / "index.html").tables["overview-table"]
    head, body = rows[0], rows[1:]
    assert [r[0] for r in body] == ["mean", "oracle", "random-box"]
    assert head[1:5] == ["Detection: IoU, all regions", "T/L: avgMRE, overall", "A/D: avgMRE, Distance",
                         "A/D: avgMRE, Angle"]
    board = {(r["label"], r["aggregate"]): r for f in ("detect", "TL", "AD")
             for r in _csv(report_dir / f"leaderboard_{f}.csv")}
    for run in body:
        for cell, (agg, stat) in zip(run[1:5], [("all regions", "IoU"), ("overall", "avgMRE"),
                                                  ("Distance", "avgMRE"), ("Angle", "avgMRE")]):
            r = board[(run[0], agg)]
            value, lo, hi = (float(r[k]) for k in (stat, f"{stat}_lo", f"{stat}_hi"))
            shown = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", cell)]
            assert len(shown) == 3 and abs(shown[0] - value) <= 5e-4 * max(1, abs(value)), (cell, value)
            assert abs(shown[1] - lo) <= 5e-4 * max(1, abs(lo)) and abs(shown[2] - hi) <= 5e-4 * max(1, abs(hi))
    oracle = next(r for r in body if r[0] == "oracle")
    assert re.match(r"1\D", _plain(oracle[1])) and re.match(r"0\D", _plain(oracle[2]))  # perfect: IoU 1, MRE 0
    for run in body:  # N per family: the samples of the rows shown
        expected = [board[(run[0], "all regions")]["n"], board[(run[0], "overall")]["n"],
                    str(int(board[(run[0], "Distance")]["n"]) + int(board[(run[0], "Angle")]["n"]))]
        assert run[5].split(" · ") == expected


def test_the_breakdown_lists_every_task_under_its_dataset(report_dir: Path, phantom_lists: Path) -> None:
    dom = _dom(report_dir / "index.html")
    html = (report_dir / "index.html").read_text()
    section = html[html.index('<section id="overview">'):html.index("</section>", html.index('<section id="overview">'))]
    assert section.count("<details>") == 3
    for fam, stat in (("detect", "IoU"), ("TL", "avgMRE"), ("AD", "avgMRE")):
        ident = next(k for k in dom.tables if k.startswith("breakdown-") and stat.lower() in k
                     and {"detect": "detection", "TL": "tumor", "AD": "angle"}[fam] in k)
        rows = dom.tables[ident]
        assert rows[0] == ["Dataset", "Task", "mean", "oracle", "random-box"]
        tasks = json.loads((phantom_lists / f"tasks_MedVision-Phantom-{fam}.json").read_text())
        assert sorted(f"{r[0]}_{r[1]}" for r in rows[1:]) == sorted(tasks)
        per_task = {(r["label"], r["task"]): r for r in _csv(report_dir / f"tasks_{fam}.csv")}
        for r in rows[1:]:
            for label, cell in zip(rows[0][2:], r[2:]):
                n = per_task[(label, f"{r[0]}_{r[1]}")]["num_samples"]
                assert cell.endswith(f"(n={n})"), cell


def test_a_run_without_a_family_reads_not_run_and_headlines_join_the_row(phantom_results: Path, phantom_dir: Path,
                                                                          phantom_lists: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(phantom_results, results)
    shutil.rmtree(results / "MedVision-Phantom-AD" / "mean")
    out = run_baseline("oracle", "TL", phantom_dir, results / "MedVision-Phantom-TL", "--sample_limit", "4",
                       "--model_name", "nothing-parses", lists=phantom_lists, backend=lambda cfg, data: NothingParses())
    assert all(o.state == "done" for o in out)
    loaded = load(discover(results)[0])
    stores = loaded.store_frame()
    tables = {f: family_tables(f, loaded.samples[f], stores, BootstrapSpec(100), 20) for f in ("detect", "TL", "AD")}
    heads = pl.DataFrame([
        {"model": "oracle", "family": "TL", "published_model": "P", "comparable": False,
         "headline": "not comparable: data (phantom), sample counts (3 of 4 rows)"},
        {"model": "oracle", "family": "AD", "published_model": "P", "comparable": False,
         "headline": "not comparable: data (phantom), parse, sample counts (1 of 2 rows)"},
        {"model": "random-box", "family": "TL", "published_model": "P", "comparable": True,
         "headline": "comparable to the paper"},
        {"model": "random-box", "family": "AD", "published_model": "P", "comparable": False,
         "headline": "not comparable: parse"}])
    view = overview_view(tables, 0.95, heads)
    rows = {r[0]: r for r in view.rows}
    assert rows["mean"][3:5] == [NOT_RUN, NOT_RUN] and rows["mean"][5].endswith(" · –")
    assert NOT_RUN not in rows["oracle"] and rows["random-box"][5].count(" · ") == 2
    assert view.headers[-1] == "Against the paper"
    # one list of the settings that differ in any family, then the families it covers
    assert rows["oracle"][-1] == "not comparable: data (phantom), sample counts, parse (T/L and A/D)"
    assert rows["random-box"][-1] == "T/L: comparable to the paper; A/D: not comparable: parse"
    assert rows["mean"][-1] == "not matched to a published run"
    # a run without a success reads as the leaderboard does, not as a blank
    assert rows["nothing-parses"][1:5] == [NOT_RUN, NO_SUCCESS, NOT_RUN, NOT_RUN]
    assert overview_view(tables, 0.95).headers[-1].startswith("N: ")  # no column when no run was matched
