"""Whether a store's parse (``parsed.jsonl`` and the ``results.json`` written with it) is current: the one rule the
report, the scorer and the importer decide it by.

A parse is *fresh* when it was made from the store's current answers and docs under the scoring asked for:
parsed.jsonl exists and ends with a whole line, results.json names that scoring, and neither docs.jsonl nor any
answer segment was written after parsed.jsonl; results.json, which every score rewrites, is newer than every
segment too (a score, or a run's finish, that finds every row up to date keeps parsed.jsonl's bytes and dates the
file to the answers it checked: ``score.follow``). A parse whose segments only gained
answers since is *refreshable*: its rows stand, and only the samples those segments touch need scoring again. Any
other parse is *stale* and the store is scored whole. All times are the file system's (no clock of this machine is
compared with a file server's), in nanoseconds; a segment written in the same tick as results.json counts as written
after it, so a coarse clock costs a refresh, never a stale score read as current.

A judged parse (``<store>/judged/<sig12>/``: its own parsed.jsonl and results.json, of the store's docs and answers)
is a parse of its store too, and the same rule decides it (``judged_parse_state``); it is never refreshed in memory,
so answers added since make it stale.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from medvision_bm.store.layout import DOCS, PARSED, RESULTS, JudgedLayout, StoreLayout
from medvision_bm.store.records import ResultsRecord

#: What the caller's scoring says of a results.json (None: there is none): whether its parse was made under it.
ScoringCheck = Callable[[ResultsRecord | None], bool]


@dataclass(frozen=True)
class Fresh:
    """The parse is of the store's current answers and docs under the scoring asked for."""


@dataclass(frozen=True)
class Stale:
    """The parse cannot be used: the store is scored whole (``reason`` says why, for a note)."""

    reason: str


@dataclass(frozen=True)
class Refreshable:
    """Only answers were added since the parse: the segments written after ``since_ns`` (parsed.jsonl's
    modification time) hold them."""

    since_ns: int

    def is_new(self, segment: Path) -> bool:
        """Whether ``segment`` was written since the parse (a missing one was not)."""
        return _mtime_ns(segment) > self.since_ns


ParseState = Fresh | Stale | Refreshable


def _mtime_ns(path: str | Path) -> int:
    """The file's modification time (0: there is no such file)."""
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return 0


def inputs_written_ns(folder: Path) -> int:
    """The newest modification time of the store's docs.jsonl and answer segments (0: none). Taken before a score
    reads them, it is the time a parse that score finds up to date is dated to (``score.follow``): a rule that reads
    parsed.jsonl's time then holds for a parse that had nothing to rewrite."""
    files = StoreLayout(folder)
    return max((_mtime_ns(p) for p in (files.docs, *files.segments())), default=0)


def segments_read_ns(folder: Path, offsets: Mapping[str, int]) -> int | None:
    """The newest modification time of the store's answer segments when a reader has read every byte of each of
    them (``offsets``: segment file name -> bytes read, ``store.samples.StoreState.offsets``), else None (a segment
    that gained bytes since, or one not read): a parse of what that reader read, found up to date, is dated to it
    (``score.follow``) as to ``inputs_written_ns``, and never past an answer it did not see. The docs are left out:
    a docs.jsonl written later still makes the parse stale."""
    newest = 0
    for seg in StoreLayout(folder).segments():
        try:
            st = os.stat(seg)
        except FileNotFoundError:
            continue
        if st.st_size != offsets.get(seg.name, -1):
            return None
        newest = max(newest, st.st_mtime_ns)
    return newest or None


def _whole_lines(path: str | Path) -> bool:
    """Whether the file is empty or ends with a newline (a copy cut short, or a file written by a writer that died,
    ends inside a row)."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        return size == 0 or os.pread(fh.fileno(), 1, size - 1) == b"\n"


@dataclass(frozen=True)
class ParsedFile:
    """A parsed.jsonl read once for both the rule and the reader: its modification time (0: there is no such file),
    taken before it was read, and its bytes (None: not read, a file that is not a regular one; ``error``: why it
    could not be read)."""

    mtime_ns: int
    data: bytes | None
    error: str | None = None


def read_parsed(path: str | Path) -> ParsedFile:
    """The parsed.jsonl at ``path`` as ``ParsedFile``: its time, then its whole bytes when it is a regular file."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return ParsedFile(0, None)
    if not stat.S_ISREG(st.st_mode):
        return ParsedFile(st.st_mtime_ns, None)
    try:
        with open(path, "rb", buffering=0) as fh:  # the whole file in one read, without a buffer
            return ParsedFile(st.st_mtime_ns, fh.readall())
    except OSError as exc:
        return ParsedFile(st.st_mtime_ns, None, str(exc.strerror or exc))


#: Why a parse older than some answers is stale (a store written before the refresh, or a judged parse).
ANSWERS_AFTER = "answers were written after parsed.jsonl"


def parse_state(folder: Path, scoring: ScoringCheck, results: ResultsRecord | None = None, *,
                read_results: bool = True, parsed: ParsedFile | None = None,
                segments: Sequence[Path] | None = None) -> ParseState:
    """The state of the store's parse at ``folder`` under ``scoring``. ``results``: the store's results.json read
    already (``read_results=False`` says it was, even when it is None); otherwise it is read here. ``parsed``: its
    parsed.jsonl read already (``read_parsed``), and ``segments``: its answer segments listed already
    (``StoreLayout.segments``), so that no file is read twice."""
    base = os.fspath(folder)  # the paths as text: a store's rule is taken once per store of a summary
    return _state(folder, os.path.join(base, DOCS), os.path.join(base, PARSED), os.path.join(base, RESULTS), scoring,
                  results, read_results, parsed, segments)


def judged_parse_state(folder: Path, judged: Path, scoring: ScoringCheck) -> Fresh | Stale:
    """The state of the judged parse in ``judged`` (``<store>/judged/<sig12>/``) of the store at ``folder`` under
    ``scoring``: the rule of ``parse_state`` with the judged folder's parsed.jsonl and results.json. A judged parse
    is never refreshed in memory: one that only lacks answers added since is stale, for the same reason."""
    files = JudgedLayout(judged)
    state = _state(folder, StoreLayout(folder).docs, files.parsed, files.results, scoring, None, True)
    return Stale(ANSWERS_AFTER) if isinstance(state, Refreshable) else state


def _state(folder: Path, docs: str | Path, parsed_path: str | Path, results_path: str | Path, scoring: ScoringCheck,
           results: ResultsRecord | None, read_results: bool, read: ParsedFile | None = None,
           segments: Sequence[Path] | None = None) -> ParseState:
    """The rule: the parse in ``parsed_path`` and ``results_path`` against the store's ``docs`` and the answer
    segments of the store at ``folder`` (``segments``: listed already)."""
    parsed = _mtime_ns(parsed_path) if read is None else read.mtime_ns
    if not parsed:
        return Stale("no parsed.jsonl")
    if read is not None and read.error is not None:
        return Stale(f"parsed.jsonl cannot be read ({read.error})")
    try:
        whole = _whole_lines(parsed_path) if read is None or read.data is None else read.data[-1:] in (b"", b"\n")
        if not whole:
            return Stale("parsed.jsonl ends inside a row")
    except OSError as exc:
        return Stale(f"parsed.jsonl cannot be read ({exc.strerror or exc})")
    if read_results and results is None:
        results = ResultsRecord.read(results_path)
    if not scoring(results):
        return Stale("results.json names another scoring than this version's")
    if _mtime_ns(docs) > parsed:
        return Stale("docs.jsonl was written after parsed.jsonl")
    listed = StoreLayout(folder).segments() if segments is None else segments
    newest = max((_mtime_ns(s) for s in listed), default=0)
    scored = _mtime_ns(results_path)
    if newest <= parsed and (results is None or scored > newest):
        return Fresh()
    if results is None or results.legacy_store:
        return Stale(ANSWERS_AFTER)
    return Refreshable(parsed)
