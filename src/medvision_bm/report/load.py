"""Read many stores into one polars frame per family without building a Python object per sample.

A store's ``parsed.jsonl`` is used when it is current (``store.freshness.parse_state`` under
``score.store_scoring.current_scoring``: made from the store's current answers and docs, and written by this
version's upstream scoring, and the rows carry their metric rules and path): scores made under older rules (a
negative A/D answer failed before scoring version 2) are never mixed in. A store whose segments only gained answers
since (a run killed mid-task: refreshable) keeps its parsed rows, and only the samples the newer segments touch are
re-scored (``rescore.refresh_stores``, one vectorised search over all such stores).
Otherwise the store is re-scored in memory from its raw answers, on the metric path its results.json records (stores
from before the upstream scoring are converted through ``data.docs.rundoc_from_store_row``). Nothing is written
either way, and the user is told to run `medvision-bm parse`. Every row carries what upstream groups it by, so
``docs.jsonl`` is read only by the sample browser.
"""

from __future__ import annotations

import functools
import gc
import io
import os
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import numpy as np
import polars as pl

from medvision_bm.report.groups import add_group_keys
from medvision_bm.score.refresh import Refreshed, changes_since_parse, refresh_stores
from medvision_bm.score.rescore import (
    StoreCounts,
    StoreProblem,
    expected_count,
    recorded_metric_path,
    rescore,
)
from medvision_bm.score.store_scoring import SCORING_VERSION, current_scoring
from medvision_bm.store.discovery import StoreRef, protocol_of
from medvision_bm.store.freshness import (
    ParsedFile,
    Refreshable,
    Stale,
    judged_parse_state,
    parse_state,
    read_parsed,
)
from medvision_bm.store.judged import JUDGE_PARSER_VERSION, JUDGED_DIR, pick_judged
from medvision_bm.store.layout import PARSED, RESULTS, JudgedLayout, StoreLayout
from medvision_bm.store.records import Counts, ParsedRow, ResultsRecord, refuse_newer_in, refuse_newer_lines
from medvision_bm.tasks.families import family_spec
from medvision_bm.tasks.scoring import SAMPLE_METRICS, protocol_settings
from medvision_bm.tasks.upstream_parse import SampleStatus

#: Columns every family's sample frame has besides its metrics.
BASE_COLUMNS = ("store", "index", "key", "task", "status", "success", "scored", "parser", "rules", "dataset",
                "label_name", "modality", "slice_dim", "metric_type", "metric_key")
#: The parsed answer's numbers (``ParsedRow.values``), a column of :func:`load`'s frames (not the judged ones'):
#: the sample browser draws them instead of parsing the answers again.
VALUES = "values"
#: The target as the parsed row holds it (``ParsedRow.target``), a column of :func:`load`'s frames too (upstream's
#: per-sample files write it).
TARGET = "target"
#: The detection target box (relative coordinates, lower-left origin) as columns.
TARGET_COLUMNS = ("tx0", "ty0", "tx1", "ty1")


#: Most bytes of a family's parsed.jsonl files held to be parsed at once (their rows in one read); past it the
#: files are scanned by path (``_scan_tolerant``), so a summary's memory does not grow with the files' size.
HELD_PARSE_BYTES = 128 * 2**20

_P = ParamSpec("_P")
_T = TypeVar("_T")


def collection_paused(stage: Callable[_P, _T]) -> Callable[_P, _T]:
    """``stage`` run with Python's cyclic garbage collector held off (as it was after): a stage that makes many small
    objects (per store, per row, per cell) would otherwise pay for full collections that walk every object
    summarize holds. What it makes holds no cycles to wait for; any it leaves are collected afterwards."""

    @functools.wraps(stage)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        was_on = gc.isenabled()
        gc.disable()
        try:
            return stage(*args, **kwargs)
        finally:
            if was_on:
                gc.enable()

    return run


def parsed_schema(family: str) -> dict[str, pl.DataType]:
    schema: dict[str, pl.DataType] = {
        "index": pl.Int64(), "key": pl.Utf8(), "status": pl.Utf8(), "success": pl.Boolean(), "parser": pl.Utf8(),
        "rules": pl.Utf8(), "near_zero_gt": pl.Boolean(), "dataset": pl.Utf8(), "label_name": pl.Utf8(),
        "modality": pl.Utf8(), "slice_dim": pl.Int64(), "metric_type": pl.Utf8(), "metric_key": pl.Utf8(),
        "metric_path": pl.Utf8(), "metrics": pl.Struct({m: pl.Float64() for m in SAMPLE_METRICS[family]}),
        # read to be checked as store.records.ParsedRow reads them (a file with a row of another type is unreadable)
        "target": pl.List(pl.Float64()), "values": pl.List(pl.Float64()), "label": pl.Int64(),
    }
    return schema


_UNREAD = object()  # StoreInfo.results before results.json was read


@dataclass
class StoreInfo:
    """A store as summarized: its reference, where its scores came from, its counts, parser and protocol."""

    id: int
    ref: StoreRef
    source: str  # "parsed.jsonl" | "re-scored in memory" | "re-scored in memory (legacy store)"
    counts: StoreCounts
    parser_version: str | None
    protocol: str = "current"
    legacy: bool = False  # written before the upstream data layer and scoring
    metric_path: str | None = None  # upstream's post-hoc or eval-time scoring (tasks.scoring.METRIC_PATHS)
    #: the store's results.json as load read it (``results_record``: read once per summarize, then passed down)
    results: ResultsRecord | object | None = field(default=_UNREAD, repr=False, compare=False)
    #: the store's answer segments as load listed them (None: not listed; ``answer_segments`` lists them then)
    segments: list[Path] | None = field(default=None, repr=False, compare=False)

    def answer_segments(self) -> list[Path]:
        """The store's answer segments in the order the store reads them: as load listed them, else listed now."""
        if self.segments is None:
            self.segments = StoreLayout(self.ref.folder).segments()
        return self.segments

    def results_record(self) -> ResultsRecord | None:
        """The store's results.json (None when it has none): the record load read, else read now."""
        if self.results is _UNREAD:
            self.results = ResultsRecord.read(StoreLayout(self.ref.folder).results())
        return self.results  # type: ignore[return-value]

    @property
    def complete(self) -> bool:
        """Every selected sample has an answer (parsed or not)."""
        return self.counts.answered == self.counts.selected

    def to_json(self) -> dict[str, Any]:
        r = self.ref
        return {"store": self.id, "label": r.label, "model": r.model, "task": r.task, "family": r.family,
                "tag": r.tag, "answer_signature": r.answer_signature, "folder": os.path.abspath(r.folder),
                "source": self.source, "parser_version": self.parser_version, "protocol": self.protocol,
                "metric_path": self.metric_path, "legacy": self.legacy, "complete": self.complete,
                **self.counts.to_json()}


@dataclass
class Loaded:
    """Per family one row per scored sample; plus the stores and the notes."""

    samples: dict[str, pl.DataFrame]
    stores: list[StoreInfo]
    notes: list[str] = field(default_factory=list)

    def store_frame(self) -> pl.DataFrame:
        ss = self.stores
        return pl.DataFrame({"store": [s.id for s in ss], "label": [s.ref.label for s in ss],
                             "model": [s.ref.model for s in ss], "task": [s.ref.task for s in ss],
                             "family": [s.ref.family for s in ss], "protocol": [s.protocol for s in ss]},
                            schema={"store": pl.Int64, "label": pl.Utf8, "model": pl.Utf8, "task": pl.Utf8,
                                    "family": pl.Utf8, "protocol": pl.Utf8})


def _store_counts(frame: pl.DataFrame, *extra: pl.Expr) -> dict[int, dict[str, Any]]:
    """Per store of a parsed frame: samples, successes, parse and request failures, pending (and ``extra``)."""
    per_store = frame.group_by("store").agg(
        pl.len().alias("n"), pl.col("success").sum().alias("success"),
        (pl.col("status") == SampleStatus.PARSE_FAILED.value).sum().alias("parse_failed"),
        (pl.col("status") == SampleStatus.REQUEST_FAILED.value).sum().alias("request_failed"),
        (pl.col("status") == SampleStatus.MISSING.value).sum().alias("pending"), *extra)
    names = per_store.columns
    return {row[0]: dict(zip(names, row)) for row in zip(*(per_store[c].to_list() for c in names))}


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _skipped_lines(results: ResultsRecord | None) -> StoreCounts:
    """The skipped-line counts the last run or parse recorded (None when there is no results.json)."""
    c = (results.counts if results is not None else None) or Counts()
    return StoreCounts(bad_lines=c.store_bad_lines, foreign_lines=c.store_foreign_lines,
                       duplicates=c.store_duplicates)


#: Characters polars' scanners take for a glob pattern: a path with one (a model folder named ``[x]``) is read as is.
_GLOB_CHARS = frozenset("*?[]{}")


def scan_rows(paths: list[str], schema: dict[str, pl.DataType], ids: list[int]) -> pl.DataFrame:
    """The JSON-lines files ``paths`` read in one scan with ``schema``, each row with its file's id (``store``)."""
    plain = [(p, i) for p, i in zip(paths, ids) if not _GLOB_CHARS.intersection(p)]
    parts = []
    if plain:
        frame = pl.scan_ndjson([p for p, _ in plain], schema=schema, include_file_paths="_file").collect()
        lookup = pl.DataFrame({"_file": [p for p, _ in plain], "store": [i for _, i in plain]},
                              schema={"_file": pl.Utf8, "store": pl.Int64})
        parts.append(frame.join(lookup, on="_file", how="left", maintain_order="left").drop("_file"))
    for p, i in zip(paths, ids):
        if _GLOB_CHARS.intersection(p):
            parts.append(pl.read_ndjson(io.BytesIO(Path(p).read_bytes()), schema=schema)
                         .with_columns(pl.lit(i, pl.Int64).alias("store")))
    return pl.concat(parts) if len(parts) > 1 else parts[0]


def _scan_tolerant(paths: list[str], schema: dict[str, pl.DataType],
                   ids: list[int]) -> tuple[pl.DataFrame | None, list[int]]:
    """Scan all files at once; if one is unreadable, scan them one by one and return the ids of the bad ones. A row
    of a newer version is refused naming its file (``NewerRecord``), never summarized as this version's."""
    if not paths:
        return None, []
    for p in paths:
        refuse_newer_lines(Path(p), ParsedRow)
    try:
        return scan_rows(paths, schema, ids), []
    except pl.exceptions.PolarsError:
        frames, bad = [], []
        for p, i in zip(paths, ids):
            try:
                frames.append(scan_rows([p], schema, [i]))
            except pl.exceptions.PolarsError:
                bad.append(i)
        return (pl.concat(frames) if frames else None), bad


def _scan_read(paths: list[str], data: list[bytes | None], schema: dict[str, pl.DataType],
               ids: list[int]) -> tuple[pl.DataFrame | None, list[int]]:
    """``_scan_tolerant`` of files read already (``data``, each whole lines): one parse of their bytes joined, each
    row given its file's id by the file's count of lines. Any file not read or not ending with a newline, or a parse
    that fails or finds fewer rows than lines (the reader skips a blank line: the rows are then not one per line),
    and the files are scanned by path instead (``_scan_tolerant``, its notes and its refusals)."""
    if not paths:
        return None, []
    whole = [d for d in data if d is not None]
    joined = b"".join(whole)
    if len(whole) == len(data) and joined and all(d.endswith(b"\n") for d in whole if d):
        if b'"v"' in joined:
            for p, d in zip(paths, whole):
                refuse_newer_in(d, Path(p), ParsedRow)
        counts = [d.count(b"\n") for d in whole]
        try:
            frame = pl.read_ndjson(io.BytesIO(joined), schema=schema)
        except pl.exceptions.PolarsError:
            frame = None
        if frame is not None and frame.height == sum(counts):
            store = pl.Series("store", np.repeat(np.asarray(ids, dtype=np.int64), counts), dtype=pl.Int64)
            return frame.with_columns(store), []
    return _scan_tolerant(paths, schema, ids)


def _flat(frame: pl.DataFrame, family: str, tasks: dict[int, str], values: bool = False) -> pl.DataFrame:
    """Metrics as columns (non-finite values as null), the scored flag, the task, the detection target box; the
    parsed answer's ``values`` and the ``target`` kept when asked (the sample browser draws the values, upstream's
    per-sample files write both)."""
    cols = [pl.col("metrics").struct.field(m) for m in SAMPLE_METRICS[family]]
    out = frame.with_columns(cols).drop("metrics", "label", *(() if values else ("values",))).with_columns(
        [pl.when(pl.col(m).is_finite()).then(pl.col(m)).otherwise(None).alias(m) for m in SAMPLE_METRICS[family]])
    out = out.with_columns((~pl.col("near_zero_gt").fill_null(False)).alias("scored"),
                           pl.col("store").replace_strict(tasks, default=None, return_dtype=pl.Utf8).alias("task"))
    if family_spec(family).has_boxes:
        t = pl.col("target")
        box = [t.list.get(i, null_on_oob=True).alias(c) for i, c in enumerate(TARGET_COLUMNS)]
        out = out.with_columns(box).with_columns(
            ((pl.col("tx1") - pl.col("tx0")) * (pl.col("ty1") - pl.col("ty0"))).abs().alias("box_area_ratio"))
        return out if values else out.drop(TARGET)
    return out if values else out.drop(TARGET)


def _refresh_all(frame: pl.DataFrame, items: list[tuple[int, StoreRef]], results_of: dict[int, ResultsRecord | None],
                 since: dict[int, Refreshable],
                 schema: dict[str, pl.DataType]) -> tuple[pl.DataFrame, dict[int, Refreshed], set[int]]:
    """Replace, in the scanned parsed rows, the rows of the samples answered since each store's parsed.jsonl was
    written (re-scored by ``rescore.refresh_stores``); the ids of the stores that need a full re-score instead
    (docs changed since, parsed by another parser than the protocol's, an answer not found again)."""
    parsers = dict(frame.filter(pl.col("store").is_in([i for i, _ in items])).group_by("store")
                   .agg(pl.col("parser").unique().sort().str.join(",")).iter_rows())
    gone: set[int] = set()
    pending: dict[int, Refreshed] = {}
    for i, r in items:
        default = protocol_settings(protocol_of(r, results_of[i])).parser
        p = (changes_since_parse(r, since[i], recorded_metric_path(results_of[i]))
             if parsers.get(i) == default else None)
        if p is None:
            gone.add(i)
        else:
            pending[i] = p
    touched = [(i, k) for i, p in pending.items() for k in p.changed]
    if touched:  # keep the samples of each store's selection, with their status in parsed.jsonl
        hits = pl.DataFrame(touched, schema={"store": pl.Int64, "key": pl.Utf8}, orient="row") \
            .join(frame.select("store", "key", "status", "index"), on=["store", "key"], how="inner")
        for p in pending.values():
            p.changed, p.old_status, p.index_of = set(), {}, {}
        for i, key, status, index in hits.iter_rows():
            pending[i].changed.add(key)
            pending[i].old_status[key] = status
            pending[i].index_of[key] = index if index is not None else 0
    refreshed: dict[int, Refreshed] = {}
    new_rows: list[dict[str, Any]] = []
    drop: list[tuple[int, str]] = []
    for i, res in zip(list(pending), refresh_stores(list(pending.values()))):
        if res is None:
            gone.add(i)
            continue
        refreshed[i] = res
        if res.rows:
            drop += [(i, k) for k in res.changed]
            new_rows += [{**{k: d.get(k) for k in schema}, "store": i} for d in (row.to_json() for row in res.rows)]
    if gone:
        frame = frame.filter(~pl.col("store").is_in(list(gone)))
    if drop:
        dropped = pl.DataFrame(drop, schema={"store": pl.Int64, "key": pl.Utf8}, orient="row")
        frame = pl.concat([frame.join(dropped, on=["store", "key"], how="anti"),
                           pl.DataFrame(new_rows, schema={**schema, "store": pl.Int64()})])
    return frame, refreshed, gone


def _overfull(frame: pl.DataFrame, results_of: dict[int, ResultsRecord | None]) -> set[int]:
    """The stores whose parsed.jsonl holds more rows than their last run's selection (``results.json`` ->
    ``selection``): they are re-scored from docs.jsonl, which says what to do about them."""
    out = set()
    for store, n in frame.group_by("store").len().iter_rows():
        rec = results_of.get(store)
        expected = expected_count(rec.selection) if rec is not None else None
        if expected is not None and n > expected:
            out.add(store)
    return out


@collection_paused
def load(refs: Sequence[StoreRef]) -> Loaded:
    """Scores of every store: per family a sample frame (BASE_COLUMNS, the family's metrics, upstream's ``group``
    key; detection also the target box and its area ratio), sorted by (store, index)."""
    notes: list[str] = []
    stores: list[StoreInfo] = []
    by_family: dict[str, list[tuple[int, StoreRef]]] = defaultdict(list)
    for i, ref in enumerate(refs):
        by_family[ref.family].append((i, ref))
    samples: dict[str, pl.DataFrame] = {}
    segments_of: dict[int, list[Path]] = {}  # each store's answer segments as listed once (StoreInfo.segments)
    stale_total = legacy_total = refreshed_total = 0
    for family, items in by_family.items():
        schema = parsed_schema(family)
        tasks = {i: r.task for i, r in items}
        # the paths as text: a Path built per store and file costs more than the file's read
        folder_of = {i: os.fspath(r.folder) for i, r in items}
        results_of = {i: ResultsRecord.read(os.path.join(folder_of[i], RESULTS)) for i, _ in items}
        current: list[tuple[int, StoreRef]] = []
        stale: list[tuple[int, StoreRef]] = []
        refreshable: dict[int, Refreshable] = {}  # stale only because answers landed after parsed.jsonl (a killed run)
        parsed_of: dict[int, ParsedFile] = {}  # each parsed.jsonl read once: for the rule and for the rows
        parsed_path: dict[int, str] = {}
        held = 0
        for i, r in items:
            segments_of[i] = StoreLayout(r.folder).segments()
            path = parsed_path[i] = os.path.join(folder_of[i], PARSED)
            parsed_of[i] = read_parsed(path)
            state = parse_state(r.folder, current_scoring, results_of[i], read_results=False, parsed=parsed_of[i],
                                segments=segments_of[i])
            held += len(parsed_of[i].data or b"")
            if held > HELD_PARSE_BYTES:  # too much to hold at once: the rows are scanned from the files instead
                parsed_of[i] = ParsedFile(parsed_of[i].mtime_ns, None)
            if isinstance(state, Refreshable):
                refreshable[i] = state
            (stale if isinstance(state, Stale) else current).append((i, r))
        frame, bad = _scan_read([parsed_path[i] for i, _ in current], [parsed_of[i].data for i, _ in current],
                                schema, [i for i, _ in current])
        parsed_of.clear()
        if bad:
            notes.extend(f"store {r.folder}: parsed.jsonl is unreadable; re-scored from the raw answers"
                         for i, r in current if i in bad)
        old_rows: set[int] = set()
        if frame is not None and frame.height:
            old_rows = set(frame.filter(pl.col("rules").is_null() | pl.col("parser").is_null()
                                        | pl.col("metric_path").is_null())["store"].to_list())
            # more rows than the run's selection: samples the data no longer has, kept by an older version's parse
            old_rows |= _overfull(frame, results_of)
            if old_rows:  # rows of an older parsed.jsonl format
                frame = frame.filter(~pl.col("store").is_in(list(old_rows)))
        stale += [(i, r) for i, r in current if i in bad or i in old_rows]
        current = [(i, r) for i, r in current if i not in bad and i not in old_rows]
        refreshed: dict[int, Refreshed] = {}
        if frame is not None and refreshable.keys() & {i for i, _ in current}:
            frame, refreshed, gone = _refresh_all(frame, [(i, r) for i, r in current if i in refreshable],
                                                  results_of, refreshable, schema)
            stale += [(i, r) for i, r in current if i in gone]
            current = [(i, r) for i, r in current if i not in gone]
        parts: list[pl.DataFrame] = []
        by_id: dict[int, dict[str, Any]] = {}
        if frame is not None and frame.height:
            parts.append(_flat(frame, family, tasks, values=True))
            by_id = _store_counts(frame, pl.col("parser").drop_nulls().unique().sort().str.join(",").alias("pv"))
        for i, r in current:
            row = by_id.get(i)
            if row is None:
                docs = StoreLayout(r.folder).docs
                empty = _mtime(docs) and not docs.stat().st_size
                notes.append(f"store {r.folder}: no sample was selected (empty task); skipped" if empty else
                             f"store {r.folder}: parsed.jsonl holds no samples; run `medvision-bm parse` on it")
                continue
            counts = _skipped_lines(results_of[i])
            source = PARSED
            if i in refreshed:
                fx = refreshed[i]
                counts.bad_lines = (counts.bad_lines or 0) + fx.bad_lines
                counts.foreign_lines = (counts.foreign_lines or 0) + fx.foreign_lines
                counts.duplicates = (counts.duplicates or 0) + fx.duplicates
                if fx.changed:
                    refreshed_total += 1
                    source = f"parsed.jsonl + {len(fx.changed)} newer answer(s) scored in memory"
            counts.selected = row["n"]
            counts.success = int(row["success"])
            counts.parse_failed = int(row["parse_failed"])
            counts.request_failed = int(row["request_failed"])
            counts.pending = int(row["pending"])
            counts.answered = row["n"] - counts.request_failed - counts.pending
            rec = results_of[i]
            legacy = bool(rec and rec.legacy_store)
            stores.append(StoreInfo(i, r, source, counts, row["pv"] or None, protocol_of(r, results_of[i]), legacy,
                                    recorded_metric_path(results_of[i]), results=rec, segments=segments_of[i]))
        for i, r in stale:
            try:
                res = rescore(r, metric_path=recorded_metric_path(results_of[i]))
            except StoreProblem as exc:
                notes.append(str(exc))
                continue
            notes.extend(res.notes)
            stale_total += 1
            legacy_total += res.legacy
            source = "re-scored in memory (legacy store)" if res.legacy else "re-scored in memory"
            stores.append(StoreInfo(i, r, source, res.counts, res.parser, res.protocol, res.legacy, res.metric_path,
                                    results=results_of[i], segments=segments_of[i]))
            if res.rows:
                part = pl.DataFrame([{k: d.get(k) for k in schema} for d in (row.to_json() for row in res.rows)],
                                    schema=schema)
                parts.append(_flat(part.with_columns(pl.lit(i, pl.Int64).alias("store")), family, tasks, values=True))
        if not parts:
            continue
        cols = [*BASE_COLUMNS, *SAMPLE_METRICS[family], VALUES, TARGET]
        if family_spec(family).has_boxes:
            cols += [*TARGET_COLUMNS, "box_area_ratio"]
        data = pl.concat([p.select(cols) for p in parts], how="vertical_relaxed").sort("store", "index")
        data, key_notes = add_group_keys(data, family)
        notes.extend(key_notes)
        samples[family] = data
    if stale_total:
        notes.append(f"{stale_total} store(s) had no current parsed.jsonl (answers newer than the last parse, a run "
                     "that was stopped, or a store scored by an older version of the suite); they were re-scored "
                     "in memory: run `medvision-bm parse` to store it")
    if refreshed_total:
        notes.append(f"{refreshed_total} store(s) hold answers newer than their parsed.jsonl (a run that was stopped); "
                     "those answers were scored in memory: run `medvision-bm parse` to store them")
    if legacy_total:
        notes.append(f"{legacy_total} store(s) were written before the upstream data layer (legacy docs.jsonl); "
                     "their stored answers were re-scored with upstream's parser and metrics on the targets they "
                     "were asked about (the prompts they were asked with are not upstream's)")
    paths = sorted({s.metric_path for s in stores if s.metric_path})
    if len(paths) > 1:
        by_path = {p: sum(s.metric_path == p for s in stores) for p in paths}
        notes.append("the stores summarized follow different metric paths ("
                     + ", ".join(f"{p}: {n} store(s)" for p, n in by_path.items())
                     + "); their numbers are not comparable: re-score them alike with `medvision-bm parse "
                     "--metric_path ...`")
    for s in stores:
        c = s.counts
        if c.bad_lines or c.foreign_lines:
            notes.append(f"{s.ref.label} / {s.ref.task}: {c.bad_lines or 0} torn or unreadable line(s) and "
                         f"{c.foreign_lines or 0} foreign line(s) in {s.ref.folder}/samples were skipped")
        if c.request_failed or c.pending:
            notes.append(f"{s.ref.label} / {s.ref.task}: incomplete run ({c.request_failed} failed request(s), "
                         f"{c.pending} pending of {c.selected}); rerun the same command to finish it")
    stores.sort(key=lambda s: s.id)
    return Loaded(samples, stores, notes)


def _judged_scoring(results: ResultsRecord | None) -> bool:
    """The scoring check of a judged parse's freshness: none (a judged parse scored by an older version of the suite
    gets a note of its own in ``load_judged``); the rule decides its age."""
    return True


def load_judged(refs: Sequence[StoreRef], judge: str | None = None) -> Loaded:
    """Like :func:`load`, from the judged parses (`medvision-bm judge`: ``<store>/judged/<sig>/parsed.jsonl``) instead
    of the strict ``parsed.jsonl``; a store without one is left out with a note (``judge``: which judge, when a
    store has several)."""
    notes: list[str] = []
    stores: list[StoreInfo] = []
    samples: dict[str, pl.DataFrame] = {}
    by_family: dict[str, list[tuple[int, StoreRef, Path]]] = defaultdict(list)
    for i, ref in enumerate(refs):
        folder, why = pick_judged(ref.folder, judge)
        if folder is None:
            notes.append(f"store {ref.folder}: {why}")
            continue
        state = judged_parse_state(ref.folder, folder, _judged_scoring)
        if isinstance(state, Stale):  # still summarized, with the reason the strict parse's rule gives
            notes.append(f"store {ref.folder}: its judged parse {folder.name} is stale ({state.reason}); rerun "
                         "`medvision-bm judge`")
        by_family[ref.family].append((i, ref, folder))
    for family, items in by_family.items():
        schema = parsed_schema(family)
        frame, bad = _scan_tolerant([str(JudgedLayout(f).parsed) for _, _, f in items], schema,
                                    [i for i, _, _ in items])
        notes.extend(f"store {r.folder}: {f.name}/parsed.jsonl is unreadable; skipped" for i, r, f in items if i in bad)
        if frame is None or not frame.height:
            continue
        per_store = _store_counts(frame)
        older = set(frame.filter(pl.col("metric_path").is_null())["store"].to_list())
        for i, r, f in items:
            row = per_store.get(i)
            if row is None:
                continue
            results = ResultsRecord.read(JudgedLayout(f).results)
            if results is not None and results.complete is False:
                n = results.counts.not_judged if results.counts is not None else None
                notes.append(f"store {r.folder}: its judged parse {f.name} is incomplete ({n} strict failure(s) not "
                             "judged yet, counted as failures: a --limit_rows pilot or a stopped run); rerun "
                             "`medvision-bm judge` without --limit_rows to finish it")
            if i in older or results is None or results.scoring_version != SCORING_VERSION:
                notes.append(f"store {r.folder}: its judged parse {f.name} was scored by an older version of the "
                             "suite (a negative A/D answer counted as a failure); rerun `medvision-bm judge` to "
                             "re-score it")
            counts = StoreCounts(selected=row["n"], success=int(row["success"]), parse_failed=int(row["parse_failed"]),
                                 request_failed=int(row["request_failed"]), pending=int(row["pending"]))
            counts.answered = row["n"] - counts.request_failed - counts.pending
            stores.append(StoreInfo(i, r, f"{JUDGED_DIR}/{f.name}/{PARSED}", counts, JUDGE_PARSER_VERSION,
                                    str((results.protocol if results else None) or protocol_of(r)),
                                    metric_path=recorded_metric_path(results)))
        data = _flat(frame, family, {i: r.task for i, r, _ in items})
        cols = [*BASE_COLUMNS, *SAMPLE_METRICS[family]]
        if family_spec(family).has_boxes:
            cols += [*TARGET_COLUMNS, "box_area_ratio"]
        data, key_notes = add_group_keys(data.select(cols).sort("store", "index"), family)
        notes.extend(key_notes)
        samples[family] = data
    stores.sort(key=lambda s: s.id)
    return Loaded(samples, stores, notes)

