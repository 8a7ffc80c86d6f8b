"""A task's to-do samples in parts of bounded size, and lmms-eval's per-sample log of them spooled to disk.

lmms-eval holds every request, dataset row and per-sample log entry of what it is handed (about 14 KB a sample, so a
from-scratch task of a million samples needed over 10 GB). The runner hands it a task's to-do samples a part at a
time (each part one ``simple_evaluate`` over its own rows file, the model object and the imports kept), builds each
part's samples only when it is reached, and appends each part's log rows to a spool file that becomes the task's
``samples_<stamp>.jsonl`` once the task ends: what a task run holds is bounded by the part, not by the task.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TextIO

from medvision_bm.io import atomic_path, dumps, jsonable

#: Samples handed to the harness at a time. lmms-eval's set-up of a part (its task and dataset built from the part's
#: rows) costs about a second, so a part this size adds a few percent to a large task and holds a few hundred MB.
TASK_PART = 10_000


def parts(positions: Sequence[int], size: int = TASK_PART) -> Iterator[tuple[int, Sequence[int]]]:
    """``(offset, positions[offset:offset + size])`` in order; a single part when the to-do fits in one."""
    size = max(1, size)
    for start in range(0, len(positions), size):
        yield start, positions[start:start + size]


class SamplesLog:
    """lmms-eval's per-sample rows of one task run, appended part by part to a temp file beside
    ``<folder>/samples_<stamp>.jsonl`` and renamed into place by :meth:`commit` (nothing is written when no row came;
    a run killed before the commit leaves a temp file the next atomic write in the folder removes)."""

    def __init__(self, folder: Path, system_prompt: str | None = None, with_system_prompt: bool = False) -> None:
        self.folder = folder
        self.extra = {"system_prompt": system_prompt} if with_system_prompt else None
        self._stack: contextlib.ExitStack | None = None
        self._fh: TextIO | None = None

    def add(self, rows: Iterable[Mapping[str, object]]) -> None:
        for row in rows:
            fh = self._fh if self._fh is not None else self._open()
            if self.extra is not None:  # upstream's --log-sys-prompt: the system prompt in every per-sample row
                row = {**row, **self.extra}
            fh.write(dumps(jsonable(row)) + "\n")

    def add_lines(self, lines: Iterable[str]) -> None:
        """Rows written already as this log writes a row (``dumps(jsonable(row))``, each line ending in a newline:
        lmms-eval's process writes its log so), kept as they are unless every row takes the system prompt."""
        if self.extra is not None:
            self.add(json.loads(line) for line in lines)
            return
        for line in lines:
            fh = self._fh if self._fh is not None else self._open()
            fh.write(line)

    def _open(self) -> TextIO:
        stack = contextlib.ExitStack()
        tmp = stack.enter_context(atomic_path(self.folder / f"samples_{time.strftime('%Y%m%dT%H%M%S')}.jsonl"))
        # the atomic_path temp file, renamed into place by commit() (closed by the stack)
        self._fh = stack.enter_context(open(tmp, "w", encoding="utf-8"))  # noqa: SIM115 (atomic temp file)
        self._stack = stack
        return self._fh

    def commit(self) -> None:
        """The rows so far become the task's log file (renamed into place)."""
        if self._stack is not None:
            stack, self._stack, self._fh = self._stack, None, None
            stack.close()

    def discard(self) -> None:
        """Drop the spool without writing the log (an error while writing it)."""
        if self._stack is not None:
            stack, self._stack, self._fh = self._stack, None, None
            with contextlib.suppress(Exception):
                stack.__exit__(RuntimeError, RuntimeError("discarded"), None)
