"""The report's first screen: one row per run across the three families (each family's headline statistic with its
CI, the samples it rests on and, where a run was matched to a published one, whether it is comparable to the paper),
then the breakdown of the same statistic per dataset and task."""

from __future__ import annotations

import re
from collections.abc import Mapping

import polars as pl

from medvision_bm.data.docs import FAMILIES
from medvision_bm.report.groups import PRIMARY
from medvision_bm.report.tables import FamilyTables
from medvision_bm.report.views import FAMILY_NAMES, NO_SUCCESS, View, with_ci
from medvision_bm.tasks.families import family_spec

#: The families' short names in the overview's headers.
#: How a headline of ``against_published.headline`` that is not comparable starts.
NOT_COMPARABLE = "not comparable: "
#: The cell of a run that has no store of the family.
NOT_RUN = "not run"


def _headline(family: str) -> list[tuple[str, str]]:
    """The leaderboard rows (aggregate, statistic) the overview shows of ``family``: its record's
    ``overview_rows``, each with its ``primary`` statistic."""
    spec = family_spec(family)
    return [(agg, spec.primary) for agg in spec.overview_rows]


def _headline_cell(family: str, board: pl.DataFrame, label: str, agg: str, stat: str) -> tuple[str, int | None]:
    sub = board.filter((pl.col("label") == label) & (pl.col("aggregate") == agg))
    if sub.height == 0:
        return "–", None
    r = sub.row(0, named=True)
    if r.get(stat) is None:  # as the leaderboard: upstream's T/L row leaves out a group without a success (N 0)
        failed = (r["n"] > 0 and r.get("SuccessRate") == 0.0) or (family_spec(family).axes and r["n"] == 0)
        return (NO_SUCCESS if failed else "–"), r["n"]
    return with_ci(r, stat), r["n"]


def _paper_cell(heads: pl.DataFrame | None, label: str) -> str:
    if heads is None or heads.height == 0:
        return ""
    lines = [(family_spec(r["family"]).heading, r["headline"])
             for r in heads.filter(pl.col("model") == label).iter_rows(named=True)]
    if not lines:
        return "not matched to a published run"
    if all(h.startswith(NOT_COMPARABLE) for _, h in lines):  # one list of the settings that differ in any family
        settings = [re.sub(r" \(\d+ of \d+ rows\)$", "", w) for _, h in lines
                    for w in h[len(NOT_COMPARABLE):].split(", ")]
        return f"{NOT_COMPARABLE}{', '.join(dict.fromkeys(settings))} ({' and '.join(f for f, _ in lines)})"
    if len({h for _, h in lines}) == 1:
        return lines[0][1]
    return "; ".join(f"{fam}: {h}" for fam, h in lines)


def overview_view(tables: Mapping[str, FamilyTables], level: float, headlines: pl.DataFrame | None = None) -> View:
    """One row per run (every run of any family, by name): per family its headline statistic with CI, the samples
    of each family, and the run's comparability with the paper when some run was matched to a published one."""
    labels = sorted({lb for ft in tables.values() for lb in ft.leaderboard["label"].to_list()})
    cols = [(fam, agg, stat) for fam in map(str, FAMILIES) if fam in tables
            for agg, stat in _headline(fam)]
    with_paper = headlines is not None and headlines.height > 0
    fams = [f for f in map(str, FAMILIES) if f in tables]
    headers = ["Run", *[f"{family_spec(fam).heading}: {stat}, {agg}" for fam, agg, stat in cols],
               "N: " + " · ".join(family_spec(f).heading for f in fams),
               *(["Against the paper"] if with_paper else [])]
    rows = []
    for label in labels:
        cells: list[str] = []
        ns: dict[str, int] = {}
        for fam, agg, stat in cols:
            board = tables[fam].leaderboard
            if label not in board["label"].to_list():
                cells.append(NOT_RUN)
                continue
            cell, n = _headline_cell(fam, board, label, agg, stat)
            cells.append(cell)
            if n is not None:
                ns[fam] = ns.get(fam, 0) + n
        n_text = " · ".join(str(ns[f]) if f in ns else "–" for f in fams)
        rows.append([label, *cells, n_text, *([_paper_cell(headlines, label)] if with_paper else [])])
    numeric = [False, *[True] * len(cols), True, *([False] if with_paper else [])]
    return View("Overview: one row per run", headers, rows,
                f"Each family's headline statistic from upstream's rows (detection: IoU over every region, "
                f"sample-weighted; T/L: avgMRE of the overall row; A/D: avgMRE of the Distance and Angle rows; all "
                f"unitless, IoU higher and MRE lower is better) with its [{level:.0%} bootstrap CI]; N = samples in "
                f"the rows shown, per family; {NOT_RUN} = the run has no store of the family. The family sections "
                "below hold every statistic and row.", numeric)


def dataset(task: str) -> str:
    """The dataset a task reads: the name's part before its first underscore (upstream's task names)."""
    return task.split("_", 1)[0]


def breakdown_view(family: str, tasks: pl.DataFrame, level: float) -> View:
    """Per dataset and task (rows) and run (columns): the family's headline statistic of the task with its CI."""
    stat = PRIMARY[family]
    labels = sorted(set(tasks["label"].to_list()))
    read = [c for c in ("task", "label", "num_samples", "n", stat, f"{stat}_lo", f"{stat}_hi") if c in tasks.columns]
    cells: dict[tuple[str, str], str] = {(r["task"], r["label"]): with_ci(r, stat) + f" (n={r['num_samples']})"
                                         for r in tasks.select(read).iter_rows(named=True)}  # the columns read
    names = sorted(set(tasks["task"].to_list()), key=lambda t: (dataset(t), t))
    rows = [[dataset(t), t.split("_", 1)[1] if "_" in t else t, *[cells.get((t, lb), NOT_RUN) for lb in labels]]
            for t in names]
    return View(f"Per dataset: {FAMILY_NAMES[family]}, {stat}", ["Dataset", "Task", *labels], rows,
                f"Per run, the task's {stat} (unitless) [{level:.0%} bootstrap CI] and its samples; the task name "
                "without its dataset prefix. Every statistic per task: the family's per-task table.",
                [False, False, *[True] * len(labels)])


def overview(tables: Mapping[str, FamilyTables], level: float, headlines: pl.DataFrame | None = None) -> list[View]:
    """The overview table, then one breakdown per family."""
    return [overview_view(tables, level, headlines),
            *[breakdown_view(fam, ft.tasks, level) for fam, ft in tables.items() if ft.tasks.height]]
