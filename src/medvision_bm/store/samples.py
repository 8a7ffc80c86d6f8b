"""The sample store: one folder per (model, task, answer signature), answers appended as they land.

Its files and their names are in ``store.layout``, their records in ``store.records``. A sample counts as answered
when any segment holds an ``ok`` record with its key and its current ``doc_sha`` (the first such record wins; later
ones are counted as duplicates). Failed records are retried unless the run keeps them. Torn last lines and foreign
lines are skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from medvision_bm.errors import UserError
from medvision_bm.io import (
    JsonlAppender,
    atomic_path,
    clean_stale_temps,
    file_lock,
    read_json,
    write_json_atomic,
    write_lines_atomic,
)
from medvision_bm.jsontypes import JsonValue
from medvision_bm.models.base import GenResult
from medvision_bm.store import layout as names
from medvision_bm.store.claims import sweep_dead_claims
from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.records import (
    STORE_SCHEMA,
    AnswerRecord,
    DocRow,
    NewerRecord,
    ParsedRow,
    RecordError,
    ResultsRecord,
    Selection,
    SignatureRecord,
    answer_identity,
    refuse_newer_line,
    refuse_newer_lines,
)
from medvision_bm.store.signature import selected_index

__all__ = ["STORE_SCHEMA", "DocsWritten", "SampleStore", "StoreState", "StoreWriter", "line_hash",
           "read_doc_sums"]
_READ_BLOCK = 4 << 20  # bytes of a segment read at a time (a few times this is held while a block is read)


#: How an ok record's place is packed into one int: byte offset (40 bits), line length (32 bits), segment number
#: (24 bits), a 32-bit check of its (key, doc hash), then the line's 64-bit hash above them. A million answers
#: take one small int each, not their lines.
_OFF_BITS, _LEN_BITS, _SEG_BITS, _CHECK_BITS = 40, 32, 24, 32
_LEN_SHIFT, _SEG_SHIFT = _OFF_BITS, _OFF_BITS + _LEN_BITS
_CHECK_SHIFT = _SEG_SHIFT + _SEG_BITS
_HASH_SHIFT = _CHECK_SHIFT + _CHECK_BITS
_CHECK_MASK = (1 << _CHECK_BITS) - 1


def _sample_id(key: str, doc_sha: str) -> tuple[int, int]:
    """The in-memory id of a (key, doc hash) and a 32-bit check of it, from two differently mixed hashes of the
    pair (per process: never stored). Ids that collide keep the later pair under its exact name instead. A doc hash
    that is not a string (None: a record or docs row written without one) counts as its text, as it always has."""
    sha = doc_sha if type(doc_sha) is str else str(doc_sha)
    return hash((key, sha)), hash((sha, key)) & _CHECK_MASK


_MAX_OPEN_SEGMENTS = 32  # segment files a state keeps open for reading answers back


def line_hash(line: bytes) -> int:
    """The 64-bit hash of a stored line that a state keeps (and the scoring digest is made of)."""
    return int.from_bytes(hashlib.blake2b(line, digest_size=8).digest(), "little")


@dataclass
class StoreState:
    """What a store holds: per key and doc hash the first ok record, per key the latest failed record.

    Ok records are kept as where their line is (segment, offset, length) and the line's hash, and read back from the
    segment when asked for (``answer_line``, ``answer``): a million answers take tens of MB, not the few hundred MB
    of their lines nor the several GB of parsed dicts. A line read back is checked against its hash; a segment
    rewritten since it was read (an import replaces its segment) makes the state read the store again.
    ``offsets`` says how far each segment was read, so ``SampleStore.refresh`` reads only what concurrent writers
    appended since.
    """

    ok: dict[int, int] = field(default_factory=dict)  # id of (key, doc_sha) -> place and hash of the first ok record
    ok_exact: dict[str, int] = field(default_factory=dict)  # "key\0doc_sha" -> the same, for ids that collided
    failed: dict[str, AnswerRecord] = field(default_factory=dict)  # key -> the latest failed record
    body_bad_lines: int = 0
    foreign_lines: int = 0
    duplicates: int = 0
    offsets: dict[str, int] = field(default_factory=dict)  # segment file name -> bytes read
    torn_tails: dict[str, bool] = field(default_factory=dict)  # segment file name -> ends in an unreadable line
    segments: list[str] = field(default_factory=list)  # segment number -> file name
    segment_numbers: dict[str, int] = field(default_factory=dict, repr=False)  # file name -> segment number
    store: SampleStore | None = field(default=None, repr=False)  # where the lines are read back from
    _open: dict[int, int] = field(default_factory=dict, repr=False)  # segment number -> open fd (LRU order)

    @property
    def bad_lines(self) -> int:
        return self.body_bad_lines + sum(self.torn_tails.values())

    def segment_number(self, name: str) -> int:
        number = self.segment_numbers.get(name)
        if number is None:
            number = self.segment_numbers[name] = len(self.segments)
            self.segments.append(name)
        return number

    @property
    def n_ok(self) -> int:
        """Samples (key and doc hash) with a stored successful answer."""
        return len(self.ok) + len(self.ok_exact)

    def _place(self, key: str, doc_sha: str) -> int | None:
        ident, check = _sample_id(key, doc_sha)
        place = self.ok.get(ident)
        if place is not None and (place >> _CHECK_SHIFT) & _CHECK_MASK == check:
            return place
        return self.ok_exact.get(f"{key}\0{doc_sha}") if self.ok_exact else None

    def _add(self, key: str, doc_sha: str, place: int) -> bool:
        """Record the place of an ok record; False when this sample already has one (a duplicate)."""
        ident, check = _sample_id(key, doc_sha)
        place |= check << _CHECK_SHIFT
        first = self.ok.get(ident)
        if first is None:
            self.ok[ident] = place
            return True
        if (first >> _CHECK_SHIFT) & _CHECK_MASK == check:
            return False
        exact = f"{key}\0{doc_sha}"  # another sample with the same id: kept under its exact name
        if exact in self.ok_exact:
            return False
        self.ok_exact[exact] = place
        return True

    def answer_hash(self, key: str, doc_sha: str) -> int | None:
        """The hash of the stored successful answer's line for this very sample, if any (no file is read)."""
        place = self._place(key, doc_sha)
        return None if place is None else place >> _HASH_SHIFT

    def answer_line(self, key: str, doc_sha: str) -> bytes | None:
        """The raw line of the stored successful answer for this very sample, if any (read from its segment)."""
        place = self._place(key, doc_sha)
        if place is None:
            return None
        line = self._read_line(place)
        if line is None and self.store is not None:  # the segment changed under us: read the store again
            self._reread()
            place = self._place(key, doc_sha)
            line = None if place is None else self._read_line(place)
        return line

    def answer(self, key: str, doc_sha: str) -> AnswerRecord | None:
        """The stored successful answer for this very sample (same key and doc hash), if any."""
        raw = self.answer_line(key, doc_sha)
        return None if raw is None else AnswerRecord.from_line(raw)

    def answered(self, key: str, doc_sha: str) -> bool:
        return self._place(key, doc_sha) is not None

    def _read_line(self, place: int) -> bytes | None:
        """The line at ``place`` if it is still there (same hash), else None (the segment was removed or rewritten).
        Other errors (too many open files, I/O errors) are raised, never taken for a changed store."""
        if self.store is None:
            return None
        seg = (place >> _SEG_SHIFT) & ((1 << _SEG_BITS) - 1)
        length = (place >> _LEN_SHIFT) & ((1 << _LEN_BITS) - 1)
        offset = place & ((1 << _OFF_BITS) - 1)
        fd = self._open.pop(seg, -1)
        if fd < 0:
            try:
                fd = os.open(self.store.layout.samples / self.segments[seg], os.O_RDONLY)
            except FileNotFoundError:
                return None
            if len(self._open) >= _MAX_OPEN_SEGMENTS:
                os.close(self._open.pop(next(iter(self._open))))
        self._open[seg] = fd  # most recently used last
        raw = os.pread(fd, length, offset)
        if len(raw) != length or line_hash(raw) != place >> _HASH_SHIFT:
            return None
        return raw

    def _reread(self) -> None:
        assert self.store is not None
        self.close()
        fresh = self.store.read()
        for name in ("ok", "ok_exact", "failed", "body_bad_lines", "foreign_lines", "duplicates", "offsets",
                     "torn_tails", "segments", "segment_numbers"):
            setattr(self, name, getattr(fresh, name))

    def close(self) -> None:
        """Close the segment files kept open for reading answers back (reopened when needed)."""
        while self._open:
            _, fd = self._open.popitem()
            with contextlib.suppress(OSError):
                os.close(fd)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


class SampleStore:
    def __init__(self, folder: str | Path, answer_signature: str) -> None:
        self.folder = Path(folder)
        self.layout = StoreLayout(self.folder)
        self.answer_signature = answer_signature

    @property
    def samples_dir(self) -> Path:
        return self.layout.samples

    def init(self, signature_inputs: Mapping[str, JsonValue]) -> None:
        """Create the folder and its signature file; refuse a folder that belongs to another signature.

        Also removes what killed runs left here: temp files of atomic writes and the claims of dead runs."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for sub in (self.folder, self.layout.lmms_log):
            clean_stale_temps(sub)
        sweep_dead_claims(self.layout)
        sig_path = self.layout.signature
        if sig_path.exists():
            try:
                existing = self.signature()
            except (OSError, ValueError) as exc:  # RecordError is a ValueError; a newer file is a UserError
                raise UserError(f"store {self.folder}: {sig_path.name} cannot be read ({exc}); restore it, or move "
                                "the folder away to ask its samples again") from None
            if existing.answer_signature != self.answer_signature:
                raise RuntimeError(f"store {self.folder} belongs to answer signature "
                                   f"{existing.answer_signature}, not {self.answer_signature}")
        else:
            SignatureRecord(self.answer_signature, signature_inputs).write(sig_path)

    def signature(self) -> SignatureRecord:
        """The store's signature.json (OSError or ValueError when it is missing or unreadable)."""
        return SignatureRecord.read(self.layout.signature)

    def writing(self) -> contextlib.AbstractContextManager[None]:
        """The store's writer lock (``.write.lock``): a writer that rewrites a segment whole (the import) holds it
        from reading what is there to scoring what it wrote, so two writers never merge from the same old state."""
        return file_lock(self.folder / ".write.lock")

    def read(self) -> StoreState:
        state = StoreState(store=self)
        self.refresh(state, collect_keys=False)
        return state

    def refresh(self, state: StoreState, collect_keys: bool = True) -> set[str]:
        """Read what the segments gained since ``state`` was read; returns the keys of the records read (nothing
        when ``collect_keys`` is False: a first read of a million answers need not hold a million more keys).

        Segments are read in blocks (a million answers never sit in memory twice)."""
        seen: set[str] = set()
        collect = seen if collect_keys else None
        if not self.samples_dir.is_dir():
            return seen
        if state.store is None:
            state.store = self
        for seg in self.layout.segments():
            start = state.offsets.get(seg.name, 0)
            seg_no = state.segment_number(seg.name)
            carry = b""
            try:
                with open(seg, "rb") as fh:
                    fh.seek(start)
                    while block := fh.read(_READ_BLOCK):
                        data = carry + block if carry else block
                        end = data.rfind(b"\n") + 1
                        self._ingest(state, data[:end], collect, seg_no, start)
                        start += end
                        carry = data[end:]
            except FileNotFoundError:
                continue
            if carry.strip():
                # a line without its newline: a writer is writing it, or one was killed mid-line. A complete record
                # is taken (a killed writer never appends again); anything else is counted and read again later.
                try:
                    orjson.loads(carry)
                except orjson.JSONDecodeError:
                    state.torn_tails[seg.name] = True
                else:
                    self._ingest(state, carry, collect, seg_no, start)
                    start += len(carry)
                    state.torn_tails.pop(seg.name, None)
            else:
                state.torn_tails.pop(seg.name, None)
            state.offsets[seg.name] = start
        return seen

    def _ingest(self, state: StoreState, body: bytes, seen: set[str] | None, seg_no: int, base: int) -> None:
        """Take the records of ``body``, which starts at byte ``base`` of segment number ``seg_no``."""
        sig = self.answer_signature
        seg_bits = seg_no << _SEG_SHIFT
        pos = base
        for raw in body.split(b"\n"):
            at = pos
            pos += len(raw) + 1
            line = raw.strip()
            if not line:
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                state.body_bad_lines += 1
                continue
            if not isinstance(obj, dict):
                state.body_bad_lines += 1
                continue
            try:
                ident = answer_identity(obj)
            except NewerRecord as exc:  # a newer version's line: refused, never read as another run's
                raise NewerRecord(f"{self.layout.samples / state.segments[seg_no]}: {exc}") from None
            if ident is None or ident[1] != sig:
                state.foreign_lines += 1
                continue
            key, _, ok, sha = ident
            if seen is not None:
                seen.add(key)
            if ok:
                at += len(raw) - len(raw.lstrip())
                place = (line_hash(line) << _HASH_SHIFT) | seg_bits | (len(line) << _LEN_SHIFT) | at
                if not state._add(key, str(sha), place):
                    state.duplicates += 1
            else:
                try:
                    state.failed[key] = AnswerRecord.from_json(obj)
                except RecordError:
                    state.foreign_lines += 1

    def writer(self, label: str = "") -> StoreWriter:
        return StoreWriter(JsonlAppender(self.layout.samples / names.segment_name(label)), self.answer_signature)

    # ------------------------------------------------------------ docs snapshot
    def write_docs(self, rows: Iterable[DocRow], selection_digest: str | None = None,
                   selection: Selection | None = None) -> DocsWritten:
        """Merge rows into docs.jsonl under a lock (shards share it), in (index, key) order.

        ``selection`` (the run's recorded selection, ``Selection.chosen``) says which rows ``rows`` speaks
        for: a row already there at an index of that selection whose key ``rows`` does not hold is a sample the data
        no longer has (removed, or re-keyed) and is set apart in docs.gone.jsonl, never scored again; a row that comes
        back leaves it. Without ``selection`` (the import) rows are only added or replaced. Every line written is
        hashed into .docs.sums, so an edited row is known. A docs row of a newer version is refused, never rewritten.

        ``selection_digest`` names the rows (a hash of their keys, indices, doc hashes, protocols and variants): when
        docs.jsonl already holds that selection and has not changed since, nothing is read or written and ``rows`` is
        never iterated. Says whether docs.jsonl was rewritten and which rows were set apart.
        """
        path = self.layout.docs
        memo_path = self.layout.docs_memo
        with file_lock(self.layout.docs_lock):
            memo = _docs_memo(memo_path, path)
            if selection_digest is not None and path.exists() and selection_digest in memo \
                    and self.layout.docs_sums.is_file():  # (the runner refused a newer row before: refuse_newer)
                return DocsWritten(False)
            created = not path.exists()
            sums: list[int] = []
            rest = _write_new_in_order(path, rows, sums) if created else rows
            if rest is None:  # a new docs.jsonl, every row in order: written one line at a time
                _write_sums(self.layout.docs_sums, sums)
                if selection_digest is not None:
                    st = path.stat()
                    write_json_atomic(memo_path, {"size": st.st_size, "mtime_ns": st.st_mtime_ns,
                                                  "selections": [selection_digest]})
                return DocsWritten(True)
            merged: dict[str, bytes] = {}
            index_of: dict[str, tuple[int, str]] = {}  # key -> (index, key): the file's order
            for rec_line in _raw_lines(path) if path.exists() else ():
                try:
                    rec = orjson.loads(rec_line)
                    key = rec.get("key")
                except (orjson.JSONDecodeError, AttributeError):
                    continue  # a corrupt line: dropped on rewrite (the sample is selected again below)
                refuse_newer_line(DocRow, rec, path)
                if isinstance(key, str):
                    merged[key] = rec_line
                    index = rec.get("index")
                    index_of[key] = (index if isinstance(index, int) else 0, key)
            gone = _read_gone(self.layout.docs_gone)
            changed = created
            given: set[str] = set()
            for row in rest:
                line = row.line()
                key = row.key
                given.add(key)
                if merged.get(key) != line:
                    merged[key] = line
                    index_of[key] = row.order
                    changed = True
            apart: list[str] = []
            if selection is not None:
                covered = selected_index(selection)
                apart = sorted((k for k in merged if k not in given and covered(index_of[k][0])),
                               key=index_of.__getitem__)
            back = [k for k in given if k in gone]
            if apart or back:
                for key in back:
                    del gone[key]
                for key in apart:
                    gone[key] = merged.pop(key)
                _write_gone(self.layout.docs_gone, gone, index_of)
                changed = True
            if changed:
                order = sorted(merged, key=index_of.__getitem__)
                write_lines_atomic(path, (merged[k] + b"\n" for k in order))
                memo = []
            _write_sums(self.layout.docs_sums, [line_hash(line) for line in merged.values()])
            if selection_digest is not None:
                st = path.stat()
                memo = [*[d for d in memo if d != selection_digest][-15:], selection_digest]
                write_json_atomic(memo_path, {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "selections": memo})
            return DocsWritten(changed, apart)

    def refuse_newer(self, shard: str | None = None) -> None:
        """Raise ``NewerRecord`` naming the file when any record this store holds besides its answers (which
        ``read`` refuses) was written by a newer version: signature.json, results.json, docs.jsonl,
        docs.gone.jsonl, parsed.jsonl (and a shard's). A writer calls it before it rewrites any of them."""
        files = self.layout
        if files.signature.is_file():
            with contextlib.suppress(OSError, ValueError):  # a damaged file: init says so
                self.signature()
        for results in {files.results(), files.results(shard)}:
            ResultsRecord.read(results)
        for lines, cls in ((files.docs, DocRow), (files.docs_gone, DocRow), (files.parsed(), ParsedRow),
                           (files.parsed(shard), ParsedRow)):
            refuse_newer_lines(lines, cls)


@dataclass(frozen=True)
class DocsWritten:
    """What ``write_docs`` did: whether docs.jsonl was rewritten, and the keys of the rows it set apart (samples
    the data no longer has, in docs.jsonl's order)."""

    rewritten: bool
    set_apart: list[str] = field(default_factory=list)


def read_doc_sums(files: StoreLayout) -> np.ndarray | None:
    """The sorted hashes (``line_hash``) of the docs.jsonl lines as the suite last wrote them; None for a store
    written before they were kept (or whose sums are damaged): its rows cannot be checked."""
    try:
        with open(files.docs_sums, "rb") as fh:
            header = orjson.loads(fh.readline())
            n = int(header["n"]) if isinstance(header, dict) and header.get("format") == _SUMS_FORMAT else -1
            if n < 0 or os.fstat(fh.fileno()).st_size - fh.tell() != 8 * n:
                return None
            return np.fromfile(fh, dtype="<u8", count=n)
    except (OSError, ValueError, KeyError, TypeError):
        return None


_SUMS_FORMAT = 1


def _write_sums(path: Path, sums: list[int]) -> None:
    arr = np.sort(np.asarray(sums, dtype="<u8"))
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(orjson.dumps({"format": _SUMS_FORMAT, "n": len(arr)}) + b"\n")
        fh.write(arr.tobytes())


def _read_gone(path: Path) -> dict[str, bytes]:
    """The rows set apart so far, by key (a newer version's row refused)."""
    out: dict[str, bytes] = {}
    for line in _raw_lines(path) if path.is_file() else ():
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        refuse_newer_line(DocRow, rec, path)
        if isinstance(rec, dict) and isinstance(rec.get("key"), str):
            out[rec["key"]] = line
    return out


def _write_gone(path: Path, gone: dict[str, bytes], index_of: dict[str, tuple[int, str]]) -> None:
    if not gone:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    order = sorted(gone, key=lambda k: index_of.get(k, (0, k)))
    write_lines_atomic(path, (gone[k] + b"\n" for k in order))


def _write_new_in_order(path: Path, rows: Iterable[DocRow], sums: list[int]) -> Iterator[DocRow] | None:
    """Write a new docs.jsonl one line at a time while ``rows`` come in (index, key) order, no key twice: None when
    every row did (``sums`` then holds each line's hash); else the rows not written (the first out of order first),
    the ones before it in ``path``."""
    it = iter(rows)
    last: tuple[int, str] | None = None
    with atomic_path(path) as tmp, open(tmp, "wb", buffering=1 << 20) as fh:
        for row in it:
            if last is not None and row.order <= last:
                rest = itertools.chain([row], it)
                break
            line = row.line()
            fh.write(line + b"\n")
            sums.append(line_hash(line))
            last = row.order
        else:
            return None
    return rest


def _raw_lines(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        for raw in fh:
            line = raw.strip()
            if line:
                yield line


def _docs_memo(memo_path: Path, docs_path: Path) -> list[str]:
    """The selections docs.jsonl is known to hold (empty when docs.jsonl changed since the memo was written)."""
    try:
        memo = read_json(memo_path)
        st = docs_path.stat()
    except (OSError, ValueError):
        return []
    if not isinstance(memo, dict) or memo.get("size") != st.st_size or memo.get("mtime_ns") != st.st_mtime_ns:
        return []
    sel = memo.get("selections")
    return [d for d in sel if isinstance(d, str)] if isinstance(sel, list) else []


class StoreWriter:
    """Appends one record per finished request; flushed to the OS at once so a kill loses nothing stored."""

    def __init__(self, appender: JsonlAppender, answer_signature: str) -> None:
        self._appender = appender
        self.answer_signature = answer_signature
        self.name = appender.path.stem  # the segment's name (its claims use it too)
        self.engine: Mapping[str, JsonValue] | None = None  # the engine settings recorded with every answer (runner sets it)

    def append(self, result: GenResult, *, index: int, doc_sha: str) -> AnswerRecord:
        # an over-long answer was cut (limits.MAX_ANSWER_CHARS): the record says by how much
        rec = AnswerRecord.of_result(result, index=index, doc_sha=doc_sha, answer_signature=self.answer_signature,
                                     engine=self.engine)
        self._appender.append(rec.to_json())
        return rec

    def close(self) -> None:
        self._appender.close()
