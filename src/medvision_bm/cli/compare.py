"""`medvision-bm compare`: paired comparison of two runs on the same samples, printed and optionally written."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from medvision_bm.cli import run_handler
from medvision_bm.cli.flag_types import add_tl_filter_flags, csv_list, family_list
from medvision_bm.errors import UserError
from medvision_bm.io import write_json_atomic, write_text_atomic
from medvision_bm.report.bootstrap import BootstrapSpec, one_thread_sums
from medvision_bm.report.plots import safe_name
from medvision_bm.secrets import SafeArgumentParser
from medvision_bm.store.discovery import discover
from medvision_bm.tasks.scoring import SAMPLE_METRICS


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = SafeArgumentParser(prog=prog, description="Compare run B against run A on the samples both answered: "
                                "difference B − A of each of upstream's per-sample metrics with a paired bootstrap CI, per "
                                "task and over tasks.")
    p.add_argument("--results_dir", required=True, help="results folder holding both runs")
    p.add_argument("--a", required=True, help="the reference run (e.g. the base model); a model folder name or a "
                   "run label as shown by summarize (model@config)")
    p.add_argument("--b", required=True, help="the run compared against A (e.g. the fine-tuned model)")
    p.add_argument("--families", type=family_list, default=None, help="comma-separated: detect,TL,AD (default: all)")
    p.add_argument("--tasks", type=csv_list, default=None, help="comma-separated task names (default: all shared)")
    p.add_argument("--metrics", type=csv_list, default=None, help="comma-separated per-sample metrics, upstream's names "
                   "(IoU, F1, Precision, Recall, MAE, MRE, nMAE; any case; default: IoU,F1,MAE for detection and "
                   "MAE,MRE,nMAE for TL/AD; SuccessRate is always included)")
    p.add_argument("--n_boot", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--ci", type=float, default=0.95, help="interval coverage (default 0.95)")
    p.add_argument("--output_dir", default=None, help="also write compare_<a>_vs_<b>.{csv,md,json} here")
    p.add_argument("--data_dir", default=None, help="the data folder the runs used (for the T/L removed-samples "
                   "lists; default: the data folder the run recorded, else MedVision_DATA_DIR)")
    add_tl_filter_flags(p)
    return p


def compare_main(argv: Sequence[str], prog: str = "medvision-bm compare") -> int:
    import sys

    from medvision_bm.report.compare import canonical_metrics, known_metrics, paired_compare
    from medvision_bm.report.load import load
    from medvision_bm.report.summarize import check_output_dir, json_safe, make_output_dir
    from medvision_bm.report.tables import csv_text, without_single_pair_verdicts
    from medvision_bm.report.views import compare_view, markdown, text_table

    ns = build_parser(prog).parse_args(list(argv))
    known = known_metrics()
    bad = [m for m in ns.metrics or [] if m.lower() not in known]
    if bad:
        raise UserError(f"--metrics {bad[0]!r} is not a metric; choose from {', '.join(sorted(known.values()))}")
    ns.metrics = canonical_metrics(ns.metrics)
    spec = BootstrapSpec(ns.n_boot, ns.seed, ns.ci)
    spec.check()
    out = check_output_dir(ns.output_dir) if ns.output_dir else None
    refs, notes = discover(ns.results_dir, tasks=ns.tasks, families=ns.families)
    loaded = load(refs)
    from medvision_bm.report.removed_filter import TABLE_POINTER, apply_tl_filter, settings_for

    report = apply_tl_filter(loaded, settings_for(
        no_filter=ns.no_tl_filter, removed_samples_dir=ns.removed_samples_dir, filename=ns.removed_samples_filename,
        data_dir=ns.data_dir, folders=[r.folder for r in refs]))
    notes += [n.replace(TABLE_POINTER, "") for n in report.notes]  # the per-task table is a summary's file
    unused = [m for m in ns.metrics or [] if m != "SuccessRate"
              and not any(m in SAMPLE_METRICS[f] for f in loaded.samples)]
    if unused:
        raise UserError(f"--metrics {unused[0]!r} is not a metric of the families compared "
                        f"({', '.join(loaded.samples)}); drop it or add its family")
    with one_thread_sums():
        frame = without_single_pair_verdicts(paired_compare(loaded, ns.a, ns.b, spec, ns.metrics))
    for note in notes + loaded.notes:  # after the checks above: a user mistake stays one line
        print(f"note: {note}", file=sys.stderr)
    view = compare_view(frame, spec.level, spec.n_boot)
    print(text_table(view))
    if out is not None:
        make_output_dir(out)
        name = f"compare_{safe_name(ns.a)}_vs_{safe_name(ns.b)}"
        write_text_atomic(out / f"{name}.csv", csv_text(frame))
        write_text_atomic(out / f"{name}.md", markdown(view))
        write_json_atomic(out / f"{name}.json", {"a": ns.a, "b": ns.b, "bootstrap": spec.__dict__,
                                                 "rows": json_safe(frame.to_dicts())})
        print(f"wrote {out / name}.{{csv,md,json}}")
    return 0


def cli_main(argv: list[str]) -> int:
    return run_handler(lambda: compare_main(argv), prog="medvision-bm compare")
