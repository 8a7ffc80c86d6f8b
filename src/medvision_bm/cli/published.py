"""`medvision-bm published`: the published leaderboard as a table, CSV or JSON."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from medvision_bm.cli import run_handler
from medvision_bm.errors import UserError
from medvision_bm.report.published import FORMATS, SOURCE_COMMIT, published_rows, select, to_csv, to_table
from medvision_bm.report.published_cda import published_cda_rows
from medvision_bm.secrets import SafeArgumentParser


def build_parser(prog: str = "medvision-bm published") -> argparse.ArgumentParser:
    p = SafeArgumentParser(prog=prog, description="List the published leaderboard: upstream MedVision's numbers "
                           f"(Paper-results-backup/ @{SOURCE_COMMIT[:7]}: planner 1.0.0, -CoT task lists, 1,000 "
                           "samples per task, judge-parsed with gemma-4-31b, T/L filtered), and its clinical decision "
                           "agreement report (group: the proxy; kind cda).")
    p.add_argument("--model", default=None, help="a published model: upstream's folder or display name, our results "
                   "folder name for it, or its registry record (default: all)")
    p.add_argument("--family", choices=("detect", "TL", "AD"), default=None, help="one family (default: all)")
    p.add_argument("--split", choices=("main", "planeOOD", "taskOOD"), default=None,
                   help="the main leaderboard or an OOD split (default: all)")
    p.add_argument("--format", choices=FORMATS, default="table", help="table, csv or json")
    return p


def published_main(argv: Sequence[str], prog: str = "medvision-bm published") -> int:
    ns = build_parser(prog).parse_args(list(argv))
    rows = select([*published_rows(), *published_cda_rows()], model=ns.model, family=ns.family, split=ns.split)
    if not rows:
        names = sorted({r.model for r in published_rows()})
        hint = f"; known models: {', '.join(names[:8])}, ..." if ns.model else ""
        raise UserError(f"no published numbers match {' '.join(argv) or 'the filters'}{hint}")
    if ns.format == "csv":
        sys.stdout.write(to_csv(rows))
    elif ns.format == "json":
        sys.stdout.write(json.dumps([r.to_json() for r in rows], indent=1) + "\n")
    else:
        sys.stdout.write(to_table(rows))
    return 0


def cli_main(argv: list[str]) -> int:
    return run_handler(lambda: published_main(argv), prog="medvision-bm published")
