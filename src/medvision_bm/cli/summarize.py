"""`medvision-bm summarize` and the summarize_*_task entry points: parse flags, run summarize, print a digest."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from medvision_bm.cli import run_handler
from medvision_bm.cli.flag_types import add_tl_filter_flags, csv_list, family_list
from medvision_bm.errors import UserError
from medvision_bm.secrets import SafeArgumentParser


def _pair(text: str) -> tuple[str, str]:
    a, sep, b = text.partition(":")
    if not sep or not a or not b:
        raise argparse.ArgumentTypeError(f"{text!r} is not RUN_A:RUN_B (e.g. base-model:fine-tuned)")
    return a, b


def build_parser(prog: str, with_families: bool = True) -> argparse.ArgumentParser:
    p = SafeArgumentParser(prog=prog, description="Summarize stored results: upstream's tables first "
                                "(rows across label groups, per group, per task) with bootstrap CIs (CSV, Markdown, "
                                "JSON), plots and a static HTML report (OUTPUT_DIR/index.html).")
    p.add_argument("--results_dir", required=True, help="results folder (as given to `medvision-bm run`, or a "
                   "task-tag folder inside it, or a root holding several task-tag folders)")
    p.add_argument("--output_dir", required=True, help="folder for index.html and the tables (created if missing)")
    if with_families:
        p.add_argument("--families", type=family_list, default=None, help="comma-separated: detect,TL,AD (default: all)")
    p.add_argument("--models", type=csv_list, default=None, help="comma-separated model folder names (default: all)")
    p.add_argument("--tasks", type=csv_list, default=None, help="comma-separated task names (default: all)")
    p.add_argument("--n_boot", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap and sample-browser seed (default 0)")
    p.add_argument("--ci", type=float, default=0.95, help="interval coverage (default 0.95)")
    p.add_argument("--min_group_size", type=int, default=20,
                   help="detection box-size (area-ratio) groups merge until each holds this many samples (default "
                   "20); upstream's own minimum of 50 samples per region in the anatomy and T/L rows is fixed")
    p.add_argument("--data_dir", default=None, help="data folder the runs used, to render the browsed slices "
                   "(default: the data folder the run recorded in results.json, else MedVision_DATA_DIR)")
    p.add_argument("--browse_per_task", type=int, default=2, help="samples per task in the sample browser (default 2)")
    p.add_argument("--sample_keys", type=csv_list, default=[], help="comma-separated sample keys to add to the browser")
    p.add_argument("--compare", type=_pair, action="append", default=[], metavar="RUN_A:RUN_B",
                   help="add a paired comparison to the report (repeatable)")
    p.add_argument("--no_plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--parse", choices=("strict", "judged", "both"), default="strict",
                   help="which parse the tables use: strict (default; parsed.jsonl), judged (the LLM-judge parse of "
                   "`medvision-bm judge`), or both (strict tables plus strict_vs_judged_<family> side by side)")
    p.add_argument("--judge", default=None, help="with --parse judged|both: which judged parse when a store has "
                   "several (judge model, weights or signature prefix)")
    add_tl_filter_flags(p)
    p.add_argument("--reference", default=None, metavar="FILE", help="check the runs against these reference numbers "
                   "instead of the published leaderboard (a CSV or JSON file as `medvision-bm published --format "
                   "csv|json` writes)")
    return p


def summarize_main(argv: Sequence[str], prog: str = "medvision-bm summarize",
                   families: Sequence[str] | None = None) -> int:
    from medvision_bm.report.summarize import SummaryOptions, result_lines, summarize

    ns = build_parser(prog, with_families=families is None).parse_args(list(argv))
    if ns.judge and ns.parse == "strict":
        raise UserError(f"--judge {ns.judge} picks a judged parse; add --parse judged or --parse both (the tables "
                        "use the strict parse otherwise)")
    opts = SummaryOptions(
        families=list(families) if families is not None else ns.families, models=ns.models, tasks=ns.tasks,
        n_boot=ns.n_boot, seed=ns.seed, level=ns.ci, min_group_size=ns.min_group_size, data_dir=ns.data_dir,
        browse_per_task=ns.browse_per_task, sample_keys=ns.sample_keys, compare=ns.compare, plots=not ns.no_plots,
        parse=ns.parse, judge=ns.judge, tl_filter=not ns.no_tl_filter, removed_samples_dir=ns.removed_samples_dir,
        removed_samples_filename=ns.removed_samples_filename, reference=ns.reference)
    res = summarize(ns.results_dir, ns.output_dir, opts)
    for note in res.notes:
        print(f"note: {note}", file=sys.stderr)
    for line in result_lines(res, opts.level):
        print(line)
    return 0


def cli_main(argv: list[str]) -> int:
    return run_handler(lambda: summarize_main(argv), prog="medvision-bm summarize")


def family_main(family: str, module: str, argv: Sequence[str] | None = None) -> int:
    """The body of `python -m medvision_bm.benchmark.summarize_<family>_task`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = f"python -m medvision_bm.benchmark.{module}"
    return run_handler(lambda: summarize_main(argv, prog=prog, families=[family]), prog=prog)
