"""The scores a run persists as its answers land: ``scores/<writer>.jsonl``, one line per scored answer, appended in
bounded checkpoints, so that a resume after a kill scores only the answers that have none.

A line names what its score was made from: the scoring key (parser, rules, metric path, versions: whatever besides
the doc and the answer a parsed row depends on), the doc hash and the hash of the stored answer's line. It carries
the parsed.jsonl row and the index columns scoring made of it, and a check of all of it. A line is taken only for the
very same scoring key, doc hash and answer hash; a line of another format, a damaged line (its check fails) and a
torn last line are passed over, never trusted. What the line's fields mean belongs to the scoring (``score.follow``);
this module only writes and finds them.

    {"v":1,"s":"<scoring key, 32 hex>","d":"<doc hash, 16 hex>","m":"<answer hash, 16 hex>","c":"<CRC-32, 8 hex>",
     "r":"<the index columns, base64>","p":<the parsed.jsonl row>}
"""

from __future__ import annotations

import binascii
import mmap
import os
import time
import zlib
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from medvision_bm.store.layout import StoreLayout

SCORE_LINE_FORMAT = 1
_HEAD = b'{"v":%d,"s":"' % SCORE_LINE_FORMAT
_KEY_LEN, _HEX, _CHECK = 32, 16, 8
# byte offsets of the fixed-width fields of a line
_D = len(_HEAD) + _KEY_LEN + len(b'","d":"')
_M = _D + _HEX + len(b'","m":"')
_C = _M + _HEX + len(b'","c":"')
_T = _C + _CHECK  # the tail: '","r":"<columns>","p":<row>}'
_R, _P = b'","r":"', b'","p":'


def _check(head: bytes, tail: bytes) -> bytes:
    """The check of a line: a CRC-32 of everything but the check itself (it finds a damaged or cut line)."""
    return b"%08x" % zlib.crc32(tail, zlib.crc32(head))


def _head(scoring: bytes, sha: int, mark: int) -> bytes:
    """A line up to its check (``"c":"`` included)."""
    return _HEAD + scoring + b'","d":"%016x","m":"%016x","c":"' % (sha, mark)


def _parse(buf: bytes | mmap.mmap, view: memoryview, start: int, end: int) -> tuple[bytes, int] | None:
    """(index columns, where the row starts) of the line ``buf[start:end]`` (``view``: a memoryview of ``buf``), if
    its check holds; nothing of the line is copied but its columns."""
    t = start + _T
    if end - t < len(_R) + len(_P) + 3 or buf[t:t + len(_R)] != _R or buf[end - 1:end] != b"}" \
            or b"%08x" % zlib.crc32(view[t:end], zlib.crc32(view[start:start + _C])) != buf[start + _C:t]:
        return None
    sep = buf.find(_P, t + len(_R), end)  # base64 holds no quote: the first one ends the columns
    if sep < 0:
        return None
    try:
        return binascii.a2b_base64(view[t + len(_R):sep], strict_mode=True), sep + len(_P)
    except (ValueError, binascii.Error):
        return None


@dataclass(frozen=True, slots=True)
class PersistedScore:
    """One scored answer: the index columns (``columns``, opaque here) and the parsed.jsonl row (``parsed``, a JSON
    object without its newline) made under scoring key ``scoring`` from doc hash ``sha`` and answer hash ``mark``."""

    scoring: str
    sha: int
    mark: int
    columns: bytes
    parsed: bytes

    def line(self) -> bytes:
        """The stored line, with its newline."""
        key = self.scoring.encode()
        if len(key) != _KEY_LEN:
            raise ValueError(f"a scoring key has {_KEY_LEN} hex digits, not {len(key)}")
        head = _head(key, self.sha, self.mark)
        tail = _R + binascii.b2a_base64(self.columns, newline=False) + _P + self.parsed + b"}"
        return head + _check(head, tail) + tail + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> PersistedScore | None:
        """The score of a stored line (without its newline); None for a line of another format, a damaged or torn
        one."""
        if not line.startswith(_HEAD) or len(line) < _T:
            return None
        try:
            key = line[len(_HEAD):len(_HEAD) + _KEY_LEN].decode("ascii")
            sha, mark = int(line[_D:_D + _HEX], 16), int(line[_M:_M + _HEX], 16)
        except ValueError:  # not hex
            return None
        got = _parse(line, memoryview(line), 0, len(line)) if line[:_C] == _head(key.encode(), sha, mark) else None
        return None if got is None else cls(key, sha, mark, got[0], line[got[1]:-1])


#: The look-up key of a persisted score: (doc hash, answer hash), sorted as a pair.
IDENT = np.dtype([("sha", "<u8"), ("mark", "<u8")])
_BLOCK = 4 << 20  # score files are read this much at a time
_SPAN_SLACK = 1 << 20  # ``parsed_rows`` reads a span of rows at once when it is at most this much over twice them


class PersistedScores:
    """The persisted scores of a store made under one scoring key, found by (doc hash, answer hash). Every line is
    checked as the files are read (a damaged, cut or foreign line is passed over; of several good lines for the same
    doc and answer the first is kept); what is held per score is a few packed numbers (its hashes, where its parsed
    row is in the mapped file) and its index columns in one buffer, about 60 bytes besides the columns, not the row
    and no Python object (a million scores: tens of MB)."""

    def __init__(self, files: StoreLayout, scoring: str, columns: int | None = None) -> None:
        self._files: list[BinaryIO] = []  # read in blocks, each row read back by its offset: nothing stays mapped
        self._columns = columns  # the size of the index columns a line must carry (None: any)
        self.scoring = scoring
        key = scoring.encode()
        prefix = _HEAD + key + b'"'
        found = _Found()
        for path in files.score_files():
            try:
                fh = open(path, "rb")  # noqa: SIM115 (closed by close())
            except OSError:  # removed meanwhile: its scores are made again
                continue
            self._files.append(fh)
            self._index(len(self._files) - 1, fh, prefix, found)
        self._ident, self._where, self._cols = found.packed()

    def _index(self, number: int, fh: BinaryIO, prefix: bytes, found: _Found) -> None:
        n, size = len(prefix), self._columns
        base, carry = 0, b""  # the file offset of the block's first byte; the unfinished line of the last block
        while block := fh.read(_BLOCK):
            buf = carry + block
            pos = 0
            with memoryview(buf) as view:
                # a last line without its newline is one a kill cut short: never taken
                while (end := buf.find(b"\n", pos)) >= 0:
                    start, pos = pos, end + 1
                    if buf[start:start + n] != prefix:
                        continue
                    got = _parse(buf, view, start, end)
                    if got is None or (size is not None and len(got[0]) != size):
                        continue
                    try:
                        sha = int(buf[start + _D:start + _D + _HEX], 16)
                        mark = int(buf[start + _M:start + _M + _HEX], 16)
                    except ValueError:
                        continue
                    found.add(sha, mark, number, base + got[1], end - 1 - got[1], got[0])
            carry, base = buf[pos:], base + pos

    def __len__(self) -> int:
        return len(self._ident)

    def find(self, shas: np.ndarray, marks: np.ndarray) -> np.ndarray:
        """For each (doc hash, answer hash) pair, the number of its score (for ``columns`` and ``parsed``), or -1."""
        want = np.empty(len(shas), dtype=IDENT)
        want["sha"], want["mark"] = shas, marks
        if not len(self._ident):
            return np.full(len(want), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self._ident, want), len(self._ident) - 1)
        return np.where(self._ident[at] == want, at, -1).astype(np.int64)

    def columns(self, numbers: np.ndarray) -> bytes:
        """The index columns of the scores ``numbers`` (``find``), joined in that order."""
        where = self._where[numbers]
        size = self._columns
        if size:  # every score's columns are this long: gathered as fixed-size records, no object per score
            return np.frombuffer(self._cols, dtype=f"V{size}")[where["col"] // size].tobytes()
        cols = self._cols
        return b"".join(bytes(cols[c:c + w]) for c, w in zip(where["col"].tolist(), where["cols"].tolist()))

    def parsed_rows(self, numbers: np.ndarray) -> list[bytes | None]:
        """The parsed.jsonl rows (each with its newline) of the scores ``numbers`` (``find``; -1: None), in that
        order. The rows of one file are read with one read of the span they lie in when that span is not much more
        than they are (a resume's rows follow each other there), else one read each: what is read is bounded by
        the rows asked for."""
        out: list[bytes | None] = [None] * len(numbers)
        have = np.flatnonzero(numbers >= 0)
        if not len(have):
            return out
        where = self._where[numbers[have]]
        files, offsets, lengths = where["file"], where["offset"], where["length"]
        for number in np.unique(files).tolist():
            at = np.flatnonzero(files == number)
            off, length = offsets[at], lengths[at]
            lo, hi = int(off.min()), int((off + length).max())
            fd = self._files[number].fileno()
            places = have[at].tolist()
            if hi - lo <= 2 * int(length.sum()) + _SPAN_SLACK:
                buf = os.pread(fd, hi - lo, lo)
                starts = (off - lo).tolist()
                for k, a, b in zip(places, starts, (off - lo + length).tolist()):
                    out[k] = buf[a:b] + b"\n"
            else:
                for k, a, n in zip(places, off.tolist(), length.tolist()):
                    out[k] = os.pread(fd, n, a) + b"\n"
        return out

    def close(self) -> None:
        for fh in self._files:
            fh.close()
        self._files.clear()


_WHERE = np.dtype([("file", "<i4"), ("cols", "<i4"), ("offset", "<i8"), ("length", "<i8"), ("col", "<i8")])


class _Found:
    """The good lines of the score files as they are read, packed (typed arrays, one columns buffer)."""

    def __init__(self) -> None:
        self.sha, self.mark = array("Q"), array("Q")
        self.file, self.cols = array("i"), array("i")
        self.offset, self.length, self.col = array("q"), array("q"), array("q")
        self.buffer = bytearray()

    def add(self, sha: int, mark: int, file: int, offset: int, length: int, columns: bytes) -> None:
        self.sha.append(sha)
        self.mark.append(mark)
        self.file.append(file)
        self.offset.append(offset)
        self.length.append(length)
        self.col.append(len(self.buffer))
        self.cols.append(len(columns))
        self.buffer += columns

    def packed(self) -> tuple[np.ndarray, np.ndarray, bytearray]:
        """(identities sorted, where each is, the columns buffer): of equal identities the first read is kept."""
        n = len(self.sha)
        ident = np.empty(n, dtype=IDENT)
        ident["sha"] = np.frombuffer(self.sha, dtype=np.uint64) if n else 0
        ident["mark"] = np.frombuffer(self.mark, dtype=np.uint64) if n else 0
        where = np.empty(n, dtype=_WHERE)
        for name in ("file", "cols", "offset", "length", "col"):
            where[name] = np.frombuffer(getattr(self, name), dtype=where.dtype[name]) if n else 0
        order = np.argsort(ident, kind="stable")  # equal identities stay in reading order: the first one leads
        ident, where = ident[order], where[order]
        first = np.ones(n, dtype=bool)
        first[1:] = ident[1:] != ident[:-1]
        return ident[first], where[first], self.buffer


class ScoreAppender:
    """Appends a writer's persisted scores to its file in checkpoints: buffered, written with one ``write`` once
    ``every`` lines or ``seconds`` have gathered, and at ``close``; a kill loses at most one checkpoint's scores."""

    def __init__(self, path: Path, *, every: int = 512, seconds: float = 1.0) -> None:
        self.path = path
        self.every, self.seconds = every, seconds
        self._buf: list[bytes] = []
        self._since = time.monotonic()
        self._fd = -1
        self.written = 0

    def add(self, score: PersistedScore) -> None:
        self._buf.append(score.line())
        if len(self._buf) >= self.every or time.monotonic() - self._since >= self.seconds:
            self.flush()

    def due(self) -> bool:
        """Whether lines have waited ``seconds`` (an idle writer flushes them)."""
        return bool(self._buf) and time.monotonic() - self._since >= self.seconds

    def flush(self) -> None:
        self._since = time.monotonic()
        if not self._buf:
            return
        if self._fd < 0:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            if os.fstat(self._fd).st_size:  # a torn last line: the next one starts on its own
                os.write(self._fd, b"\n")
        data = b"".join(self._buf)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        self.written += len(self._buf)
        self._buf.clear()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
