"""Upstream's per-sample files ``summary_values_{detect,TL,AD}_Task*.json``: one record per sample the per-group
metrics count, in upstream's shape and key order, in the order the metrics sum them.

Shapes (docs/spec/upstream-summary-files.md; YongchengYAO/MedVision ``src/medvision_bm/benchmark/
summarize_TL_task.py`` @28f6c67 ``process_parsed_file_in_model_folder``, ``summarize_AD_task.py`` @286f632, and the
published ``Paper-results-backup/{TL,AD}/MedVision-V0-7B/llm-parsed_gemma-4-31b/summary_values_*.json`` @755a7bb):

* T/L: ``{group: {"targets": [str], "responses": [str], "doc_metas": [meta]}}``, groups in order of first sample;
* A/D: ``[{"label", "targets": str, "responses": [str], "doc_meta": meta}]`` in sample order;
* detection: ``{group: {"targets": [str], "responses": [str]}}`` (``parse_utils.group_by_anatomy_modality_slice``;
  the published ``Paper-results-backup/Detect/.../summary_values_detect_Task.json``).

``targets`` is lmms-eval's target string (``str`` of the list or number), ``responses`` the decided numbers joined by
``,`` (upstream's parsed ``filtered_resps[0]``): in a judged parse the strict prediction as the parser spelled it or
the judge's numbers, as upstream's ``LLM_filtered_resps``; in a strict parse the float32 values the score used,
written with ``repr`` (``parsed.jsonl`` keeps no spelling), so upstream's ``np.float32(part)`` reads back the same
numbers. ``nmae_precomputed`` is the sample's nMAE as upstream's
summarizers read it (``{"NMAE", "success"}``). Fed to upstream's summarizer loop, a file gives back the
``summary_metrics_*.json`` written beside it, to the last bit.

summarize writes the files' text through ``with_value_texts`` and ``run_values_text``: ``json.dumps(run_values(...),
indent=2)`` to the character, built column-wise for all runs of a family at once (each distinct float formatted
once, each doc's ``doc_meta`` text once per docs file, each group's lists joined at once); ``run_values`` itself
writes every case those columns do not cover.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import polars as pl

from medvision_bm.report.float_text import float_reprs
from medvision_bm.report.load import TARGET, VALUES, StoreInfo, scan_rows
from medvision_bm.report.upstream_summaries import dump_json, json_parts
from medvision_bm.store.discovery import StoreRef
from medvision_bm.store.layout import DOCS, PARSED, VALUES_FIRST_RECORD, VALUES_IMPORT_FORMAT, StoreLayout
from medvision_bm.store.records import DocRow, ParsedRow, iter_lines
from medvision_bm.tasks.families import family_spec
from medvision_bm.tasks.scoring import SAMPLE_METRICS


def _response(values: Sequence[float | None] | None) -> str:
    """The decided numbers as upstream's parsed ``filtered_resps[0]``: comma-joined; "" for a failed parse."""
    if not values or any(v is None for v in values):
        return ""
    return ",".join(repr(float(v)) for v in values if v is not None)


def _judged_response(judge: Mapping[str, Any], values: Sequence[float | None] | None) -> str:
    """A judged row's decided numbers as upstream's ``LLM_filtered_resps[0]``: the strict prediction as the strict
    parser spelled it where it stands, the judge's verified numbers (comma-joined) for a recovery, "" otherwise."""
    mode = judge.get("mode")
    if mode == "conclusion_in_format" and judge.get("strict_pred"):
        return str(judge["strict_pred"])
    if mode == "conclusion_off_format" and judge.get("judge_numbers"):
        return ",".join(str(n) for n in judge["judge_numbers"])
    return _response(values) if mode in ("conclusion_in_format", "conclusion_off_format") else ""


def _target(family: str, target: Sequence[float | None]) -> str:
    """lmms-eval's ``str(doc_to_target(doc))``: the list (detection's box, T/L's axes), the number for A/D (a
    parsed row's null, a target that was not finite, is refused: TypeError)."""
    if None in target:
        raise TypeError(f"a parsed row's target holds null: {target}")
    nums = [float(t) for t in target if t is not None]
    return str(nums[0]) if family_spec(family).per_metric else str(nums)


def doc_meta(family: str, doc: Mapping[str, object], nmae: float | None, scaled: bool) -> dict[str, object]:
    """Upstream's ``doc_meta`` of one sample (its keys in upstream's order); ``doc``: its ``_meta_fields``."""
    meta: dict[str, object] = {"image_file": f"Data/Datasets/{doc.get('image_file')}", "slice_dim": doc.get("slice_dim"),
                               "slice_idx": doc.get("slice_idx"), "image_size_2d": doc.get("image_size_2d")}
    if family_spec(family).per_metric:
        profile = doc.get("biometric_profile")  # {metric_type} or empty (``_meta_fields``)
        mtype = profile.get("metric_type") if isinstance(profile, dict) else None
        meta["metric_type"] = mtype[0] if isinstance(mtype, list) and mtype else mtype
    meta.update({"scale_mode": "uniform" if scaled else None,
                 "nmae_precomputed": {"NMAE": nmae, "success": nmae is not None},
                 "taskID": doc.get("taskID"), "label": doc.get("label") if family_spec(family).axes else None,
                 "pixel_size_scale": None})
    return meta


def file_order(refs: Sequence[StoreRef]) -> list[StoreRef]:
    """``refs`` with the stores imported from one run's per-sample files in those files' order (each in the slot one
    of them held), every other store where it was: a group spanning several tasks is then summed in upstream's
    order, as upstream's loop added its files."""
    placed: dict[str, list[tuple[int, int]]] = {}  # run label -> (file position, slot) of its imported stores
    for slot, ref in enumerate(refs):
        imported = ref.imported or {}  # signature.json's, as discovery read it (each store's read once)
        position = imported.get(VALUES_FIRST_RECORD)
        if imported.get("format") == VALUES_IMPORT_FORMAT and isinstance(position, int):
            placed.setdefault(ref.label, []).append((position, slot))
    out = list(refs)
    for items in placed.values():
        slots = sorted(slot for _, slot in items)
        for slot, (_, old) in zip(slots, sorted(items)):
            out[slot] = refs[old]
    return out


def _parsed_path(info: StoreInfo) -> Path | None:
    """The parsed rows the summary read (strict ``parsed.jsonl`` or a judged parse's); None when it re-scored in
    memory."""
    path = info.ref.folder / info.source
    return path if info.source.endswith(".jsonl") and path.is_file() else None


class DocsCache(dict[bytes, dict[str, dict[str, object]]]):
    """Per docs file content (its bytes: a few KB per store, each distinct content held once): each doc's fields
    ``doc_meta`` reads, by key; and each docs file's content by its path (``content``: each file read once, for
    every stage of a summary that reads docs)."""

    def __init__(self) -> None:
        super().__init__()
        self.files: dict[str, bytes] = {}
        self._held: dict[bytes, bytes] = {}  # each distinct content, held once for every path that has it

    def content(self, path: str) -> bytes:
        """The content of the docs file at ``path``: read on the first call for the path."""
        found = self.files.get(path)
        if found is None:
            with open(path, "rb", buffering=0) as fh:  # a docs file is small: read whole
                read = fh.read()
            found = self.files[path] = self._held.setdefault(read, read)
        return found


class ValueRecord(TypedDict):
    """One sample of a per-sample file: lmms-eval's target and response texts and upstream's ``doc_meta``."""

    target: str
    response: str
    meta: dict[str, object] | None


#: A run's per-sample file: per group its columns (detection, T/L), or one record per sample (A/D).
Values = dict[str, dict[str, list[object]]] | list[dict[str, object]]
#: The doc fields ``doc_meta`` reads (``biometric_profile``: its ``metric_type`` alone).
_META_FIELDS = ("image_file", "slice_dim", "slice_idx", "image_size_2d", "taskID", "label")


def _meta_fields(doc: Mapping[str, object]) -> dict[str, object]:
    if not doc:
        return {}
    out = {k: doc.get(k) for k in _META_FIELDS}
    profile = doc.get("biometric_profile")
    if not profile:
        out["biometric_profile"] = profile
    elif isinstance(profile, Mapping):
        out["biometric_profile"] = {"metric_type": profile.get("metric_type")}
    else:  # what ``profile.get`` raised on it
        raise AttributeError(f"{type(profile).__name__!r} object has no attribute 'get'")
    return out


def _doc_fields(info: StoreInfo, wanted: set[str], cache: DocsCache | None) -> dict[str, dict[str, object]]:
    """The ``doc_meta`` fields of the wanted keys' docs of one store, read through the typed reader once per
    distinct docs file in ``cache`` (the runs of a task hold the same docs, byte for byte)."""
    if cache is None:
        path = StoreLayout(info.ref.folder).docs
        return {r.key: _meta_fields(r.doc) for r in iter_lines(path, DocRow.from_json) if r.key in wanted}
    return {k: v for k, v in _docs_of(info, cache)[1].items() if k in wanted}


def _store_records(family: str, info: StoreInfo, keys: Sequence[str],
                   docs_cache: DocsCache | None = None) -> Iterator[tuple[str, ValueRecord]]:
    """(group, record) of each key of one store, in ``keys``' order."""
    wanted = set(keys)
    path = _parsed_path(info)
    if path is None:
        raise LookupError(f"{info.ref.label} / {info.ref.task}: scored in memory (run `medvision-bm parse`)")
    rows = {r.key: r for r in iter_lines(path, ParsedRow.from_json) if r.key in wanted}
    docs = _doc_fields(info, wanted, docs_cache) if family_spec(family).measure else {}  # detection's file holds no doc meta
    scaled = "scaledPS" in info.ref.task
    for key in keys:
        row, doc = rows.get(key), docs.get(key, {})
        if row is None or (family_spec(family).measure and not doc):
            raise LookupError(f"{info.ref.label} / {info.ref.task}: sample {key} not in its parsed rows")
        response = _judged_response(row.judge, row.values) if row.judge is not None else _response(row.values)
        nmae = (row.metrics or {}).get("nMAE")
        yield key, {"target": _target(family, row.target), "response": response,
                    "meta": doc_meta(family, doc, nmae, scaled) if family_spec(family).measure else None}


#: What the strict per-sample file takes from a parsed row (``scan_rows`` reads floats as Python's parser does).
_STRICT_SCHEMA: dict[str, pl.DataType] = {"key": pl.Utf8(), "values": pl.List(pl.Float64()),
                                          "target": pl.List(pl.Float64()),
                                          "metrics": pl.Struct({"nMAE": pl.Float64()})}


#: A sample's (values, target, nMAE) as its parsed row holds them.
_RowNumbers = tuple[Sequence[float | None] | None, Sequence[float | None], float | None]


def _held_rows(family: str, frame: pl.DataFrame) -> dict[tuple[int, str], _RowNumbers] | None:
    """(values, target, nMAE) per (store, key) of a run's rows as ``load`` read them from the parsed.jsonl files
    (the same scan of the same files: the same numbers), or None when the frame lacks them or a store holds a key
    twice (the scan's last-row rule decides then)."""
    cols = [VALUES, TARGET, *(["nMAE"] if "nMAE" in SAMPLE_METRICS[family] else [])]
    if any(c not in frame.columns for c in cols):
        return None
    rows = frame.select("store", "key", *cols)
    if rows.select(pl.struct("store", "key").is_duplicated().any()).item():
        return None
    if len(cols) == 2:
        return {(sid, key): (values, target, None) for sid, key, values, target in rows.iter_rows()}
    return {(sid, key): (values, target, nmae) for sid, key, values, target, nmae in rows.iter_rows()}


def _strict_records(family: str, by_store: Mapping[int, Sequence[str]], stores: Mapping[int, StoreInfo],
                    docs_cache: DocsCache | None = None,
                    held: pl.DataFrame | None = None) -> dict[tuple[int, str], ValueRecord]:
    """``_store_records`` of every store of a strict parse at once: their parsed rows as ``load`` read them
    (``held``: the run's rows, when they carry the values and targets), else their parsed.jsonl files read in one
    scan (the last row of a key counts, as there); docs (T/L, A/D) through the typed reader once per distinct docs
    file (``_doc_fields``)."""
    paths: dict[int, str] = {}
    for sid in by_store:
        path = _parsed_path(stores[sid])
        if path is None:
            info = stores[sid]
            raise LookupError(f"{info.ref.label} / {info.ref.task}: scored in memory (run `medvision-bm parse`)")
        paths[sid] = str(path)
    found: dict[tuple[int, str], _RowNumbers] | None = _held_rows(family, held) if held is not None else None
    if found is None:
        rows = scan_rows(list(paths.values()), _STRICT_SCHEMA, list(paths)).unique(["store", "key"], keep="last")
        found = {(sid, key): (values, target, metrics["nMAE"] if metrics else None)
                 for sid, key, values, target, metrics in rows.select("store", "key", "values", "target", "metrics")
                 .iter_rows()}
    records: dict[tuple[int, str], ValueRecord] = {}
    for sid, keys in by_store.items():
        info = stores[sid]
        docs = _doc_fields(info, set(keys), docs_cache) if family_spec(family).measure else {}
        scaled = "scaledPS" in info.ref.task
        for key in keys:
            row, doc = found.get((sid, key)), docs.get(key, {})
            if row is None or (family_spec(family).measure and not doc):
                raise LookupError(f"{info.ref.label} / {info.ref.task}: sample {key} not in its parsed rows")
            values, target, nmae = row
            records[(sid, key)] = {
                "target": _target(family, target), "response": _response(values),
                "meta": doc_meta(family, doc, nmae, scaled) if family_spec(family).measure else None}
    return records


def run_values(family: str, frame: pl.DataFrame, stores: Mapping[int, StoreInfo],
               docs_cache: DocsCache | None = None) -> Values:
    """Upstream's per-sample file of one run: the frame's counted rows (``scored``, with their ``group``) in its
    order, each store's parsed rows read once (a strict parse's parsed rows in one scan), the docs of each distinct
    docs file once per ``docs_cache`` (pass one cache to the runs of a family: their stores of one task share
    their docs)."""
    counted = frame.filter(pl.col("scored")).select("store", "key", "group")
    by_store: dict[int, list[str]] = {}
    for sid, key in counted.select("store", "key").iter_rows():
        by_store.setdefault(sid, []).append(key)
    records: dict[tuple[int, str], ValueRecord] = {}
    if all(stores[sid].source == PARSED for sid in by_store):
        records = _strict_records(family, by_store, stores, docs_cache, frame)
    else:
        for sid, keys in by_store.items():
            records.update({(sid, k): rec for k, rec in _store_records(family, stores[sid], keys, docs_cache)})
    if not family_spec(family).per_metric:  # grouped by label (A/D: by its metric)
        out: dict[str, dict[str, list[object]]] = {}
        for sid, key, group in counted.iter_rows():
            rec = records[(sid, key)]
            g = out.setdefault(group, {"targets": [], "responses": [], "doc_metas": []} if family_spec(family).axes
                               else {"targets": [], "responses": []})
            g["targets"].append(rec["target"])
            g["responses"].append(rec["response"])
            if family_spec(family).axes:
                g["doc_metas"].append(rec["meta"])
        return out
    return [{"label": group, "targets": records[(sid, key)]["target"],
             "responses": [records[(sid, key)]["response"]], "doc_meta": records[(sid, key)]["meta"]}
            for sid, key, group in counted.iter_rows()]


# ------------------------------------------------------------------------- the file's text, built column-wise

#: The columns ``with_value_texts`` adds: per row its target's and response's JSON text and its ``doc_meta``'s.
TEXT_COLUMNS = ("_target_text", "_response_text", "_meta_text")
#: Stands for a sample's ``nmae_precomputed`` in a doc's ``doc_meta`` text (split there; ``json`` escapes the NULs).
_NMAE_SLOT = "\x00nmae_precomputed\x00"
_ESCAPE = json.encoder.encode_basestring_ascii


def _float_texts(values: pl.Series, as_json: bool = False) -> pl.Series:
    """``repr`` of each float of a Float64 series (``as_json``: as ``json`` writes it, NaN and infinities spelled
    its way), each distinct bit pattern formatted once (``float_text.float_reprs``); null stays null."""
    bits = values.fill_null(0.0).to_numpy().view(np.uint64)
    distinct, inverse = np.unique(bits, return_inverse=True)
    floats = distinct.view(np.float64)
    texts = float_reprs(floats)
    if as_json and not np.isfinite(floats).all():
        texts = [_JSON_SPELLING.get(t, t) for t in texts]
    out = pl.Series("text", texts, dtype=pl.Utf8).gather(inverse.reshape(-1))
    return pl.select(pl.when(values.is_null()).then(None).otherwise(out)).to_series() if values.null_count() else out


#: ``repr``'s non-finite floats as ``json`` writes them.
_JSON_SPELLING = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _joined_texts(lists: pl.Series, sep: str) -> pl.Series:
    """Per list of floats its non-null elements' ``repr`` joined by ``sep`` (an empty or null list: ""): every
    element spelled in one ``_float_texts``, then each position's texts taken from it."""
    lengths = lists.list.len().fill_null(0).to_numpy().astype(np.int64)
    longest = int(lengths.max(initial=0))
    if not longest:
        return pl.Series([""] * len(lists), dtype=pl.Utf8)
    flat = _float_texts(lists.filter(pl.Series(lengths > 0)).explode().cast(pl.Float64))  # every element, in order
    starts = np.cumsum(lengths) - lengths
    positions = []
    for i in range(longest):
        inside = pl.Series(i < lengths)
        taken = flat.gather(np.where(i < lengths, starts + i, 0))
        positions.append(pl.when(inside).then(taken).otherwise(None))
    return pl.select(pl.concat_str(positions, separator=sep, ignore_nulls=True)).to_series()


def _target_texts(family: str, target: pl.Series) -> pl.Series:
    """Each row's ``_target`` as JSON text; null where ``_target`` refuses it (a null, A/D: none)."""
    lengths = target.list.len()
    refused = target.is_null() | (target.list.drop_nulls().list.len() != lengths)
    if family_spec(family).per_metric:
        refused = refused | (lengths == 0)
        text = _float_texts(target.list.first())
    else:
        text = pl.select(pl.when(lengths == 0).then(pl.lit("[]"))
                         .otherwise(pl.lit("[") + _joined_texts(target, ", ") + pl.lit("]"))).to_series()
    return pl.select(pl.when(refused.fill_null(True)).then(None)
                     .otherwise(pl.lit('"') + text + pl.lit('"'))).to_series()


def _response_texts(values: pl.Series) -> pl.Series:
    """Each row's ``_response`` as JSON text."""
    failed = values.is_null() | (values.list.len() == 0) | (values.list.drop_nulls().list.len() != values.list.len())
    return pl.select(pl.lit('"') + pl.when(failed.fill_null(True)).then(pl.lit(""))
                     .otherwise(_joined_texts(values, ",")) + pl.lit('"')).to_series()


def _docs_of(info: StoreInfo, cache: DocsCache) -> tuple[bytes, dict[str, dict[str, object]]]:
    """The content and each doc's ``doc_meta`` fields of a store's docs file, read through the typed reader once per
    distinct content in ``cache`` (the content is the key: hashing it is cheaper than a digest)."""
    path = os.path.join(info.ref.folder, DOCS)  # ``StoreLayout.docs``, without a Path each
    if isinstance(cache, DocsCache):
        content = cache.content(path)
    else:
        with open(path, "rb", buffering=0) as fh:  # a docs file is small: read whole
            content = fh.read()
    fields = cache.get(content)
    if fields is None:
        fields = cache[content] = {r.key: _meta_fields(r.doc) for r in iter_lines(Path(path), DocRow.from_json)}
    return content, fields


def _meta_pieces(family: str, docs: Mapping[str, Mapping[str, object]], scaled: bool,
                 nl: str) -> tuple[list[str], list[str], list[str]]:
    """(key, text before, text after) of each doc's ``doc_meta`` text at indent ``nl`` around its
    ``nmae_precomputed``; a doc without fields or whose text is not ``_put``'s is left out."""
    slot = _ESCAPE(_NMAE_SLOT)
    keys, heads, tails = [], [], []
    for key, doc in docs.items():
        if not doc:
            continue
        meta = doc_meta(family, doc, None, scaled)
        meta["nmae_precomputed"] = _NMAE_SLOT
        text = json_parts(meta, nl)
        if text is None or text.count(slot) != 1:
            continue
        head, tail = text.split(slot)
        keys.append(key)
        heads.append(head)
        tails.append(tail)
    return keys, heads, tails


def _meta_texts(family: str, rows: pl.DataFrame, stores: Mapping[int, StoreInfo], read: Sequence[int],
                cache: DocsCache) -> pl.Series:
    """Each row's ``doc_meta`` JSON text at its depth in the file: each doc's text written once per docs file and
    scale mode, the row's nMAE put in; null where its store is not in ``read``, the doc is missing, its text is not
    ``_put``'s, or its store's docs could not be read (``run_values`` then says or raises it)."""
    nl = "\n    " if family_spec(family).per_metric else "\n      "
    inner = nl + "    "
    piece_of: dict[tuple[bytes, bool], int] = {}
    store_piece: dict[int, int] = {}
    parts: list[pl.DataFrame] = []
    for sid in read:
        scaled = "scaledPS" in stores[sid].ref.task
        try:
            content, docs = _docs_of(stores[sid], cache)
        except Exception:  # run_values reads it again and raises it where it did
            continue
        if (content, scaled) not in piece_of:
            piece_of[(content, scaled)] = len(piece_of)
            keys, heads, tails = _meta_pieces(family, docs, scaled, nl)
            parts.append(pl.DataFrame({"_piece": [len(parts)] * len(keys), "key": keys, "_head": heads,
                                       "_tail": tails},
                                      schema={"_piece": pl.Int64, "key": pl.Utf8, "_head": pl.Utf8, "_tail": pl.Utf8}))
        store_piece[sid] = piece_of[(content, scaled)]
    if not parts:
        return pl.Series([None] * rows.height, dtype=pl.Utf8)
    nmae = rows["nMAE"]
    number = pl.select(pl.when(nmae.is_null()).then(pl.lit(f'{{{inner}"NMAE": null,{inner}"success": false{nl}  }}'))
                       .otherwise(pl.lit(f'{{{inner}"NMAE": ') + _float_texts(nmae, as_json=True)
                                  + pl.lit(f',{inner}"success": true{nl}  }}'))).to_series()
    pieces = rows.select(pl.col("store").replace_strict(store_piece, default=None, return_dtype=pl.Int64)
                         .alias("_piece"), "key").with_columns(number.alias("_number")) \
        .join(pl.concat(parts), on=["_piece", "key"], how="left", maintain_order="left")
    return pieces.select(pl.concat_str("_head", "_number", "_tail")).to_series()


def with_value_texts(family: str, frame: pl.DataFrame, stores: Mapping[int, StoreInfo],
                     docs_cache: DocsCache) -> pl.DataFrame:
    """The frame with ``TEXT_COLUMNS``: each row's pieces of upstream's per-sample file written once for all runs
    of the family (each distinct float formatted once, each doc's ``doc_meta`` once per docs file), which
    ``run_values_text`` joins; null for the rows of a store whose parsed rows are not a strict parse's file (a
    judged parse, scored in memory); the frame as it is where its rows lack the numbers ``load`` held."""
    if any(c not in frame.columns for c in (VALUES, TARGET, *(["nMAE"] if "nMAE" in SAMPLE_METRICS[family] else []))):
        return frame
    counted = frame.filter(pl.col("scored"))["store"].unique(maintain_order=True).to_list()
    read = [sid for sid in counted if stores[sid].source == PARSED  # (``_parsed_path``, without a Path each)
            and os.path.isfile(os.path.join(stores[sid].ref.folder, PARSED))]
    texts = [_target_texts(family, frame[TARGET]).alias(TEXT_COLUMNS[0]),
             _response_texts(frame[VALUES]).alias(TEXT_COLUMNS[1])]
    if family_spec(family).measure:
        texts.append(_meta_texts(family, frame, stores, read, docs_cache).alias(TEXT_COLUMNS[2]))
    mine = pl.col("store").is_in(read)
    return frame.with_columns(texts).with_columns(pl.when(mine).then(pl.col(c)).otherwise(None).alias(c)
                                                  for c in TEXT_COLUMNS[:len(texts)])


def run_values_text(family: str, frame: pl.DataFrame, stores: Mapping[int, StoreInfo],
                    docs_cache: DocsCache | None = None) -> str:
    """The text of ``run_values``' file as upstream's ``json.dump(..., indent=2)`` writes it: joined column-wise
    from the frame's ``TEXT_COLUMNS`` (``with_value_texts``) when a strict parse's held rows give every counted
    sample's texts; else ``run_values`` dumped as before."""
    text = _joined_file(family, frame, stores)
    return text if text is not None else dump_json(run_values(family, frame, stores, docs_cache))


def _joined_file(family: str, frame: pl.DataFrame, stores: Mapping[int, StoreInfo]) -> str | None:
    """``run_values_text`` from the text columns (``with_value_texts``: null for a store not strictly parsed);
    None where ``run_values`` decides (no text columns, a key held twice, a text missing, a group that is not
    text)."""
    return _joined_by_run(family, frame, stores, pl.lit(0)).get(0)


def joined_runs(family: str, frame: pl.DataFrame, stores: Mapping[int, StoreInfo]) -> dict[object, str]:
    """``run_values_text`` of every run (``label``) of a family's frame (``with_value_texts``) at once, each from
    its own rows as ``run_values_text`` of those rows would join them; a run it would not join is left out."""
    return _joined_by_run(family, frame, stores, pl.col("label"))


def _joined_by_run(family: str, frame: pl.DataFrame, stores: Mapping[int, StoreInfo],
                   run: pl.Expr) -> dict[object, str]:
    """Per run (the value of ``run``) the file joined from its rows' text columns; a run is left out where
    ``run_values`` decides (a key held twice, a store not strictly parsed, a text missing, a group that is not
    text; none at all without the text columns). A store is one run's: a key held twice is within a run."""
    spec = family_spec(family)
    needed = TEXT_COLUMNS if spec.measure else TEXT_COLUMNS[:2]
    if any(c not in frame.columns for c in needed):
        return {}
    frame = frame.with_columns(run.alias("_run"))
    counted = frame.filter(pl.col("scored")).select("_run", "store", "group", *needed)
    if not counted.height:
        return {}
    refused = set(frame.filter(pl.struct("store", "key").is_duplicated())["_run"].unique().to_list())
    refused |= {r for r, sid in counted.select("_run", "store").unique().iter_rows() if stores[sid].source != PARSED}
    missing = pl.any_horizontal(pl.col(c).is_null() for c in needed)
    if not spec.per_metric:
        missing = missing | pl.col("group").is_null()
    refused |= set(counted.filter(missing)["_run"].unique().to_list())
    if refused:
        counted = counted.filter(~pl.col("_run").is_in(list(refused)))
    target, response = (pl.col(c) for c in TEXT_COLUMNS[:2])
    if spec.per_metric:  # A/D: a record per sample
        labels = {g: _ESCAPE(g) for g in counted["group"].drop_nulls().unique().to_list()}
        records = counted.group_by("_run", maintain_order=True).agg(pl.concat_str(
            pl.lit('{\n    "label": '),
            pl.col("group").replace_strict(labels, default=None, return_dtype=pl.Utf8).fill_null("null"),
            pl.lit(',\n    "targets": '), target, pl.lit(',\n    "responses": [\n      '), response,
            pl.lit('\n    ],\n    "doc_meta": '), pl.col(TEXT_COLUMNS[2]), pl.lit("\n  }")).str.join(",\n  "))
        return {r: "[\n  " + text + "\n]" for r, text in records.iter_rows()}
    item = ",\n      "
    groups = counted.group_by("_run", "group", maintain_order=True).agg(
        target.str.join(item), response.str.join(item),
        *([pl.col(TEXT_COLUMNS[2]).str.join(item)] if spec.axes else []))
    parts: dict[object, list[str]] = {}
    for r, group, t, rs, *m in groups.iter_rows():
        metas = f',\n    "doc_metas": [\n      {m[0]}\n    ]' if spec.axes else ""
        parts.setdefault(r, []).append(f'{_ESCAPE(group)}: {{\n    "targets": [\n      {t}\n    ],\n'
                                       f'    "responses": [\n      {rs}\n    ]{metas}\n  }}')
    return {r: "{\n  " + ",\n  ".join(p) + "\n}" for r, p in parts.items()}
