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
from dataclasses import dataclass
from pathlib import Path

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


class PersistedScores:
    """The persisted scores of a store made under one scoring key, found by (doc hash, answer hash). Every line is
    checked as the files are read (a damaged, cut or foreign line is passed over; of several good lines for the same
    doc and answer the first is kept); what is held per score is its index columns and where its parsed row is in
    the mapped file (``take`` hands it out), not the row."""

    def __init__(self, files: StoreLayout, scoring: str, columns: int | None = None) -> None:
        self._maps: list[mmap.mmap] = []
        self._columns = columns  # the size of the index columns a line must carry (None: any)
        self._at: dict[tuple[int, int], tuple[int, int, int, bytes]] = {}
        self.scoring = scoring
        key = scoring.encode()
        prefix = _HEAD + key + b'"'
        for path in files.score_files():
            try:
                with open(path, "rb") as fh:
                    view = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):  # removed meanwhile, or empty: its scores are made again
                continue
            self._maps.append(view)
            self._index(len(self._maps) - 1, view, prefix)

    def _index(self, number: int, buf: mmap.mmap, prefix: bytes) -> None:
        at, n, size = self._at, len(prefix), self._columns
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
                    ident = int(buf[start + _D:start + _D + _HEX], 16), int(buf[start + _M:start + _M + _HEX], 16)
                except ValueError:
                    continue
                if ident not in at:
                    at[ident] = (number, got[1], end - 1 - got[1], got[0])

    def __len__(self) -> int:
        return len(self._at)

    def has(self, sha: int, mark: int) -> bool:
        return (sha, mark) in self._at

    def take(self, sha: int, mark: int) -> tuple[bytes, bytes]:
        """(index columns, parsed row) persisted for this doc and answer under this scoring key (``has``)."""
        number, offset, length, columns = self._at[(sha, mark)]
        return columns, self._maps[number][offset:offset + length]

    def close(self) -> None:
        for view in self._maps:
            view.close()
        self._maps.clear()


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
