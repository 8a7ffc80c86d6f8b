"""Re-score one store from its raw answers with the current parser and upstream's metrics (no model is asked).

The samples scored are the store's latest selection (``results.json`` -> ``selection``; every doc in
``docs.jsonl`` when there is no results file). A sample is answered when a segment holds an ``ok`` record for it
whose ``doc_sha`` matches ``docs.jsonl`` (first one wins), exactly as the runner decides, and it is scored by the
runner's own code path (``tasks.store_scoring.score_store``), on upstream's post-hoc metric path unless another is
asked for (``tasks.scoring.METRIC_PATHS``); results.json records the path and the scoring version. ``docs.jsonl``
rows of stores written before the upstream data layer are converted by ``data.docs.rundoc_from_store_row`` (the
target each sample was asked about is kept); such stores are marked as re-scored legacy stores.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medvision_bm.data.docs import RunDoc, rundoc_from_store_row
from medvision_bm.io import dumps, iter_jsonl, read_json, write_json_atomic, write_lines_atomic
from medvision_bm.score.store_scoring import RESULTS_SCHEMA, SCORING_VERSION, score_store
from medvision_bm.store.discovery import StoreRef
from medvision_bm.store.samples import SampleStore
from medvision_bm.tasks.scoring import DEFAULT_METRIC_PATH, METRIC_PATHS, aggregate_rows, protocol_settings


class StoreProblem(Exception):
    """A store that cannot be scored (the message names the folder and what is missing)."""


@dataclass
class StoreCounts:
    """How many samples a store has in each state, and how many of its lines were skipped."""

    selected: int = 0
    answered: int = 0
    success: int = 0
    parse_failed: int = 0
    request_failed: int = 0
    pending: int = 0
    bad_lines: int | None = None  # torn or non-JSON lines in samples/*.jsonl (None: not counted)
    foreign_lines: int | None = None  # lines of another answer signature, or without a key
    duplicates: int | None = None  # further ok records for an answered key (the first one wins)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Rescored:
    """The per-sample rows written to parsed.jsonl and what they add up to."""

    ref: StoreRef
    rows: list[dict[str, Any]]
    metrics: dict[str, Any]
    counts: StoreCounts
    parser: str  # the parser used ("strict-1" | "lastk-1")
    protocol: str
    rules: str
    legacy: bool = False
    notes: list[str] = field(default_factory=list)
    metric_path: str = DEFAULT_METRIC_PATH


def read_results(folder: Path) -> dict[str, Any] | None:
    try:
        data = read_json(folder / "results.json")
    except (OSError, ValueError):  # missing or unreadable: the store is scored without it
        return None
    return data if isinstance(data, dict) else None


def expected_count(selection: dict[str, Any] | None) -> int | None:
    """How many samples a recorded selection holds (None when unknown)."""
    try:
        if not selection:
            return None
        if "indices" in selection:
            return len({int(i) for i in selection["indices"]})
        if "limit" in selection:
            return int(selection["limit"])
        if "all" in selection:
            return int(selection["all"])
    except (TypeError, ValueError):
        return None
    return None


def select_rows(rows: list[dict[str, Any]], selection: dict[str, Any] | None) -> list[dict[str, Any]]:
    rows = sorted(rows, key=lambda r: (r.get("index", 0), r["key"]))
    if not selection:
        return rows
    if "indices" in selection:
        wanted = {int(i) for i in selection["indices"]}
        return [r for r in rows if r.get("index") in wanted]
    if "limit" in selection:
        return [r for r in rows if int(r.get("index", 0)) < int(selection["limit"])]
    return rows


def is_legacy_row(row: dict[str, Any]) -> bool:
    """A docs.jsonl row written before the upstream data layer (its doc has an ``annotation``)."""
    return isinstance(row.get("doc"), dict) and "annotation" in row["doc"]


@dataclass
class StoreDocs:
    """A store's selected samples as its runner asked them: the docs.jsonl rows, their RunDocs, the protocol."""

    chosen: list[dict[str, Any]]
    rundocs: list[RunDoc]
    protocol: str
    settings: dict[str, Any]  # the protocol's parser and metric rules
    legacy: bool  # rows written before the upstream data layer
    unreadable: int  # selected samples whose docs.jsonl line could not be read (counted as missing)
    notes: list[str]

    @property
    def shas(self) -> dict[str, Any]:
        return {row["key"]: row.get("doc_sha") for row in self.chosen}


def store_docs(ref: StoreRef) -> StoreDocs:
    """Read and check a store's docs.jsonl for its last selection (``parse``, ``summarize`` and ``judge`` alike);
    a store that cannot be scored raises StoreProblem with a one-line reason."""
    folder = ref.folder
    docs_path = folder / "docs.jsonl"
    if not docs_path.is_file():
        raise StoreProblem(f"store {folder} has no docs.jsonl (the run stopped before selecting samples); skipped")
    bad_docs = 0

    def on_bad(lineno: int, text: str) -> None:
        nonlocal bad_docs
        bad_docs += 1

    all_docs: dict[str, dict[str, Any]] = {}
    for rec in iter_jsonl(docs_path, on_bad_line=on_bad):
        if isinstance(rec.get("key"), str) and isinstance(rec.get("doc"), dict):
            all_docs[rec["key"]] = rec
    results = read_results(folder)
    selection = (results or {}).get("selection")
    chosen = select_rows(list(all_docs.values()), selection)
    # a corrupt docs.jsonl line loses its sample: it is counted as missing (pending), never dropped from the count
    expected = expected_count(selection)
    unreadable = max(0, expected - len(chosen)) if expected is not None else bad_docs
    notes = [f"store {folder}: {bad_docs} unreadable line(s) in docs.jsonl; {unreadable} selected sample(s) "
             "counted as missing (rerun the run command to restore them)"] if bad_docs else []
    if not chosen:
        raise StoreProblem(f"store {folder} has no usable rows in docs.jsonl; skipped")
    rundocs: list[RunDoc] = []
    try:
        for row in chosen:
            rundocs.append(rundoc_from_store_row(row))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise StoreProblem(f"store {folder}: docs.jsonl row {row.get('key')!r} is not a doc this version reads "
                           f"({type(exc).__name__}: {exc}); skipped") from None
    legacy = any(is_legacy_row(row) for row in chosen)
    protocols = {rd.protocol for rd in rundocs}
    if len(protocols) > 1:
        raise StoreProblem(f"store {folder}: docs.jsonl mixes protocols ({', '.join(sorted(protocols))}); skipped")
    protocol = rundocs[0].protocol
    try:
        settings = protocol_settings(protocol)
    except ValueError as exc:
        raise StoreProblem(f"store {folder}: {exc}; skipped") from None
    return StoreDocs(chosen, rundocs, protocol, settings, legacy, unreadable, notes)


def recorded_metric_path(results: dict[str, Any] | None) -> str:
    """The metric path a store's results.json says its scores follow; the default when it names none this version
    knows (a store scored before metric paths were recorded)."""
    path = (results or {}).get("metric_path")
    return path if path in METRIC_PATHS else DEFAULT_METRIC_PATH


def rescore(ref: StoreRef, parser: str | None = None, metric_path: str = DEFAULT_METRIC_PATH) -> Rescored:
    """Parse and score every selected sample of a store from its raw answers (``parser`` overrides the protocol's;
    ``metric_path``: upstream's post-hoc or eval-time scoring)."""
    folder = ref.folder
    sd = store_docs(ref)
    rundocs, protocol, settings, legacy, unreadable, notes = (
        sd.rundocs, sd.protocol, sd.settings, sd.legacy, sd.unreadable, sd.notes)
    state = SampleStore(folder, ref.answer_signature).read()
    scores, rows = score_store(rundocs, sd.shas, state, parser, metric_path)  # type: ignore[arg-type]
    counts = StoreCounts(
        selected=len(scores) + unreadable,
        answered=sum(s.status in ("ok", "parse_failed") for s in scores),
        success=sum(s.success for s in scores),
        parse_failed=sum(s.status == "parse_failed" for s in scores),
        request_failed=sum(s.status == "request_failed" for s in scores),
        pending=sum(s.status == "missing" for s in scores) + unreadable,
        bad_lines=state.bad_lines, foreign_lines=state.foreign_lines, duplicates=state.duplicates)
    metrics = aggregate_rows(ref.family, rows, settings["rules"])
    return Rescored(ref, rows, metrics, counts, parser or settings["parser"], protocol, settings["rules"], legacy,
                    notes, metric_path)


def write_rescored(res: Rescored) -> None:
    """Rewrite parsed.jsonl atomically and bring results.json's metrics and counts up to date."""
    folder = res.ref.folder
    write_lines_atomic(folder / "parsed.jsonl", (dumps(r) + "\n" for r in res.rows))
    results = read_results(folder)
    c = res.counts
    if results is None:
        results = {"schema": RESULTS_SCHEMA, "model_name": res.ref.model, "task": res.ref.task,
                   "family": res.ref.family, "answer_signature": res.ref.answer_signature,
                   "signature_inputs": res.ref.inputs, "written_by": "medvision-bm parse", "error": None}
    else:
        results.setdefault("metrics_at_run", results.get("metrics"))
        if res.legacy:
            results.setdefault("parser_version_at_run", results.get("parser_version"))
    counts = dict(results.get("counts") or {})
    counts.update({"selected": c.selected, "answered": c.answered, "request_failed": c.request_failed,
                   "pending": c.pending, "store_bad_lines": c.bad_lines, "store_foreign_lines": c.foreign_lines,
                   "store_duplicates": c.duplicates})
    results["counts"] = counts
    results["metrics"] = res.metrics
    results["complete"] = c.answered == c.selected and not results.get("error")
    results["protocol"] = res.protocol
    results["parser_version"] = res.parser
    results["metric_rules"] = res.rules
    results["metric_path"] = res.metric_path
    results["scoring_version"] = SCORING_VERSION
    if res.legacy:
        results["schema"] = RESULTS_SCHEMA
        results["legacy_store"] = True
        results["legacy_note"] = ("re-scored legacy store: written before the upstream data layer; its stored "
                                  "answers were scored with upstream's parser and metrics on the targets they were "
                                  "asked about (its prompts were not upstream's)")
    results["parsed_at"] = time.time()
    write_json_atomic(folder / "results.json", results)


@dataclass
class ParseOutcome:
    """One store after `medvision-bm parse`: success before and after, and the store's counts."""

    ref: StoreRef
    success_before: int | None
    counts: StoreCounts | None
    changed: int  # samples whose status or values changed
    problem: str | None = None
    parser: str | None = None
    legacy: bool = False
    metric_path: str | None = None


def _previous(folder: Path) -> dict[str, dict[str, Any]]:
    path = folder / "parsed.jsonl"
    if not path.is_file():
        return {}
    return {r["key"]: r for r in iter_jsonl(path) if isinstance(r.get("key"), str)}


def reparse_stores(refs: list[StoreRef], *, write: bool = True, parser: str | None = None,
                   metric_path: str = DEFAULT_METRIC_PATH) -> tuple[list[ParseOutcome], list[str]]:
    """Re-score every store; rewrite parsed.jsonl and results.json unless ``write`` is false."""
    outcomes: list[ParseOutcome] = []
    notes: list[str] = []
    for ref in refs:
        try:
            before = _previous(ref.folder)
            res = rescore(ref, parser, metric_path)
            if write:
                write_rescored(res)
        except StoreProblem as exc:
            problem = str(exc)
        except OSError as exc:  # a store we may not read or write (permissions, a folder in a file's place)
            problem = f"store {ref.folder}: {exc.strerror or exc} ({exc.filename or 'a store file'}); skipped"
        else:
            notes.extend(res.notes)
            changed = sum(1 for r in res.rows if (before.get(r["key"]) or {}).get("status") != r["status"]
                          or (before.get(r["key"]) or {}).get("values") != r["values"])
            success_before = sum(1 for r in before.values() if r.get("success")) if before else None
            outcomes.append(ParseOutcome(ref, success_before, res.counts, changed, parser=res.parser,
                                         legacy=res.legacy, metric_path=res.metric_path))
            continue
        outcomes.append(ParseOutcome(ref, None, None, 0, problem))
        notes.append(problem)
    return outcomes, notes


# ------------------------------------------------------------------------ stale stores, brought up to date in memory


@dataclass
class Refreshed:
    """What a stale store's parsed.jsonl lacks: the re-scored rows of the samples answered since it was written
    (parsed.jsonl's row format), and the lines skipped in the segments written since."""

    ref: StoreRef
    segments: list[Path]  # every segment, in the store's reading order (by name)
    new: set[str]  # the segments written after parsed.jsonl
    rows: list[dict[str, Any]] = field(default_factory=list)
    changed: set[str] = field(default_factory=set)
    bad_lines: int = 0
    foreign_lines: int = 0
    duplicates: int = 0
    new_records: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    old_status: dict[str, str] = field(default_factory=dict)  # changed key -> its status in parsed.jsonl
    index_of: dict[str, int] = field(default_factory=dict)  # changed key -> its index (docs.jsonl's order)
    metric_path: str = DEFAULT_METRIC_PATH  # the path parsed.jsonl was scored on (the new rows follow it)


class _Answers:
    """The answers of a few samples, as ``score_store`` reads a store (``tasks.store_scoring.AnswerLookup``)."""

    def __init__(self) -> None:
        self.ok: dict[tuple[str, Any], dict[str, Any]] = {}  # (key, doc_sha) -> first ok record
        self.failed: dict[str, dict[str, Any]] = {}  # key -> latest failed record

    def answer(self, key: str, doc_sha: str) -> dict[str, Any] | None:
        return self.ok.get((key, doc_sha))


def _file_mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _lines_with(paths: list[str], keys: set[str]) -> dict[str, list[bytes]]:
    """Per file, in file order, the lines that hold one of ``keys`` as a JSON string (any JSON spacing): one
    vectorised pre-filter over every file (polars, Aho-Corasick); callers parse the lines found and check the key
    and the store exactly."""
    import orjson
    import polars as pl

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


def changes_since_parse(ref: StoreRef, parsed_mtime: float,
                        metric_path: str = DEFAULT_METRIC_PATH) -> Refreshed | None:
    """First step of bringing a stale store up to date: read the segments written after parsed.jsonl (they hold
    the answers since) and name the samples they touch (``changed``; the caller keeps those of the selection, with
    their status in parsed.jsonl: ``old_status``). None when the store must be re-scored whole: docs.jsonl is newer
    than parsed.jsonl (a doc may have changed)."""
    folder = ref.folder
    if _file_mtime(folder / "docs.jsonl") > parsed_mtime:
        return None
    seg_dir = folder / "samples"
    segs = sorted(seg_dir.glob("*.jsonl")) if seg_dir.is_dir() else []
    out = Refreshed(ref, segs, {str(s) for s in segs if _file_mtime(s) > parsed_mtime}, metric_path=metric_path)

    def bad(lineno: int, text: str) -> None:
        out.bad_lines += 1

    for seg in segs:
        if str(seg) not in out.new:
            continue
        recs = out.new_records.setdefault(str(seg), [])
        for rec in iter_jsonl(seg, on_bad_line=bad):
            key = rec.get("key")
            if not isinstance(key, str) or rec.get("answer_signature") != ref.answer_signature:
                out.foreign_lines += 1
                continue
            recs.append(rec)
            out.changed.add(key)
    return out


def _docs_by_bisection(path: Path, wanted: dict[str, int]) -> dict[str, dict[str, Any]] | None:
    """docs.jsonl rows of ``wanted`` (key -> index), found by bisection over the file, which the runner writes sorted
    by (index, key): a few lines read per key, never the whole file. None when a key is not where that order puts it
    (another writer's order, a damaged line): the caller searches the file instead."""
    import mmap

    import orjson

    out: dict[str, dict[str, Any]] = {}
    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            size = len(mm)

            def line_at(start: int) -> tuple[int, dict[str, Any]]:
                end = mm.find(b"\n", start)
                end = size if end < 0 else end
                rec = orjson.loads(mm[start:end])
                if not isinstance(rec, dict):
                    raise ValueError("not a row")
                return end, rec

            def order(rec: dict[str, Any]) -> tuple[int, str]:
                idx = rec.get("index", 0)
                return (idx if isinstance(idx, int) else 0, str(rec.get("key")))

            for key, index in wanted.items():
                target, lo, hi = (index, key), 0, size
                while lo < hi:  # lo: the start of the first line not before the target
                    start = mm.rfind(b"\n", 0, (lo + hi) // 2) + 1
                    start = max(start, lo)
                    end, rec = line_at(start)
                    if order(rec) < target:
                        lo = end + 1
                    else:
                        hi = start
                if lo >= size:
                    return None
                _, rec = line_at(lo)
                if rec.get("key") != key:
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
    import orjson

    work = [p for p in pending if p.changed]
    docs_of: dict[int, dict[str, dict[str, Any]]] = {}
    search = []
    for n, p in enumerate(work):
        rows = _docs_by_bisection(p.ref.folder / "docs.jsonl", {k: p.index_of.get(k, 0) for k in p.changed})
        if rows is None:
            search.append(n)
        else:
            docs_of[n] = rows
    if search:
        found = _lines_with([str(work[n].ref.folder / "docs.jsonl") for n in search],
                            set().union(*(work[n].changed for n in search)))
        for n in search:
            rows = {}
            for line in found.get(str(work[n].ref.folder / "docs.jsonl"), []):
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(rec, dict) and rec.get("key") in work[n].changed and isinstance(rec.get("doc"), dict):
                    rows[rec["key"]] = rec
            docs_of[n] = rows
    need_old: dict[int, set[str]] = {}
    for n, p in enumerate(work):
        shas = {k: r.get("doc_sha") for k, r in docs_of[n].items()}
        settled = {r["key"] for recs in p.new_records.values() for r in recs
                   if r.get("status") == "ok" and r["key"] in shas and r.get("doc_sha") == shas[r["key"]]}
        need_old[n] = {k for k in p.changed if p.old_status.get(k) in ("ok", "parse_failed")
                       or (p.old_status.get(k) == "request_failed" and k not in settled)}
    paths = [str(s) for n, p in enumerate(work) if need_old[n] for s in p.segments if str(s) not in p.new]
    found = _lines_with(paths, set().union(*need_old.values())) if paths else {}
    results: list[Refreshed | None] = []
    n = 0
    for p in pending:
        if not p.changed:
            results.append(p)
            continue
        results.append(_rescore_changed(p, found, docs_of[n], need_old[n], orjson))
        n += 1
    return results


def _rescore_changed(p: Refreshed, found: dict[str, list[bytes]], rows: dict[str, dict[str, Any]],
                     need_old: set[str], orjson: Any) -> Refreshed | None:
    sig = p.ref.answer_signature
    state = _Answers()
    n_all: dict[tuple[str, Any], int] = {}
    n_old: dict[tuple[str, Any], int] = {}
    for seg in p.segments:
        name = str(seg)
        if name in p.new:
            recs = [r for r in p.new_records.get(name, []) if r["key"] in p.changed]
        else:
            recs = []
            for line in found.get(name, []):
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(rec, dict) and rec.get("key") in need_old and rec.get("answer_signature") == sig:
                    recs.append(rec)
        for rec in recs:  # the runner's reading rule (store.samples.SampleStore.read), for these samples only
            key, sha = rec["key"], rec.get("doc_sha")
            if rec.get("status") == "ok":
                state.ok.setdefault((key, sha), rec)
                n_all[(key, sha)] = n_all.get((key, sha), 0) + 1
                if name not in p.new:
                    n_old[(key, sha)] = n_old.get((key, sha), 0) + 1
            else:
                state.failed[key] = rec
    # further ok records of one sample: those the newer segments add (the older ones were counted at the last parse)
    p.duplicates = sum(n - 1 for n in n_all.values()) - sum(n - 1 for n in n_old.values())
    if set(rows) != p.changed or any(is_legacy_row(r) for r in rows.values()):
        return None
    chosen = sorted(rows.values(), key=lambda r: (r.get("index", 0), r["key"]))
    shas = {r["key"]: r.get("doc_sha") for r in chosen}
    for key in p.changed:  # an answer parsed.jsonl counted must be found again
        if p.old_status.get(key) in ("ok", "parse_failed") and state.answer(key, shas[key]) is None:
            return None
    try:
        rundocs = [rundoc_from_store_row(r) for r in chosen]
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    _, p.rows = score_store(rundocs, shas, state, metric_path=p.metric_path)  # type: ignore[arg-type]
    p.new_records = {}
    return p
