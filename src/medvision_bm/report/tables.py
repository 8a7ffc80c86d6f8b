"""The summary tables of one family, upstream's first: per run the aggregate rows across label groups (the
leaderboard), per run and label group, per run and task; then ours for detection: the random-box comparison and
IoU by box size. Every table is a polars frame; nothing here writes files. How each number is made:
``report/groups.py`` (upstream's rules) and docs/parse-and-summarize.md.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from medvision_bm.io import finite_or_none
from medvision_bm.report.bootstrap import BootstrapSpec, Resampler, intervals_of, percentile_interval
from medvision_bm.report.groups import (
    AGGREGATES,
    PRIMARY,
    STATS,
    GroupDict,
    RunRows,
    Stat,
    StatRow,
    ad_unit,
    add_group_keys,
    aggregate_unit,
    era,
    run_rows,
    upstream_dicts,
)
from medvision_bm.report.load import TARGET_COLUMNS
from medvision_bm.report.replicates import replicates
from medvision_bm.tasks.families import family_spec

#: Starting edges of the box-to-image area-ratio groups; neighbours merge until each holds min_group_size docs.
AREA_EDGES: tuple[float, ...] = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 1.0)
RANDOM_BOX_DRAWS = 256


def ci_columns(metric: str) -> tuple[str, str]:
    return f"{metric}_lo", f"{metric}_hi"


def stat_names(family: str) -> list[str]:
    return [s.name for s in STATS[family]]


#: A frame's column types, as pl.DataFrame(schema=...) takes them (a type class such as pl.Utf8, or an instance).
Schema = dict[str, pl.DataType | type[pl.DataType]]


def _stat_schema(family: str) -> dict[str, pl.DataType]:
    return {k: pl.Float64() for s in STATS[family] for k in (s.name, *ci_columns(s.name))}


@dataclass
class FamilyTables:
    """Everything summarized for one family."""

    family: str
    leaderboard: pl.DataFrame
    groups: pl.DataFrame
    tasks: pl.DataFrame
    random_box: pl.DataFrame | None = None
    box_size: pl.DataFrame | None = None
    area_edges: list[float] = field(default_factory=list)
    upstream: dict[str, Any] = field(default_factory=dict)  # run label -> upstream's per-group dicts and rows
    notes: list[str] = field(default_factory=list)


def _with_cis(row: dict[str, object], stats: Sequence[Stat], values: Mapping[str, float | None],
              ci: tuple[np.ndarray, np.ndarray] | None, rules: str) -> dict[str, object]:
    """Stat values and their percentile intervals ``ci`` = (lo, hi) per stat, from ``bootstrap.intervals_of``
    (None: no replicates; None for stats the rules lack)."""
    lo, hi = ci if ci is not None else (None, None)
    for j, s in enumerate(stats):
        if s.newer_only and rules == "paper":
            row[s.name] = row[f"{s.name}_lo"] = row[f"{s.name}_hi"] = None
            continue
        row[s.name] = finite_or_none(values.get(s.name))
        row[f"{s.name}_lo"] = finite_or_none(lo[j]) if lo is not None else None
        row[f"{s.name}_hi"] = finite_or_none(hi[j]) if hi is not None else None
    return row


#: The group table's columns before its statistics, with their types.
_GROUP_COLUMNS: Schema = {"label": pl.Utf8, "group": pl.Utf8, "unit": pl.Utf8, "enters": pl.Utf8, "protocol": pl.Utf8,
                          "parser": pl.Utf8, "n": pl.Int64, "n_success": pl.Int64}


def _floats(values: Sequence[Mapping[str, Any]], key: str) -> np.ndarray:
    """Each mapping's number under ``key`` as float64 (NaN where it has none)."""
    return np.fromiter((np.nan if (x := v.get(key)) is None else x for v in values), dtype=np.float64,
                       count=len(values))


def _float_column(name: str, values: np.ndarray) -> pl.Series:
    """A Float64 column of ``values``, null where a value is not finite (``finite_or_none``'s rule)."""
    return pl.Series(name, np.where(np.isfinite(values), values, np.nan), dtype=pl.Float64, nan_to_null=True)


def _stat_columns(stats: Sequence[Stat], values: Sequence[Mapping[str, Any]],
                  cis: Sequence[tuple[np.ndarray, np.ndarray] | None], paper: np.ndarray) -> list[pl.Series]:
    """``_with_cis`` of many rows at once, as columns: per stat its value, lo and hi (per row: ``values``, its
    intervals ``cis`` or None, whether it follows the paper's rules, which lack the newer-only stats)."""
    lo, hi = np.full((len(cis), len(stats)), np.nan), np.full((len(cis), len(stats)), np.nan)
    for i, ci in enumerate(cis):
        if ci is not None:
            lo[i], hi[i] = ci
    out = []
    for j, s in enumerate(stats):
        for name, col in zip((s.name, *ci_columns(s.name)), (_floats(values, s.name), lo[:, j], hi[:, j])):
            out.append(_float_column(name, np.where(paper, np.nan, col) if s.newer_only else col))
    return out


#: A text cell starting with one of these is a formula to a spreadsheet (OWASP "CSV injection"): = + - @ tab CR.
FORMULA_START = r"^[=+\-@\t\r]"
#: ... unless it is a plain number (``-0.5``, ``+3``, ``1e-3``) or our "none" mark ``-``: those stay as they are.
PLAIN_NUMBER = r"^(?:[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|-)$"


def csv_text(frame: pl.DataFrame) -> str:
    """The frame as CSV with every text cell a spreadsheet would run as a formula made inert by a leading
    apostrophe (OWASP's rule; the CSV writer quotes cells with separators, quotes or line breaks). Numeric columns,
    and text cells that are plain numbers, are written unchanged."""
    cols = [c for c, t in frame.schema.items() if t == pl.Utf8]
    if cols:
        frame = frame.with_columns([
            pl.when(pl.col(c).str.contains(FORMULA_START) & ~pl.col(c).str.contains(PLAIN_NUMBER))
            .then(pl.lit("'") + pl.col(c)).otherwise(pl.col(c)).alias(c) for c in cols])
    return frame.write_csv()


def without_single_sample_cis(frame: pl.DataFrame, n_col: str) -> pl.DataFrame:
    """Null every interval column (``*_lo``/``*_hi``) of the rows resting on fewer than two samples: a bootstrap
    of one sample is the point itself (``[x, x]``), not an interval; the views mark such cells (``views.with_ci``)."""
    cols = [c for c in frame.columns if c.endswith(("_lo", "_hi")) or c == "above_random"]
    if not cols or n_col not in frame.columns:
        return frame
    few = pl.col(n_col).fill_null(0) < 2
    return frame.with_columns([pl.when(few).then(None).otherwise(pl.col(c)).alias(c) for c in cols])


#: The verdict of a paired comparison that rests on fewer than two pairs (no interval, no p-value).
TOO_FEW_PAIRS = "too few pairs"


def without_single_pair_verdicts(frame: pl.DataFrame) -> pl.DataFrame:
    """A paired comparison (``compare.paired_compare``) whose rows rest on fewer than two pairs: no interval, no
    p-value and no winner (one pair gives ``[d, d]`` and p = 0 whatever the models)."""
    if "n_pairs" not in frame.columns:
        return frame
    few = pl.col("n_pairs").fill_null(0) < 2
    return frame.with_columns(
        *[pl.when(few).then(None).otherwise(pl.col(c)).alias(c) for c in ("diff_lo", "diff_hi", "p_boot")
          if c in frame.columns],
        pl.when(few).then(pl.lit(TOO_FEW_PAIRS)).otherwise(pl.col("better")).alias("better"))


def _joined(values: Sequence[object]) -> str:
    return ",".join(sorted({str(v) for v in values if v})) or "-"


def tables_cost(frame: pl.DataFrame, stores: pl.DataFrame) -> int:
    """A rough relative cost of :func:`family_tables` on ``frame``, only to start the costliest family first: its
    stores and its (run, group) rows, each with its own bootstrap replicates and intervals (a family grouped per
    metric and landmark has hundreds of groups where another has a dozen)."""
    if not frame.height:
        return 0
    runs = stores.filter(pl.col("store").is_in(frame["store"].unique().implode()))["label"].n_unique()
    return frame["store"].n_unique() + frame["group"].n_unique() * max(runs, 1)


def family_tables(family: str, frame: pl.DataFrame, stores: pl.DataFrame, spec: BootstrapSpec,
                  min_group_size: int) -> FamilyTables:
    """Leaderboard (aggregate rows per run), per-group and per-task tables with bootstrap CIs; detection extras.

    ``frame``: load()'s sample frame of the family (sorted by store, index); ``stores``: Loaded.store_frame().
    """
    notes: list[str] = []
    if "group" not in frame.columns:
        frame, notes = add_group_keys(frame, family)
    info = stores.select("store", "label", "task", "protocol")
    frame = frame.join(info.select("store", "label"), on="store", how="left", maintain_order="left")
    scored = frame.filter(pl.col("scored"))
    stats = STATS[family]
    level = spec.level
    # per run: rules (from its rows), parsers, protocol
    run_meta: dict[str, dict[str, str]] = {}
    per_run = frame.group_by("label", maintain_order=True).agg(
        pl.col("rules").drop_nulls().mode().sort().first().alias("rules"),
        pl.col("rules").drop_nulls().unique().sort().alias("all_rules"),
        pl.col("parser").drop_nulls().unique().sort().alias("parsers"))
    protocols = info.group_by("label").agg(pl.col("protocol").drop_nulls().unique().sort())
    proto_of = dict(protocols.iter_rows())
    for label, rules, all_rules, parsers in per_run.iter_rows():
        run_meta[label] = {"rules": era(rules), "parser": _joined(parsers), "protocol": _joined(proto_of.get(label, []))}
        if len(all_rules) > 1:
            notes.append(f"{label}: rows scored with different metric rules ({_joined(all_rules)}); "
                         f"its {family} groups use the {run_meta[label]['rules']} rules")
    rules_of_label = {k: v["rules"] for k, v in run_meta.items()}
    # upstream per-group dicts and aggregate rows per run
    per_group = upstream_dicts(scored, family, ("label", "group"), lambda key: rules_of_label[key[0]])
    by_run: dict[str, dict[str, GroupDict]] = {}
    for (label, group), d in per_group.items():
        by_run.setdefault(label, {})[group] = d
    group_types: dict[str, str] = {}
    if family_spec(family).per_metric:
        for g, mt in scored.select("group", "metric_type").unique(maintain_order=True).iter_rows():
            group_types.setdefault(g, str(mt or ""))
    rows_of: dict[str, RunRows] = {label: run_rows(family, groups, rules_of_label[label], group_types)
                                   for label, groups in by_run.items()}
    store_label = dict(zip(info["store"].to_list(), info["label"].to_list()))
    store_task = dict(zip(info["store"].to_list(), info["task"].to_list()))
    iou_j = stat_names(family).index("IoU") if family_spec(family).has_boxes else None
    # per store: its intervals, and of its replicates only the IoU column the random-box table needs
    reps = replicates(family, scored, store_label, store_task, rows_of, Resampler(spec), level,
                      store_columns=[] if iou_j is None else [iou_j])

    # --- leaderboard: one row per run and aggregate
    tasks_total = frame["task"].n_unique() if "task" in frame.columns else 0
    covered = dict(frame.group_by("label").agg(pl.col("task").n_unique()).iter_rows())
    board_cis = intervals_of({(label, agg): reps.rows.get(label, {}).get(agg) for label, rr in rows_of.items()
                              for agg in AGGREGATES[family] if agg in rr.rows}, level)
    board_rows = []
    for label, rr in rows_of.items():
        for agg in AGGREGATES[family]:
            if agg not in rr.rows:
                continue
            values = rr.rows[agg]
            meta = run_meta[label]
            row: dict[str, object] = {"label": label, "aggregate": agg, "unit": aggregate_unit(family, agg), "protocol": meta["protocol"],
                   "parser": meta["parser"], "rules": meta["rules"], "tasks_covered": int(covered.get(label, 0)),
                   "tasks_total": int(tasks_total), "n": values["n"], "n_groups": values["n_groups"]}
            board_rows.append(_with_cis(row, stats, values, board_cis.get((label, agg)), meta["rules"]))
    board_schema: Schema = {"label": pl.Utf8, "aggregate": pl.Utf8, "unit": pl.Utf8, "protocol": pl.Utf8, "parser": pl.Utf8,
                    "rules": pl.Utf8, "tasks_covered": pl.Int64, "tasks_total": pl.Int64, "n": pl.Int64,
                    "n_groups": pl.Int64, **_stat_schema(family)}
    board = pl.DataFrame(board_rows, schema=board_schema)
    ranking = ranking_values(family, frame, scored, board, rows_of, rules_of_label, group_types)
    if any(n != own for (n, _v), own in zip(ranking.values(), board["n"])):
        notes.append(f"{family} leaderboards: runs were scored on different samples: each row ranks its runs by "
                     f"{PRIMARY[family]} on the samples they all have (columns rank_n, rank_value), as `compare` "
                     "pairs them")
    board = rank(family, board, ranking)

    # --- per run and label group
    fixed = list(_GROUP_COLUMNS)
    cells: dict[str, list[object]] = {c: [] for c in fixed}
    dicts: list[GroupDict] = []  # per group row: upstream's dict of its group
    cis: list[tuple[np.ndarray, np.ndarray] | None] = []
    paper: list[bool] = []
    for label, rr in rows_of.items():
        group_cis = reps.group_cis.get(label, {})
        meta = run_meta[label]
        for g, d in rr.per_group.items():
            unit = ad_unit(group_types.get(g)) if family_spec(family).per_metric else aggregate_unit(family, "")
            for c, v in zip(fixed, (label, g, unit, rr.membership.get(g, ""), meta["protocol"], meta["parser"],
                                    int(d["num_samples"]), round(d["SuccessRate"] * d["num_samples"]))):
                cells[c].append(v)
            dicts.append(d)
            cis.append(group_cis.get(g))
            paper.append(meta["rules"] == "paper")
    taken = {*fixed, *_stat_schema(family), "num_samples"}
    extra_keys = list(dict.fromkeys(k for d in dicts for k in d if k not in taken))
    groups = pl.DataFrame([*(pl.Series(c, cells[c], dtype=_GROUP_COLUMNS[c]) for c in fixed),
                           *_stat_columns(stats, dicts, cis, np.array(paper, dtype=bool)),
                           *(_float_column(k, _floats(dicts, k)) for k in extra_keys)]) \
        .sort(["label", "n", "group"], descending=[False, True, False])

    # --- per run and task
    tasks = task_table(family, frame, scored, stores, reps.store_cis, run_meta)

    upstream = {label: {"rules": run_meta[label]["rules"], "groups": rr.per_group, **rr.upstream}
                for label, rr in rows_of.items()}
    board, groups = without_single_sample_cis(board, "n"), without_single_sample_cis(groups, "n")
    tasks = without_single_sample_cis(tasks, "num_samples")
    ft = FamilyTables(family, board, groups, tasks, upstream=upstream, notes=notes)
    if family_spec(family).has_boxes:
        docs = distinct_docs(frame)
        edges = area_edges(docs["box_area_ratio"].to_list(), min_group_size)
        docs = with_random_iou(docs, spec.seed)
        ft.random_box = without_single_sample_cis(
            random_box_table(scored, docs, tasks, {s: r[:, 0] for s, r in reps.store.items()}, spec), "num_samples")
        ft.box_size = box_size_table(scored, docs, edges)
        ft.area_edges = edges
    return ft


def ranking_values(family: str, frame: pl.DataFrame, scored: pl.DataFrame, board: pl.DataFrame,
                   rows_of: dict[str, RunRows], rules_of_label: dict[str, str],
                   group_types: dict[str, str]) -> dict[tuple[str, str], tuple[int, float | None]]:
    """Per leaderboard row (run, aggregate): the samples its rank rests on and the primary stat there.

    The runs of an aggregate row with samples in it are compared on the samples they all have, as ``compare``
    pairs them: where they all have the same samples that is each run's own row; else upstream's rows are computed
    again on the shared samples only. A run without samples in the row is not ranked there (0, None)."""
    primary = PRIMARY[family]
    pairs = frame.select("label", "task", "key").unique()  # the samples each run has
    have = dict(pairs.group_by("label").agg(pl.len()).iter_rows())  # run -> its count of samples
    cache: dict[frozenset[str], dict[str, dict[str, StatRow]]] = {}

    def rows_for(labels: frozenset[str]) -> dict[str, dict[str, StatRow]]:
        if labels not in cache:
            # the samples every run of ``labels`` has; they are all a run has when their counts are equal
            keys = pairs.filter(pl.col("label").is_in(list(labels))).group_by("task", "key").agg(pl.len()) \
                .filter(pl.col("len") == len(labels)).select("task", "key")
            if all(have[lb] == keys.height for lb in labels):
                cache[labels] = {lb: rows_of[lb].rows for lb in labels}
            else:
                subset = scored.filter(pl.col("label").is_in(list(labels))).join(keys, on=["task", "key"], how="semi")
                per_group = upstream_dicts(subset, family, ("label", "group"), lambda key: rules_of_label[key[0]])
                by_run: dict[str, dict[str, GroupDict]] = {}
                for (label, group), d in per_group.items():
                    by_run.setdefault(label, {})[group] = d
                cache[labels] = {lb: run_rows(family, by_run.get(lb, {}), rules_of_label[lb], group_types).rows
                                 for lb in labels}
        return cache[labels]

    out: dict[tuple[str, str], tuple[int, float | None]] = {}
    for (agg,), sub in board.group_by("aggregate", maintain_order=True):
        present = frozenset(lb for lb, n in zip(sub["label"], sub["n"]) if n and lb in have)
        rows = rows_for(present) if present else {}
        for label in sub["label"]:
            row = rows.get(label, {}).get(agg, {}) if label in present else {}
            out[(label, agg)] = (int(row.get("n", 0) or 0), finite_or_none(row.get(primary)))
    return {(lb, agg): out[(lb, agg)] for lb, agg in zip(board["label"], board["aggregate"])}


def rank(family: str, board: pl.DataFrame,
         ranking: dict[tuple[str, str], tuple[int, float | None]] | None = None) -> pl.DataFrame:
    """Rank runs within each aggregate row by the family's primary stat, then the name, on comparable samples.

    ``ranking``: per (run, aggregate) the samples the rank rests on and the primary stat there
    (``ranking_values``; without it, each run's own row). The board gains ``rank_n`` and ``rank_value``; a run with
    no sample in a row is not ranked there, one without a value (every answer failed) comes last."""
    primary = PRIMARY[family]
    higher = next(s.higher_is_better for s in STATS[family] if s.name == primary)
    order = {a: i for i, a in enumerate(AGGREGATES[family])}
    if ranking is None:
        ranking = {(lb, agg): (int(n or 0), finite_or_none(v)) for lb, agg, n, v in
                   zip(board["label"], board["aggregate"], board["n"], board[primary])}
    pairs = [ranking[(lb, agg)] for lb, agg in zip(board["label"], board["aggregate"])]
    board = board.with_columns(pl.Series("rank_n", [n for n, _ in pairs], dtype=pl.Int64),
                               pl.Series("rank_value", [v for _, v in pairs], dtype=pl.Float64))
    parts = []
    for (agg,), sub in board.group_by("aggregate", maintain_order=True):
        sub = sub.sort([pl.col("rank_n") == 0, pl.col("rank_value"), pl.col("label")],
                       descending=[False, higher, False], nulls_last=True)
        ranks = pl.when(pl.col("rank_n") == 0).then(None).otherwise(pl.int_range(1, sub.height + 1, dtype=pl.Int64))
        parts.append(sub.with_columns(ranks.alias("rank"), pl.lit(order.get(agg, 99)).alias("_o")))
    if not parts:
        return board.with_columns(pl.lit(None, pl.Int64).alias("rank")).select(["rank", *board.columns])
    out = pl.concat(parts).sort("_o", "rank", nulls_last=True).drop("_o")
    return out.select(["rank", *board.columns])


def task_table(family: str, frame: pl.DataFrame, scored: pl.DataFrame, stores: pl.DataFrame,
               cis: Mapping[int, tuple[np.ndarray, np.ndarray]], run_meta: dict[str, dict[str, str]]) -> pl.DataFrame:
    """One row per run x task: counts, upstream's task metrics (results.json's) and their bootstrap intervals
    (``cis``: per store, ``Replicates.store_cis``)."""
    stats = STATS[family]
    counts = frame.group_by("store").agg(
        pl.len().alias("n"), pl.col("scored").sum().cast(pl.Int64).alias("num_samples"),
        pl.col("success").filter(pl.col("scored")).sum().cast(pl.Int64).alias("n_success"),
        (pl.col("status") == "parse_failed").sum().cast(pl.Int64).alias("n_parse_failed"),
        (pl.col("status") == "request_failed").sum().cast(pl.Int64).alias("n_request_failed"),
        (pl.col("status") == "missing").sum().cast(pl.Int64).alias("n_pending"),
        (~pl.col("scored")).sum().cast(pl.Int64).alias("n_near_zero_gt"),
        pl.col("parser").drop_nulls().unique().sort().str.join(",").alias("parser"),
        pl.col("rules").drop_nulls().first().alias("rules"),
        pl.col("metric_type").drop_nulls().unique().sort().str.join(",").alias("metric_types"))
    # per store (in the counts' order) its run, task and protocol
    rows = counts.join(stores.select("store", "label", "task", "protocol"), on="store", how="left",
                       maintain_order="left")
    ids, labels = rows["store"].to_list(), rows["label"].to_list()
    label_of = dict(zip(ids, labels))
    dicts = upstream_dicts(scored, family, ("store",), lambda key: era(run_meta[label_of[key[0]]]["rules"]))
    if family_spec(family).per_metric:
        def unit_of(metric_types: str | None) -> str:
            types = [t for t in (metric_types or "").split(",") if t]
            return ad_unit(types[0]) if len(types) == 1 else ("mixed" if types else "mm")

        unit_by = {t: unit_of(t) for t in rows["metric_types"].unique().to_list()}
        units = [unit_by[t] for t in rows["metric_types"].to_list()]
    else:
        units = [aggregate_unit(family, "")] * rows.height
    paper_of = {lb: era(run_meta[lb]["rules"]) == "paper" for lb in set(labels)}
    fixed = [rows["label"], rows["task"], rows["store"].cast(pl.Int64), pl.Series("unit", units, dtype=pl.Utf8),
             rows["protocol"], rows["parser"].fill_null("").replace("", "-").alias("parser"),
             *(rows[c].cast(pl.Int64) for c in ("n", "num_samples", "n_success", "n_parse_failed",
                                                 "n_request_failed", "n_pending", "n_near_zero_gt"))]
    return pl.DataFrame([*fixed, *_stat_columns(stats, [dicts.get((sid,), {}) for sid in ids],
                                                [cis.get(sid) for sid in ids],
                                                np.array([paper_of[lb] for lb in labels], dtype=bool))]
                        ).sort("task", "label")


# --------------------------------------------------------------------------------------------- detection extras


def distinct_docs(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per (task, key) with its target box and box-to-image area ratio."""
    return frame.filter(pl.col("tx0").is_not_null()).unique(["task", "key"], keep="first", maintain_order=True) \
        .select("task", "key", *TARGET_COLUMNS, "box_area_ratio").sort("task", "key")


def area_edges(ratios: Sequence[float | None], min_group_size: int, start: Sequence[float] = AREA_EDGES) -> list[float]:
    """Group edges over the box-to-image area ratios of the distinct docs: neighbours merge until every group
    holds at least ``min_group_size`` docs (a single group when there are fewer docs than that)."""
    arr = np.asarray([r for r in ratios if r is not None and np.isfinite(r)], dtype=np.float64)
    edges = list(start)
    if arr.size and arr.max() >= edges[-1]:
        edges[-1] = float(arr.max()) * (1 + 1e-9) + 1e-12
    counts = np.histogram(arr, bins=edges)[0].tolist() if arr.size else [0] * (len(edges) - 1)
    while len(counts) > 1:
        small = [i for i, c in enumerate(counts) if c < min_group_size]
        if not small:
            break
        i = small[0]
        j = i + 1 if i + 1 < len(counts) else i - 1  # merge into the right neighbour (the last one: left)
        a, b = min(i, j), max(i, j)
        counts[a:b + 1] = [counts[a] + counts[b]]
        del edges[b]
    return edges


def area_group_label(lo: float, hi: float) -> str:
    return f"{lo * 100:.3g}–{hi * 100:.3g}%"


def area_group_expr(edges: Sequence[float]) -> pl.Expr:
    labels = [area_group_label(a, b) for a, b in itertools.pairwise(edges)]
    inner = list(edges[1:-1])
    if not inner:
        return pl.when(pl.col("box_area_ratio").is_not_null()).then(pl.lit(labels[0])).otherwise(None) \
            .alias("area_group")
    return pl.col("box_area_ratio").cut(inner, labels=labels, left_closed=True).cast(pl.Utf8).alias("area_group")


def random_box_iou(targets: np.ndarray, draws: int, seed: int) -> np.ndarray:
    """Expected IoU of a uniformly random box (corners sorted per axis, as the random-box baseline draws them)
    with each target box [x0, y0, x1, y1], by Monte Carlo: one seeded point set, shifted modulo 1 by a seeded
    offset per target, so that each estimate is unbiased and their errors average out over a task."""
    rng = np.random.default_rng([seed, 0x5B0C])
    base = rng.random((draws, 4), dtype=np.float32)
    shifts = rng.random((len(targets), 4), dtype=np.float32)
    targets = np.asarray(targets, dtype=np.float32)
    out = np.empty(len(targets))
    step = max(1, 262_144 // max(draws, 1))
    for start in range(0, len(targets), step):
        pts = (base[None, :, :] + shifts[start:start + step, None, :]) % 1.0
        x0, x1 = np.minimum(pts[..., 0], pts[..., 1]), np.maximum(pts[..., 0], pts[..., 1])
        y0, y1 = np.minimum(pts[..., 2], pts[..., 3]), np.maximum(pts[..., 2], pts[..., 3])
        t = targets[start:start + step][:, None, :]
        ix = np.clip(np.minimum(t[..., 2], x1) - np.maximum(t[..., 0], x0), 0, None)
        iy = np.clip(np.minimum(t[..., 3], y1) - np.maximum(t[..., 1], y0), 0, None)
        inter = ix * iy
        area_t = np.clip(t[..., 2] - t[..., 0], 0, None) * np.clip(t[..., 3] - t[..., 1], 0, None)
        union = area_t + (x1 - x0) * (y1 - y0) - inter
        out[start:start + step] = np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0).mean(axis=1)
    return out


def with_random_iou(docs: pl.DataFrame, seed: int) -> pl.DataFrame:
    """The distinct docs with each one's expected random-box IoU."""
    targets = docs.select(TARGET_COLUMNS).to_numpy().astype(np.float64)
    return docs.with_columns(pl.Series("random_iou", random_box_iou(targets, RANDOM_BOX_DRAWS, seed)
                                       if len(targets) else np.zeros(0)))


def _nanmean0(stack: np.ndarray) -> np.ndarray:
    """Mean over the first axis ignoring NaN; NaN where every entry is NaN (no warning)."""
    valid = ~np.isnan(stack)
    total = np.where(valid, stack, 0.0).sum(axis=0)
    n = valid.sum(axis=0)
    return np.where(n > 0, total / np.maximum(n, 1), np.nan)


def random_box_table(scored: pl.DataFrame, docs: pl.DataFrame, tasks: pl.DataFrame, iou_reps: dict[int, np.ndarray],
                     spec: BootstrapSpec) -> pl.DataFrame:
    """Per run x task (and per run over its tasks): upstream's IoU (failures count 0) against the expected IoU of a
    random box."""
    per_task_random = docs.group_by("task").agg(pl.col("random_iou").mean())
    above = scored.join(docs.select("task", "key", "random_iou"), on=["task", "key"], how="left") \
        .group_by("store").agg((pl.col("IoU").fill_null(0.0) > pl.col("random_iou")).mean().alias("share_above_random"))
    t = tasks.select("label", "task", "store", "num_samples", "n_success", "IoU", "IoU_lo", "IoU_hi") \
        .join(per_task_random, on="task", how="left").join(above, on="store", how="left")
    rows: list[dict[str, Any]] = []
    diffs: list[tuple[int, np.ndarray]] = []  # per row with replicates and a random IoU: its replicate differences
    for r in t.iter_rows(named=True):
        rnd = r["random_iou"]
        rep = iou_reps.get(r["store"])
        if rep is not None and rnd is not None:
            diffs.append((len(rows), rep - rnd))
        rows.append({**r, "iou_minus_random": None if r["IoU"] is None or rnd is None else r["IoU"] - rnd,
                     "diff_lo": None, "diff_hi": None})
    if diffs:  # every row's interval in one call (each column's percentiles depend on that column alone)
        lo, hi = percentile_interval(np.column_stack([d for _, d in diffs]), spec.level)
        for k, (i, _) in enumerate(diffs):
            rows[i]["diff_lo"], rows[i]["diff_hi"] = finite_or_none(lo[k]), finite_or_none(hi[k])
    for label in t["label"].unique(maintain_order=True).to_list():
        sub = [r for r in rows if r["label"] == label and r["random_iou"] is not None and r["store"] in iou_reps]
        if not sub:
            continue
        lo, hi = percentile_interval(_nanmean0(np.stack([iou_reps[r["store"]] - r["random_iou"]
                                                          for r in sub]))[:, None], spec.level)
        ious = [r["IoU"] for r in sub if r["IoU"] is not None]
        iou = float(np.mean(ious)) if ious else None
        rnd = float(np.mean([r["random_iou"] for r in sub]))
        rows.append({"label": label, "task": "ALL", "store": -1, "num_samples": sum(r["num_samples"] for r in sub),
                     "n_success": sum(r["n_success"] for r in sub), "IoU": iou, "IoU_lo": None, "IoU_hi": None,
                     "random_iou": rnd, "share_above_random": None,
                     "iou_minus_random": None if iou is None else iou - rnd, "diff_lo": finite_or_none(lo[0]),
                     "diff_hi": finite_or_none(hi[0])})
    out = pl.DataFrame(rows, schema={"label": pl.Utf8, "task": pl.Utf8, "store": pl.Int64, "num_samples": pl.Int64,
                                     "n_success": pl.Int64, "IoU": pl.Float64, "IoU_lo": pl.Float64,
                                     "IoU_hi": pl.Float64, "random_iou": pl.Float64,
                                     "share_above_random": pl.Float64, "iou_minus_random": pl.Float64,
                                     "diff_lo": pl.Float64, "diff_hi": pl.Float64})
    return out.with_columns((pl.col("diff_lo") > 0).alias("above_random")).drop("store")


def box_size_table(scored: pl.DataFrame, docs: pl.DataFrame, edges: Sequence[float]) -> pl.DataFrame:
    """Per run and area-ratio group: IoU over the group's samples (failures count 0, as upstream's IoU), beside the
    group's median ratio and random-box expectation over its distinct docs."""
    data = scored.with_columns(area_group_expr(edges)).filter(pl.col("area_group").is_not_null())
    runs = data.group_by("label", "area_group").agg(
        pl.len().cast(pl.Int64).alias("n"), pl.col("success").sum().cast(pl.Int64).alias("n_success"),
        pl.col("IoU").mean().alias("IoU"))
    groups = docs.with_columns(area_group_expr(edges)).filter(pl.col("area_group").is_not_null()).group_by(
        "area_group").agg(pl.col("box_area_ratio").median().alias("median_area_ratio"), pl.col("random_iou").mean())
    order = {area_group_label(a, b): i for i, (a, b) in enumerate(itertools.pairwise(edges))}
    return runs.join(groups, on="area_group", how="left").with_columns(
        pl.col("area_group").replace_strict(order, default=-1, return_dtype=pl.Int64).alias("_g")) \
        .sort("label", "_g").drop("_g").select("label", "area_group", "n", "n_success", "IoU", "median_area_ratio",
                                               "random_iou")


def parse_comparison(family: str, strict_tasks: pl.DataFrame, judged_tasks: pl.DataFrame) -> pl.DataFrame:
    """Per run and task, the strict parse's and the judged parse's success rate, primary statistic and avgMAE side by
    side (``<stat>_strict``, ``<stat>_judged``; ``n_judged``: samples in the judged parse, null when it has none)."""

    stats = list(dict.fromkeys(("SuccessRate", PRIMARY[family], "avgMAE")))
    keys = ["label", "task"]
    s = strict_tasks.select([*keys, "num_samples", *[c for c in stats if c in strict_tasks.columns]])
    j = judged_tasks.select([*keys, "num_samples", *[c for c in stats if c in judged_tasks.columns]])
    s = s.rename({c: f"{c}_strict" for c in stats if c in s.columns}).rename({"num_samples": "n"})
    j = j.rename({c: f"{c}_judged" for c in stats if c in j.columns}).rename({"num_samples": "n_judged"})
    out = s.join(j, on=keys, how="left", maintain_order="left")
    order = [*keys, "n", "n_judged", *[f"{c}_{p}" for c in stats for p in ("strict", "judged") if f"{c}_{p}" in out.columns]]
    return out.select(order).sort(keys)
