"""Re-score one store from its raw answers with the current parser and upstream's metrics (no model is asked).

The samples scored are the store's latest selection (``results.json`` -> ``selection``; every doc in
``docs.jsonl`` when there is no results file). A sample is answered when a segment holds an ``ok`` record for it
whose ``doc_sha`` matches ``docs.jsonl`` (first one wins), exactly as the runner decides, and it is scored by the
runner's own code path (``tasks.store_scoring.score_store``). ``docs.jsonl`` rows of stores written before the
upstream data layer are converted by ``data.docs.rundoc_from_store_row`` (the target each sample was asked about is
kept); such stores are marked as re-scored legacy stores.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medvision_bm.data.docs import RunDoc, rundoc_from_store_row
from medvision_bm.io import dumps, iter_jsonl, read_json, write_json_atomic, write_text_atomic
from medvision_bm.report.stores import StoreRef
from medvision_bm.runner.store import SampleStore
from medvision_bm.tasks.scoring import aggregate_rows, protocol_settings
from medvision_bm.tasks.store_scoring import RESULTS_SCHEMA, score_store


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


def read_results(folder: Path) -> dict[str, Any] | None:
    try:
        data = read_json(folder / "results.json")
    except (OSError, ValueError):  # missing or unreadable: the store is scored without it
        return None
    return data if isinstance(data, dict) else None


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


def rescore(ref: StoreRef, parser: str | None = None) -> Rescored:
    """Parse and score every selected sample of a store from its raw answers (``parser`` overrides the protocol's)."""
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
    notes = [f"store {folder}: {bad_docs} unreadable line(s) in docs.jsonl skipped"] if bad_docs else []
    results = read_results(folder)
    chosen = select_rows(list(all_docs.values()), (results or {}).get("selection"))
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
    shas = {row["key"]: row.get("doc_sha") for row in chosen}
    state = SampleStore(folder, ref.answer_signature).read()
    scores, rows = score_store(rundocs, shas, state, parser)  # type: ignore[arg-type]
    counts = StoreCounts(
        selected=len(scores),
        answered=sum(s.status in ("ok", "parse_failed") for s in scores),
        success=sum(s.success for s in scores),
        parse_failed=sum(s.status == "parse_failed" for s in scores),
        request_failed=sum(s.status == "request_failed" for s in scores),
        pending=sum(s.status == "missing" for s in scores),
        bad_lines=state.bad_lines, foreign_lines=state.foreign_lines, duplicates=state.duplicates)
    metrics = aggregate_rows(ref.family, rows, settings["rules"])
    return Rescored(ref, rows, metrics, counts, parser or settings["parser"], protocol, settings["rules"], legacy,
                    notes)


def write_rescored(res: Rescored) -> None:
    """Rewrite parsed.jsonl atomically and bring results.json's metrics and counts up to date."""
    folder = res.ref.folder
    write_text_atomic(folder / "parsed.jsonl", "".join(dumps(r) + "\n" for r in res.rows))
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


def _previous(folder: Path) -> dict[str, dict[str, Any]]:
    path = folder / "parsed.jsonl"
    if not path.is_file():
        return {}
    return {r["key"]: r for r in iter_jsonl(path) if isinstance(r.get("key"), str)}


def reparse_stores(refs: list[StoreRef], *, write: bool = True,
                   parser: str | None = None) -> tuple[list[ParseOutcome], list[str]]:
    """Re-score every store; rewrite parsed.jsonl and results.json unless ``write`` is false."""
    outcomes: list[ParseOutcome] = []
    notes: list[str] = []
    for ref in refs:
        try:
            before = _previous(ref.folder)
            res = rescore(ref, parser)
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
                                         legacy=res.legacy))
            continue
        outcomes.append(ParseOutcome(ref, None, None, 0, problem))
        notes.append(problem)
    return outcomes, notes
