"""`medvision-bm parse` / `python -m medvision_bm.benchmark.parse_outputs`: re-score stored answers in place."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from medvision_bm.cli import run_handler
from medvision_bm.cli.flag_types import add_tl_filter_flags, csv_list, family_list
from medvision_bm.score.rescore import reparse_stores
from medvision_bm.secrets import SafeArgumentParser
from medvision_bm.store.discovery import discover
from medvision_bm.tasks.scoring import DEFAULT_METRIC_PATH, METRIC_PATHS, PARSERS


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = SafeArgumentParser(
        prog=prog, description="Re-score the stored raw answers with the current parser and upstream's metrics, "
        "rewriting parsed.jsonl and results.json beside them. No model is asked. Stores written before the upstream "
        "data layer are re-scored too (on the targets they were asked about) and marked as legacy stores.")
    p.add_argument("--results_dir", required=True, help="results folder (as given to `medvision-bm run`, or a "
                   "task-tag folder inside it)")
    p.add_argument("--parser", choices=PARSERS, default=None,
                   help="parse with this parser instead of the run protocol's (strict-1: upstream's newer "
                   "<answer>-tag parser, the current protocol's; lastk-1: the paper era's last numbers of the whole "
                   "answer); the metric rules stay the protocol's")
    p.add_argument("--metric_path", choices=METRIC_PATHS, default=DEFAULT_METRIC_PATH,
                   help="which of upstream's scorings to follow: posthoc (default; the summarizers and "
                   "parse_utils.cal_metrics that made the published tables: a negative A/D answer is a success with "
                   "its error) or eval-time (the process_results_* behind upstream's <ts>_results.json: a negative "
                   "A/D answer fails, and under the paper protocol the T/L relative error divides by the ground "
                   "truth without 1e-15); recorded in results.json and every parsed.jsonl row")
    p.add_argument("--models", type=csv_list, default=None, help="comma-separated model folder names (default: all)")
    p.add_argument("--tasks", type=csv_list, default=None, help="comma-separated task names (default: all)")
    p.add_argument("--families", type=family_list, default=None, help="comma-separated: detect,TL,AD (default: all)")
    p.add_argument("--dry_run", action="store_true", help="report what would change; write nothing")
    p.add_argument("--force", action="store_true",
                   help="score every stored answer again (default: as a run's resume does, only the answers, docs or "
                   "scoring that changed since parsed.jsonl was written; the rows are the same either way)")
    p.add_argument("--data_dir", default=None, help="the data folder the runs used (for the T/L removed-samples "
                   "lists; default: the data folder the run recorded, else MedVision_DATA_DIR)")
    add_tl_filter_flags(p)
    return p


def parse_main(argv: Sequence[str], prog: str = "medvision-bm parse") -> int:
    ns = build_parser(prog).parse_args(list(argv))
    refs, notes = discover(ns.results_dir, models=ns.models, tasks=ns.tasks, families=ns.families)
    outcomes, parse_notes = reparse_stores(refs, write=not ns.dry_run, parser=ns.parser, metric_path=ns.metric_path,
                                           force=ns.force)
    from medvision_bm.report.removed_filter import TABLE_POINTER, filter_stores, settings_for

    tl = filter_stores(refs, settings_for(no_filter=ns.no_tl_filter, removed_samples_dir=ns.removed_samples_dir,
                                          filename=ns.removed_samples_filename, data_dir=ns.data_dir,
                                          folders=[r.folder for r in refs]))
    tl_of = {(r.label, r.task): r for r in tl.rows}
    parse_notes += [n.replace(TABLE_POINTER, " from the summaries (parsed.jsonl keeps them)") for n in tl.notes]
    for note in notes + parse_notes:
        print(f"note: {note}", file=sys.stderr)
    width = max(len(o.ref.task) for o in outcomes)
    mwidth = max(len(o.ref.label) for o in outcomes)
    for o in outcomes:
        if o.counts is None:
            print(f"{o.ref.label:<{mwidth}}  {o.ref.task:<{width}}  {o.ref.sig12}  skipped")
            continue
        c = o.counts
        before = "-" if o.success_before is None else str(o.success_before)
        extra = f"  skipped lines: {c.bad_lines} torn, {c.foreign_lines} foreign" if c.bad_lines or c.foreign_lines else ""
        legacy = "  (re-scored legacy store)" if o.legacy else ""
        rescored = f"  rescored={o.rescored}" if o.rescored is not None and not ns.dry_run else ""
        f = tl_of.get((o.ref.label, o.ref.task))
        tl_note = f"  tl_filter: {f.status}, {f.removed} listed" if f is not None else ""
        print(f"{o.ref.label:<{mwidth}}  {o.ref.task:<{width}}  {o.ref.sig12}  {o.parser}  n={c.selected}  success "
              f"{before} -> {c.success}  parse_failed={c.parse_failed}  request_failed={c.request_failed}  "
              f"pending={c.pending}  changed={o.changed}{rescored}{extra}{legacy}{tl_note}")
    done = [o for o in outcomes if o.counts is not None]
    verb = "would rewrite" if ns.dry_run else "rewrote"
    parsers = ", ".join(sorted({o.parser for o in done if o.parser})) or "-"
    n_legacy = sum(o.legacy for o in done)
    print(f"{verb} parsed.jsonl of {len(done)} store(s) with parser {parsers}"
          + (f"; {n_legacy} legacy store(s) re-scored" if n_legacy else "")
          + (f"; {len(outcomes) - len(done)} skipped" if len(done) < len(outcomes) else "")
          + f" (metric path: {ns.metric_path})")
    return 0 if done else 1


def cli_main(argv: list[str]) -> int:
    return run_handler(lambda: parse_main(argv), prog="medvision-bm parse")
