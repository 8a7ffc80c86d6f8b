"""Benchmark: claiming a task's to-do list chunk by chunk, as a run does (one ``Claims`` on a fresh store).

A run hands its claims the keys still to ask and takes ``--chunk`` of them at a time. ``Claims.take`` given the
list that is left looks at every key of it each time, so a from-scratch task of N samples costs about N*N/(2*chunk)
look-ups; ``ClaimQueue.next`` looks at each key once. For each N this times both in the same process over a fresh
store (the claim files written as a run writes them) and prints the queue's time, take's, and their ratio; the
queue's time per key should stay flat as N grows.

    .venv/bin/python benchmarks/bench_claims.py [--sizes 10000,100000] [--chunk 64] [--take_limit 200000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from medvision_bm.store.claims import Claims
from medvision_bm.store.samples import SampleStore


def _store(root: Path, name: str) -> SampleStore:
    store = SampleStore(root / name, "sig")
    store.folder.mkdir(parents=True)
    return store


def time_queue(root: Path, keys: list[str], chunk: int) -> float:
    store = _store(root, "queue")
    start = time.perf_counter()
    with Claims(store, store.read(), "queue") as claims:
        queue = claims.queue(keys)
        while queue:
            queue.next(chunk)
    return time.perf_counter() - start


def time_take(root: Path, keys: list[str], chunk: int) -> float:
    store = _store(root, "take")
    start = time.perf_counter()
    with Claims(store, store.read(), "take") as claims:
        left = list(keys)
        while left:
            mine, _, _ = claims.take(left, chunk)
            taken = set(mine)
            left = [k for k in left if k not in taken]  # what a caller holding a list did
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,50000", help="comma-separated to-do list lengths")
    ap.add_argument("--chunk", type=int, default=64, help="keys claimed per call (a run's chunk)")
    ap.add_argument("--take_limit", type=int, default=100_000, help="largest N timed with take (it is quadratic)")
    ns = ap.parse_args()
    print(f"{'N':>9}  {'queue s':>8}  {'us/key':>7}  {'take s':>8}  {'take/queue':>10}")
    for n in (int(x) for x in ns.sizes.split(",")):
        keys = [f"PhantomCT_BoxCoordinate_Task01_Axial/{i:08d}/label1" for i in range(n)]
        with tempfile.TemporaryDirectory() as tmp:
            q = time_queue(Path(tmp), keys, ns.chunk)
            t = time_take(Path(tmp), keys, ns.chunk) if n <= ns.take_limit else None
        ratio = f"{t / q:10.1f}" if t is not None else f"{'-':>10}"
        print(f"{n:>9}  {q:8.2f}  {q / n * 1e6:7.1f}  {t if t is not None else float('nan'):8.2f}  {ratio}")


if __name__ == "__main__":
    main()
