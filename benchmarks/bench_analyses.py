"""Benchmark: each analysis of the paper's evaluation (CDA, process accuracy, equation accuracy, T/L by major axis,
detection by box ratio) on one generated results folder of --samples rows (1,000,000 by default), beside the plain
summarize of the same folder.

The folder holds three kinds of stores, in the runner's layout: ``bench_summarize``'s generic stores (2 models x one
detection, T/L and A/D task, 10% of the rows each: what the box-ratio and major-axis analyses read), ``bench_cda``'s
proxy stores (2 models x a KiTS23 T/L and a Ceph-Biometrics-400 angle task, 5% each: what the CDA reads; their T/L
rows are in the major-axis analysis too), and ``bench_process_accuracy``'s phantom T/L -CoT store (the oracle's real
run, its answers rewritten as four-step -CoT answers and repeated to 20% of the rows; every sample reads its
landmark file: what process and equation accuracy read).

Every measurement is one summarize without plots (no sample browser, no T/L filter, 200 resamples) in a fresh child
process, with every analysis stage switched off but the one measured: "plain" has all of them off. Printed per
measurement: the wall time, the stage's own time inside it, and the peak RSS of the process; the stage's time is
also given as a ratio to the plain summarize's wall time. Process and equation accuracy are one pass over the
answers: "process + equation" is that pass, "equation only" the same pass with the process records left out
(process accuracy alone is about their difference).

    .venv/bin/python benchmarks/bench_analyses.py [--samples 1000000] [--keep DIR] [--only plain cda ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_cda
import bench_process_accuracy
import bench_summarize
from _peak import peak_rss_mb
from medvision_bm.data.phantom import make_phantom

REPO = Path(__file__).resolve().parents[1]
#: What each measurement leaves on (the rest switched off); "plain": nothing.
MODES = ("plain", "cda", "process+equation", "equation", "tl_major_axis", "box_ratio")
#: Where summary.json holds each measured analysis's result.
OUTPUT = {"cda": "cda", "process+equation": "process_accuracy", "equation": "process_accuracy",
          "tl_major_axis": "tl_by_major_axis", "box_ratio": "detect_by_box_ratio"}


def build(work: Path, n: int) -> Path:
    """The results folder of ``n`` rows (module docstring); reused when already there."""
    results = work / f"results-{n}"
    if (results / ".complete").exists():
        return results
    shutil.rmtree(results, ignore_errors=True)
    data = work / "Data"
    if not (data / "Datasets").is_dir():
        make_phantom(data)
    t = time.perf_counter()
    generic, proxy = n // 10, n // 20
    cot = n - 6 * generic - 4 * proxy
    rows = bench_summarize.generate(results / "generic", 2, 3, generic)
    rows += bench_cda.generate(results / "cda", 2, proxy)
    base = bench_process_accuracy.base_store(work, data)
    bench_process_accuracy.grow(base, cot, results / "cot")
    rows += cot
    (results / ".complete").write_text(str(rows))
    print(f"generated {rows:,} rows in {time.perf_counter() - t:.0f} s: 6 generic stores x {generic:,}, "
          f"4 CDA proxy stores x {proxy:,}, 1 T/L -CoT store x {cot:,}", flush=True)
    return results


def _switch_off(mode: str) -> dict[str, float]:
    """Patch every stage but ``mode``'s to a no-op; the measured one is wrapped in a timer (its seconds land in the
    returned dict)."""
    from medvision_bm.report import box_ratio, cda_section, process_stage, tl_major_axis

    spent: dict[str, float] = {}

    def timed(fn):
        def run(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent["stage_s"] = spent.get("stage_s", 0.0) + time.perf_counter() - t
        return run

    stages = {"cda": (cda_section, "summary_section", lambda *a, **k: cda_section.Section()),
              "process+equation": (process_stage, "run_stage", lambda *a, **k: process_stage.ProcessResult()),
              "tl_major_axis": (tl_major_axis, "run_stage", lambda *a, **k: ({}, [], None)),
              "box_ratio": (box_ratio, "run_stage", lambda *a, **k: ({}, [], None))}
    measured = "process+equation" if mode == "equation" else mode
    for name, (module, attr, off) in stages.items():
        setattr(module, attr, timed(getattr(module, attr)) if name == measured else off)
    if mode == "equation":  # the same pass without the process records (each answer still read, equations scored)
        process_stage.process_record = lambda rd, text, truth, steps=None: ({"doc_id": rd.doc.index,
                                                                             "error": "not measured"}, None)
    return spent


def child(mode: str, results: str, out: str, data: str) -> None:
    from medvision_bm.report.summarize import SummaryOptions, summarize

    spent = _switch_off(mode)
    t0 = time.perf_counter()
    res = summarize(results, out, SummaryOptions(data_dir=data, plots=False, n_boot=200, browse_per_task=0,
                                                 tl_filter=False))
    wall, peak = time.perf_counter() - t0, peak_rss_mb()
    summary = json.loads((Path(out) / "summary.json").read_text())
    if mode != "plain" and not summary[OUTPUT[mode]]:  # a stage that computed nothing is no measurement
        raise SystemExit(f"{mode}: summary.json {OUTPUT[mode]} is empty")
    print(json.dumps({"wall_s": wall, "stage_s": spent.get("stage_s"), "peak_mb": peak,
                      "samples": sum(f.height for f in res.loaded.samples.values()), "files": len(res.files)}))


def timed(mode: str, results: Path, out: Path, data: Path) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    os.sync()  # the previous run's writes are not flushed inside this one
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}:{REPO / 'benchmarks'}:{os.environ.get('PYTHONPATH', '')}"}
    res = subprocess.run([sys.executable, __file__, "--child", mode, str(results), str(out), str(data)], env=env,
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(res.stderr[-3000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--keep", default=None, help="keep (and reuse) the generated folder here")
    ap.add_argument("--only", nargs="+", choices=MODES, default=list(MODES), help="measure these (plain first)")
    ap.add_argument("--child", nargs=4, default=None, help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.child:
        child(*ns.child)
        return 0
    work = Path(ns.keep or tempfile.mkdtemp(prefix="bench-analyses-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        results = build(work, ns.samples)
        plain: dict | None = None
        for mode in sorted(ns.only, key=MODES.index):
            got = timed(mode, results, work / f"out-{mode}", work / "Data")
            if mode == "plain":
                plain = got
                print(f"{'plain summarize':>18}: {got['wall_s']:7.1f} s, peak {got['peak_mb']:6.0f} MB "
                      f"({got['samples']:,} samples)", flush=True)
                continue
            ratio = f", {got['stage_s'] / plain['wall_s']:.2f}x the plain summarize" if plain else ""
            extra = f", {got['peak_mb'] - plain['peak_mb']:+.0f} MB against plain" if plain else ""
            print(f"{mode:>18}: {got['wall_s']:7.1f} s in all, the analysis {got['stage_s']:7.1f} s{ratio}; peak "
                  f"{got['peak_mb']:6.0f} MB{extra}", flush=True)
    finally:
        if not ns.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
