"""Benchmark: the full-parse plan reader (a task whose keys are not in upstream's order) on one long string.

A plan whose task lists ``test_cases`` before ``task_ID`` is read by the full parser (``data/plans.py``
``_full_tasks``). Its parser lexes again from its start a token that a read cut, so a string fed in small fixed reads
costs time quadratic in its length; the reader's doubling reads make it linear. For each size (MB of one string
inside one case) this writes such a plan (gzip level 1, cached under ``--workdir``), then, each in a fresh
subprocess, times ``read_task`` on it (and its peak RSS) and, for reference, the same parser fed in fixed 64 kB
reads (what the reader did before). The figure the reader is held to: a 100 MB string read in seconds
(``--sizes 25,50,100``); the time per MB should stay flat as the size doubles.

    .venv/bin/python benchmarks/bench_plan_strings.py [--sizes 4,8,16] [--no_baseline] [--workdir /tmp/...]
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

from _peak import peak_rss_mb

HEAD = b'{"dataset_info": {}, "tasks_number": 1, "tasks": [{"test_cases": [{"case_ID": "c1", "image_file": "i.nii.gz", '
TAIL = b'}], "task_ID": "01", "task_type": "Box-Size", "train_cases": [], "test_cases_number": 1}]}'


def ensure_plan(workdir: Path, mb: int) -> Path:
    """A one-task plan, keys out of upstream's order, whose one case holds a string of ``mb`` MB."""
    path = workdir / f"reordered_{mb}mb.json.gz"
    if not path.exists():
        workdir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with gzip.open(tmp, "wb", compresslevel=1) as fh:
            fh.write(HEAD + b'"note": "')
            block = b"x" * (1 << 20)
            for _ in range(mb):
                fh.write(block)
            fh.write(b'"' + TAIL)
        tmp.rename(path)
    return path


def child(mode: str, path: Path) -> dict:
    """Run in a fresh process: read the plan's one case (``reader``: this checkout's ``read_task``; ``fixed``: the
    parser fed in fixed 64 kB reads); seconds, peak RSS and the string's length."""
    t0 = time.perf_counter()
    if mode == "reader":
        from medvision_bm.data.plans import read_task

        (case,) = list(read_task(path, 0).cases)
    else:
        import ijson

        with gzip.open(path, "rb") as fh:
            (task,) = list(ijson.items(fh, "tasks.item", use_float=True, buf_size=64 << 10))
        (case,) = task["test_cases"]
    return {"seconds": time.perf_counter() - t0, "peak_mb": peak_rss_mb(), "chars": len(case["note"])}


def run_child(mode: str, path: Path, timeout: float) -> dict | None:
    cmd = [sys.executable, __file__, "--child", mode, str(path)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        raise SystemExit(f"{mode} on {path} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="4,8,16", help="MB of the one string, comma-separated (default 4,8,16)")
    ap.add_argument("--workdir", default="/tmp/medvision_bench_plan_strings", help="where the plans are cached")
    ap.add_argument("--no_baseline", action="store_true", help="skip the fixed-read baseline (slow past 50 MB)")
    ap.add_argument("--baseline_timeout", type=float, default=300.0, help="seconds before a baseline run is cut")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "PLAN"), help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.child:
        print(json.dumps(child(ns.child[0], Path(ns.child[1]))))
        return
    sizes = [int(s) for s in ns.sizes.split(",") if s.strip()]
    print(f"{'string':>8}  {'reader':>9}  {'s/100MB':>8}  {'peak RSS':>9}  {'fixed 64 kB reads':>18}")
    for mb in sizes:
        path = ensure_plan(Path(ns.workdir), mb)
        ours = run_child("reader", path, 3600)
        assert ours is not None and ours["chars"] == mb << 20, ours
        base = "-" if ns.no_baseline else f"over {ns.baseline_timeout:.0f}s"
        if not ns.no_baseline:
            fixed = run_child("fixed", path, ns.baseline_timeout)
            if fixed is not None:
                base = f"{fixed['seconds']:.2f}s"
        print(f"{mb:>6}MB  {ours['seconds']:>8.2f}s  {ours['seconds'] * 100 / mb:>7.2f}s  {ours['peak_mb']:>7.0f}MB  "
              f"{base:>18}", flush=True)


if __name__ == "__main__":
    main()
