"""Scoring that follows the answers: a task's parsed.jsonl and its metrics brought up to date for the samples whose
answer or doc changed since they were scored; every other row is kept as it is (its bytes are copied).

Beside parsed.jsonl, ``.parsed.index`` holds per row what it was scored from (the doc hash, and a mark of the stored
answer: the hash of its line, of its failed request's line, or none) and what the task's metrics and usage totals are
made of (``tasks.scoring.ScoreColumns``, tokens, latency, attempts). Its header names the scoring the rows were made
under (``store_scoring.scoring_key``) and the parsed.jsonl they are (size and mtime). A resume re-scores exactly the
samples whose mark or doc hash changed and those new to the selection; another scoring key, a parsed.jsonl written by
anything else, or no index (a store from before the index) re-scores the whole selection, once.

A sample to score whose answer has a score persisted as it landed (``store.scores``, written by
``score.checkpoint``: a run killed before its task's scoring leaves them) under the same scoring key, doc hash and
answer line takes that row and its index columns instead of being scored again (``Followed.rescored`` counts only
the rows scored here); a line that does not hold its check is passed over.

parsed.jsonl is written in one streaming pass into a temp file renamed into place: never held whole, never seen half
written; the index is written after it. The task metrics are computed from the index's columns in selection order, so
a resume gives, bit for bit, the numbers of a full re-score.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import orjson

from medvision_bm.data.docs import RunDoc
from medvision_bm.io import atomic_path
from medvision_bm.score.store_scoring import score_sample, scoring_key
from medvision_bm.store.freshness import segments_read_ns
from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.records import AnswerRecord, ParsedRow, Usage
from medvision_bm.store.samples import StoreState, line_hash
from medvision_bm.store.scores import PersistedScore, PersistedScores
from medvision_bm.tasks.scoring import (
    DEFAULT_METRIC_PATH,
    SAMPLE_METRICS,
    STATUS_CODES,
    ScoreColumns,
    ScoreMemo,
    aggregate_columns,
    protocol_settings,
)
from medvision_bm.tasks.upstream_parse import SampleStatus

INDEX_FORMAT = 1
#: One row of the index: what the parsed row was made from, where it ends in parsed.jsonl, and its task-metric and
#: usage columns (metrics: the family's ``SAMPLE_METRICS`` in order, NaN where none; the rest of the 5 unused).
METRIC_COLUMNS = 5
ROW = np.dtype([("sha", "<u8"), ("mark", "<u8"), ("end", "<u8"), ("metrics", "<f8", (METRIC_COLUMNS,)), ("latency", "<f8"),
                ("in_tok", "<i8"), ("out_tok", "<i8"), ("reason_tok", "<i8"), ("attempts", "<i8"),
                ("status", "u1"), ("success", "u1"), ("near_zero", "u1"), ("length_cut", "u1")])
NO_ANSWER = 0  # the mark of a sample with neither an answer nor a failed request
_CODE = {s.value: i for i, s in enumerate(STATUS_CODES)}
_COPY_BLOCK = 16 << 20
_TAKE_CHUNK = 4096  # persisted rows taken into parsed.jsonl are read this many at a time


def _hash64(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def sha_code(doc_sha: object) -> int:
    """A doc hash as the index keeps it: the 16 hex digits as a number (any other text: a hash of it)."""
    if type(doc_sha) is str and len(doc_sha) == 16:
        try:
            return int(doc_sha, 16)
        except ValueError:
            pass
    return _hash64(str(doc_sha).encode())


def failure_mark(rec: AnswerRecord) -> int:
    """The mark of a failed request: a hash of its whole line (error, usage, attempts)."""
    return _hash64(b"F" + rec.line()) or 1


class Selection(Protocol):
    """A task's selected samples in selection order, as scoring reads them: every key and doc hash, and the samples
    themselves only where a row is scored (``rundocs``)."""

    @property
    def keys(self) -> Sequence[str]: ...

    @property
    def shas(self) -> Sequence[str]: ...

    def rundocs(self, positions: Sequence[int]) -> Iterable[RunDoc]: ...


@dataclass(frozen=True)
class ListSelection:
    """A selection held as RunDocs (`medvision-bm parse`, tests)."""

    items: Sequence[RunDoc]
    sha_of: dict[str, str]

    @property
    def keys(self) -> list[str]:
        return [rd.doc.key for rd in self.items]

    @property
    def shas(self) -> list[str]:
        return [self.sha_of[rd.doc.key] for rd in self.items]

    def rundocs(self, positions: Sequence[int]) -> list[RunDoc]:
        return [self.items[int(i)] for i in positions]

    def rundoc(self, position: int) -> RunDoc:
        return self.items[position]

    def close(self) -> None:
        """Nothing to close (``DocsFileSelection`` has a file)."""


def answer_marks(keys: Sequence[str], shas: Sequence[str], state: StoreState) -> tuple[np.ndarray, np.ndarray]:
    """(doc hash codes, answer marks) of every selected sample: no line is read (``StoreState.answer_hash``)."""
    answer_hash, failed = state.answer_hash, state.failed

    def mark(key: str, sha: str) -> int:
        h = answer_hash(key, sha)
        if h is None:
            rec = failed.get(key)
            h = NO_ANSWER if rec is None else failure_mark(rec)
        return h

    n = len(shas)
    return (np.fromiter(map(sha_code, shas), dtype=np.uint64, count=n),
            np.fromiter(map(mark, keys, shas), dtype=np.uint64, count=n))


# ------------------------------------------------------------------------------------------------- the index


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def read_index(path: Path, parsed: Path, key: str | None) -> np.ndarray | None:
    """The rows of an index written under scoring ``key`` (None: any) for the parsed.jsonl now at ``parsed``; None
    when there is none, it is damaged, or it describes another scoring or another parsed.jsonl."""
    try:
        with open(path, "rb") as fh:
            header = orjson.loads(fh.readline())
            if not isinstance(header, dict) or header.get("format") != INDEX_FORMAT \
                    or (key is not None and header.get("key") != key) \
                    or header.get("row") != ROW.itemsize or [header.get("parsed_size"), header.get("parsed_mtime_ns")] \
                    != list(_stat(parsed) or (None, None)):
                return None
            n = int(header.get("n", -1))
            if os.fstat(fh.fileno()).st_size - fh.tell() != ROW.itemsize * n:
                return None
            rows = np.fromfile(fh, dtype=ROW, count=n)  # read into the array itself: no second copy
    except (OSError, orjson.JSONDecodeError, ValueError, TypeError):
        return None
    if len(rows) and int(rows["end"][-1]) != header["parsed_size"]:
        return None
    return rows


def write_index(path: Path, key: str, rows: np.ndarray, parsed: Path) -> None:
    size, mtime = _stat(parsed) or (0, 0)
    header = {"format": INDEX_FORMAT, "key": key, "n": len(rows), "row": ROW.itemsize, "parsed_size": size,
              "parsed_mtime_ns": mtime}
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(orjson.dumps(header) + b"\n")
        fh.write(rows.tobytes())


def fill_row(rows: np.ndarray, i: int, family: str, row: ParsedRow, rec: AnswerRecord | None) -> None:
    """Row ``i`` of the index from a parsed row and the record it was scored from (``end`` is set by the writer)."""
    r = rows[i]
    r["status"] = _CODE[row.status]
    r["success"] = row.success
    r["near_zero"] = row.near_zero_gt
    names = SAMPLE_METRICS[family]
    if len(names) > METRIC_COLUMNS:
        raise ValueError(f"the {family} family has {len(names)} metric records; the score index holds "
                         f"{METRIC_COLUMNS} metric columns a row (score.follow.ROW)")
    r["metrics"] = [np.nan if (v := row.metrics.get(m)) is None else v for m in names] \
        + [np.nan] * (METRIC_COLUMNS - len(names))
    if rec is not None:
        usage = rec.usage
        r["in_tok"], r["out_tok"], r["reason_tok"] = (usage.get(k) or 0 for k in
                                                      ("input_tokens", "output_tokens", "reasoning_tokens"))
        r["latency"], r["attempts"] = rec.latency_s or 0.0, rec.attempts or 0
        r["length_cut"] = rec.finish_reason == "length"


# ----------------------------------------------------------------------------------------------- following


@dataclass
class Followed:
    """A task's scores after ``follow``: the index rows (selection order) and what was done to get them."""

    family: str
    rules: str
    rows: np.ndarray
    rescored: int  # rows scored now (the others were reused)
    rewritten: bool  # parsed.jsonl was written
    changed: int = 0  # rows whose status, success or metrics differ from the row kept before (or that had none)

    def columns(self) -> ScoreColumns:
        k = len(SAMPLE_METRICS[self.family])
        r = self.rows
        return ScoreColumns(r["status"], r["success"].astype(bool), r["near_zero"].astype(bool), r["metrics"][:, :k])

    def metrics(self) -> dict[str, Any]:
        """The task metrics (upstream's and our counts), as a full re-score makes them."""
        return aggregate_columns(self.family, self.columns(), self.rules)

    def status_counts(self) -> dict[SampleStatus, int]:
        """How many selected samples are in each status."""
        codes = np.bincount(self.rows["status"], minlength=len(STATUS_CODES))
        return {s: int(codes[_CODE[s]]) for s in STATUS_CODES}

    def counts(self) -> dict[str, int]:
        n = self.status_counts()
        return {"selected": len(self.rows), "answered": n[SampleStatus.OK] + n[SampleStatus.PARSE_FAILED],
                "request_failed": n[SampleStatus.REQUEST_FAILED], "pending": n[SampleStatus.MISSING]}

    def usage(self) -> Usage:
        """Token, latency and attempt totals over the selected samples' records (latency added in order)."""
        r = self.rows
        lat = r["latency"]
        return Usage.of_totals(input_tokens=int(r["in_tok"].sum()), output_tokens=int(r["out_tok"].sum()),
                               reasoning_tokens=int(r["reason_tok"].sum()),
                               latency_s=float(np.add.accumulate(np.concatenate(([0.0], lat)))[-1]),
                               attempts=int(r["attempts"].sum()), length_cut=int(r["length_cut"].sum()))


def _old_positions(old: np.ndarray, sha: np.ndarray) -> np.ndarray:
    """Per selected sample, the old row of the same doc hash (-1: none, or the old rows repeat a hash)."""
    if len(old) == len(sha) and np.array_equal(old["sha"], sha):
        return np.arange(len(sha), dtype=np.int64)
    osha = old["sha"]
    order = np.argsort(osha, kind="stable")
    srt = osha[order]
    if len(srt) > 1 and (srt[1:] == srt[:-1]).any():
        return np.full(len(sha), -1, dtype=np.int64)
    at = np.searchsorted(srt, sha)
    ok = at < len(srt)
    ok[ok] = srt[at[ok]] == sha[ok]
    return np.where(ok, order[np.minimum(at, len(srt) - 1)], -1).astype(np.int64)


def follow(files: StoreLayout, selection: Selection, state: StoreState, family: str, protocol: str, *,
           shard: str | None = None, parser: str | None = None, metric_path: str = DEFAULT_METRIC_PATH,
           memo: ScoreMemo | None = None, reuse: bool = True, inputs_ns: int | None = None) -> Followed:
    """Bring parsed.jsonl (``parsed.shard-<shard>.jsonl``) and its index up to date with the store's answers for
    ``selection``: score the samples whose answer or doc changed (a score the task run made already is taken from
    ``memo``), copy every other row. ``reuse=False`` scores every sample. ``inputs_ns``: the newest time of the
    store's docs and segments before ``state`` was read (``store.freshness.inputs_written_ns``); a parse found up to
    date is dated to it (``_date_parse``). Without it (a run's finish), such a parse is dated to the newest segment
    when ``state`` read every segment through (``store.freshness.segments_read_ns``): a run that appended only
    answers the parse holds already (a duplicate line) leaves the store's parse fresh."""
    settings = protocol_settings(protocol)
    use_parser, rules = parser or settings.parser, settings.rules
    key = scoring_key(family, protocol, parser, metric_path)
    parsed_path, index_path = files.parsed(shard), files.parsed_index(shard)
    keys, shas = selection.keys, selection.shas
    sha, mark = answer_marks(keys, shas, state)
    n = len(sha)
    old = read_index(index_path, parsed_path, key) if reuse else None
    # what the rows said before, under whichever scoring: changes are counted against it
    prior = old if old is not None else read_index(index_path, parsed_path, None)
    prior_pos = _old_positions(prior, sha) if prior is not None else None
    if old is not None:
        old_pos = _old_positions(old, sha)
        found = old_pos >= 0
        same = np.zeros(n, dtype=bool)
        same[found] = old["mark"][old_pos[found]] == mark[found]
    else:
        old_pos, same = np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=bool)
    if old is not None and len(old) == n and same.all() and (old_pos == np.arange(n)).all():
        if inputs_ns is None:  # (a run's finish) the segments as far as ``state`` read them, if that is all of them
            inputs_ns = segments_read_ns(files.folder, state.offsets)
        if inputs_ns is not None:
            _date_parse(parsed_path, index_path, key, old, inputs_ns)
        return Followed(family, rules, old, 0, False)  # nothing changed: no row is read or written
    rows = np.zeros(n, dtype=ROW)
    rows["sha"], rows["mark"] = sha, mark
    if old is not None and same.any():
        src = old[old_pos[same]]
        for name in ROW.names or ():  # a structured dtype: names is never None
            if name not in ("sha", "mark", "end"):
                rows[name][same] = src[name]
    todo = np.flatnonzero(~same)
    todo_pos: list[int] = todo.tolist()
    kept = PersistedScores(files, key, ROW.itemsize) if reuse and todo_pos else None
    # answers scored as they landed (a run killed before it wrote parsed.jsonl): the number of each one's persisted
    # score, -1 where there is none
    found = kept.find(sha[todo], mark[todo]) if kept is not None and len(kept) else np.full(len(todo), -1)
    taken = todo[found >= 0]
    changed = 0

    def scored() -> Iterator[bytes]:  # the new rows in selection order, each scored as the writer reaches it
        nonlocal changed
        fresh_pos: list[int] = todo[found < 0].tolist()
        fresh = zip(fresh_pos, selection.rundocs(fresh_pos))
        for first in range(0, len(todo_pos), _TAKE_CHUNK):  # persisted rows read a chunk at a time
            chunk = found[first:first + _TAKE_CHUNK]
            lines = kept.parsed_rows(chunk) if kept is not None else [None] * len(chunk)
            for pos, line in zip(todo_pos[first:first + _TAKE_CHUNK], lines):
                if line is not None:
                    yield line
                    continue
                at, rd = next(fresh)
                assert at == pos
                row, rec = _score_row(rd, shas[pos], state, family, use_parser, rules, metric_path, memo)
                fill_row(rows, pos, family, row, rec)
                changed += prior is None or prior_pos is None or prior_pos[pos] < 0 \
                    or _differs(rows[pos], prior[prior_pos[pos]])
                yield row.line()

    try:
        _write_parsed(parsed_path, rows, scored(), same, old_pos, old)
        if len(taken) and kept is not None:
            changed += _take_rows(rows, taken, kept.columns(found[found >= 0]), prior, prior_pos)
    finally:
        if kept is not None:
            kept.close()
    write_index(index_path, key, rows, parsed_path)
    return Followed(family, rules, rows, len(todo) - len(taken), True, changed)


def _date_parse(parsed: Path, index: Path, key: str, rows: np.ndarray, inputs_ns: int) -> None:
    """A parse found up to date with the docs and answers as they were at ``inputs_ns``, and older than that, is
    dated to that time (its bytes stay as they are) and its index rewritten to describe it: the freshness rule
    (``store.freshness``), which compares parsed.jsonl's time with the answers', then reads it as current instead of
    refreshing it on every summary and import."""
    st = _stat(parsed)
    if st is None or st[1] >= inputs_ns:
        return
    os.utime(parsed, ns=(os.stat(parsed).st_atime_ns, inputs_ns))
    write_index(index, key, rows, parsed)


def _score_row(rd: RunDoc, doc_sha: str, state: StoreState, family: str, parser: str, rules: str, metric_path: str,
               memo: ScoreMemo | None) -> tuple[ParsedRow, AnswerRecord | None]:
    sc, rec = score_sample(rd, doc_sha, state, parser, rules, metric_path, memo)
    return ParsedRow.of_score(rd.doc, sc, rules), rec


def _take_rows(rows: np.ndarray, positions: np.ndarray, columns: bytes, prior: np.ndarray | None,
               prior_pos: np.ndarray | None) -> int:
    """Set the rows at ``positions`` from persisted index rows (``columns``: theirs, joined in that order; all but
    where they end in parsed.jsonl); how many of them differ from the rows kept before (or had none)."""
    got = np.frombuffer(columns, dtype=ROW)
    for name in ROW.names or ():
        if name not in ("sha", "mark", "end"):  # the doc and answer hashes are what they were found by
            rows[name][positions] = got[name]
    if prior is None or prior_pos is None:
        return len(positions)
    before = prior_pos[positions]
    has = before >= 0
    new, old = rows[positions[has]], prior[before[has]]
    same = (new["status"] == old["status"]) & (new["success"] == old["success"]) \
        & ((new["metrics"] == old["metrics"]) | (np.isnan(new["metrics"]) & np.isnan(old["metrics"]))).all(axis=1)
    return int(np.count_nonzero(~has) + np.count_nonzero(~same))


def persisted_score(family: str, scoring: str, doc_sha: str, rec: AnswerRecord, row: ParsedRow) -> PersistedScore:
    """What a run persists of an answer it scored as it landed (``store.scores``): the parsed row and its index row,
    found again by the doc hash and the hash of the answer's stored line."""
    one = np.zeros(1, dtype=ROW)
    fill_row(one, 0, family, row, rec)
    one["sha"], one["mark"] = sha_code(doc_sha), line_hash(rec.line())
    return PersistedScore(scoring, int(one["sha"][0]), int(one["mark"][0]), one.tobytes(), row.line().rstrip(b"\n"))


def _differs(new: np.void, old: np.void) -> bool:
    """Whether a re-scored row says something else than the row it replaces: its status, success or metrics."""
    return bool(new["status"] != old["status"] or new["success"] != old["success"]
                or not np.array_equal(new["metrics"], old["metrics"], equal_nan=True))


def _write_parsed(path: Path, rows: np.ndarray, lines: Iterator[bytes], same: np.ndarray, old_pos: np.ndarray,
                  old: np.ndarray | None) -> None:
    """Write parsed.jsonl in selection order in one pass: the reused rows' bytes copied from the old file in runs
    (consecutive old rows), the new rows taken from ``lines`` (one per row that is not reused, in order: never held
    together); set ``rows["end"]``."""
    n = len(rows)
    ends = np.zeros(n, dtype=np.uint64)
    starts_old = np.zeros(n, dtype=np.uint64)
    if old is not None and same.any():
        old_end = old["end"]
        op = old_pos[same]
        starts_old[same] = np.where(op > 0, old_end[np.maximum(op - 1, 0)], 0)
        ends[same] = old_end[op]
    # runs of reused rows that follow each other in the old file are copied at once
    cont = np.zeros(n, dtype=bool)
    if n > 1:
        cont[1:] = same[1:] & same[:-1] & (old_pos[1:] == old_pos[:-1] + 1)
    with atomic_path(path) as tmp, open(tmp, "wb", buffering=0) as out, \
            (open(path, "rb", buffering=0) if old is not None and same.any() else nullcontext()) as src:
        written = 0
        pending = bytearray()  # new rows not written yet (a file without Python's buffer: copies go in between)
        i = 0
        is_same, follows = same.tolist(), cont.tolist()
        new_at: list[int] = []  # the new rows' positions and where each ends (set together once written)
        new_end: list[int] = []
        while i < n:
            if not is_same[i]:
                line = next(lines)
                pending += line
                written += len(line)
                new_at.append(i)
                new_end.append(written)
                if len(pending) >= _COPY_BLOCK:
                    _write_all(out, pending)
                i += 1
                continue
            j = i + 1
            while j < n and follows[j]:
                j += 1
            start, stop = int(starts_old[i]), int(ends[j - 1])
            _write_all(out, pending)
            _copy(src, out, start, stop - start)
            rows["end"][i:j] = ends[i:j] - np.uint64(start) + np.uint64(written)
            written += stop - start
            i = j
        _write_all(out, pending)
        rows["end"][new_at] = new_end


def _write_all(out: io.FileIO, data: bytearray) -> None:
    done = 0
    with memoryview(data) as view:
        while done < len(view):
            done += out.write(view[done:])
    data.clear()


def _copy(src: io.FileIO | None, dst: io.FileIO, offset: int, count: int) -> None:
    """``count`` bytes of ``src`` from ``offset`` appended to ``dst`` (in the kernel where it can)."""
    assert src is not None  # the old file is open whenever a row of it is reused (``_write_parsed``)
    fd_in, fd_out = src.fileno(), dst.fileno()
    done = 0
    copy_range = getattr(os, "copy_file_range", None)
    while done < count and copy_range is not None:
        try:
            got = copy_range(fd_in, fd_out, count - done, offset + done)
        except OSError:  # another file system, an old kernel: plain reads and writes
            break
        if got <= 0:
            break
        done += got
    while done < count:
        chunk = os.pread(fd_in, min(_COPY_BLOCK, count - done), offset + done)
        if not chunk:
            raise OSError(f"parsed.jsonl ended before byte {offset + count} while it was copied")
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd_out, view):]
        done += len(chunk)


def store_rows(files: StoreLayout, rows: Sequence[ParsedRow], shas: Sequence[str], state: StoreState, family: str,
               protocol: str, *, parser: str | None = None, metric_path: str = DEFAULT_METRIC_PATH) -> Followed:
    """Write rows scored already (a whole selection, in order; `medvision-bm parse`) as parsed.jsonl and its index."""
    keys = [r.key for r in rows]
    sha, mark = answer_marks(keys, shas, state)
    index = np.zeros(len(rows), dtype=ROW)
    index["sha"], index["mark"] = sha, mark
    for i, (row, doc_sha) in enumerate(zip(rows, shas)):
        fill_row(index, i, family, row, state.answer(row.key, doc_sha) or state.failed.get(row.key))
    parsed_path = files.parsed()
    _write_parsed(parsed_path, index, (row.line() for row in rows), np.zeros(len(rows), bool),
                  np.full(len(rows), -1, dtype=np.int64), None)
    write_index(files.parsed_index(), scoring_key(family, protocol, parser, metric_path), index, parsed_path)
    return Followed(family, protocol_settings(protocol).rules, index, len(rows), True)
