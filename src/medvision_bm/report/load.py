"""Read many stores into one polars frame per family without building a Python object per sample.

A store's ``parsed.jsonl`` is used when it is current (at least as new as ``docs.jsonl`` and every sample
segment); otherwise the store is re-scored in memory from its raw answers (nothing is written) and the user is
told to run `medvision-bm parse`. Sample metadata for the breakdowns comes from ``docs.jsonl``; identical
``docs.jsonl`` files (every model of a task usually has the same one) are parsed once.
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from medvision_bm.geometry import box_px_to_relative
from medvision_bm.report.rescore import StoreCounts, StoreProblem, read_results, rescore
from medvision_bm.report.stores import StoreRef
from medvision_bm.tasks.metrics import SAMPLE_METRICS
from medvision_bm.tasks.parse import PARSER_VERSION

#: Columns every family's sample frame has besides its metrics.
BASE_COLUMNS = ("store", "docs", "index", "status", "success", "parser_version")
#: Doc metadata columns joined onto every sample row (categorical).
META_COLUMNS = ("label_name", "structure_kind", "modality", "plane", "measure")
#: The detection target box (relative, lower-left origin) in the docs frame.
TARGET_COLUMNS = ("tx0", "ty0", "tx1", "ty1")


def parsed_schema(family: str) -> dict[str, pl.DataType]:
    return {"index": pl.Int64(), "status": pl.Utf8(), "success": pl.Boolean(),
            "metrics": pl.Struct({m: pl.Float64() for m in SAMPLE_METRICS[family]}), "parser_version": pl.Utf8()}


DOCS_SCHEMA: dict[str, pl.DataType] = {
    "key": pl.Utf8(), "index": pl.Int64(), "doc_sha": pl.Utf8(),
    "doc": pl.Struct({"label": pl.Int64(), "label_name": pl.Utf8(), "structure_kind": pl.Utf8(),
                      "modality": pl.Utf8(), "plane": pl.Utf8(), "image_hw": pl.List(pl.Int64()),
                      "annotation": pl.Struct({"box_area_ratio": pl.Float64(), "metric": pl.Utf8(),
                                               "box_px": pl.List(pl.Float64())})}),
}
DOC_META_SCHEMA: dict[str, pl.DataType] = {
    "docs": pl.Int64(), "task": pl.Utf8(), "key": pl.Utf8(), "index": pl.Int64(), "doc_sha": pl.Utf8(),
    "label_id": pl.Int64(), "label_name": pl.Utf8(), "structure_kind": pl.Utf8(), "modality": pl.Utf8(),
    "plane": pl.Utf8(), "box_area_ratio": pl.Float64(), "measure": pl.Utf8(),
    **{c: pl.Float64() for c in ("tx0", "ty0", "tx1", "ty1")},
}


@dataclass
class StoreInfo:
    """A store as summarized: its reference, where its scores came from and its counts."""

    id: int
    ref: StoreRef
    source: str  # "parsed.jsonl" | "re-scored in memory"
    counts: StoreCounts
    parser_version: str | None
    docs: int = -1  # id of its docs.jsonl content in Loaded.docs

    @property
    def complete(self) -> bool:
        """Every selected sample has an answer (parsed or not)."""
        return self.counts.answered == self.counts.selected

    def to_json(self) -> dict[str, Any]:
        r = self.ref
        return {"store": self.id, "label": r.label, "model": r.model, "task": r.task, "family": r.family,
                "tag": r.tag, "answer_signature": r.answer_signature, "folder": str(r.folder),
                "source": self.source, "parser_version": self.parser_version, "complete": self.complete,
                **self.counts.to_json()}


@dataclass
class Loaded:
    """Per family: one row per scored sample, and one row per distinct doc; plus the stores and the notes."""

    samples: dict[str, pl.DataFrame]
    docs: dict[str, pl.DataFrame]
    stores: list[StoreInfo]
    notes: list[str] = field(default_factory=list)

    def store_frame(self) -> pl.DataFrame:
        return pl.DataFrame([{"store": s.id, "label": s.ref.label, "model": s.ref.model, "task": s.ref.task,
                              "family": s.ref.family} for s in self.stores],
                            schema={"store": pl.Int64, "label": pl.Utf8, "model": pl.Utf8, "task": pl.Utf8,
                                    "family": pl.Utf8})


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


def _scan(paths: list[str], schema: dict[str, pl.DataType], ids: list[int], id_name: str) -> pl.DataFrame:
    frame = pl.scan_ndjson(paths, schema=schema, include_file_paths="_file").collect()
    lookup = pl.DataFrame({"_file": paths, id_name: ids}, schema={"_file": pl.Utf8, id_name: pl.Int64})
    return frame.join(lookup, on="_file", how="left", maintain_order="left").drop("_file")


def _scan_tolerant(paths: list[str], schema: dict[str, pl.DataType], ids: list[int],
                   id_name: str) -> tuple[pl.DataFrame | None, list[int]]:
    """Scan all files at once; if one is unreadable, scan them one by one and return the ids of the bad ones."""
    if not paths:
        return None, []
    try:
        return _scan(paths, schema, ids, id_name), []
    except pl.exceptions.PolarsError:
        frames, bad = [], []
        for p, i in zip(paths, ids):
            try:
                frames.append(_scan([p], schema, [i], id_name))
            except pl.exceptions.PolarsError:
                bad.append(i)
        return (pl.concat(frames) if frames else None), bad


def _detect_target(box_px: list[float] | None, image_hw: list[int] | None) -> list[float] | None:
    if not box_px or not image_hw or len(box_px) != 4 or len(image_hw) != 2:
        return None
    return box_px_to_relative(box_px, (int(image_hw[0]), int(image_hw[1])))


def _doc_meta(docs: pl.DataFrame, family: str) -> pl.DataFrame:
    """docs.jsonl rows -> one flat metadata row per doc (with the detection target, for the random-box
    comparison, as columns tx0, ty0, tx1, ty1)."""
    d = pl.col("doc")
    ann = d.struct.field("annotation")
    meta = docs.select(
        "docs", "task", "key", "index", "doc_sha",
        d.struct.field("label").alias("label_id"), d.struct.field("label_name").alias("label_name"),
        d.struct.field("structure_kind").alias("structure_kind"), d.struct.field("modality").alias("modality"),
        d.struct.field("plane").alias("plane"), ann.struct.field("box_area_ratio").alias("box_area_ratio"),
        ann.struct.field("metric").alias("measure"), ann.struct.field("box_px").alias("_box"),
        d.struct.field("image_hw").alias("_hw"))
    targets = np.full((meta.height, 4), np.nan)
    if family == "detect":
        for j, (b, h) in enumerate(zip(meta["_box"].to_list(), meta["_hw"].to_list())):
            t = _detect_target(b, h)
            if t is not None:
                targets[j] = t
    return meta.drop("_box", "_hw").with_columns(
        [pl.Series(name, targets[:, j]).fill_nan(None) for j, name in enumerate(TARGET_COLUMNS)])


def _flat(frame: pl.DataFrame, family: str) -> pl.DataFrame:
    """Unnest the metrics struct; non-successful samples carry no metrics."""
    cols = [pl.col("metrics").struct.field(m).alias(m) for m in SAMPLE_METRICS[family]]
    return frame.with_columns(cols).drop("metrics")


def _docs_identity(path: Path) -> str:
    h = hashlib.sha1(usedforsecurity=False)
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def load(refs: Sequence[StoreRef]) -> Loaded:
    """Scores and metadata of every store: per family, a sample frame (store, docs, index, status, success,
    parser_version, the family's metrics, then key and the doc metadata joined from docs.jsonl by index) and a
    frame of the distinct docs."""
    notes: list[str] = []
    stores: list[StoreInfo] = []
    by_family: dict[str, list[tuple[int, StoreRef]]] = defaultdict(list)
    for i, ref in enumerate(refs):
        by_family[ref.family].append((i, ref))
    samples: dict[str, pl.DataFrame] = {}
    docs_frames: dict[str, pl.DataFrame] = {}
    stale_total = 0
    next_docs = 0
    for family, items in by_family.items():
        schema = parsed_schema(family)
        current, stale = [], []
        for i, r in items:
            (current if is_current(r.folder) else stale).append((i, r))
        frame, bad = _scan_tolerant([str(r.folder / "parsed.jsonl") for _, r in current], schema,
                                    [i for i, _ in current], "store")
        if bad:
            notes.extend(f"store {r.folder}: parsed.jsonl is unreadable; re-scored from the raw answers"
                         for i, r in current if i in bad)
            stale += [(i, r) for i, r in current if i in bad]
            current = [(i, r) for i, r in current if i not in bad]
        # distinct docs.jsonl contents of the current stores
        identity: dict[str, int] = {}
        docs_of: dict[int, int] = {}
        first_path: dict[int, tuple[str, str]] = {}
        for i, r in current:
            path = r.folder / "docs.jsonl"
            try:
                ident = _docs_identity(path)
            except OSError:
                notes.append(f"store {r.folder}: docs.jsonl is missing; its breakdown columns are empty")
                continue
            if ident not in identity:
                identity[ident] = next_docs
                first_path[next_docs] = (str(path), r.task)
                next_docs += 1
            docs_of[i] = identity[ident]
        metas: list[pl.DataFrame] = []
        if first_path:
            ids = list(first_path)
            raw, bad_docs = _scan_tolerant([first_path[d][0] for d in ids], DOCS_SCHEMA, ids, "docs")
            notes.extend(f"{first_path[d][0]}: unreadable; breakdown columns of its runs are empty" for d in bad_docs)
            if raw is not None:
                tasks = pl.DataFrame({"docs": ids, "task": [first_path[d][1] for d in ids]},
                                     schema={"docs": pl.Int64, "task": pl.Utf8})
                metas.append(_doc_meta(raw.join(tasks, on="docs", how="left"), family))
        parts: list[pl.DataFrame] = []
        by_id: dict[int, dict[str, Any]] = {}
        if frame is not None and frame.height:
            doc_ids = pl.DataFrame({"store": list(docs_of), "docs": list(docs_of.values())},
                                   schema={"store": pl.Int64, "docs": pl.Int64})
            frame = frame.join(doc_ids, on="store", how="left", maintain_order="left")
            parts.append(_flat(frame, family))
            per_store = frame.group_by("store").agg(
                pl.len().alias("n"), pl.col("success").sum().alias("success"),
                (pl.col("status") == "parse_failed").sum().alias("parse_failed"),
                (pl.col("status") == "request_failed").sum().alias("request_failed"),
                (pl.col("status") == "missing").sum().alias("pending"),
                pl.col("parser_version").drop_nulls().first().alias("pv"))
            by_id = {row["store"]: row for row in per_store.iter_rows(named=True)}
        for i, r in current:
            row = by_id.get(i)
            if row is None:
                notes.append(f"store {r.folder}: parsed.jsonl holds no samples; run `medvision-bm parse` on it")
                continue
            counts = _skipped_lines(read_results(r.folder))
            counts.selected = row["n"]
            counts.success = int(row["success"])
            counts.parse_failed = int(row["parse_failed"])
            counts.request_failed = int(row["request_failed"])
            counts.pending = int(row["pending"])
            counts.answered = row["n"] - counts.request_failed - counts.pending
            stores.append(StoreInfo(i, r, "parsed.jsonl", counts, row["pv"], docs_of.get(i, -1)))
        for i, r in stale:
            try:
                res = rescore(r)
            except StoreProblem as exc:
                notes.append(str(exc))
                continue
            notes.extend(res.notes)
            stale_total += 1
            c = res.counts
            docs_id = next_docs
            next_docs += 1
            stores.append(StoreInfo(i, r, "re-scored in memory", c, PARSER_VERSION, docs_id))
            raw = pl.DataFrame([{**row, "docs": docs_id, "task": r.task} for row in res.docs.values()],
                               schema={**DOCS_SCHEMA, "docs": pl.Int64(), "task": pl.Utf8()})
            metas.append(_doc_meta(raw, family))
            rows = [{k: row.get(k) for k in ("index", "status", "success", "metrics", "parser_version")}
                    for row in res.rows]
            if rows:
                part = pl.DataFrame(rows, schema=schema).with_columns(pl.lit(i, pl.Int64).alias("store"),
                                                                     pl.lit(docs_id, pl.Int64).alias("docs"))
                parts.append(_flat(part, family))
        if not parts:
            continue
        meta = pl.concat(metas, how="vertical_relaxed") if metas else pl.DataFrame(schema=DOC_META_SCHEMA)
        docs_frames[family] = meta
        cols = [*BASE_COLUMNS, *SAMPLE_METRICS[family]]
        data = pl.concat([p.select(cols) for p in parts], how="vertical_relaxed")
        join_meta = meta.select("docs", "index", "key", "doc_sha", "label_id", "box_area_ratio",
                                *[pl.col(c).cast(pl.Categorical) for c in META_COLUMNS])
        samples[family] = data.join(join_meta, on=["docs", "index"], how="left").sort("store", "index")
    if stale_total:
        notes.append(f"{stale_total} store(s) had no current parsed.jsonl (answers newer than the last parse, or "
                     "a run that was stopped); they were re-scored in memory: run `medvision-bm parse` to store it")
    others = sorted({s.parser_version for s in stores if s.parser_version not in (None, PARSER_VERSION)})
    if others:
        notes.append(f"some stores were parsed with {', '.join(others)}, not the current {PARSER_VERSION}; "
                     "run `medvision-bm parse --results_dir ...` to re-score them")
    for s in stores:
        c = s.counts
        if c.bad_lines or c.foreign_lines:
            notes.append(f"{s.ref.label} / {s.ref.task}: {c.bad_lines or 0} torn or unreadable line(s) and "
                         f"{c.foreign_lines or 0} foreign line(s) in {s.ref.folder}/samples were skipped")
        if c.request_failed or c.pending:
            notes.append(f"{s.ref.label} / {s.ref.task}: incomplete run ({c.request_failed} failed request(s), "
                         f"{c.pending} pending of {c.selected}); rerun the same command to finish it")
    stores.sort(key=lambda s: s.id)
    return Loaded(samples, docs_frames, stores, notes)
