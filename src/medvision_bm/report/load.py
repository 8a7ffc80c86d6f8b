"""Read many stores into one polars frame per family without building a Python object per sample.

A store's ``parsed.jsonl`` is used when it is current: at least as new as ``docs.jsonl`` and every sample segment,
and written by this suite's upstream scoring (``results.json`` names a parser of ``tasks.scoring.PARSERS`` and the
rows carry their metric rules). Otherwise the store is re-scored in memory from its raw answers (nothing is
written; stores from before the upstream scoring are converted through ``data.docs.rundoc_from_store_row``) and
the user is told to run `medvision-bm parse`. Every row carries what upstream groups it by, so ``docs.jsonl`` is
read only by the sample browser.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from medvision_bm.report.groups import add_group_keys
from medvision_bm.report.rescore import StoreCounts, StoreProblem, read_results, rescore
from medvision_bm.report.stores import StoreRef, protocol_of
from medvision_bm.tasks.scoring import PARSERS, SAMPLE_METRICS

#: Columns every family's sample frame has besides its metrics.
BASE_COLUMNS = ("store", "index", "key", "task", "status", "success", "scored", "parser", "rules", "dataset",
                "label_name", "modality", "slice_dim", "metric_type", "metric_key")
#: The detection target box (relative coordinates, lower-left origin) as columns.
TARGET_COLUMNS = ("tx0", "ty0", "tx1", "ty1")


def parsed_schema(family: str) -> dict[str, pl.DataType]:
    schema: dict[str, pl.DataType] = {
        "index": pl.Int64(), "key": pl.Utf8(), "status": pl.Utf8(), "success": pl.Boolean(), "parser": pl.Utf8(),
        "rules": pl.Utf8(), "near_zero_gt": pl.Boolean(), "dataset": pl.Utf8(), "label_name": pl.Utf8(),
        "modality": pl.Utf8(), "slice_dim": pl.Int64(), "metric_type": pl.Utf8(), "metric_key": pl.Utf8(),
        "metrics": pl.Struct({m: pl.Float64() for m in SAMPLE_METRICS[family]}),
    }
    if family == "detect":
        schema["target"] = pl.List(pl.Float64())
    return schema


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

    @property
    def complete(self) -> bool:
        """Every selected sample has an answer (parsed or not)."""
        return self.counts.answered == self.counts.selected

    def to_json(self) -> dict[str, Any]:
        r = self.ref
        return {"store": self.id, "label": r.label, "model": r.model, "task": r.task, "family": r.family,
                "tag": r.tag, "answer_signature": r.answer_signature, "folder": str(r.folder),
                "source": self.source, "parser_version": self.parser_version, "protocol": self.protocol,
                "legacy": self.legacy, "complete": self.complete, **self.counts.to_json()}


@dataclass
class Loaded:
    """Per family one row per scored sample; plus the stores and the notes."""

    samples: dict[str, pl.DataFrame]
    stores: list[StoreInfo]
    notes: list[str] = field(default_factory=list)

    def store_frame(self) -> pl.DataFrame:
        return pl.DataFrame([{"store": s.id, "label": s.ref.label, "model": s.ref.model, "task": s.ref.task,
                              "family": s.ref.family, "protocol": s.protocol} for s in self.stores],
                            schema={"store": pl.Int64, "label": pl.Utf8, "model": pl.Utf8, "task": pl.Utf8,
                                    "family": pl.Utf8, "protocol": pl.Utf8})


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def is_current(folder: Path) -> bool:
    """parsed.jsonl exists and is at least as new as docs.jsonl and every sample segment."""
    parsed = _mtime(folder / "parsed.jsonl")
    if not parsed:
        return False
    newest = _mtime(folder / "docs.jsonl")
    samples = folder / "samples"
    if samples.is_dir():
        with os.scandir(samples) as it:
            for entry in it:
                if entry.name.endswith(".jsonl"):
                    newest = max(newest, entry.stat().st_mtime)
    return parsed >= newest


def _skipped_lines(results: dict[str, Any] | None) -> StoreCounts:
    """The skipped-line counts the last run or parse recorded (None when there is no results.json)."""
    c = (results or {}).get("counts") or {}
    return StoreCounts(bad_lines=c.get("store_bad_lines"), foreign_lines=c.get("store_foreign_lines"),
                       duplicates=c.get("store_duplicates"))


def _scan(paths: list[str], schema: dict[str, pl.DataType], ids: list[int]) -> pl.DataFrame:
    frame = pl.scan_ndjson(paths, schema=schema, include_file_paths="_file").collect()
    lookup = pl.DataFrame({"_file": paths, "store": ids}, schema={"_file": pl.Utf8, "store": pl.Int64})
    return frame.join(lookup, on="_file", how="left", maintain_order="left").drop("_file")


def _scan_tolerant(paths: list[str], schema: dict[str, pl.DataType],
                   ids: list[int]) -> tuple[pl.DataFrame | None, list[int]]:
    """Scan all files at once; if one is unreadable, scan them one by one and return the ids of the bad ones."""
    if not paths:
        return None, []
    try:
        return _scan(paths, schema, ids), []
    except pl.exceptions.PolarsError:
        frames, bad = [], []
        for p, i in zip(paths, ids):
            try:
                frames.append(_scan([p], schema, [i]))
            except pl.exceptions.PolarsError:
                bad.append(i)
        return (pl.concat(frames) if frames else None), bad


def _flat(frame: pl.DataFrame, family: str, tasks: dict[int, str]) -> pl.DataFrame:
    """Metrics as columns (non-finite values as null), the scored flag, the task, the detection target box."""
    cols = [pl.col("metrics").struct.field(m) for m in SAMPLE_METRICS[family]]
    out = frame.with_columns(cols).drop("metrics").with_columns(
        [pl.when(pl.col(m).is_finite()).then(pl.col(m)).otherwise(None).alias(m) for m in SAMPLE_METRICS[family]])
    out = out.with_columns((~pl.col("near_zero_gt").fill_null(False)).alias("scored"),
                           pl.col("store").replace_strict(tasks, default=None, return_dtype=pl.Utf8).alias("task"))
    if family == "detect":
        t = pl.col("target")
        box = [t.list.get(i, null_on_oob=True).alias(c) for i, c in enumerate(TARGET_COLUMNS)]
        out = out.with_columns(box).with_columns(
            ((pl.col("tx1") - pl.col("tx0")) * (pl.col("ty1") - pl.col("ty0"))).abs().alias("box_area_ratio"))
        return out.drop("target")
    return out


def _scoring_of(results: dict[str, Any] | None) -> bool:
    """True when results.json says the store was scored by this suite's upstream scoring (or says nothing)."""
    if results is None:
        return True
    return results.get("parser_version") in PARSERS and bool(results.get("metric_rules"))


def load(refs: Sequence[StoreRef]) -> Loaded:
    """Scores of every store: per family a sample frame (BASE_COLUMNS, the family's metrics, upstream's ``group``
    key; detection also the target box and its area ratio), sorted by (store, index)."""
    notes: list[str] = []
    stores: list[StoreInfo] = []
    by_family: dict[str, list[tuple[int, StoreRef]]] = defaultdict(list)
    for i, ref in enumerate(refs):
        by_family[ref.family].append((i, ref))
    samples: dict[str, pl.DataFrame] = {}
    stale_total = legacy_total = 0
    for family, items in by_family.items():
        schema = parsed_schema(family)
        tasks = {i: r.task for i, r in items}
        results_of = {i: read_results(r.folder) for i, r in items}
        current, stale = [], []
        for i, r in items:
            fresh = is_current(r.folder) and _scoring_of(results_of[i])
            (current if fresh else stale).append((i, r))
        frame, bad = _scan_tolerant([str(r.folder / "parsed.jsonl") for _, r in current], schema,
                                    [i for i, _ in current])
        if bad:
            notes.extend(f"store {r.folder}: parsed.jsonl is unreadable; re-scored from the raw answers"
                         for i, r in current if i in bad)
        old_rows: set[int] = set()
        if frame is not None and frame.height:
            old_rows = set(frame.filter(pl.col("rules").is_null() | pl.col("parser").is_null())["store"].to_list())
            if old_rows:  # rows of an older parsed.jsonl format
                frame = frame.filter(~pl.col("store").is_in(list(old_rows)))
        stale += [(i, r) for i, r in current if i in bad or i in old_rows]
        current = [(i, r) for i, r in current if i not in bad and i not in old_rows]
        parts: list[pl.DataFrame] = []
        by_id: dict[int, dict[str, Any]] = {}
        if frame is not None and frame.height:
            parts.append(_flat(frame, family, tasks))
            per_store = frame.group_by("store").agg(
                pl.len().alias("n"), pl.col("success").sum().alias("success"),
                (pl.col("status") == "parse_failed").sum().alias("parse_failed"),
                (pl.col("status") == "request_failed").sum().alias("request_failed"),
                (pl.col("status") == "missing").sum().alias("pending"),
                pl.col("parser").drop_nulls().unique().sort().str.join(",").alias("pv"))
            by_id = {row["store"]: row for row in per_store.iter_rows(named=True)}
        for i, r in current:
            row = by_id.get(i)
            if row is None:
                notes.append(f"store {r.folder}: parsed.jsonl holds no samples; run `medvision-bm parse` on it")
                continue
            counts = _skipped_lines(results_of[i])
            counts.selected = row["n"]
            counts.success = int(row["success"])
            counts.parse_failed = int(row["parse_failed"])
            counts.request_failed = int(row["request_failed"])
            counts.pending = int(row["pending"])
            counts.answered = row["n"] - counts.request_failed - counts.pending
            legacy = bool((results_of[i] or {}).get("legacy_store"))
            stores.append(StoreInfo(i, r, "parsed.jsonl", counts, row["pv"] or None, protocol_of(r, results_of[i]),
                                    legacy))
        for i, r in stale:
            try:
                res = rescore(r)
            except StoreProblem as exc:
                notes.append(str(exc))
                continue
            notes.extend(res.notes)
            stale_total += 1
            legacy_total += res.legacy
            source = "re-scored in memory (legacy store)" if res.legacy else "re-scored in memory"
            stores.append(StoreInfo(i, r, source, res.counts, res.parser, res.protocol, res.legacy))
            if res.rows:
                part = pl.DataFrame([{k: row.get(k) for k in schema} for row in res.rows], schema=schema)
                parts.append(_flat(part.with_columns(pl.lit(i, pl.Int64).alias("store")), family, tasks))
        if not parts:
            continue
        cols = [*BASE_COLUMNS, *SAMPLE_METRICS[family]]
        if family == "detect":
            cols += [*TARGET_COLUMNS, "box_area_ratio"]
        data = pl.concat([p.select(cols) for p in parts], how="vertical_relaxed").sort("store", "index")
        data, key_notes = add_group_keys(data, family)
        notes.extend(key_notes)
        samples[family] = data
    if stale_total:
        notes.append(f"{stale_total} store(s) had no current parsed.jsonl (answers newer than the last parse, a run "
                     "that was stopped, or a store scored by an older version of the suite); they were re-scored "
                     "in memory: run `medvision-bm parse` to store it")
    if legacy_total:
        notes.append(f"{legacy_total} store(s) were written before the upstream data layer (legacy docs.jsonl); "
                     "their stored answers were re-scored with upstream's parser and metrics on the targets they "
                     "were asked about (the prompts they were asked with are not upstream's)")
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
