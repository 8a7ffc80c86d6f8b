"""The scores a run persists as its answers land: ``scores/<writer>.jsonl``, one line per scored answer, appended in
bounded checkpoints, so that a resume after a kill scores only the answers that have none.

A line names what its score was made from: the scoring key (parser, rules, metric path, versions: whatever besides
the doc and the answer a parsed row depends on), the doc hash and the hash of the stored answer's line. It carries
the parsed.jsonl row and the index columns scoring made of it, and a check of all of it. A line is taken only for the
very same scoring key, doc hash and answer hash; a line of another format, a damaged line (its check fails) and a
torn last line are passed over, never trusted. What the line's fields mean belongs to the scoring (``score.follow``);
this module only writes and finds them.

    {"v":1,"s":"<scoring key, 32 hex>","d":"<doc hash, 16 hex>","m":"<answer hash, 16 hex>","c":"<check, 16 hex>",
     "r":"<the index columns, base64>","p":<the parsed.jsonl row>}
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from medvision_bm.store.layout import StoreLayout

SCORE_LINE_FORMAT = 1
_HEAD = b'{"v":%d,"s":"' % SCORE_LINE_FORMAT
_KEY_LEN, _HEX = 32, 16
# byte offsets of the fixed-width fields of a line
_D = len(_HEAD) + _KEY_LEN + len(b'","d":"')
_M = _D + _HEX + len(b'","m":"')
_C = _M + _HEX + len(b'","c":"')
_R = _C + _HEX + len(b'","r":"')
_READ_BLOCK = 8 << 20


def _check(scoring: bytes, sha: int, mark: int, tail: bytes) -> bytes:
    h = hashlib.blake2b(scoring, digest_size=8)
    h.update(sha.to_bytes(8, "little") + mark.to_bytes(8, "little"))
    h.update(tail)
    return h.hexdigest().encode()


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
        tail = b'","r":"' + base64.b64encode(self.columns) + b'","p":' + self.parsed + b"}"
        return (_HEAD + key + b'","d":"%016x","m":"%016x","c":"' % (self.sha, self.mark)
                + _check(key, self.sha, self.mark, tail) + tail + b"\n")

    @classmethod
    def from_line(cls, line: bytes) -> PersistedScore | None:
        """The score of a stored line (without its newline); None for a line of another format, a damaged or torn
        one."""
        if not line.startswith(_HEAD) or len(line) < _R + 2 or not line.endswith(b"}"):
            return None
        try:
            key = line[len(_HEAD):len(_HEAD) + _KEY_LEN]
            sha, mark = int(line[_D:_D + _HEX], 16), int(line[_M:_M + _HEX], 16)
            tail = line[_C + _HEX:]
            if _check(key, sha, mark, tail) != line[_C:_C + _HEX]:
                return None
            cols, sep, parsed = tail[len(b'","r":"'):-1].partition(b'","p":')
            if not sep:
                return None
            return cls(key.decode(), sha, mark, binascii.a2b_base64(cols, strict_mode=True), parsed)
        except (ValueError, binascii.Error):  # not hex, not base64
            return None


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(offset, line without its newline) of every complete line of ``path``, read a block at a time."""
    with open(path, "rb", buffering=0) as fh:
        base, rest = 0, b""
        while block := fh.read(_READ_BLOCK):
            data = rest + block
            start = 0
            while (end := data.find(b"\n", start)) >= 0:
                yield base + start, data[start:end]
                start = end + 1
            base += start
            rest = data[start:]
        # a last line without its newline is one a kill cut short: never taken


class PersistedScores:
    """The persisted scores of a store made under one scoring key, found by (doc hash, answer hash): where each
    line is, not the lines themselves (``take`` reads one back and checks it: a damaged line is found, never taken).
    Of several lines for the same doc and answer, the first is the one found."""

    def __init__(self, files: StoreLayout, scoring: str) -> None:
        self.paths = files.score_files()
        self._fds: dict[int, int] = {}
        self._at: dict[tuple[int, int], tuple[int, int, int]] = {}
        prefix = _HEAD + scoring.encode() + b'"'
        for number, path in enumerate(self.paths):
            try:
                for offset, line in _lines(path):
                    if line.startswith(prefix) and len(line) > _R:  # checked when taken (``take``)
                        self._at.setdefault((int(line[_D:_D + _HEX], 16), int(line[_M:_M + _HEX], 16)),
                                            (number, offset, len(line)))
            except OSError:  # a file removed meanwhile: its scores are made again
                continue
        self.scoring = scoring

    def __len__(self) -> int:
        return len(self._at)

    def has(self, sha: int, mark: int) -> bool:
        return (sha, mark) in self._at

    def take(self, sha: int, mark: int) -> PersistedScore | None:
        """The score persisted for this doc and answer under this scoring key, if any (read back and checked)."""
        at = self._at.get((sha, mark))
        if at is None:
            return None
        number, offset, length = at
        try:
            fd = self._fds.get(number)
            if fd is None:
                fd = self._fds[number] = os.open(self.paths[number], os.O_RDONLY)
            line = os.pread(fd, length, offset)
        except OSError:
            return None
        got = PersistedScore.from_line(line)
        return got if got is not None and (got.scoring, got.sha, got.mark) == (self.scoring, sha, mark) else None

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


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
