"""Every summary checked against the published leaderboard (or a user's reference numbers): per run whose model is a
published one, ours with its bootstrap CI beside the published value, n beside n, a verdict, and a protocol check
naming every setting that differs from the published run.

Matching: a run matches a published model of its family when its name is one of the model's names
(``published.aliases``: upstream's result folder, its display name, our folder name for the record and weights) or
when its signature's registry record and weights are the published ones. Rows: the published aggregate rows
(overall, anatomy, T/L, Distance ...) against the run's leaderboard rows of the same name, label groups against its
groups of the same key (upstream's keys: docs/spec/published-leaderboard.md). Verdict, only where the row is
comparable (no protocol setting and no sample count differs): the published value, as the interval of half a printed
digit around it, inside our CI, above it or below it. One headline per run and family: comparable to the paper, or
not comparable and the settings that differ (the data, phantom or MedVision, among them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict, TypeVar

import polars as pl

from medvision_bm import limits
from medvision_bm.data.layout import parse_task_name
from medvision_bm.data.phantom import SPECS as PHANTOM_SPECS
from medvision_bm.data.removed_samples import FILTER_PIN
from medvision_bm.jsontypes import JsonMapping
from medvision_bm.models.registry import REGISTRY
from medvision_bm.report.groups import units_title
from medvision_bm.report.load import Loaded, StoreInfo
from medvision_bm.report.plots import PlotJob
from medvision_bm.report.published import PUBLISHED_DATA, PublishedRow, aliases
from medvision_bm.report.removed_filter import FILTERED, FilterReport
from medvision_bm.report.tables import FamilyTables
from medvision_bm.report.upstream_summaries import judged_dir
from medvision_bm.report.views import FAMILY_NAMES, View, fmt
from medvision_bm.store.discovery import signature_object
from medvision_bm.store.judged import judge_weights
from medvision_bm.tasks.families import family_spec

INSIDE, ABOVE, BELOW = "published inside ours", "published above ours", "published below ours"
NO_CI, NO_VALUE, NOT_COMPARABLE = "no CI", "no value", "not comparable"
#: The comparison CSV: the columns every row has, in this order, then the ones that say where the number came from.
COLUMNS: tuple[str, ...] = ("model", "family", "group", "metric", "ours", "ci_low", "ci_high", "published",
                            "n_ours", "n_published", "verdict", "comparable", "differences", "published_model",
                            "published_name", "split", "kind", "decimals", "source_file")
#: The protocol settings checked, in report order.
SETTINGS: tuple[str, ...] = ("model weights", "data", "annotation pin", "task-list variant", "sample limit",
                             "parse", "T/L filter", "token budget", "engine")
#: The datasets of the bundled phantom: a run on them is a run on stand-in data, never on the paper's.
PHANTOM_DATASETS: frozenset[str] = frozenset(spec.name for spec in PHANTOM_SPECS)
MAIN = "main"
#: How a task-name variant reads in the protocol check (``(none)``: plain task names).
VARIANT_WORDS: dict[str, str] = {"(none)": "plain task names", "-CoT": "CoT (-CoT task names)"}


#: A fact of a run's stores: their one value, or their different values (sorted by repr).
Recorded = str | tuple[str | None, ...] | None


class ProtocolCheck(TypedDict):
    """One protocol setting of a run beside the published run's (a row of the protocol table)."""

    model: str
    family: str
    published_model: str
    setting: str
    ours: str
    published: str
    differs: bool | None  # None: the published run does not state it
    note: str


@dataclass
class RunFacts:
    """What one run (label) of one family was: the protocol settings the published runs are checked against."""

    label: str
    family: str
    model: str
    record: Recorded
    weights: Recorded
    settings: dict[str, str] = field(default_factory=dict)  # setting -> ours, in words
    values: dict[str, object] = field(default_factory=dict)  # setting -> ours, as compared


_T = TypeVar("_T")
#: A store's sample selection as compared: its kind (``limit``, ``all``, ``indices``, ``unknown``) and its number.
Selected = tuple[str, int | None]


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _one(values: Sequence[_T]) -> _T | tuple[_T, ...]:
    uniq = sorted({repr(v): v for v in values}.items())
    return uniq[0][1] if len(uniq) == 1 else tuple(v for _, v in uniq)


def _selection(s: StoreInfo) -> Selected:
    """The sample selection as compared with upstream's ``--sample_limit``: ``limit N``, ``all N`` (every sample;
    the same as a limit of at least N), ``indices``."""
    results = s.results_record()
    sel = results.selection if results is not None else None
    if sel is None:
        return ("unknown", None)
    if sel.limit is not None:
        return ("limit", sel.limit)
    if sel.all is not None:
        return ("all", sel.all)
    return ("indices", len(sel.indices)) if sel.indices is not None else ("unknown", None)


def _judge_weights(s: StoreInfo) -> str | None:
    return judge_weights(s)


#: The ``model_args`` keys of upstream's lmms-eval runs that name the weights, in the order they are looked for.
WEIGHT_ARGS: tuple[str, ...] = ("pretrained", "model_version", "model_hf", "model", "model_path")


def weights_of_model(model: JsonMapping) -> str | None:
    """The weights a run's signature names: its ``weights`` (a served model's ``--model_hf_id``, else the name it is
    served by), or for an imported upstream run the weights its lmms-eval ``model_args`` name (``pretrained=...``)."""
    if model.get("weights"):
        return str(model["weights"])
    args = model.get("model_args")
    if isinstance(args, str):
        pairs = dict(part.split("=", 1) for part in args.split(",") if "=" in part)
        for key in WEIGHT_ARGS:
            if pairs.get(key, "").strip():
                return pairs[key].strip()
    return None


def run_identity(stores: Sequence[StoreInfo], family: str, label: str) -> RunFacts:
    """Who a run is (its name, record and weights): enough to match it with a published model."""
    model = [signature_object(s.ref.inputs, "model") for s in stores]
    return RunFacts(label, family, stores[0].ref.model if stores else label, _one([_text_or_none(m.get("record")) for m in model]),
                    _one([weights_of_model(m) for m in model]))


def run_facts(loaded: Loaded, family: str, label: str, parse: str, tl_filter: FilterReport | None) -> RunFacts:
    """A run's identity and its protocol settings (reads each store's results.json: only for matched runs)."""
    stores = [s for s in loaded.stores if s.ref.family == family and s.ref.label == label]
    model = [signature_object(s.ref.inputs, "model") for s in stores]
    facts = run_identity(stores, family, label)
    pins = _one([str(s.ref.inputs.get("planner_version") or "") for s in stores])
    variants = _one([parse_task_name(s.ref.task).variant or "(none)" for s in stores])
    sels = [_selection(s) for s in stores]
    budgets = _one([signature_object(s.ref.inputs, "generation").get("max_new_tokens") for s in stores])
    engines = _one([m.get("backend") for m in model])
    if parse == "judged":
        judges = _one([_judge_weights(s) for s in stores])
        parsed = f"judged:{judged_dir(judges).removeprefix('llm-parsed_')}" if isinstance(judges, str) else \
            f"judged:{judges}"
    else:
        parsed = "strict"
    datasets = sorted({parse_task_name(s.ref.task).dataset for s in stores})
    data = "phantom" if PHANTOM_DATASETS.intersection(datasets) else PUBLISHED_DATA
    facts.values = {"data": data, "annotation pin": pins, "task-list variant": variants, "sample limit": sels,
                    "parse": parsed, "token budget": budgets, "engine": engines}
    if family_spec(family).axes:
        facts.values["T/L filter"] = bool(tl_filter is not None and tl_filter.status_of(label) == FILTERED)
    facts.settings = {k: _words(k, v) for k, v in facts.values.items()}
    facts.settings["data"] = f"{data} ({', '.join(datasets)})"
    facts.settings["model weights"] = f"{facts.record} {facts.weights or '(record default)'}"
    return facts


def _selection_words(sels: Sequence[Selected]) -> str:
    parts = []
    for kind in ("limit", "all", "indices", "unknown"):
        ns = sorted(n for k, n in sels if k == kind and n is not None)
        if kind == "all" and ns:
            parts.append(f"all samples ({ns[0]}–{ns[-1]} per task)" if ns[0] != ns[-1] else f"all samples ({ns[0]})")
        elif kind == "limit" and ns:
            parts.append(" | ".join(f"limit {n}" for n in dict.fromkeys(ns)))
        elif kind in ("indices", "unknown") and any(k == kind for k, _ in sels):
            parts.append("chosen indices" if kind == "indices" else "not recorded")
    return "; ".join(parts)


def _selections(value: object) -> list[Selected]:
    """The per-store selections ``RunFacts.values`` holds under ``sample limit`` (``_selection`` pairs)."""
    out: list[Selected] = []
    for kind, n in value if isinstance(value, list) else ():
        out.append((str(kind), n if isinstance(n, int) else None))
    return out


def _words(setting: str, value: object) -> str:
    if setting == "sample limit":
        return _selection_words(_selections(value))
    if setting == "task-list variant":
        variants = value if isinstance(value, tuple) else (value,)
        return " | ".join(VARIANT_WORDS.get(v, v) if isinstance(v, str) else str(v) for v in variants)
    if setting == "T/L filter":
        return "on" if value else "off"
    if isinstance(value, tuple):
        return " | ".join(str(v) for v in value)
    return str(value)


def _limit_same(ours: Sequence[Selected], limit: int) -> bool:
    """Every store read what a ``--sample_limit`` of ``limit`` reads: that limit, or all of at most that many."""
    return all((k == "limit" and n == limit) or (k == "all" and n is not None and n <= limit) for k, n in ours)


def _weights_of(record: Recorded, weights: Recorded) -> Recorded:
    if weights or not record:
        return weights
    rec = REGISTRY.get(record) if isinstance(record, str) else None  # several records: none of them
    return rec.default_weights if rec is not None else None


def _same_weights(facts: RunFacts, row: PublishedRow) -> bool:
    """Whether the run read the published weights of ``row`` (hub ids compared without case), whatever served them."""
    if not row.record or row.weights == "":
        return False
    ours = _weights_of(facts.record, facts.weights) if isinstance(facts.weights, str | None) else None
    theirs = _weights_of(row.record, row.weights)
    return isinstance(ours, str) and isinstance(theirs, str) and bool(ours and theirs) \
        and ours.lower() == theirs.lower()


def matches(facts: RunFacts, row: PublishedRow) -> bool:
    """Whether a run is the published model of ``row``: by name, or by the weights it ran (its record's, a
    ``--model_hf_id``, the name a server serves them by, an imported run's ``model_args``)."""
    if facts.label.lower() in aliases(row) or facts.model.lower() in aliases(row):
        return True
    return _same_weights(facts, row)


def near_miss(facts: RunFacts, rows: Sequence[PublishedRow]) -> str | None:
    """A note for a run whose name holds a published model's name but which matched none, saying why."""
    name = facts.label.lower()
    for row in rows:
        hit = next((a for a in sorted(aliases(row), key=len, reverse=True) if len(a) >= 6 and a in name), None)
        if hit is not None:
            weights = facts.weights if isinstance(facts.weights, str) else "not recorded"
            return (f"run {facts.label} ({facts.family}) looks like published model {row.model} but is not checked "
                    f"against it: its name is not one of that model's names and its weights ({weights}) are not "
                    f"{row.weights or 'published'}; name its folder {row.model} or pass the weights it ran")
    return None


def protocol(facts: RunFacts, ref: PublishedRow) -> list[ProtocolCheck]:
    """The protocol check of one run against one published run: per setting ours, published, and whether they
    differ (a setting the published run does not state is not a difference)."""
    v = facts.values
    out: list[ProtocolCheck] = []

    def add(setting: str, ours: str, published: object, same: bool | None, note: str = "") -> None:
        out.append({"model": facts.label, "family": facts.family, "published_model": ref.model, "setting": setting,
                    "ours": ours, "published": "not stated" if published is None else str(published),
                    "differs": None if published is None else not same, "note": note})

    rec_w = _weights_of(ref.record, ref.weights)
    add("model weights", facts.settings["model weights"], f"{ref.record} {ref.weights or '(record default)'}"
        if ref.record else None, _same_weights(facts, ref) or (ref.record == facts.record
        and (ref.weights == "" or rec_w == _weights_of(facts.record, facts.weights))),
        "weights not published: matched by name" if ref.weights == "" else "")
    add("data", facts.settings.get("data", "not recorded"), ref.data, v.get("data") == ref.data,
        "the bundled phantom stands in for the data: its numbers check the plumbing, never the paper"
        if v.get("data") == "phantom" else "")
    add("annotation pin", facts.settings["annotation pin"], ref.planner_version, v["annotation pin"] == ref.planner_version)
    add("task-list variant", facts.settings["task-list variant"], ref.task_variant and
        VARIANT_WORDS.get(ref.task_variant, ref.task_variant), v["task-list variant"] == ref.task_variant)
    add("sample limit", facts.settings["sample limit"], ref.sample_limit and f"limit {ref.sample_limit}",
        ref.sample_limit is not None and _limit_same(_selections(v["sample limit"]), ref.sample_limit))
    add("parse", facts.settings["parse"], ref.parse, v["parse"] == ref.parse)
    if family_spec(facts.family).axes:
        add("T/L filter", facts.settings["T/L filter"], None if ref.tl_filter is None else
            ("on" if ref.tl_filter else "off"), v["T/L filter"] == ref.tl_filter,
            f"upstream's removed-samples list at annotation pin {FILTER_PIN}")
    budget_note = ""
    if ref.note:
        budget_note = f"{ref.note}; --max_new_tokens {ref.max_new_tokens} reproduces the published run"
    add("token budget", facts.settings["token budget"], ref.max_new_tokens, v["token budget"] == ref.max_new_tokens,
        budget_note)
    add("engine", facts.settings["engine"], ref.engine, v["engine"] == ref.engine)
    return out


def verdict(ours: float | None, lo: float | None, hi: float | None, published: float | None, half: float) -> str:
    if ours is None or published is None:
        return NO_VALUE
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return NO_CI
    if published + half < lo:
        return BELOW
    if published - half > hi:
        return ABOVE
    return INSIDE


_HEAD_SCHEMA = {"model": pl.Utf8, "family": pl.Utf8, "published_model": pl.Utf8,
                "comparable": pl.Boolean, "headline": pl.Utf8}


@dataclass
class Against:
    """The comparison of one summary: rows, protocol checks, and which runs matched nothing."""

    rows: pl.DataFrame
    protocol: pl.DataFrame
    notes: list[str] = field(default_factory=list)
    headlines: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=_HEAD_SCHEMA))
    near_misses: list[str] = field(default_factory=list)  # runs that look like a published model but matched none

    @property
    def empty(self) -> bool:
        return self.rows.height == 0


_ROW_SCHEMA = {"model": pl.Utf8, "family": pl.Utf8, "group": pl.Utf8, "metric": pl.Utf8, "ours": pl.Float64,
               "ci_low": pl.Float64, "ci_high": pl.Float64, "published": pl.Float64, "n_ours": pl.Int64,
               "n_published": pl.Int64, "verdict": pl.Utf8, "comparable": pl.Boolean, "differences": pl.Utf8,
               "published_model": pl.Utf8, "published_name": pl.Utf8, "split": pl.Utf8, "kind": pl.Utf8,
               "decimals": pl.Int64, "source_file": pl.Utf8}
_PROTO_SCHEMA = {"model": pl.Utf8, "family": pl.Utf8, "published_model": pl.Utf8, "setting": pl.Utf8,
                 "ours": pl.Utf8, "published": pl.Utf8, "differs": pl.Boolean, "note": pl.Utf8}


def _number(value: object) -> float | None:
    """A cell of a statistic column (polars gives a float, an int or None)."""
    return value if isinstance(value, float | int) and not isinstance(value, bool) else None


def _ours_row(frame: pl.DataFrame, label: str, col: str, key: str, metric: str) -> OursRow | None:
    """Our value of ``metric`` on the row of run ``label`` whose ``col`` is ``key``, its CI and its n."""
    sub = frame.filter((pl.col("label") == label) & (pl.col(col) == key))
    if not sub.height:
        return None
    row = sub.row(0, named=True)
    n = row.get("n")
    return OursRow(_number(row.get(metric)), _number(row.get(f"{metric}_lo")), _number(row.get(f"{metric}_hi")),
                   n if isinstance(n, int) else None)


@dataclass(frozen=True)
class OursRow:
    """Our side of one published number: the value, its CI and the sample count (None: not in the table)."""

    value: float | None
    lo: float | None
    hi: float | None
    n: int | None


def headline(proto: Sequence[JsonMapping], rows: Sequence[JsonMapping], paper: bool = True) -> str:
    """One run's verdict on comparability: ``comparable to the paper`` (or to the reference numbers), or ``not
    comparable: <settings>``: the protocol settings that differ (the data as ``data (phantom)``) and, when sample
    counts differ, how many rows."""
    words = [f"data ({str(p['ours']).split(' ')[0]})" if p["setting"] == "data" else str(p["setting"])
             for p in proto if p["differs"]]
    counts = sum("samples " in str(r["differences"] or "") for r in rows)
    if counts:
        words.append(f"sample counts ({counts} of {len(rows)} rows)")
    return f"not comparable: {', '.join(words)}" if words else \
        f"comparable to {'the paper' if paper else 'the reference numbers'}"


def compare(tables: Mapping[str, FamilyTables], loaded: Loaded, reference: Sequence[PublishedRow], *, parse: str,
            tl_filter: FilterReport | None = None, paper: bool = True) -> Against:
    """``tables``: family -> FamilyTables; ``reference``: the published rows (``paper``) or a user's."""
    rows: list[dict[str, object]] = []
    checks: list[ProtocolCheck] = []
    heads: list[dict[str, object]] = []
    near: list[str] = []
    matched: set[str] = set()
    for family, ft in tables.items():
        labels = ft.leaderboard["label"].unique(maintain_order=True).to_list()
        by_model: dict[str, list[PublishedRow]] = {}
        for r in reference:
            if r.family == family:
                by_model.setdefault(r.model, []).append(r)
        stores_of: dict[str, list[StoreInfo]] = {}
        for s in loaded.stores:
            if s.ref.family == family:
                stores_of.setdefault(s.ref.label, []).append(s)
        for label in labels:
            who = run_identity(stores_of.get(label, []), family, label)
            mine = [r for rows_m in by_model.values() if matches(who, rows_m[0]) for r in rows_m]
            if not mine:
                miss = near_miss(who, [rows_m[0] for rows_m in by_model.values()])
                if miss is not None:
                    near.append(miss)
                continue
            facts = run_facts(loaded, family, label, parse, tl_filter)
            splits = {r.split for r in mine}
            split = MAIN if MAIN in splits else sorted(splits)[0]
            names = {r.model for r in mine if r.split == split}
            named = [m for m in names if facts.label.lower() in aliases(next(r for r in mine if r.model == m))]
            chosen = sorted(named or names)[0]
            ref_rows = [r for r in mine if r.split == split and r.model == chosen]
            proto = protocol(facts, ref_rows[0])
            checks += proto
            diffs = [p["setting"] for p in proto if p["differs"]]
            matched.add(label)
            first = len(rows)
            for r in ref_rows:
                frame, col = (ft.leaderboard, "aggregate") if r.kind == "aggregate" else (ft.groups, "group")
                if r.metric not in frame.columns:
                    continue
                ours = _ours_row(frame, label, col, r.group, r.metric)
                if ours is None:
                    continue
                value, lo, hi, n_ours = ours.value, ours.lo, ours.hi, ours.n
                row_diffs = list(diffs)
                if r.n is not None and n_ours is not None and n_ours != r.n:
                    row_diffs.append(f"samples {n_ours} vs {r.n}")
                rows.append({"model": label, "family": family, "group": r.group, "metric": r.metric, "ours": value,
                             "ci_low": lo, "ci_high": hi, "published": r.value, "n_ours": n_ours,
                             "n_published": r.n, "verdict": NOT_COMPARABLE if row_diffs else
                             verdict(value, lo, hi, r.value, r.half_unit),
                             "comparable": not row_diffs, "differences": "; ".join(row_diffs),
                             "published_model": r.model, "published_name": r.name, "split": r.split,
                             "kind": r.kind, "decimals": r.decimals, "source_file": r.source_file})
            line = headline(proto, rows[first:], paper)
            heads.append({"model": label, "family": family, "published_model": chosen,
                          "comparable": line.startswith("comparable"), "headline": line})
    notes = []
    if not rows:
        notes.append("no run matches a published model (by name, or by registry record and weights); name a run's "
                     "folder after one (`medvision-bm published` lists them) to check it against the paper")
    return Against(pl.DataFrame(rows, schema=_ROW_SCHEMA, orient="row"),
                   pl.DataFrame(checks, schema=_PROTO_SCHEMA, orient="row"), notes,
                   pl.DataFrame(heads, schema=_HEAD_SCHEMA, orient="row"), list(dict.fromkeys(near)))


def unmatched_note(where: str, reference: Sequence[PublishedRow]) -> str:
    """The one line saying that no run matched a reference file's models, with the first few it names."""
    models = sorted({r.model for r in reference})
    shown = ", ".join(limits.shown(m, 60) for m in models[:3]) + (f" and {len(models) - 3} more" if len(models) > 3
                                                                    else "")
    return (f"--reference {where}: none of its {len(models)} model(s) ({shown}) matches a run here (by folder name, "
            "or by registry record and weights); name the rows' model after a run's folder")


# --------------------------------------------------------------------------------------------- views and plot


def _ci(r: JsonMapping) -> str:
    if r["ours"] is None:
        return "–"
    if r["ci_low"] is None:
        return fmt(r["ours"])
    return f"{fmt(r['ours'])} [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]"


def headline_view(frame: pl.DataFrame, source: str) -> View:
    """One line per run and family: comparable, or not and why (the first table of the section)."""
    rows = [[r["model"], FAMILY_NAMES[r["family"]], r["published_model"], r["headline"]]
            for r in frame.iter_rows(named=True)]
    return View(f"Comparable to {source}?", ["Run", "Family", "Published as", "Headline"], rows,
                "A run is comparable when every protocol setting (the data, phantom or MedVision, among them) and "
                "every sample count is the published run's; verdicts are given for comparable rows only.",
                [False, False, False, False])


def against_view(frame: pl.DataFrame, family: str, level: float, source: str) -> View:
    """One row per published number; a row that is not comparable shows no verdict, says why in its Comparable
    cell, and is greyed in the HTML (row class ``not-comparable``)."""
    headers = ["Run", "Published as", "Group", "Metric", "Ours [CI]", "Published", "N ours", "N published",
               "Verdict", "Comparable"]
    sub = frame.filter(pl.col("family") == family)
    rows = [[r["model"], r["published_model"], r["group"], r["metric"], _ci(r),
             "nan" if r["published"] is None else f"{r['published']:.{r['decimals'] or 4}f}", fmt(r["n_ours"]),
             fmt(r["n_published"]), r["verdict"] if r["comparable"] else "–",
             "yes" if r["comparable"] else f"{NOT_COMPARABLE}: {r['differences'] or '–'}"]
            for r in sub.iter_rows(named=True)]
    return View(f"Against {source}: {FAMILY_NAMES[family]}", headers, rows,
                f"Ours with its {level:.0%} bootstrap CI beside the published value (printed to "
                "3 or 4 decimals, taken as ± half a last digit); verdict, for comparable rows only: the published "
                "value inside our CI, above it or below it. A row is comparable only when no protocol setting "
                "(protocol check) and no sample count differs; otherwise it shows no verdict, is greyed, and says "
                "which settings differ.",
                [False, False, False, False, True, True, True, True, False, False],
                row_classes=["" if r["comparable"] else "not-comparable" for r in sub.iter_rows(named=True)])


def protocol_view(frame: pl.DataFrame, family: str, source: str) -> View:
    headers = ["Run", "Published as", "Setting", "Ours", "Published", "Differs", "Note"]
    rows = [[r["model"], r["published_model"], r["setting"], r["ours"], r["published"],
             "–" if r["differs"] is None else ("yes" if r["differs"] else "no"), r["note"] or "–"]
            for r in frame.filter(pl.col("family") == family).iter_rows(named=True)]
    return View(f"Protocol check against {source}: {FAMILY_NAMES[family]}", headers, rows,
                "Every setting of our run beside the published run's; a setting the published run does not state is "
                "no difference. The published protocol: annotation pin 1.0.0, -CoT task lists, 1,000 samples per task, "
                "judge parse gemma-4-31b, T/L removed-samples filter, the launchers' token budgets and engines.")


def plot_job(frame: pl.DataFrame, family: str, path: str, level: float, source: str) -> PlotJob | None:
    """Ours against published per statistic (aggregate rows), CI bars and the y = x line; None without points."""
    sub = frame.filter((pl.col("family") == family) & (pl.col("kind") == "aggregate")
                       & pl.col("ours").is_not_null() & pl.col("published").is_not_null())
    panels = []
    for metric in family_spec(family).published_plot_stats:  # (when both sides have them)
        pts = sub.filter(pl.col("metric") == metric)
        if pts.height == 0:
            continue
        title = f"avgMAE ({units_title(family)})" if metric == "avgMAE" else f"{metric} (unitless)"
        panels.append({"title": title, "points": [
            {"label": f"{r['model']} · {r['group']}" + ("" if r["comparable"] else " (not comparable)"),
             "x": r["published"], "y": r["ours"], "lo": r["ci_low"], "hi": r["ci_high"],
             "comparable": bool(r["comparable"])} for r in pts.iter_rows(named=True)]})
    if not panels:
        return None
    return PlotJob("against", path, f"{FAMILY_NAMES[family]}: ours ({level:.0%} CI) against {source}",
                   {"panels": panels})
