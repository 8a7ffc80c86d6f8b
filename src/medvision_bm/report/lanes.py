"""The summary's independent computing stages side by side on the machine's cores: a few daemon threads per batch of
stages, their results collected in the order asked.

Threads pay only where a stage spends most of its time outside the interpreter: the families' tables (the
bootstrap's products and intervals in numpy, the group-bys in polars). Stages that are mostly Python (the sample
cards, the per-sample value files, the per-store reads of ``load``) were measured slower side by side, as the
interpreter's lock serialises them (docs/parse-and-summarize.md). Each stage submitted is deterministic, writes
nothing and shares nothing mutable with the others, so what a summary writes does not depend on the number of
lanes or on which stage ends first; only its wall time does. As the stages write nothing, an error or an interrupt
(Ctrl-C) leaves at once: the stages not begun are cancelled and a running one is abandoned (its thread is a daemon:
it neither holds the summary nor the process's exit), not waited for.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, wait
from types import TracebackType
from typing import Any, TypeVar

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
    """A context: ``start_each`` runs stages on daemon threads, at most ``lanes`` at once; an error leaving the
    block cancels the stages not yet begun (and waits for none)."""

    def __init__(self, lanes: int | None = None) -> None:
        self.lanes = lanes or lane_count()
        self._futures: list[Future[Any]] = []

    def __enter__(self) -> Lanes:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is not None:
            for future in self._futures:
                future.cancel()  # a stage not begun never starts; a running one is left to its daemon thread

    def start_each(self, fn: Callable[[K], V], keys: Iterable[K],
                   cost: Mapping[K, float] | None = None) -> dict[K, Future[V]]:
        """``fn(k)`` for every key, the costliest (``cost``) started first, at most ``lanes`` at once; the futures
        in the order of ``keys`` (collect them with :func:`results`)."""
        order = list(keys)
        futures: dict[K, Future[V]] = {k: Future() for k in order}
        self._futures += futures.values()
        jobs = deque(sorted(order, key=lambda k: -(cost or {}).get(k, 0.0)))
        lock = threading.Lock()

        def lane() -> None:
            while True:
                with lock:
                    if not jobs:
                        return
                    key = jobs.popleft()
                future = futures[key]
                if not future.set_running_or_notify_cancel():
                    continue  # cancelled before it began
                try:
                    value = fn(key)
                except BaseException as exc:  # handed to the caller: raised where it collects the result
                    future.set_exception(exc)
                else:
                    future.set_result(value)

        for n in range(min(self.lanes, len(order))):
            threading.Thread(target=lane, name=f"summary-lane-{n}", daemon=True).start()
        return {k: futures[k] for k in order}


#: Seconds between two looks at a running stage: a wait without a timeout would hold off Ctrl-C until the stage
#: ends (once polars has run, SIGINT's handler restarts the interrupted wait instead of breaking it).
POLL_S = 0.2


def results(futures: Mapping[K, Future[V]]) -> dict[K, V]:
    """Each future's result in the mapping's order (the first error in that order is raised); an interrupt
    reaches the caller within :data:`POLL_S` however long a stage runs."""
    out: dict[K, V] = {}
    for k, future in futures.items():
        while not future.done():
            wait([future], timeout=POLL_S)
        out[k] = future.result()
    return out
