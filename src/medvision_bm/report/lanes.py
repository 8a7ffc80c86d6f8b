"""The summary's independent stages side by side on the machine's cores: a small pool of threads whose work is all
joined (or, after an error, cancelled and waited for) before the summary returns.

Threads pay only where a stage spends most of its time outside the interpreter: the families' tables (the
bootstrap's products and intervals in numpy, the group-bys in polars). Stages that are mostly Python (the sample
cards, the per-sample value files, the per-store reads of ``load``) were measured slower side by side, as the
interpreter's lock serialises them (docs/parse-and-summarize.md). Each stage submitted is deterministic and shares
nothing mutable with the others, so what a summary writes does not depend on the number of lanes or on which stage
ends first; only its wall time does.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")

#: At most this many stages at once (a summary has at most three families).
MAX_LANES = 3


def lane_count() -> int:
    """The cores this process may run on, at most :data:`MAX_LANES` (at least one)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on every platform
        cores = os.cpu_count() or 1
    return max(1, min(MAX_LANES, cores))


class Lanes:
    """A context: ``start_each`` runs stages on the pool's threads; leaving the block waits for every stage started
    (an error leaving it first cancels the stages not yet begun), so no stage writes after the summary returns."""

    def __init__(self, lanes: int | None = None) -> None:
        self._pool = ThreadPoolExecutor(max_workers=lanes or lane_count(), thread_name_prefix="summary-lane")

    def __enter__(self) -> Lanes:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._pool.shutdown(wait=True, cancel_futures=kind is not None)

    def start_each(self, fn: Callable[[K], V], keys: Iterable[K],
                   cost: Mapping[K, float] | None = None) -> dict[K, Future[V]]:
        """``fn(k)`` for every key on the pool, the costliest (``cost``) started first; the futures in the order of
        ``keys`` (collect them with :func:`results`)."""
        order = list(keys)
        futures = {k: self._pool.submit(fn, k) for k in sorted(order, key=lambda k: -(cost or {}).get(k, 0.0))}
        return {k: futures[k] for k in order}


def results(futures: Mapping[K, Future[V]]) -> dict[K, V]:
    """Each future's result in the mapping's order (the first error in that order is raised)."""
    return {k: f.result() for k, f in futures.items()}
