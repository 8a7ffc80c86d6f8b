"""`medvision-bm parse` / `python -m medvision_bm.benchmark.parse_outputs`: re-parse stored answers in place."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from medvision_bm.report.summarize_cli import _csv, _families
from medvision_bm.tasks.parse import PARSER_VERSION


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description="Re-parse the stored raw answers with the current parser and metrics, rewriting "
        "parsed.jsonl and results.json beside them. No model is asked.")
    p.add_argument("--results_dir", required=True, help="results folder (as given to `medvision-bm run`, or a "
                   "task-tag folder inside it)")
    p.add_argument("--models", type=_csv, default=None, help="comma-separated model folder names (default: all)")
    p.add_argument("--tasks", type=_csv, default=None, help="comma-separated task names (default: all)")
    p.add_argument("--families", type=_families, default=None, help="comma-separated: detect,TL,AD (default: all)")
    p.add_argument("--dry_run", action="store_true", help="report what would change; write nothing")
    return p


def parse_main(argv: Sequence[str], prog: str = "medvision-bm parse") -> int:
    from medvision_bm.report.rescore import reparse_stores
    from medvision_bm.report.stores import discover

    ns = build_parser(prog).parse_args(list(argv))
    refs, notes = discover(ns.results_dir, models=ns.models, tasks=ns.tasks, families=ns.families)
    outcomes, parse_notes = reparse_stores(refs, write=not ns.dry_run)
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
        print(f"{o.ref.label:<{mwidth}}  {o.ref.task:<{width}}  {o.ref.sig12}  n={c.selected}  success {before} -> "
              f"{c.success}  parse_failed={c.parse_failed}  request_failed={c.request_failed}  pending={c.pending}  "
              f"changed={o.changed}{extra}")
    done = sum(o.counts is not None for o in outcomes)
    verb = "would rewrite" if ns.dry_run else "rewrote"
    print(f"{verb} parsed.jsonl of {done} store(s) with parser {PARSER_VERSION}"
          + (f"; {len(outcomes) - done} skipped" if done < len(outcomes) else ""))
    return 0 if done else 1


def cli_main(argv: list[str]) -> int:
    from medvision_bm.cli import run_handler

    return run_handler(lambda: parse_main(argv), prog="medvision-bm parse")
