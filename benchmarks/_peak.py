"""Peak resident memory of the calling process, for the benchmarks' memory figures.

``getrusage(...).ru_maxrss`` is unfit for a benchmark child: on Linux a child process starts with its parent's
high-water mark (the forked copy of the parent's memory counts until ``exec``), so a small child of a large parent
reports the parent's peak. ``VmHWM`` in ``/proc/self/status`` belongs to the process's own address space and starts
afresh at ``exec``; it is used where present, ``ru_maxrss`` elsewhere.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path


def _status_mb(field: str) -> float | None:
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return None


def peak_rss_mb() -> float:
    """This process's own peak resident memory so far, in MB (Linux: ``VmHWM``; elsewhere ``ru_maxrss``)."""
    hwm = _status_mb("VmHWM")
    if hwm is not None:
        return hwm
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss / (1024 * 1024) if sys.platform == "darwin" else maxrss / 1024


def rss_mb() -> float:
    """Resident memory now, in MB (Linux ``VmRSS``; elsewhere the peak, the best figure available)."""
    now = _status_mb("VmRSS")
    return now if now is not None else peak_rss_mb()


def reset_peak() -> None:
    """Start a new peak window where the kernel allows it (Linux: writing 5 to ``clear_refs`` resets ``VmHWM``)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
