"""A live one-line progress report for API runs: done/total, rate, ETA, in flight, retries, failures, 429s.

:func:`format_progress` is pure (the runner may put it in its own bar); :class:`ProgressLine` redraws it on a
terminal (carriage return) or prints a plain line every ``interval_s`` seconds elsewhere (logs, SLURM).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from medvision_bm.models.api.engine import ApiStats


def _duration(seconds: float) -> str:
    whole = round(seconds)
    h, rem = divmod(whole, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def format_progress(stats: ApiStats, elapsed_s: float, total: int | None = None, done_before: int = 0) -> str:
    """``done_before`` results that were already there when timing started do not count towards the rate."""
    total = stats.total if total is None else total
    done = stats.done
    rate = (done - done_before) / elapsed_s if elapsed_s > 0 else 0.0
    left = max(0, total - done)
    eta = _duration(left / rate) if rate > 0 and left else ("0s" if not left else "?")
    parts = [f"{done}/{total}", f"{rate:.1f}/s", f"ETA {eta}",
             f"in flight {stats.in_flight}/{stats.concurrency}", f"retries {stats.retries}",
             f"failed {stats.failures}"]
    if stats.throttled:
        parts.append(f"429s {stats.throttled}")
    if stats.length_cuts:
        parts.append(f"cut {stats.length_cuts}")
    return " | ".join(parts)


class ProgressLine:
    """Redraws ``format_progress(source())`` from a background thread until stopped (use as a context manager)."""

    def __init__(self, source: Callable[[], ApiStats], *, label: str = "", stream: TextIO | None = None,
                 interval_s: float | None = None) -> None:
        self.source = source
        self.label = label
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval_s = interval_s if interval_s is not None else (0.5 if self.tty else 30.0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()
        self._done0 = 0

    def line(self) -> str:
        text = format_progress(self.source(), time.monotonic() - self._t0, done_before=self._done0)
        return f"{self.label} {text}" if self.label else text

    def _draw(self, final: bool = False) -> None:
        text = self.line()
        if self.tty:
            self.stream.write("\r\x1b[K" + text + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._draw()

    def start(self) -> ProgressLine:
        self._t0 = time.monotonic()
        self._done0 = self.source().done
        self._thread = threading.Thread(target=self._loop, name="medvision-progress", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
            self._draw(final=True)

    def __enter__(self) -> ProgressLine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
