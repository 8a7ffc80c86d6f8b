"""Summarize a results folder: upstream's tables first (rows across label groups, per group, per task), then ours
(random boxes, box size), as CSV, Markdown and JSON, plus plots and the HTML report, in one output folder."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from medvision_bm.data.docs import FAMILIES
from medvision_bm.data.removed_samples import LIST_FILENAME
from medvision_bm.errors import UserError
from medvision_bm.io import finite_or_none, write_json_atomic, write_text_atomic
from medvision_bm.report import against_published as ap
from medvision_bm.report import box_ratio, cda_section, judge_report, overview, process_stage, tl_major_axis
from medvision_bm.report import removed_filter as rf
from medvision_bm.report import summary_json as sj
from medvision_bm.report import training_release as tr
from medvision_bm.report import upstream_values as uv
from medvision_bm.report.bootstrap import BootstrapSpec, one_thread_sums
from medvision_bm.report.browser import build_cards, choose_samples
from medvision_bm.report.compare import paired_compare
from medvision_bm.report.data_dir import resolve_data_dir
from medvision_bm.report.groups import add_group_keys, units_line
from medvision_bm.report.html import FamilySection, render, slug
from medvision_bm.report.lanes import Lanes, results
from medvision_bm.report.load import Loaded, StoreInfo, collection_paused, load, load_judged
from medvision_bm.report.plot_jobs import bar_job, box_size_job, error_jobs
from medvision_bm.report.plots import PlotJob, draw, safe_name
from medvision_bm.report.published import PublishedRow, published_rows, read_rows
from medvision_bm.report.removed_filter import FilterReport, apply_tl_filter, settings_for
from medvision_bm.report.tables import (
    FamilyTables,
    csv_text,
    family_tables,
    parse_comparison,
    tables_cost,
    without_single_pair_verdicts,
)
from medvision_bm.report.upstream_summaries import judged_dir, write_family
from medvision_bm.report.views import (
    FAMILY_NAMES,
    NO_VALUE,
    View,
    box_size_view,
    compare_view,
    fmt,
    groups_view,
    is_empty,
    leaderboard_views,
    left_out,
    markdown,
    random_box_view,
    stores_view,
    tasks_view,
)
from medvision_bm.store.discovery import discover
from medvision_bm.store.judged import judge_description, judge_weights
from medvision_bm.tasks.families import family_spec
from medvision_bm.tasks.metrics import METRICS

if TYPE_CHECKING:
    from medvision_bm.report.against_published import Against
    from medvision_bm.report.plots import PlotJob

SUMMARY_SCHEMA = "medvision-summary/2"
#: --parse: which stored parse the tables use (strict: parsed.jsonl; judged: `medvision-bm judge`; both).
PARSES = ("strict", "judged", "both")


@dataclass
class SummaryOptions:
    """Everything that changes what summarize writes."""

    families: list[str] | None = None
    models: list[str] | None = None
    tasks: list[str] | None = None
    n_boot: int = 1000
    seed: int = 0
    level: float = 0.95
    min_group_size: int = 20
    data_dir: str | None = None
    browse_per_task: int = 2
    sample_keys: list[str] = field(default_factory=list)
    compare: list[tuple[str, str]] = field(default_factory=list)
    plots: bool = True
    parse: str = "strict"  # which parse the tables use: strict | judged (`medvision-bm judge`) | both (strict + side by side)
    judge: str | None = None  # which judged parse, when a store has several (judge model, weights or signature)
    tl_filter: bool = True  # upstream's T/L removed-samples filter at annotation pin 1.0.0 (--no_tl_filter: off)
    removed_samples_dir: str | None = None  # the Data/Datasets root holding the lists (default: <data folder>/Datasets)
    removed_samples_filename: str = LIST_FILENAME
    reference: str | None = None  # reference numbers to check against instead of the published leaderboard

    @property
    def spec(self) -> BootstrapSpec:
        return BootstrapSpec(self.n_boot, self.seed, self.level)


@dataclass
class SummaryResult:
    """What summarize computed and where it wrote it."""

    output_dir: Path
    loaded: Loaded
    tables: dict[str, FamilyTables]
    comparisons: list[pl.DataFrame]
    notes: list[str]
    files: list[str]
    timings: dict[str, float]
    against: Against | None = None
    tl_filter: FilterReport | None = None
    trained: list[tr.Overlap] = field(default_factory=list)  # runs against their model's training release


#: Values ``json_safe`` keeps as they are, told by their exact type.
_KEPT_TYPES = frozenset({str, int, bool, type(None)})


def json_safe(obj: Any) -> Any:
    """A summary structure with every non-finite number as None (``io.finite_or_none``)."""
    kind = type(obj)
    if kind in _KEPT_TYPES:
        return obj
    if kind is dict:  # (a table row: its plain values and finite floats kept without a call each)
        return {k: v if (t := type(v)) in _KEPT_TYPES or (t is float and math.isfinite(v)) else json_safe(v)
                for k, v in obj.items()}
    if isinstance(obj, float):
        return finite_or_none(obj)
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def check_output_dir(path: str | Path) -> Path:
    """--output_dir as a Path; a user error when it names a file."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UserError(f"--output_dir {out} is a file; pass a folder (it is created when missing)")
    return out


def make_output_dir(out: Path) -> None:
    """Create --output_dir (and its parents); a user error when that is not possible."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--output_dir {out} cannot be created ({exc.strerror or exc}); "
                        "pass a folder you can write to") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise UserError(f"--output_dir {out} is not writable; pass a folder you can write to")


def _rows(frame: pl.DataFrame | None) -> list[dict[str, Any]] | sj.TableRows:
    """A table's rows in summary.json: written column by column (``summary_json``), each as its ``json_safe`` dict."""
    return [] if frame is None else sj.TableRows(frame)


def _store_rows(stores: Sequence[StoreInfo]) -> pl.DataFrame:
    """The runs table: each store's ``to_json`` a row, built column by column where every row has the same keys in
    the same order (each store's usual record), else from the rows."""
    records = [s.to_json() for s in stores]
    names = list(records[0]) if records else []
    if not records or any(list(r) != names for r in records):
        return pl.DataFrame(records, infer_schema_length=None)
    return pl.DataFrame({name: [r[name] for r in records] for name in names}, strict=False)


class _Writer:
    """Writes table files into the output folder and remembers their names (relative)."""

    def __init__(self, out: Path, banner: str = "") -> None:
        self.out = out
        self.files: list[str] = []
        self.banner = banner  # a line above every Markdown table (which parse it uses, when not the strict one)

    def table(self, name: str, frame: pl.DataFrame, views: Sequence[View]) -> list[str]:
        csv_path = self.out / f"{name}.csv"
        write_text_atomic(csv_path, csv_text(frame.drop("store", strict=False)))  # formulas made inert
        write_text_atomic(self.out / f"{name}.md", self.banner + "\n".join(markdown(v) for v in views))
        names = [f"{name}.csv", f"{name}.md"]
        self.files += names
        return names


def summarize(results_dir: str | Path, output_dir: str | Path, options: SummaryOptions) -> SummaryResult:
    """Discover, load and summarize the runs under ``results_dir``; write everything into ``output_dir`` (the
    bootstrap's products on one BLAS thread: ``bootstrap.one_thread_sums``; Python's cyclic collector held off
    throughout: ``load.collection_paused``)."""
    with one_thread_sums():
        return _summarize(results_dir, output_dir, options)


@collection_paused
def _summarize(results_dir: str | Path, output_dir: str | Path, options: SummaryOptions) -> SummaryResult:
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    out = check_output_dir(output_dir)
    options.spec.check()
    if options.min_group_size < 1 or options.browse_per_task < 0:
        raise UserError("--min_group_size must be at least 1 and --browse_per_task at least 0")
    refs, notes = discover(results_dir, models=options.models, tasks=options.tasks, families=options.families)
    refs = uv.file_order(refs)  # stores imported from upstream's per-sample files: summed in those files' order
    if options.parse not in PARSES:
        raise UserError(f"--parse {options.parse!r}: use one of {', '.join(PARSES)}")
    loaded = load_judged(refs, options.judge) if options.parse == "judged" else load(refs)
    notes += loaded.notes
    judged = load_judged(refs, options.judge) if options.parse == "both" else None
    if judged is not None:
        notes += [n for n in judged.notes if n not in notes]
        if not judged.samples:
            raise UserError(f"results dir {results_dir} has no judged parse to show beside the strict one "
                            f"({judged.notes[0] if judged.notes else 'none found'})")
    if not loaded.samples:
        first = f" (first problem: {notes[0]})" if notes else ""
        raise UserError(f"results dir {results_dir} has runs but none could be scored{first}; "
                        "rerun the evaluation or point --results_dir at complete runs")
    info = {s.id: s for s in loaded.stores}  # each store's results.json as load read it: not read again
    settings = settings_for(no_filter=not options.tl_filter, removed_samples_dir=options.removed_samples_dir,
                            filename=options.removed_samples_filename, data_dir=options.data_dir,
                            folders=[(r.folder, info[i].results_record()) if i in info else r.folder
                                     for i, r in enumerate(refs)])
    tl_report = apply_tl_filter(loaded, settings)
    notes += [n for n in tl_report.notes if n not in notes]
    judged_report = apply_tl_filter(judged, settings) if judged is not None else None
    if judged_report is not None:
        notes += [n for n in judged_report.notes if n not in notes]
    reference = read_rows(options.reference) if options.reference else None  # a bad file fails before any write
    if not loaded.samples:
        raise UserError(f"results dir {results_dir}: upstream's T/L removed-samples filter left no sample to "
                        "summarize; pass --no_tl_filter to see them")
    timings["load"] = time.perf_counter() - t0
    make_output_dir(out)
    with Lanes() as lanes:  # the stages that do not wait on each other run side by side (report.lanes)
        return _report(Path(results_dir), out, options, loaded, notes, timings, t0, lanes, judged, tl_report,
                       judged_report, reference)


def _tables_of(loaded: Loaded, families: Sequence[str], options: SummaryOptions,
               lanes: Lanes) -> dict[str, FamilyTables]:
    """The tables of each of ``families`` (``tables.family_tables``), the families side by side on ``lanes``, the
    costliest first; in the order of ``families``."""
    stores = loaded.store_frame()
    return results(lanes.start_each(
        lambda fam: family_tables(fam, loaded.samples[fam], stores, options.spec, options.min_group_size), families,
        cost={fam: tables_cost(loaded.samples[fam], stores) for fam in families}))


def _judged_tables(options: SummaryOptions, tables: dict[str, FamilyTables],
                   judged: Loaded | None, lanes: Lanes) -> dict[str, FamilyTables]:
    """--parse both: the judged parse's tables of every family the strict tables have."""
    if judged is None:
        return {}
    return _tables_of(judged, [fam for fam in tables if fam in judged.samples], options, lanes)


def _parse_side(tables: dict[str, FamilyTables], judged_tables: dict[str, FamilyTables]) -> dict[str, pl.DataFrame]:
    """--parse both: per family the strict and judged numbers per run and task (tables.parse_comparison)."""
    return {fam: parse_comparison(fam, tables[fam].tasks, jt.tasks) for fam, jt in judged_tables.items()}


def _parse_view(family: str, frame: pl.DataFrame, judge: str) -> View:
    stats = [c.removesuffix("_strict") for c in frame.columns if c.endswith("_strict")]
    headers = ["Run", "Task", "N", "N judged", *[f"{st} ({p})" for st in stats for p in ("strict", "judged")]]
    rows = [[r["label"], r["task"], str(r["n"]), str(r["n_judged"] if r["n_judged"] is not None else "–"),
             *[fmt(r[f"{st}_{p}"]) for st in stats for p in ("strict", "judged")]] for r in frame.iter_rows(named=True)]
    return View(f"Strict vs judged parse: {FAMILY_NAMES[family]}", headers, rows,
                "Per run and task, upstream's task metrics of the same stored answers under the strict parse (the "
                f"parser of the run's protocol) and under the LLM-judge parse (upstream's llm-parsing; judge: {judge}); "
                "the other tables use the strict parse.", [False, False, *([True] * (len(headers) - 2))])


def _upstream_files(out: Path, tables: dict[str, FamilyTables], parsed_dir: str, filtered: bool,
                    loaded: Loaded, notes: list[str], docs_cache: uv.DocsCache) -> list[str]:
    """Upstream's summary files of every family (report.upstream_summaries, report.upstream_values) under
    ``out/upstream`` (``docs_cache``: the docs files read, shared with the other stages that read them)."""
    written: list[str] = []
    for fam, ft in tables.items():
        runs = [(label, ft.upstream[label]["groups"]) for label in sorted(ft.upstream)]
        values = _values(fam, loaded, notes, docs_cache) if fam in loaded.samples else None
        written += [f"upstream/{p}" for p in write_family(out / "upstream", fam, runs, parsed_dir=parsed_dir,
                                                          filtered=filtered and family_spec(fam).axes, values=values)]
    return written


def _values(family: str, loaded: Loaded, notes: list[str], docs_cache: uv.DocsCache) -> dict[str, Any]:
    """Per run its ``summary_values_*`` content; a run whose parsed rows are not on disk gets none (a note); the runs
    of a task share its docs: each distinct docs file read once (``docs_cache``)."""
    info = {s.id: s for s in loaded.stores}
    frame, _ = add_group_keys(loaded.samples[family], family)
    frame = frame.join(loaded.store_frame().select("store", "label"), on="store", how="left", maintain_order="left")
    out: dict[str, Any] = {}
    frame = uv.with_value_texts(family, frame, info, docs_cache)  # each row's pieces of the files, for all runs at once
    joined = uv.joined_runs(family, frame, info)  # the runs whose texts join from the columns: all at once
    for label in frame["label"].unique(maintain_order=True).to_list():
        if label in joined:
            out[str(label)] = joined[label]
            continue
        rows = frame.filter(pl.col("label").is_null() if label is None else pl.col("label") == label)
        try:
            out[str(label)] = uv.run_values_text(family, rows, info, docs_cache)
        except LookupError as exc:
            notes.append(f"{family} summary_values not written for {label}: {exc}")
    return out


def _judged_dir(stores: Sequence[StoreInfo]) -> str:
    """Upstream's parsed-folder name of a judged load (``llm-parsed_<judge>``; several judges: joined by ``+``)."""
    names = sorted({judged_dir(judge_weights(s)) for s in stores})
    return "+".join(names) if names else judged_dir(None)


def _judge_reports(judged: Loaded | None) -> dict[str, judge_report.JudgeReport]:
    """Upstream's judge report of every family of a judged load (report.judge_report), per run and pooled."""
    if judged is None:
        return {}
    out = {}
    for fam in map(str, FAMILIES):
        stores = [s for s in judged.stores if s.ref.family == fam]
        if stores:
            out[fam] = judge_report.build(fam, _judged_dir(stores), [(s.ref.label, s.ref.folder / s.source)
                                                                      for s in stores])
    return out


def _report(results_dir: Path, out: Path, options: SummaryOptions, loaded: Loaded, notes: list[str],
            timings: dict[str, float], t0: float, lanes: Lanes, judged: Loaded | None = None,
            tl_report: FilterReport | None = None, judged_report: FilterReport | None = None,
            reference: list[PublishedRow] | None = None) -> SummaryResult:

    spec = options.spec
    stores = loaded.store_frame()
    # one look for the data folder (it reads every store's results.json when none recorded one): steps and browser
    data_dir, browser_note = resolve_data_dir(options.data_dir, [(s.ref.folder, s.results_record())
                                                                 for s in loaded.stores])
    t1 = time.perf_counter()
    tables = _tables_of(loaded, [fam for fam in map(str, FAMILIES) if fam in loaded.samples], options, lanes)
    for ft in tables.values():
        notes += [n for n in ft.notes if n not in notes]
    tl_report = tl_report or rf.FilterReport()
    for fam, ft in list(tables.items()):
        if family_spec(fam).axes:  # upstream's removed-samples lists are T/L's
            tables[fam] = rf.with_filter_columns(ft, tl_report)
    comparisons = [without_single_pair_verdicts(paired_compare(loaded, a, b, spec)) for a, b in options.compare]
    judged_tables = _judged_tables(options, tables, judged, lanes)
    side = _parse_side(tables, judged_tables)
    source = (f"the reference numbers ({Path(options.reference).name})" if options.reference
              else "the published leaderboard")
    against = ap.compare(tables, loaded, reference if reference is not None else published_rows(),
                         parse="judged" if options.parse == "judged" else "strict", tl_filter=tl_report,
                         paper=reference is None)
    notes += [n for n in against.near_misses if n not in notes]
    if reference is not None and against.empty:
        notes.append(ap.unmatched_note(str(options.reference), reference))
    timings["tables"] = time.perf_counter() - t1


    judge_text = judge_description((judged or loaded).stores) if options.parse != "strict" else "-"
    parse_text = {"strict": "strict (the parser of each run's protocol)",
                  "judged": f"judged (LLM judge: {judge_text}; upstream's llm-parsing re-parse)",
                  "both": f"strict; strict_vs_judged tables: both (LLM judge: {judge_text})"}[options.parse]
    t1 = time.perf_counter()
    reports = _judge_reports(judged if options.parse == "both" else loaded if options.parse == "judged" else None)
    for rep in reports.values():
        notes += [n for n in rep.notes if n not in notes]
    w = _Writer(out, f"_Parse: {parse_text}._\n\n" if options.parse == "judged" else "")
    sections: list[FamilySection] = []
    store_rows = _store_rows(loaded.stores)
    all_md: list[str] = []
    plot_jobs: list[PlotJob] = []
    if options.plots:
        (out / "plots").mkdir(exist_ok=True)
    for fam, ft in tables.items():
        lbs = leaderboard_views(fam, ft.leaderboard, spec.level)
        gv = groups_view(fam, ft.groups, spec.level)
        tv = tasks_view(fam, ft.tasks, spec.level)
        if family_spec(fam).axes and tl_report.rows:
            for v in (*lbs, gv, tv):
                v.caption = f"{v.caption} {rf.caption(tl_report)}"
        files = w.table(f"leaderboard_{fam}", ft.leaderboard, lbs) + w.table(f"groups_{fam}", ft.groups, [gv]) \
            + w.table(f"tasks_{fam}", ft.tasks, [tv])
        sec = FamilySection(fam, lbs, None, gv, tv)
        all_md += [*[markdown(v) for v in lbs], markdown(gv), markdown(tv)]
        if options.plots:
            bars = bar_job(ft, out / "plots" / f"leaderboard_{fam}.png", spec.level)
            if bars is not None:
                plot_jobs.append(bars)
                sec.leaderboard_plot = f"plots/leaderboard_{fam}.png"
            errors = error_jobs(fam, loaded.samples[fam], stores, out / "plots")
            plot_jobs += errors
            sec.error_plots = [Path(j.path).relative_to(out).as_posix() for j in errors]
        if ft.random_box is not None and ft.box_size is not None:
            sec.random_box = random_box_view(ft.random_box, spec.level)
            sec.box_size = box_size_view(ft.box_size)
            files += w.table("random_box_detect", ft.random_box, [sec.random_box])
            files += w.table("box_size_detect", ft.box_size, [sec.box_size])
            all_md += [markdown(sec.random_box), markdown(sec.box_size)]
            if options.plots and ft.box_size.height:
                plot_jobs.append(box_size_job(ft, out / "plots" / "box_size_iou_detect.png"))
                sec.box_size_plot = "plots/box_size_iou_detect.png"
        if fam in reports and reports[fam].models:
            jv = judge_report.view(reports[fam], judge_text)
            sec.extra.append(jv)
            files += w.table(f"judge_report_{fam}", pl.DataFrame(judge_report.rows(reports[fam]),
                                                                 infer_schema_length=None), [jv])
            all_md.append(markdown(jv))
        if family_spec(fam).axes and tl_report.rows:
            fv = rf.view(tl_report)
            sec.extra.append(fv)
            files += w.table("tl_filter", tl_report.frame(), [fv])
            all_md.append(markdown(fv))
        sec.files = files
        sections.append(sec)
    compare_views = []
    for frame in comparisons:
        v = compare_view(frame, spec.level, spec.n_boot)
        compare_views.append(v)
        w.table(f"compare_{safe_name(frame['a'][0])}_vs_{safe_name(frame['b'][0])}", frame, [v])
        all_md.append(markdown(v))
    for fam, frame in side.items():
        v = _parse_view(fam, frame, judge_text)
        w.table(f"strict_vs_judged_{fam}", frame, [v])
        all_md.append(markdown(v))
    extra_sections: list[tuple[str, str, Sequence[View], Sequence[str | tuple[str, str]]]] = []
    if not against.empty:
        against_views: list[View] = []
        images: list[str] = []
        md_views: list[View] = []
        for fam in tables:
            if against.rows.filter(pl.col("family") == fam).height == 0:
                continue
            pv, av = ap.protocol_view(against.protocol, fam, source), ap.against_view(against.rows, fam, spec.level,
                                                                                       source)
            if not against_views:  # the section opens with one headline per run
                hv = ap.headline_view(against.headlines, source)
                against_views.append(hv)
                md_views.append(hv)
            against_views += [pv, av]
            md_views += [pv, av]
            job = ap.plot_job(against.rows, fam, str(out / "plots" / f"against_published_{fam}.png"), spec.level,
                              source) if options.plots else None
            if job is not None:
                plot_jobs.append(job)
                images.append(f"plots/against_published_{fam}.png")
        w.table("against_published", against.rows.select(ap.COLUMNS), [v for v in md_views if v.title.startswith("Against")])
        w.table("protocol_check", against.protocol, [v for v in md_views if v.title.startswith("Protocol")])
        all_md += [markdown(v) for v in md_views]
        extra_sections.append(("against-published", f"Against {source}", against_views, images))
    parsed_dir = _judged_dir(loaded.stores) if options.parse == "judged" else "parsed"
    docs_cache = uv.DocsCache()  # each docs file read once: by the per-sample files and the major-axis table
    upstream_files = _upstream_files(out, tables, parsed_dir, tl_report.filtered_name, loaded, notes, docs_cache)
    if judged is not None and judged_tables:
        upstream_files += _upstream_files(out, judged_tables, _judged_dir(judged.stores),
                                          bool(judged_report and judged_report.filtered_name), judged, notes,
                                          docs_cache)
    for rep in reports.values():
        if rep.models:
            upstream_files += [f"upstream/{p}" for p in judge_report.write_files(rep, out / "upstream",
                                                                                 str(results_dir))]
    t_cda = time.perf_counter()
    cda_sec = cda_section.summary_section(out, loaded, judged, parsed_dir, _judged_dir(judged.stores) if judged else "",
                                  parse_text, results_dir, tl_report, bool(judged_report and judged_report.applied),
                                  options.plots, "judged" if options.parse == "judged" else "strict")
    notes += [n for n in cda_sec.notes if n not in notes]
    upstream_files += cda_sec.files
    plot_jobs += cda_sec.jobs
    extra_sections += cda_sec.extra
    all_md += [markdown(v) for sec_ in cda_sec.extra for v in sec_[2]]
    timings["cda"] = time.perf_counter() - t_cda  # also inside write_tables
    t2 = time.perf_counter()
    steps = process_stage.run_stage(out, loaded.samples, loaded.stores, data_dir, parsed_dir, tl_report.applied)
    notes += [n for n in steps.notes if n not in notes]
    upstream_files += steps.files
    for fam, views in steps.views.items():
        extra_sections.append((f"steps-{fam}", f"Reasoning steps: {FAMILY_NAMES[fam]}", views, []))
        all_md += [markdown(v) for v in views]
    timings["process_accuracy"] = time.perf_counter() - t2
    trained, trained_notes = tr.overlaps(loaded.stores, data_dir)
    notes += [n for n in trained_notes if n not in notes]
    if trained:
        tv_ = tr.view(trained)
        w.table("training_release", pl.DataFrame([r.to_json() for r in trained]), [tv_])
        extra_sections.append((slug(tr.TITLE), tr.TITLE, [tv_], []))
        all_md.append(markdown(tv_))
    by_major, major_files, major_view = tl_major_axis.run_stage(out, loaded.samples, loaded.stores,
                                                                docs=docs_cache.content)
    by_ratio, ratio_files, ratio_view = box_ratio.run_stage(out, loaded.samples, loaded.stores, parsed_dir)
    upstream_files += major_files + ratio_files
    for size_view in (major_view, ratio_view):
        if size_view is not None:
            extra_sections.append((slug(size_view.title), size_view.title, [size_view], []))
            all_md.append(markdown(size_view))
    sv = stores_view(store_rows)
    w.table("runs", store_rows, [sv])
    all_md.append(markdown(sv))
    w.files += upstream_files
    timings["write_tables"] = time.perf_counter() - t1

    t1 = time.perf_counter()
    if data_dir is None:
        notes.append(browser_note)
    chosen = choose_samples(loaded, options.browse_per_task, options.sample_keys, options.seed)
    cards = build_cards(loaded, chosen, data_dir, browser_note, out)
    timings["samples"] = time.perf_counter() - t1

    t1 = time.perf_counter()
    parsers = sorted({p for s in loaded.stores for p in (s.parser_version or "").split(",") if p})
    protocols = sorted({s.protocol for s in loaded.stores})
    summary = {
        "schema": SUMMARY_SCHEMA, "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "results_dir": str(results_dir.resolve()), "parsers": parsers, "protocols": protocols,
        "units": {**{fam: units_line(fam) for fam in map(str, FAMILIES)},
                  "unitless": f"{', '.join(n for n, m in METRICS.items() if m.unit == 'unitless')} and every "
                              "threshold rate"},
        "bootstrap": asdict(spec), "options": json_safe(asdict(options)), "notes": notes,
        "runs": _rows(store_rows),
        "families": {fam: {"leaderboard": _rows(ft.leaderboard), "groups": _rows(ft.groups), "tasks": _rows(ft.tasks),
                           "upstream": json_safe(ft.upstream), "area_ratio_edges": ft.area_edges,
                           "random_box": _rows(ft.random_box), "box_size": _rows(ft.box_size)}
                     for fam, ft in tables.items()},
        "comparisons": [_rows(c) for c in comparisons],
        "parse": "judged" if options.parse == "judged" else "strict", "parse_description": parse_text,
        "parse_comparison": {fam: _rows(f) for fam, f in side.items()},
        "tl_filter": [r.to_json() for r in tl_report.rows],
        "judge_report": {fam: {"parsed_dir": rep.parsed_dir, "models": json_safe(rep.models),
                               "pooled": json_safe(rep.pooled())} for fam, rep in reports.items() if rep.models},
        "against_published": {"source": source, "rows": _rows(against.rows), "protocol": _rows(against.protocol),
                              "headlines": _rows(against.headlines), "notes": against.notes},
        "upstream_files": upstream_files, "cda": json_safe(cda_sec.rows),
        "process_accuracy": json_safe(steps.to_json()),
        "tl_by_major_axis": json_safe(by_major),
        "detect_by_box_ratio": json_safe(by_ratio),
        "training_release": [r.to_json() for r in trained],
    }
    write_json_atomic(out / "summary.json", summary, indent=None,  # compact; the tables' rows column by column
                      encode=lambda obj: sj.dumps(obj, json_safe))
    first = overview.overview(tables, spec.level, against.headlines)
    write_text_atomic(out / "summary.md", f"# MedVision summary\n\nResults: `{results_dir.resolve()}`\n\n"
                      f"Parse: {parse_text}.\n\n"
                      + "\n".join([markdown(first[0]), *all_md]))
    w.files += ["summary.json", "summary.md"]
    meta = [("results", str(results_dir.resolve())), ("runs", str(len(loaded.stores))),
            ("samples", str(sum(f.height for f in loaded.samples.values()))),
            ("protocol", ", ".join(protocols)), ("parser", ", ".join(parsers) or "-"), ("parse", parse_text),
            ("bootstrap", f"{spec.n_boot} resamples, seed {spec.seed}, {spec.level:.0%} CI"),
            ("generated", summary["generated_at"])]
    page = render(title="MedVision benchmark report", meta=meta, notes=notes, sections=sections, cards=cards,
                  browser_note=browser_note, comparisons=compare_views, stores=sv, files=w.files,
                  extra=extra_sections, overview=first)
    timings["html"] = time.perf_counter() - t1
    if plot_jobs:
        t1 = time.perf_counter()
        draw(plot_jobs)
        timings["plots"] = time.perf_counter() - t1
    write_text_atomic(out / "index.html", page)
    timings["total"] = time.perf_counter() - t0
    return SummaryResult(out, loaded, tables, comparisons, notes, ["index.html", *w.files], timings, against,
                         tl_report, trained)


def result_lines(res: SummaryResult, level: float) -> list[str]:
    """The lines a summary shows on the terminal: upstream's rows of each family (one line per run), the comparison
    with the published leaderboard, the tasks holding training cases, and the report's path (``res.notes`` apart)."""
    lines: list[str] = []
    for fam, ft in res.tables.items():
        for view in leaderboard_views(fam, ft.leaderboard, level):
            if is_empty(view):  # as the report shows it: one line saying why, not a row of dashes per run
                lines.append(f"{view.title}: {left_out(view)}")
                continue
            lines.append(f"{view.title}:")
            at = {h: i for i, h in enumerate(view.headers)}
            first_stat = at["Groups"] + 1
            for row in view.rows:
                cells = [f"{h} {c}" for h, c in zip(view.headers[first_stat:], row[first_stat:])]
                if all(c == NO_VALUE for c in row[first_stat:]):
                    cells = ["no value (no sample of this run is in this row)"]
                ranked = f", ranked on {row[at['Ranked on']]}" if "Ranked on" in at else ""
                lines.append(f"  {row[0]}. {row[1]} ({row[2]}, {row[3]}, {row[4]} tasks, n={row[at['N']]}{ranked}, "
                             f"{row[at['Groups']]} groups): " + "; ".join(cells))
    if res.against is not None and not res.against.empty:
        a = res.against.rows
        verdicts = ", ".join(f"{v} {n}" for v, n in a.group_by("verdict").len().sort("verdict").iter_rows())
        lines.append(f"against the published leaderboard: {a.height} numbers of {a['model'].n_unique()} run(s) "
                     f"({verdicts}; comparable: {int(a['comparable'].sum())}); against_published.csv, "
                     "protocol_check.csv")
        for h in res.against.headlines.iter_rows(named=True):  # one line per run: can it be read against the paper?
            lines.append(f"  {h['model']} ({FAMILY_NAMES[h['family']]}, as {h['published_model']}): {h['headline']}")
    if res.trained:  # which tasks hold test cases the model was trained on
        lines.append("tasks holding test cases of the model's training split (training_release.csv):")
        lines.extend(tr.summary_lines(res.trained))
    lines.append(f"report: {res.output_dir / 'index.html'} ({len(res.files)} files, {res.timings['total']:.1f} s)")
    return lines
