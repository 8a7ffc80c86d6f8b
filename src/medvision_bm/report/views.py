"""What the Markdown and HTML tables show: headers (upstream's metric names, with units) and formatted cells from
the summary frames (one place, so the two renderings always agree)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import polars as pl

from medvision_bm.jsontypes import JsonMapping
from medvision_bm.report.groups import AGGREGATES, PRIMARY, STATS, UNIT_WORDS, aggregate_unit, key_recipe
from medvision_bm.tasks import upstream_metrics as um
from medvision_bm.tasks.families import FamilyView, family_spec
from medvision_bm.tasks.metrics import error_names, unitless_text

#: The family as a heading (``FamilySpec.title``).
FAMILY_NAMES: Mapping[str, str] = FamilyView(lambda s: s.title)
#: Short unit suffixes of the error statistics.
UNIT_SHORT: dict[str, str] = {"relative": "relative", "mm": "mm", "degrees": "degrees", "mixed": "mm | degrees"}
AGGREGATE_NOTES: dict[str, str] = {
    "anatomy": f"upstream's anatomy group: every region (label group) with at least {um.MINIMUM_GROUP_SIZE} samples "
               f"whose name has none of {', '.join(um.TUMOR_LESION_GROUP_KEYS)} "
               f"(nor {', '.join(um.EXCLUDED_KEYS)}), sample-weighted",
    "T/L": f"upstream's tumor/lesion group: regions with at least {um.MINIMUM_GROUP_SIZE} samples whose name has "
           f"{', '.join(um.TUMOR_LESION_GROUP_KEYS)}, sample-weighted",
    "all regions": "ours: every region, whatever its size, with the same sample weighting (upstream prints no such "
                   "row; it lets small runs be compared)",
    "overall": "upstream's T/L model row: label groups without a finite MRE dropped, the rest sample-weighted",
    "Distance": "distance labels (mm), upstream's group average (sample-weighted over the labels with a value); "
                "equals the newer summarizer's Distance row on the benchmark (FeTA24 + Ceph-Biometrics-400)",
    "Angle": "angle labels (degrees), upstream's group average; equals the newer summarizer's Angle row on the "
             "benchmark (Ceph-Biometrics-400)",
    "FeTA-Distance": "upstream's FeTA-Distance row (labels named FeTA24_distance)",
    "Ceph-Distance": "upstream's Ceph-Distance row (labels named Ceph-Biometrics-400_distance)",
    "Ceph-Angle": "upstream's Ceph-Angle row (labels named Ceph-Biometrics-400_angle)",
}


@dataclass
class View:
    """A table ready to render: a title, a caption, headers and string cells."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    caption: str = ""
    numeric: list[bool] = field(default_factory=list)
    empty: str = ""  # why the table holds no value: the report shows this line in its place
    row_classes: list[str] = field(default_factory=list)  # per row, a class the HTML gives it ("" for none)


def left_out(view: View) -> str:
    """The one line shown in place of a table without values: its reason, or that it has no rows."""
    return f"Left out: {view.empty or 'no run has a row here.'}"


def is_empty(view: View) -> bool:
    return bool(view.empty) or not view.rows


#: How a cell without a value reads.
NO_VALUE = "–"


def fmt(v: object) -> str:
    if type(v) is float:  # the common case first: the same text as below
        if v != v:
            return NO_VALUE
        if v == 0:
            return "0"
        return f"{v:.1f}" if abs(v) >= 100 else f"{v:.4g}"
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return NO_VALUE
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v == 0:
            return "0"
        return f"{v:.1f}" if abs(v) >= 100 else f"{v:.4g}"
    return str(v)


#: Shown instead of an interval for a value resting on one sample (``tables.without_single_sample_cis``).
ONE_SAMPLE = "(n=1: no CI)"


def _one_sample(row: JsonMapping) -> bool:
    return _under_two(row.get("num_samples", row.get("n")))


def _under_two(n: object) -> bool:
    """Whether a sample count says the value rests on one sample (or none)."""
    return isinstance(n, int) and n < 2


def _ci_cell(value: str, lo: str, hi: str, bounded: bool, one_sample: bool) -> str:
    """A statistic's cell: its value and interval; without bounds, the value (marked when it rests on one sample)."""
    if not bounded:
        return f"{value} {ONE_SAMPLE}" if one_sample else value
    return f"{value} [{lo}, {hi}]"


#: A leaderboard cell whose statistic has no value because every answer of the run in that row failed.
NO_SUCCESS = "– (0 successes)"


def with_ci(row: JsonMapping, name: str) -> str:
    lo, hi, value = row.get(f"{name}_lo"), row.get(f"{name}_hi"), row.get(name)
    return _ci_cell(fmt(value), fmt(lo), fmt(hi), not (lo is None and hi is None),
                    value is not None and _one_sample(row))


def _fmt_texts(values: Sequence[object]) -> list[str]:
    """``fmt`` of each value, each distinct float formatted once."""
    memo: dict[float, str] = {}
    out = []
    for v in values:
        if type(v) is float:
            text = memo.get(v)
            if text is None:
                text = memo[v] = fmt(v)  # (a NaN is never found again: formatted each time, the same "–")
            out.append(text)
        else:
            out.append(fmt(v))
    return out


def ci_texts(frame: pl.DataFrame, name: str) -> list[str]:
    """``with_ci`` of every row of ``frame`` (a column absent: None), built from its columns."""
    def column(col: str) -> list[object]:
        return frame[col].to_list() if col in frame.columns else [None] * frame.height

    counts = column("num_samples" if "num_samples" in frame.columns else "n")
    values, lows, highs = (_fmt_texts(column(c)) for c in (name, f"{name}_lo", f"{name}_hi"))
    raw_lo, raw_hi, raw = column(f"{name}_lo"), column(f"{name}_hi"), column(name)
    return [_ci_cell(value, lo, hi, not (rlo is None and rhi is None), v is not None and _under_two(n))
            for value, lo, hi, v, rlo, rhi, n in zip(values, lows, highs, raw, raw_lo, raw_hi, counts)]


def stat_header(name: str, unit: str) -> str:
    """Upstream's key, with the unit where the statistic has one (``avgMAE (mm)``)."""
    return f"{name} ({UNIT_SHORT.get(unit, unit)})" if name in error_names() else name


def _numeric(headers: Sequence[str], text_columns: int) -> list[bool]:
    return [i >= text_columns for i in range(len(headers))]


def _shown(family: str, frame: pl.DataFrame) -> list[str]:
    """The family's stats that hold a value in some row (paper-era runs lack nMAE and Acc@IoU)."""
    return [s.name for s in STATS[family] if s.name in frame.columns and frame[s.name].is_not_null().any()] or \
        [s.name for s in STATS[family] if not s.newer_only]


def leaderboard_views(family: str, board: pl.DataFrame, level: float) -> list[View]:
    """One table per aggregate row (anatomy, T/L, ...): one row per run, upstream's statistics with CIs."""
    views = []
    for agg in AGGREGATES[family]:
        sub = board.filter(pl.col("aggregate") == agg)
        if sub.height == 0:
            continue
        unit = aggregate_unit(family, agg)
        stats = _shown(family, sub)
        restricted = "rank_n" in sub.columns and (sub["rank_n"] != sub["n"]).any()
        headers = ["Rank", "Run", "Protocol", "Parser", "Tasks", "N", *(["Ranked on"] if restricted else []),
                   "Groups", *[stat_header(s, unit) for s in stats]]
        rows = []
        any_failed = False
        for r in sub.iter_rows(named=True):
            partial = r["tasks_covered"] < r["tasks_total"]
            rank = "-" if r["rank"] is None else str(r["rank"])
            ranked_on = [f"{r['rank_n']} ({PRIMARY[family]} {fmt(r['rank_value'])})"] if restricted else []
            # errors exist only for successes, and upstream's T/L rows drop a group without one (N is then 0)
            no_success = (r["n"] > 0 and r.get("SuccessRate") == 0.0) or (
                family_spec(family).axes and r["n"] == 0 and bool((sub["n"] > 0).any()))
            rows.append([rank, r["label"], r["protocol"], r["parser"],
                         f"{r['tasks_covered']}/{r['tasks_total']}" + (" *" if partial else ""),
                         str(r["n"]) + (" †" if restricted and r["n"] != r["rank_n"] else ""), *ranked_on,
                         str(r["n_groups"]),
                         *[NO_SUCCESS if no_success and r.get(s) is None else with_ci(r, s) for s in stats]])
            any_failed = any_failed or no_success
        empty = "" if (sub["n"] > 0).any() else \
            f"no label group of any run qualifies for this row ({AGGREGATE_NOTES.get(agg, agg)})."
        shared = (f" Runs were scored on different samples: the ranks are by {PRIMARY[family]} on the samples every "
                  "run has (Ranked on: how many, and the value there), the other columns are each run's own; † = N "
                  "includes samples not every run has." if restricted else "")
        caption = (f"{AGGREGATE_NOTES.get(agg, '')}. N = samples in the row, Groups = label groups averaged; "
                   f"[{level:.0%} bootstrap CI over resampled samples]. Units: avgMAE in {UNIT_WORDS[unit]}; "
                   f"{unitless_text()}. * = the run lacks some of the family's tasks.{shared}"
                   + (f" {NO_SUCCESS} = no answer of the run in this row succeeded (parsed and scored): upstream "
                      "averages the errors over successes only, and its T/L rows leave out a label group without "
                      "one (the row's N is then 0)." if any_failed else ""))
        views.append(View(f"{FAMILY_NAMES[family]}: {agg}", headers, rows, caption,
                          _numeric(headers, 4), empty))
    return views


def groups_view(family: str, groups: pl.DataFrame, level: float) -> View:
    """Per run and label group: upstream's per-group statistics (summary_metrics_<T>_Task.json)."""
    stats = _shown(family, groups)
    unit_col = family_spec(family).per_metric
    unit = aggregate_unit(family, "")
    headers = ["Run", "Group", *(["Unit"] if unit_col else []), "Enters", "N",
               *[s if unit_col else stat_header(s, unit) for s in stats]]
    cells = [groups[c].to_list() for c in ("label", "group", *(["unit"] if unit_col else []), "enters")]
    cells += [list(map(str, groups["n"].to_list())), *[ci_texts(groups, s) for s in stats]]
    rows = [list(row) for row in zip(*cells)]
    key = key_recipe(family)
    units = "avgMAE in the Unit column's unit" if unit_col else f"avgMAE in {UNIT_WORDS[unit]}"
    return View(f"{FAMILY_NAMES[family]} by label group", headers, rows,
                f"Upstream's groups ({key}); Enters = the aggregate row the group is averaged into. "
                f"[{level:.0%} bootstrap CI]. Units: {units}; {unitless_text()}. The CSV holds every upstream key.",
                _numeric(headers, 4 if unit_col else 3))


#: The per-task table's one column for the samples without a score: three counts in one cell keep the table narrow.
FAILED_COUNTS = "Parse failed · request failed · pending"
#: The per-task frame's columns of those counts.
FAILED_COLUMNS = ("n_parse_failed", "n_request_failed", "n_pending")


def tasks_view(family: str, tasks: pl.DataFrame, level: float) -> View:
    stats = _shown(family, tasks)
    headers = ["Task", "Run", "Unit", "Parser", "N", FAILED_COUNTS, *(["Near-zero GT"] if family_spec(family).per_metric else []),
               *stats]
    cells = [tasks[c].to_list() for c in ("task", "label", "unit", "parser")]
    cells += [list(map(str, tasks["num_samples"].to_list())),
              [f"{a} · {b} · {c}" for a, b, c in zip(*(tasks[c].to_list() for c in FAILED_COLUMNS))],
              *([list(map(str, tasks["n_near_zero_gt"].to_list()))] if family_spec(family).per_metric else []),
              *[ci_texts(tasks, s) for s in stats]]
    rows = [list(row) for row in zip(*cells)]
    return View(f"Per task: {FAMILY_NAMES[family]}", headers, rows,
                f"Per run and task: upstream's task metrics (results.json), [{level:.0%} bootstrap CI]. Unit: of "
                f"avgMAE ({', '.join(f'{k} = {v}' for k, v in UNIT_WORDS.items() if k != 'mixed')}); "
                f"{unitless_text()}. N = samples scored"
                + ("; A/D samples whose ground truth is below 0.1 are left out (newer rules)." if family_spec(family).per_metric
                   else "."), _numeric(headers, 4))


#: The random-box table's row over a run's tasks, as the report names it (its CSV keeps upstream's "ALL").
ALL_TASKS_MEAN = "ALL (mean of tasks)"


def random_box_view(table: pl.DataFrame, level: float) -> View:
    headers = ["Run", "Task", "N", "IoU", "Random-box IoU", "IoU − random", "Above random", "Samples above random"]
    col = {c: table[c].to_list() for c in ("label", "task", "num_samples", "iou_minus_random")}
    text = {c: _fmt_texts(table[c].to_list())
            for c in ("random_iou", "iou_minus_random", "diff_lo", "diff_hi", "above_random", "share_above_random")}
    # a difference resting on one sample is marked so; every other one is shown with its interval
    one = [_under_two(n) and raw is not None for n, raw in zip(col["num_samples"], col["iou_minus_random"])]
    diffs = [_ci_cell(d, lo, hi, bounded=not single, one_sample=single)
             for d, lo, hi, single in zip(text["iou_minus_random"], text["diff_lo"], text["diff_hi"], one)]
    cells = [col["label"], [ALL_TASKS_MEAN if t == "ALL" else t for t in col["task"]],
             list(map(str, col["num_samples"])), ci_texts(table, "IoU"), text["random_iou"], diffs,
             text["above_random"], text["share_above_random"]]
    rows = [list(row) for row in zip(*cells)]
    return View("Detection against random boxes (ours)", headers, rows,
                "IoU: upstream's (failures count 0). Random-box IoU: expected IoU of a uniformly random box per "
                f"sample (seeded Monte Carlo), averaged over the task; [{level:.0%} bootstrap CI]; above random when "
                f"the CI of the difference is above 0. {ALL_TASKS_MEAN}: the mean of the run's task rows, each task "
                "counting once whatever its N (the N shown is their sum), so it differs from the leaderboard's IoU, "
                "which weights by sample. All unitless.", _numeric(headers, 2))


def box_size_view(table: pl.DataFrame) -> View:
    headers = ["Run", "Area ratio group", "N", "Median ratio", "IoU", "Random-box IoU"]
    rows = [[r["label"], r["area_group"], str(r["n"]), fmt(r["median_area_ratio"]), fmt(r["IoU"]),
             fmt(r["random_iou"])] for r in table.iter_rows(named=True)]
    return View("Detection IoU by box size (ours)", headers, rows,
                "Box area / image area of the target box (unitless); groups merged until each holds the minimum "
                "group size; IoU as upstream's (failures count 0).", _numeric(headers, 2))


def p_text(p: float | None, n_boot: int) -> str:
    """A bootstrap p-value as text: 0 means no replicate fell on the other side of zero, so ``< 1/n_boot``."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return fmt(p)
    return f"< {1 / n_boot:.2g}" if p == 0 else fmt(p)


def compare_view(table: pl.DataFrame, level: float, n_boot: int) -> View:
    a, b = table["a"][0], table["b"][0]
    headers = ["Family", "Task", "Metric", "Unit", "Pairs", a, b, f"{b} − {a}", "p (bootstrap)", "Better"]
    rows = [[r["family"], r["task"], r["metric"], r["unit"], str(r["n_pairs"]), fmt(r["mean_a"]),
             fmt(r["mean_b"]), f"{fmt(r['diff'])} {ONE_SAMPLE}" if r["diff_lo"] is None and r["diff"] is not None
             and (r["n_pairs"] or 0) < 2 else f"{fmt(r['diff'])} [{fmt(r['diff_lo'])}, {fmt(r['diff_hi'])}]",
             p_text(r["p_boot"], n_boot),
             r["better"]] for r in table.iter_rows(named=True)]
    return View(f"Paired comparison: {b} vs {a}", headers, rows,
                f"Upstream's per-sample metrics on the same samples; difference {b} − {a} with a {level:.0%} paired "
                "bootstrap CI; ALL = mean over the shared tasks (A/D: per metric type, so mm and degrees never mix); "
                "IoU/F1/Precision/Recall count a failure as 0, MAE/MRE/nMAE pair the samples both runs answered.",
                _numeric(headers, 4))


def stores_view(stores: pl.DataFrame) -> View:
    headers = ["Run", "Model", "Tag", "Task", "Signature", "Protocol", "Scores from", "Parser", "N", "Success",
               "Parse failed", "Request failed", "Pending", "Torn lines", "Foreign lines"]
    col = {c: stores[c].to_list() for c in ("label", "model", "tag", "task", "answer_signature", "protocol", "source",
                                            "legacy", "parser_version", "selected", "success", "parse_failed",
                                            "request_failed", "pending", "bad_lines", "foreign_lines")}
    cells = [col["label"], col["model"], [t or "–" for t in col["tag"]], col["task"],
             [sig[:12] for sig in col["answer_signature"]], col["protocol"],
             [src + (" (legacy store)" if legacy and "legacy" not in src else "")
              for src, legacy in zip(col["source"], col["legacy"])],
             [p or "not recorded" for p in col["parser_version"]],
             *[list(map(str, col[c])) for c in ("selected", "success", "parse_failed", "request_failed", "pending")],
             _fmt_texts(col["bad_lines"]), _fmt_texts(col["foreign_lines"])]
    rows = [list(row) for row in zip(*cells)]
    return View("Runs (sample stores)", headers, rows, "Every store read; a run label with @ names one of several "
                "configurations of one model (never averaged together).", _numeric(headers, 8))


#: Markdown/HTML characters escaped in every table cell: a run, task or group name shows as text, never as HTML,
#: a link, code or emphasis, and never splits its table row.
_MD_ESCAPES = str.maketrans({"\\": "\\\\", "|": "\\|", "`": "\\`", "*": "\\*", "&": "&amp;", "<": "&lt;",
                             ">": "&gt;", "\n": " ", "\r": " "})


def md_cell(text: str) -> str:
    """``text`` safe inside a Markdown table cell (see _MD_ESCAPES; ``](`` is broken so no link forms)."""
    return text.translate(_MD_ESCAPES).replace("](", "]\\(")


_CONTROL = {c: " " for c in [*range(0x20), 0x7f]}


def text_table(view: View) -> str:
    """``view`` for a terminal: title, caption and the rows in aligned columns, each cell as it reads (``< 0.001``,
    not Markdown's ``&lt; 0.001``; control characters shown as spaces)."""
    rows = [[str(c).translate(_CONTROL) for c in row] for row in [view.headers, *view.rows]]
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(len(view.headers))]
    right = [view.numeric[i] if i < len(view.numeric) else False for i in range(len(view.headers))]

    def line(row: list[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row, widths, right)).rstrip()

    out = [view.title.translate(_CONTROL), ""]
    if view.caption:
        out += [view.caption.translate(_CONTROL), ""]
    out += [line(rows[0]), "  ".join("-" * w for w in widths), *(line(r) for r in rows[1:])]
    return "\n".join(out) + "\n"


#: ``_MD_ESCAPES`` as plain replacements, in an order that gives the translation's text (each replacement holds only
#: characters replaced before it).
_MD_REPLACEMENTS = (("\\", "\\\\"), ("|", "\\|"), ("`", "\\`"), ("*", "\\*"), ("&", "&amp;"), ("<", "&lt;"),
                    (">", "&gt;"), ("\n", " "), ("\r", " "))
#: Stand for the cell and row borders while a table's cells are escaped together (``_md_body``).
_CELL_MARK, _ROW_MARK = "\x00", "\x01"


def _md_body(rows: Sequence[Sequence[str]]) -> str | None:
    """The table lines of ``rows``, every cell as ``md_cell`` writes it, escaped in one pass over all cells joined
    (the borders stand as control characters meanwhile); None when a row is empty, a cell holds one of those
    characters or is not text (``md_cell`` decides then)."""
    try:
        body = _ROW_MARK.join([_CELL_MARK.join(row) for row in rows])
    except TypeError:
        return None
    cells = sum(map(len, rows))
    if body.count(_CELL_MARK) != cells - len(rows) or body.count(_ROW_MARK) != len(rows) - 1 \
            or not all(rows):
        return None
    for char, escaped in _MD_REPLACEMENTS:
        if char in body:
            body = body.replace(char, escaped)
    body = body.replace("](", "]\\(").replace(_CELL_MARK, " | ").replace(_ROW_MARK, " |\n| ")
    return "| " + body + " |"


def markdown(view: View) -> str:
    cell = md_cell

    align = ["---:" if (view.numeric[i] if i < len(view.numeric) else False) else "---" for i in range(len(view.headers))]
    lines = [f"### {cell(view.title)}", ""]
    if is_empty(view):
        return "\n".join([*lines, cell(left_out(view))]) + "\n"
    if view.caption:
        lines += [cell(view.caption), ""]
    lines.append("| " + " | ".join(cell(h) for h in view.headers) + " |")
    lines.append("| " + " | ".join(align) + " |")
    body = _md_body(view.rows)
    if body is None:
        lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in view.rows]
    else:
        lines.append(body)
    return "\n".join(lines) + "\n"
