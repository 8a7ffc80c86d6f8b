"""Stale stores brought up to date in memory for a summary: only the samples whose answers landed after the store's
parsed.jsonl was written (a run killed mid-task) are re-scored, through the runner's own scoring path; nothing is
written (`medvision-bm parse` stores it)."""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from medvision_bm.io import iter_jsonl
from medvision_bm.score.store_scoring import score_store
from medvision_bm.store.discovery import StoreRef
from medvision_bm.store.freshness import Refreshable
from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.records import AnswerRecord, DocRow, NewerRecord, ParsedRow, RecordError
from medvision_bm.tasks.scoring import DEFAULT_METRIC_PATH
from medvision_bm.tasks.upstream_parse import SampleStatus


@dataclass
class Refreshed:
    """What a stale store's parsed.jsonl lacks: the re-scored rows of the samples answered since it was written
    (parsed.jsonl's row format), and the lines skipped in the segments written since."""

    ref: StoreRef
    segments: list[Path]  # every segment, in the store's reading order (by name)
    new: set[str]  # the segments written after parsed.jsonl
    rows: list[ParsedRow] = field(default_factory=list)
    changed: set[str] = field(default_factory=set)
    bad_lines: int = 0
    foreign_lines: int = 0
    duplicates: int = 0
    new_records: dict[str, list[AnswerRecord]] = field(default_factory=dict)
    old_status: dict[str, str] = field(default_factory=dict)  # changed key -> its status in parsed.jsonl
    index_of: dict[str, int] = field(default_factory=dict)  # changed key -> its index (docs.jsonl's order)
    metric_path: str = DEFAULT_METRIC_PATH  # the path parsed.jsonl was scored on (the new rows follow it)


class _Answers:
    """The answers of a few samples, as ``score_store`` reads a store (``tasks.store_scoring.AnswerLookup``)."""

    def __init__(self) -> None:
        self.ok: dict[tuple[str, str | None], AnswerRecord] = {}  # (key, doc_sha) -> first ok record
        self.failed: dict[str, AnswerRecord] = {}  # key -> latest failed record

    def answer(self, key: str, doc_sha: str) -> AnswerRecord | None:
        return self.ok.get((key, doc_sha))


def _lines_with(paths: list[str], keys: set[str]) -> dict[str, list[bytes]]:
    """Per file, in file order, the lines that hold one of ``keys`` as a JSON string (any JSON spacing): one
    vectorised pre-filter over every file (polars, Aho-Corasick); callers parse the lines found and check the key
    and the store exactly."""
    import polars as pl  # heavy: only a summary of stale stores searches files this way

    if not paths or not keys:
        return {}
    patterns = [orjson.dumps(k).decode("utf-8") for k in keys]
    frame = pl.scan_csv(paths, has_header=False, separator="\x1f", quote_char=None, schema={"line": pl.Utf8},
                        include_file_paths="_f", encoding="utf8-lossy", truncate_ragged_lines=True,
                        glob=False) \
        .filter(pl.col("line").str.contains_any(patterns)).collect()
    out: dict[str, list[bytes]] = {}
    for f, line in frame.select("_f", "line").iter_rows():
        out.setdefault(f, []).append(line.encode("utf-8"))
    return out


def changes_since_parse(ref: StoreRef, since: Refreshable,
                        metric_path: str = DEFAULT_METRIC_PATH) -> Refreshed:
    """First step of bringing a refreshable store up to date (``store.freshness``: only answers were added since its
    parse): read the segments written after parsed.jsonl (they hold the answers since) and name the samples they
    touch (``changed``; the caller keeps those of the selection, with their status in parsed.jsonl:
    ``old_status``)."""
    segs = StoreLayout(ref.folder).segments()
    out = Refreshed(ref, segs, {str(s) for s in segs if since.is_new(s)}, metric_path=metric_path)

    def bad(lineno: int, text: str) -> None:
        out.bad_lines += 1

    for seg in segs:
        if str(seg) not in out.new:
            continue
        recs = out.new_records.setdefault(str(seg), [])
        for obj in iter_jsonl(seg, on_bad_line=bad):
            try:
                rec = AnswerRecord.from_json(obj)
            except RecordError:
                rec = None
            except NewerRecord as exc:  # named with its file, as every reader of a store names it
                raise NewerRecord(f"{seg}: {exc}") from None
            if rec is None or rec.answer_signature != ref.answer_signature:
                out.foreign_lines += 1
                continue
            recs.append(rec)
            out.changed.add(rec.key)
    return out


def _docs_by_bisection(path: Path, wanted: dict[str, int]) -> dict[str, DocRow] | None:
    """docs.jsonl rows of ``wanted`` (key -> index), found by bisection over the file, which the runner writes sorted
    by (index, key): a few lines read per key, never the whole file. None when a key is not where that order puts it
    (another writer's order, a damaged line): the caller searches the file instead."""
    out: dict[str, DocRow] = {}
    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            size = len(mm)

            def line_at(start: int) -> tuple[int, DocRow]:
                end = mm.find(b"\n", start)
                end = size if end < 0 else end
                return end, DocRow.from_json(orjson.loads(mm[start:end]))  # RecordError is a ValueError

            for key, index in wanted.items():
                target, lo, hi = (index, key), 0, size
                while lo < hi:  # lo: the start of the first line not before the target
                    start = mm.rfind(b"\n", 0, (lo + hi) // 2) + 1
                    start = max(start, lo)
                    end, rec = line_at(start)
                    if rec.order < target:
                        lo = end + 1
                    else:
                        hi = start
                if lo >= size:
                    return None
                _, rec = line_at(lo)
                if rec.key != key:
                    return None
                out[key] = rec
    except (OSError, ValueError):  # mmap of an empty file, a line that is not JSON (orjson's error is a ValueError)
        return None
    return out


def refresh_stores(pending: list[Refreshed]) -> list[Refreshed | None]:
    """Re-score, in every pending store, only the samples its newer segments touch: through the runner's own path
    (``score_store``) on every record the store holds for them (all segments in the store's reading order: by name,
    lines in order; the first ``ok`` record of the current ``doc_sha`` wins, the latest failure is kept). Their doc
    rows are found by bisection of docs.jsonl (``index_of``: key -> index); the older segments are searched, in one
    vectorised pass over all stores, only for the samples whose older records can matter (parsed.jsonl counted an
    answer or a failure for them, and no newer answer of the current doc settles it). A store comes back None (re-score
    it whole) when a doc row or an answer its parsed.jsonl counted is not found again."""
    work = [p for p in pending if p.changed]
    docs_of: dict[int, dict[str, DocRow]] = {}
    search = []
    for n, p in enumerate(work):
        rows = _docs_by_bisection(StoreLayout(p.ref.folder).docs, {k: p.index_of.get(k, 0) for k in p.changed})
        if rows is None:
            search.append(n)
        else:
            docs_of[n] = rows
    if search:
        found = _lines_with([str(StoreLayout(work[n].ref.folder).docs) for n in search],
                            set().union(*(work[n].changed for n in search)))
        for n in search:
            rows = {}
            for line in found.get(str(StoreLayout(work[n].ref.folder).docs), []):
                try:
                    rec = DocRow.from_json(orjson.loads(line))
                except (orjson.JSONDecodeError, RecordError):
                    continue
                if rec.key in work[n].changed:
                    rows[rec.key] = rec
            docs_of[n] = rows
    need_old: dict[int, set[str]] = {}
    for n, p in enumerate(work):
        shas = {k: r.doc_sha for k, r in docs_of[n].items()}
        settled = {r.key for recs in p.new_records.values() for r in recs
                   if r.ok and r.key in shas and r.doc_sha == shas[r.key]}
        need_old[n] = {k for k in p.changed if _answered(p.old_status.get(k))
                       or (p.old_status.get(k) == SampleStatus.REQUEST_FAILED and k not in settled)}
    paths = [str(s) for n, p in enumerate(work) if need_old[n] for s in p.segments if str(s) not in p.new]
    found = _lines_with(paths, set().union(*need_old.values())) if paths else {}
    results: list[Refreshed | None] = []
    n = 0
    for p in pending:
        if not p.changed:
            results.append(p)
            continue
        results.append(_rescore_changed(p, found, docs_of[n], need_old[n]))
        n += 1
    return results


def _answered(status: str | None) -> bool:
    return status in (SampleStatus.OK, SampleStatus.PARSE_FAILED)


def _rescore_changed(p: Refreshed, found: dict[str, list[bytes]], rows: dict[str, DocRow],
                     need_old: set[str]) -> Refreshed | None:
    sig = p.ref.answer_signature
    state = _Answers()
    n_all: dict[tuple[str, str | None], int] = {}
    n_old: dict[tuple[str, str | None], int] = {}
    for seg in p.segments:
        name = str(seg)
        if name in p.new:
            recs = [r for r in p.new_records.get(name, []) if r.key in p.changed]
        else:
            recs = []
            for line in found.get(name, []):
                try:
                    rec = AnswerRecord.from_line(line)
                except RecordError:
                    continue
                except NewerRecord as exc:
                    raise NewerRecord(f"{name}: {exc}") from None
                if rec.key in need_old and rec.answer_signature == sig:
                    recs.append(rec)
        for rec in recs:  # the runner's reading rule (store.samples.SampleStore.read), for these samples only
            key, sha = rec.key, rec.doc_sha
            if rec.ok:
                state.ok.setdefault((key, sha), rec)
                n_all[(key, sha)] = n_all.get((key, sha), 0) + 1
                if name not in p.new:
                    n_old[(key, sha)] = n_old.get((key, sha), 0) + 1
            else:
                state.failed[key] = rec
    # further ok records of one sample: those the newer segments add (the older ones were counted at the last parse)
    p.duplicates = sum(n - 1 for n in n_all.values()) - sum(n - 1 for n in n_old.values())
    if set(rows) != p.changed or any(r.legacy for r in rows.values()):
        return None
    chosen = sorted(rows.values(), key=lambda r: r.order)
    shas = {r.key: r.doc_sha for r in chosen}
    for key in p.changed:  # an answer parsed.jsonl counted must be found again
        if _answered(p.old_status.get(key)) and state.answer(key, shas[key]) is None:  # type: ignore[arg-type]
            return None
    try:
        rundocs = [r.rundoc() for r in chosen]
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    _, p.rows = score_store(rundocs, shas, state, metric_path=p.metric_path)  # type: ignore[arg-type]
    p.new_records = {}
    return p
