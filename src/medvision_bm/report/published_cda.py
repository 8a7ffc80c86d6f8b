"""The published clinical decision agreement as data (the 18 models of upstream's CDA report, published_cda.json) in
the published leaderboard's row format, and a run of a published model held against it.

Source: YongchengYAO/MedVision ``Paper-results-backup/CDA/CDA_REPORT_llm-parsed-gemma-4-31b.md`` @755a7bb, its three
tables cell for cell as printed (3 decimals; p ``<0.001`` kept as text). Each row takes its model's folder, registry
record, weights and protocol from the same model's main-split run of that family in the published leaderboard (the
report names models by display name): the CDA of upstream's A/D and T/L results of the leaderboard runs (-CoT,
1,000 samples per task, judged by gemma-4-31b, T/L filtered), ``docs/spec/cda.md``.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from medvision_bm.report.published import PublishedRow, published_rows

if TYPE_CHECKING:  # the report's tables (polars) only where a summary holds a run against the numbers: the listing
    # (`medvision-bm published`) runs on a plain install
    from medvision_bm.report.cda import Analysis
    from medvision_bm.report.load import Loaded
    from medvision_bm.report.removed_filter import FilterReport
    from medvision_bm.report.views import View

#: (metric, column of the published table, decimals); the CI and p are those of the weighted kappa.
METRICS: tuple[tuple[str, str, int], ...] = (
    ("CDA Acc", "Acc", 3), ("CDA AccCov", "AccCov", 3), ("CDA kappa", "κ", 3), ("CDA wkappa", "wκ", 3),
    ("CDA wkappa CI lower", "95% CI", 3), ("CDA wkappa CI upper", "95% CI", 3), ("CDA p(wkappa > 0)", "p", 3),
    ("CDA Nparsed", "Nparsed", 0))
KIND = "cda"


def _raw() -> dict[str, Any]:
    return json.loads(resources.files("medvision_bm.report").joinpath("published_cda.json").read_text("utf-8"))


def _value(metric: str, cells: dict[str, str]) -> tuple[float | None, str]:
    """The number of one metric and a note (``p < 0.001`` is stored as its bound 0.001, with a note)."""
    if metric.endswith("CI lower") or metric.endswith("CI upper"):
        lo, hi = cells["95% CI"].strip("[]").split(",")
        return float(lo if metric.endswith("lower") else hi), ""
    col = next(c for m, c, _ in METRICS if m == metric)
    text = cells[col]
    if text.startswith("<"):
        return float(text[1:]), f"printed {text}"
    return (None, "") if text in ("—", "") else (float(text), "")


@cache
def published_cda_rows() -> tuple[PublishedRow, ...]:
    """Every number of the published CDA report as published rows (kind ``cda``, group: the proxy)."""
    raw = _raw()
    src = raw["source"]
    runs = {(r.name, r.family): r for r in published_rows() if r.split == "main"}
    out = []
    for proxy, rows in raw["tables"].items():
        family = raw["families"][proxy]
        for row in rows:
            cells = dict(zip(raw["columns"], row))
            ref = runs[(cells["Model"], family)]
            for metric, _, decimals in METRICS:
                value, note = _value(metric, cells)
                out.append(replace(ref, group=proxy, kind=KIND, metric=metric, value=value, decimals=decimals,
                                   n=int(cells["Ntotal"]), n_groups=None, source_file=src["file"],
                                   commit=src["commit"], note="; ".join(x for x in (note, ref.note) if x)))
    return tuple(out)


def same_as_printed(ours: float | None, row: PublishedRow) -> bool | None:
    """Whether our number prints as the published one (None: either has no value). ``<0.001``: ours below it."""
    if ours is None or row.value is None or (isinstance(ours, float) and math.isnan(ours)):
        return None
    if row.note.startswith("printed <"):
        return ours < row.value
    return f"{ours:.{row.decimals or 0}f}" == f"{row.value:.{row.decimals or 0}f}" or \
        abs(ours - row.value) <= row.half_unit * (1 + 1e-9)


def against(analysis: Analysis, loaded: Loaded, parse: str, tl_report: FilterReport | None) -> list[View]:
    """Every run of a published model held against the published CDA: per proxy and statistic ours and the
    published number, whether ours prints the same, and for the weighted kappa whether the published value lies in
    our 95% CI (``against_published.verdict``); then the protocol check of each matched run (its settings against
    the published run's, ``against_published.protocol``)."""
    from medvision_bm.report import against_published as ap
    from medvision_bm.report.views import View

    published = published_cda_rows()
    rows: list[list[str]] = []
    proto: list[list[str]] = []
    for family, runs in analysis.runs.items():
        refs = [r for r in published if r.family == family]
        for run in runs:
            stores = [s for s in loaded.stores if s.ref.family == family and s.ref.label == run.label]
            ident = ap.run_identity(stores, family, run.label)
            mine = [r for r in refs if ap.matches(ident, r)]
            if not mine:
                continue
            facts = ap.run_facts(loaded, family, run.label, parse, tl_report)
            proto += [[p["model"], family, p["published_model"], p["setting"], p["ours"], p["published"],
                       {None: "not stated", True: "differs", False: "same"}[p["differs"]]]
                      for p in ap.protocol(facts, mine[0])]
            for ref in mine:
                group = run.overall.get(ref.group)
                if group is None:
                    continue
                a = group.agreement()
                u = run.uncertainty(ref.group)
                ours = {"CDA Acc": a.accuracy, "CDA AccCov": a.accuracy_coverage_adjusted, "CDA kappa": a.cohen_kappa,
                        "CDA wkappa": a.weighted_kappa, "CDA wkappa CI lower": u.ci_lower if u else None,
                        "CDA wkappa CI upper": u.ci_upper if u else None,
                        "CDA p(wkappa > 0)": u.p_kappa_gt_zero if u else None,
                        "CDA Nparsed": float(a.n_parsed)}[ref.metric]
                same = same_as_printed(ours, ref)
                inside = ""
                if ref.metric == "CDA wkappa" and u is not None:
                    inside = ap.verdict(ours, u.ci_lower, u.ci_upper, ref.value, ref.half_unit)
                shown = "–" if ours is None or (isinstance(ours, float) and math.isnan(ours)) else \
                    f"{ours:.{ref.decimals or 0}f}"
                printed = "–" if ref.value is None else (ref.note.split(";")[0].removeprefix("printed ")
                                                          if ref.note.startswith("printed <")
                                                          else f"{ref.value:.{ref.decimals or 0}f}")
                rows.append([run.label, ref.group, ref.metric.removeprefix("CDA "), shown, printed,
                             {None: "–", True: "yes", False: "no"}[same], inside])
    if not rows:
        return []
    caption = ("Runs of a published model against the published clinical decision agreement (YongchengYAO/MedVision "
               "Paper-results-backup/CDA/CDA_REPORT_llm-parsed-gemma-4-31b.md @755a7bb, printed to 3 decimals): "
               "'same as printed' when ours rounds to the published number; for wkappa, where the published value "
               "lies against our 95% bootstrap CI. The published runs were judge-parsed (gemma-4-31b), -CoT, 1,000 "
               "samples per task, T/L filtered: see the protocol check before reading a difference. Unitless.")
    out = [View("CDA against the published report", ["Run", "Proxy", "Statistic", "Ours", "Published",
                                                     "Same as printed", "Published vs our CI"], rows, caption,
                [False, False, False, True, True, False, False])]
    if proto:
        out.append(View("CDA protocol check", ["Run", "Family", "Published model", "Setting", "Ours", "Published",
                                               "Verdict"], proto,
                        "The settings of each matched run against those of the published run its CDA numbers come "
                        "from."))
    return out
