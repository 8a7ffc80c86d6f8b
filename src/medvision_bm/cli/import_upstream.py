"""`medvision-bm import`: flags to an import of upstream lmms-eval results, and the report it prints."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from medvision_bm.cli import run_handler
from medvision_bm.data.layout import load_tasks_list
from medvision_bm.ingest.upstream import ImportReport, import_upstream
from medvision_bm.ingest.upstream_judged import JudgedImport, import_judged
from medvision_bm.ingest.upstream_values import import_values, report_lines
from medvision_bm.secrets import SafeArgumentParser
from medvision_bm.tasks.scaled_ps import check_range


def build_parser(prog: str = "medvision-bm import") -> argparse.ArgumentParser:
    p = SafeArgumentParser(
        prog=prog, description="Import upstream MedVision results (lmms-eval <timestamp>_samples_<task>.jsonl and "
        "<timestamp>_results.json) into sample stores, so that parse, summarize and compare treat them as runs. "
        "Each answer is keyed to the doc it answered by the doc's fields; the newest timestamp wins per doc. "
        "Upstream's judged folders (llm-parsed_<judge>/) beside them become the stores' judged parses, which "
        "`summarize --parse judged` reports. Upstream's per-sample files (<model>/<parsed dir>/summary_values_"
        "{TL,AD}_Task*.json, as Paper-results-backup/ publishes them) become stores with a judged parse of their "
        "values; their numbers are compared with the summary_metrics_*.json beside them.")
    p.add_argument("--upstream_results", required=True,
                   help="upstream results folder: Results/, Results/<task_tag>/ or one model folder inside it")
    p.add_argument("--results_dir", required=True, help="our results folder to import into")
    p.add_argument("--model_name", default=None,
                   help="store the answers under this model name (default: the upstream model folder's name, the "
                   "launchers' --model_name); only for a folder holding one model")
    p.add_argument("--models", default=None, help="comma-separated upstream model folders to import (default: all)")
    p.add_argument("--tasks_list_json_path", default=None, help="import only the tasks of this tasks list")
    p.add_argument("--data_dir", default=None,
                   help="upstream Data/ folder whose docs the answers are keyed to (default: MedVision_DATA_DIR; "
                   "with neither, docs are built from the records themselves)")
    p.add_argument("--protocol", choices=("auto", "current", "paper"), default="auto",
                   help="upstream generation the answers were asked under: auto reads the stored prompt (<answer> "
                   "tags: current, else paper)")
    p.add_argument("--scaled_ps_low", type=float, default=None,
                   help="lower end of the pixel-size factor range the -CoT-scaledPS runs were asked with (upstream's "
                   "--scaled_ps_low, default 0.5; its files do not record it): their targets are scaled by it")
    p.add_argument("--scaled_ps_high", type=float, default=None,
                   help="upper end of that range (upstream's --scaled_ps_high, default 3.0)")
    return p


def import_main(argv: Sequence[str], prog: str = "medvision-bm import") -> int:
    ns = build_parser(prog).parse_args(list(argv))
    tasks = None
    if ns.tasks_list_json_path:
        tasks = list(load_tasks_list(ns.tasks_list_json_path))
    models = [m for m in (ns.models or "").split(",") if m] or None
    scaled_ps = check_range(ns.scaled_ps_low, ns.scaled_ps_high)
    report = import_upstream(ns.upstream_results, ns.results_dir, model_name=ns.model_name, models=models,
                             tasks=tasks, data_dir=ns.data_dir, protocol=ns.protocol, scaled_ps=scaled_ps)
    # upstream's judged folders (llm-parsed_<judge>/) go into the judged parses of the stores just imported
    judged, bad, notes = import_judged(ns.upstream_results, [s for t in report.tasks for s in t.stores],
                                       models=models, tasks=tasks)
    report.malformed += bad
    report.notes += notes
    # upstream's per-sample files (summary_values_*.json) below the same folder
    values, values_notes = import_values(ns.upstream_results, ns.results_dir, model_name=ns.model_name,
                                         models=models)
    if values:  # a folder of per-sample files holds no samples files: that is no problem then
        report.notes = [n for n in report.notes if not n.startswith("no upstream samples files")]
    report.notes += values_notes
    if values and not report.files:  # only per-sample files: their lines below say what was imported
        for note in report.notes:
            print(f"note: {note}", file=sys.stderr)
    else:
        print_report(report, ns.upstream_results)
    print_judged(judged)
    for line in report_lines(values):
        print(line)
    # nothing imported (every record unmatched: another data folder or annotation version?) is a failure
    stored = sum(t.added + t.replaced + t.unchanged for t in report.tasks) + sum(v.samples for v in values)
    return 0 if stored else 1


def print_report(report: ImportReport, source: object) -> None:
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    for line in report.malformed:
        print(f"malformed: {line} (skipped; the import goes on)", file=sys.stderr)
    for t in report.tasks:
        for line in t.unmatched[:20]:
            print(f"unmatched: {line}", file=sys.stderr)
        if len(t.unmatched) > 20:
            print(f"unmatched: ... and {len(t.unmatched) - 20} more for {t.task}", file=sys.stderr)
    for line in report.skipped_tasks:
        print(f"skipped task: {line}", file=sys.stderr)
    if report.tasks:
        width = max(len(t.task) for t in report.tasks)
        for t in report.tasks:
            stores = ", ".join(s.name for s in t.stores) or "-"
            print(f"{t.model}  {t.task:<{width}}  records={t.records}  new={t.added}  replaced={t.replaced}  "
                  f"unchanged={t.unchanged}  superseded={t.superseded}  unmatched={len(t.unmatched)}  store={stores}")
    n_new = sum(t.added + t.replaced for t in report.tasks)
    print(f"imported {report.files} upstream file(s) from {source}: {n_new} answer(s) new or replaced, "
          f"{sum(t.superseded for t in report.tasks)} superseded by newer timestamps, "
          f"{sum(len(t.unmatched) for t in report.tasks)} unmatched, {len(report.malformed)} malformed line(s)"
          + ("; nothing new" if n_new == 0 else ""))


def print_judged(imports: Sequence[JudgedImport]) -> None:
    for ji in imports:
        for line in ji.unmatched[:20]:
            print(f"unmatched: {line}", file=sys.stderr)
        where = f"{ji.store.name}/{ji.judged_folder.relative_to(ji.store)}" if ji.store and ji.judged_folder else "-"
        print(f"{ji.model}  {ji.task}  judged by {ji.judge_dir}: records={ji.records}  used={ji.used}  "
              f"superseded={ji.superseded}  unmatched={len(ji.unmatched)}  not_judged={ji.not_judged}  "
              f"duplicates={ji.duplicates}  kept={ji.kept}  judged parse={where}")
        if ji.duplicates:
            print(f"note: {ji.model} / {ji.task}: {ji.duplicates} judged record(s) judge a doc and answer another "
                  "record of this import judged already; the later one is kept", file=sys.stderr)
        if ji.strict_mismatch:
            print(f"note: {ji.model} / {ji.task}: {ji.strict_mismatch} judged record(s) name a strict prediction "
                  "this store's parser does not reproduce (another protocol?); upstream's decision is kept",
                  file=sys.stderr)
    if imports:
        print(f"imported {sum(j.used for j in imports)} judged answer(s) of {len(imports)} store(s): "
              "`medvision-bm summarize --parse judged` reports them")


def cli_main(argv: list[str]) -> int:
    return run_handler(lambda: import_main(argv), prog="medvision-bm import")
