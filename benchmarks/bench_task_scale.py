"""Benchmark: a from-scratch task through lmms-eval's real loop at growing sizes: time and peak memory against N.

Each size runs in a fresh process: ``Runner._run_task`` (the runner's whole task path: the store, docs.jsonl, the
claims, the asking, the score checkpoints, parsed.jsonl, results.json) over --sizes samples of the synthetic
detection task of ``bench_resume`` (the same doc for the same index), answered by the oracle backend (no model: all
bookkeeping) through ``LmmsHarness``, i.e. lmms-eval 0.7.3's ``simple_evaluate`` building its dataset, requests and
per-sample log. Printed per size: seconds, seconds per 1,000 samples, peak RSS (the process's own ``VmHWM``), and
the ratios against the smallest size (time ratio beside the size ratio: linear time gives equal ratios; flat memory
gives a peak ratio near 1). The selection itself (keys, indices, doc hashes) is made before the clock starts.

    python benchmarks/bench_task_scale.py --sizes 10000,50000,100000
    python benchmarks/bench_task_scale.py --sizes 10000,100000,1000000 --workdir /big/tmp   # about 6 GB of disk at 1M

lmms-eval is imported by the child processes only (by the harness, as a run imports it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _peak import peak_rss_mb, reset_peak, rss_mb
from bench_resume import bench_runner, prepared
from medvision_bm.runner.harness import LmmsHarness
from medvision_bm.store.samples import SampleStore

SIG = "bench-answer-signature"


def side(folder: Path, n: int) -> dict[str, float]:
    """In a fresh process: one from-scratch task of ``n`` samples through lmms-eval."""
    runner = bench_runner()
    harness = LmmsHarness(runner._backend, folder / "work")  # lmms-eval imported here, before the clock
    runner.harness = lambda: harness  # type: ignore[method-assign]
    prep = prepared(n, SampleStore(folder / "store", SIG))
    base_mb = rss_mb()
    reset_peak()
    t0 = time.perf_counter()
    outcome = runner._run_task(prep)
    seconds = time.perf_counter() - t0
    assert outcome.state == "done" and outcome.n_asked == n, outcome
    return {"s": seconds, "peak_mb": peak_rss_mb(), "base_mb": base_mb}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,50000,100000", help="task sizes, comma-separated, smallest first")
    ap.add_argument("--workdir", type=Path, default=None, help="where the stores are written (default: a temp dir)")
    ap.add_argument("--side", type=int, default=None, help=argparse.SUPPRESS)  # the child process
    ap.add_argument("--folder", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side is not None:
        print(json.dumps(side(args.folder, args.side)))
        return
    sizes = sorted(int(s) for s in args.sizes.split(",") if s)
    got: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        for n in sizes:
            child = subprocess.run([sys.executable, __file__, "--side", str(n), "--folder", str(Path(tmp) / str(n))],
                                   capture_output=True, text=True)
            if child.returncode:
                raise SystemExit(f"size {n} failed:\n{child.stderr[-3000:]}")
            got[n] = json.loads(child.stdout.strip().splitlines()[-1])
            r = got[n]
            print(f"n={n:>9,}: {r['s']:8.1f} s  ({1000 * r['s'] / n:.2f} s per 1,000)  peak RSS {r['peak_mb']:6.0f} MB "
                  f"(before the task {r['base_mb']:.0f} MB)", flush=True)
    small = sizes[0]
    for n in sizes[1:]:
        print(f"n={n:,} / n={small:,}: size x{n / small:.1f}, time x{got[n]['s'] / got[small]['s']:.2f}, peak RSS "
              f"x{got[n]['peak_mb'] / got[small]['peak_mb']:.2f}")


if __name__ == "__main__":
    main()
