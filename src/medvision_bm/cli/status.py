"""`medvision-bm status [SUBMIT_DIR]`: per model and task, done / running (job id) / pending / failed; and the open
provider batches (`run --batch`) of the stores, with their age and counts (`--batches DIR` for any results dir)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import NoReturn

from medvision_bm.cli import run_handler
from medvision_bm.cli.submit import default_results_root
from medvision_bm.cluster.manifest import find_submission, load_manifest
from medvision_bm.cluster.status_view import Row, Unit, collect, job_states
from medvision_bm.errors import IncompleteRun, UserError
from medvision_bm.store.batches import age_text, open_batch_rows


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message} (`medvision-bm status --help` lists the options)")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="medvision-bm status", allow_abbrev=False,
                description="Show, per model and task of a submission, whether it is done, running, pending or "
                            "failed (status files + squeue/sacct + the jobs' own markers).")
    p.add_argument("submit_dir", nargs="?", default=None,
                   help="the submission folder `medvision-bm submit` printed (default: the newest under "
                        "<results_root>/submissions)")
    p.add_argument("--results_root", "--results-root", default=None,
                   help="where to look for submissions/ (default: submit's, <benchmark_dir>/Results)")
    p.add_argument("--wait", action="store_true",
                   help="poll until no job of the submission is pending or running; exit 3 if a task is not done")
    p.add_argument("--interval", type=_seconds, default=5.0, help="seconds between polls with --wait (default 5)")
    p.add_argument("--timeout", type=_seconds, default=None, help="give up waiting after this many seconds (exit 124)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON lines")
    p.add_argument("--batches", default=None, metavar="RESULTS_DIR",
                   help="only list the open provider batches (`run --batch`) of the stores below RESULTS_DIR: per "
                        "store each batch's id, age, samples and whether a live run is collecting it (no submission "
                        "needed; no provider is asked)")
    return p


def batches_text(results_dirs: Sequence[Path]) -> str:
    """The open batches of the stores below ``results_dirs``, one line each under its store, and a total line."""
    lines: list[str] = []
    total = samples = 0
    for root in results_dirs:
        store = None
        for row in open_batch_rows(root) if root.is_dir() else []:
            if row.store != store:
                store = row.store
                lines.append(f"{store}:")
            state = ("collecting (a live run holds it)" if row.collecting else
                     "not submitted (its run stopped before the provider answered)" if row.batch_id is None else
                     "waiting: rerun the same `run --batch` command (or submission) to collect it")
            lines.append(f"  {row.batch_id or row.local_id}  {row.interface}  {row.samples} sample(s)  "
                         f"age {age_text(row.since)}  {state}")
            total += 1
            samples += row.samples
    lines.append(f"open batches: {total} ({samples} sample(s))" if total else "open batches: none")
    return "\n".join(lines) + "\n"


def _table(rows: list[Row], units: list[Unit]) -> str:
    header = ("model", "family", "task", "state", "job", "detail")
    cells = [header] + [(r.model_name, r.family, r.task, r.state, r.job, r.detail) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(5)]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(5)) + "  " + c[5] for c in cells]
    others = [u for u in units if u.job["kind"] in ("warmup", "preflight", "summary")]
    for u in others:
        lines.append(f"{u.job['kind']} {u.label}: {u.state.lower()} {u.detail}".rstrip())
    counts = Counter(r.state for r in rows)
    lines.append("tasks: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _status(argv: list[str]) -> int:
    ns = build_parser().parse_args(argv)
    if ns.batches is not None:
        root = Path(ns.batches).expanduser()
        if not root.is_dir():
            raise UserError(f"--batches {root}: not a folder; pass the --results_dir of `medvision-bm run`")
        print(batches_text([root]), end="")
        return 0
    root = Path(ns.results_root).expanduser().resolve() if ns.results_root else default_results_root()
    folder = find_submission(ns.submit_dir, root)
    data = load_manifest(folder)
    started = time.monotonic()
    while True:
        units = job_states(folder, data)
        rows = collect(folder, data, units)
        active = [u for u in units if u.active]
        if not ns.wait or not active:
            break
        if ns.timeout is not None and time.monotonic() - started > ns.timeout:
            print(_table(rows, units), end="")
            print(f"medvision-bm status: gave up after {ns.timeout:g} s with {len(active)} job(s) still queued "
                  "or running", file=sys.stderr)
            return 124
        time.sleep(ns.interval)
    if ns.json:
        for r in rows:
            print(json.dumps(asdict(r)))
    else:
        print(f"submission {folder} ({data['mode']})")
        print(_table(rows, units), end="")
        summary = Path(data["summary"])
        print(f"summary: {summary}" + ("" if summary.is_file() else " (not written yet)"))
        roots = sorted({Path(f["results_dir"]) for f in data["families"].values() if f.get("results_dir")})
        print(batches_text(roots), end="")
    if ns.wait:
        not_done = [r for r in rows if r.state != "done"]
        if not_done:
            raise IncompleteRun(f"{len(not_done)} of {len(rows)} tasks are not done; resubmit the same "
                                "`medvision-bm submit` command to run only what is missing")
    return 0


def cli_main(argv: Sequence[str]) -> int:
    return run_handler(lambda: _status(list(argv)), prog="medvision-bm status")
