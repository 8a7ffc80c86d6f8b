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

import dataclasses
import time
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, BinaryIO, Protocol, TypeVar

import numpy as np
import orjson

from medvision_bm.data.docs import RunDoc
from medvision_bm.jsontypes import JsonValue
from medvision_bm.score.follow import follow, read_index, store_rows
from medvision_bm.score.store_scoring import SCORING_VERSION, score_store
from medvision_bm.store.discovery import StoreRef
from medvision_bm.store.freshness import inputs_written_ns
from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.packed import PackedTexts
from medvision_bm.store.records import (
    RESULTS_SCHEMA,
    Counts,
    DocRow,
    NewerRecord,
    ParsedRow,
    ResultsRecord,
    Selection,
    iter_lines,
    iter_lines_with,
)
from medvision_bm.store.samples import SampleStore, line_hash, read_doc_sums
from medvision_bm.store.signature import selected_index
from medvision_bm.tasks.scoring import (
    DEFAULT_METRIC_PATH,
    METRIC_PATHS,
    ProtocolSettings,
    aggregate_rows,
    protocol_settings,
)
from medvision_bm.tasks.upstream_parse import SampleStatus


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

    def to_json(self) -> dict[str, int | None]:
        return dict(self.__dict__)


@dataclass
class Rescored:
    """The per-sample rows written to parsed.jsonl and what they add up to."""

    ref: StoreRef
    rows: list[ParsedRow]
    metrics: dict[str, Any]
    counts: StoreCounts
    parser: str  # the parser used ("strict-1" | "lastk-1")
    protocol: str
    rules: str
    legacy: bool = False
    notes: list[str] = field(default_factory=list)
    metric_path: str = DEFAULT_METRIC_PATH
    shas: list[str] = field(default_factory=list, repr=False)  # the rows' doc hashes (docs.jsonl's)
    state: Any = field(default=None, repr=False)  # the store's answers the rows were scored from
    parser_asked: str | None = None  # the parser asked for (None: the protocol's)


def expected_count(selection: Selection | None) -> int | None:
    """How many samples a recorded selection holds (None when unknown)."""
    return selection.expected() if selection else None


class _Placed(Protocol):
    """What a selection is made from: a docs.jsonl row's index and its place in the file's order."""

    @property
    def index(self) -> int: ...

    @property
    def order(self) -> tuple[int, str]: ...


_Row = TypeVar("_Row", bound=_Placed)


def select_rows(rows: Sequence[_Row], selection: Selection | None) -> list[_Row]:
    """The rows at the indices of a recorded selection (``signature.selected_index``), in docs.jsonl's order. The
    runner keeps exactly its selection's rows at those indices in docs.jsonl (the rows the data no longer has are
    set apart), so these are the samples the run reported."""
    selected = selected_index(selection)
    return [r for r in sorted(rows, key=lambda r: r.order) if selected(r.index)]


@dataclass
class StoreDocs:
    """A store's selected samples as its runner asked them: the docs.jsonl rows, their RunDocs, the protocol."""

    chosen: list[DocRow]
    rundocs: list[RunDoc]
    protocol: str
    settings: ProtocolSettings  # the protocol's parser and metric rules
    legacy: bool  # rows written before the upstream data layer
    unreadable: int  # selected samples whose docs.jsonl line could not be read (counted as missing)
    notes: list[str]

    @cached_property
    def shas(self) -> dict[str, Any]:
        """Each chosen sample's doc hash by key (built once: callers look keys up one by one)."""
        return {row.key: row.doc_sha for row in self.chosen}


def store_docs(ref: StoreRef) -> StoreDocs:
    """Read and check a store's docs.jsonl for its last selection (``parse``, ``summarize`` and ``judge`` alike);
    a store that cannot be scored raises StoreProblem with a one-line reason."""
    folder = ref.folder
    files = StoreLayout(folder)
    if not files.docs.is_file():
        raise StoreProblem(f"store {folder} has no docs.jsonl (the run stopped before selecting samples); skipped")
    bad_docs = 0

    def on_bad() -> None:
        nonlocal bad_docs
        bad_docs += 1

    all_docs: dict[str, DocRow] = {}
    sum_of: dict[str, int] = {}  # key -> the hash of its line
    for line, row in iter_lines_with(files.docs, DocRow.from_json, on_bad):
        all_docs[row.key] = row
        sum_of[row.key] = line_hash(line)
    results = ResultsRecord.read(files.results())
    selection = results.selection if results is not None else None
    chosen = select_rows(list(all_docs.values()), selection)
    expected = expected_count(selection)
    if expected is not None and len(chosen) > expected:  # an older version kept rows the data no longer had
        raise StoreProblem(f"store {folder}: docs.jsonl holds {len(chosen)} rows for the last run's selection of "
                           f"{expected} sample(s) (rows of samples the data no longer has, kept by an older version "
                           "of medvision-bm): rerun the run command to set them apart; skipped")
    # a row edited since the suite wrote it is never trusted: its sample is counted as missing, as is the sample of
    # a corrupt line (never dropped from the count)
    sums = read_doc_sums(files)
    edited: list[str] = []
    if sums is not None and chosen:
        known = np.isin(np.fromiter((sum_of[r.key] for r in chosen), dtype=np.uint64, count=len(chosen)), sums)
        if not known.all():
            edited = [r.key for r, ok in zip(chosen, known.tolist()) if not ok]
            chosen = [r for r, ok in zip(chosen, known.tolist()) if ok]
    unreadable = max(0, expected - len(chosen)) if expected is not None else bad_docs + len(edited)
    notes = [f"store {folder}: {bad_docs} unreadable line(s) in docs.jsonl; {unreadable} selected sample(s) "
             "counted as missing (rerun the run command to restore them)"] if bad_docs else []
    if edited:
        notes.append(f"store {folder}: {len(edited)} docs.jsonl row(s) changed since medvision-bm wrote them "
                     f"({', '.join(edited[:3])}{', ...' if len(edited) > 3 else ''}): never scored, counted as "
                     "missing (rerun the run command to restore them from the data)")
    gone = _count_lines(files.docs_gone)
    if gone:
        notes.append(f"store {folder}: {gone} sample(s) the data no longer had at the last run are set apart in "
                     f"{files.docs_gone.name}: not scored")
    if not chosen:
        why = " (each selected row changed since medvision-bm wrote it: rerun the run command)" if edited else ""
        raise StoreProblem(f"store {folder} has no usable rows in docs.jsonl{why}; skipped")
    rundocs: list[RunDoc] = []
    try:
        for row in chosen:
            rundocs.append(row.rundoc())
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise StoreProblem(f"store {folder}: docs.jsonl row {row.key!r} is not a doc this version reads "
                           f"({type(exc).__name__}: {exc}); skipped") from None
    legacy = any(row.legacy for row in chosen)
    protocols = {rd.protocol for rd in rundocs}
    if len(protocols) > 1:
        raise StoreProblem(f"store {folder}: docs.jsonl mixes protocols ({', '.join(sorted(protocols))}); skipped")
    protocol = rundocs[0].protocol
    try:
        settings = protocol_settings(protocol)
    except ValueError as exc:
        raise StoreProblem(f"store {folder}: {exc}; skipped") from None
    return StoreDocs(chosen, rundocs, protocol, settings, legacy, unreadable, notes)


def _count_lines(path: Path) -> int:
    """Lines in a small file of the store (0 when there is none)."""
    if not path.is_file():
        return 0
    with open(path, "rb") as fh:
        return sum(1 for raw in fh if raw.strip())


def recorded_metric_path(results: ResultsRecord | None) -> str:
    """The metric path a store's results.json says its scores follow; the default when it names none this version
    knows (a store scored before metric paths were recorded)."""
    path = results.metric_path if results is not None else None
    return path if path in METRIC_PATHS else DEFAULT_METRIC_PATH


def rescore(ref: StoreRef, parser: str | None = None, metric_path: str = DEFAULT_METRIC_PATH) -> Rescored:
    """Parse and score every selected sample of a store from its raw answers (``parser`` overrides the protocol's;
    ``metric_path``: upstream's post-hoc or eval-time scoring)."""
    folder = ref.folder
    sd = store_docs(ref)
    rundocs, protocol, settings, legacy, unreadable, notes = (
        sd.rundocs, sd.protocol, sd.settings, sd.legacy, sd.unreadable, sd.notes)
    state = SampleStore(folder, ref.answer_signature).read()
    scores, rows = score_store(rundocs, sd.shas, state, parser, metric_path)
    counts = StoreCounts(
        selected=len(scores) + unreadable,
        answered=sum(s.status.answered for s in scores),
        success=sum(s.success for s in scores),
        parse_failed=sum(s.status == SampleStatus.PARSE_FAILED for s in scores),
        request_failed=sum(s.status == SampleStatus.REQUEST_FAILED for s in scores),
        pending=sum(s.status == SampleStatus.MISSING for s in scores) + unreadable,
        bad_lines=state.bad_lines, foreign_lines=state.foreign_lines, duplicates=state.duplicates)
    metrics = aggregate_rows(ref.family, [r.to_json() for r in rows], settings.rules)
    return Rescored(ref, rows, metrics, counts, parser or settings.parser, protocol, settings.rules, legacy,
                    notes, metric_path, [sd.shas[r.key] for r in rows], state, parser)


LEGACY_NOTE = ("re-scored legacy store: written before the upstream data layer; its stored answers were scored with "
               "upstream's parser and metrics on the targets they were asked about (its prompts were not upstream's)")


def write_rescored(res: Rescored) -> None:
    """Rewrite parsed.jsonl atomically and bring results.json's metrics and counts up to date."""
    files = StoreLayout(res.ref.folder)
    store_rows(files, res.rows, res.shas, res.state, res.ref.family, res.protocol, parser=res.parser_asked,
               metric_path=res.metric_path)
    _write_results(res.ref, res.counts, res.metrics, res.protocol, res.parser, res.rules, res.metric_path,
                   res.legacy)


def _write_results(ref: StoreRef, c: StoreCounts, metrics: Mapping[str, JsonValue], protocol: str, parser: str, rules: str,
                   metric_path: str, legacy_store: bool) -> None:
    """Bring results.json's metrics and counts up to date with a re-score."""
    files = StoreLayout(ref.folder)
    results = ResultsRecord.read(files.results())
    if results is None:
        results = ResultsRecord(model_name=ref.model, task=ref.task, family=ref.family,
                                answer_signature=ref.answer_signature, signature_inputs=ref.inputs,
                                written_by="medvision-bm parse")
    elif results.parsed_at is None:  # parsed for the first time: keep what the run (or the import) said
        results = dataclasses.replace(
            results, metrics_at_run=results.metrics_at_run or results.metrics,
            parser_version_at_run=(results.parser_version_at_run or results.parser_version) if legacy_store
            else results.parser_version_at_run)
    counts = Counts.of_parse(results.counts, selected=c.selected, answered=c.answered,
                             request_failed=c.request_failed, pending=c.pending, bad_lines=c.bad_lines,
                             foreign_lines=c.foreign_lines, duplicates=c.duplicates)
    legacy: dict[str, Any] = ({"schema": RESULTS_SCHEMA, "legacy_store": True, "legacy_note": LEGACY_NOTE}
                              if legacy_store else {})
    results = dataclasses.replace(
        results, counts=counts, metrics=metrics, complete=c.answered == c.selected and not results.error,
        protocol=protocol, parser_version=parser, metric_rules=rules, metric_path=metric_path,
        scoring_version=SCORING_VERSION, parsed_at=time.time(), **legacy)
    results.write(files.results())


class DocsFileSelection:
    """A store's selection read from its docs.jsonl in one pass, in selection order: each row's key, doc hash and
    where its line starts are held (packed: about their length and 24 bytes a sample), and a RunDoc is made from its line only when it is
    read (``rundocs``, ``rundoc``; a ``score.follow.Selection``)."""

    def __init__(self, path: Path, keys: Sequence[str], shas: Sequence[str], offsets: np.ndarray,
                 protocol: str) -> None:
        self.path, self.keys, self.shas, self.offsets, self.protocol = path, keys, shas, offsets, protocol
        self._fh: BinaryIO | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def rundoc(self, position: int) -> RunDoc:
        """The RunDoc at one position (the file kept open between calls: ``close``); a row this version cannot read
        as a doc is a StoreProblem naming it, as ``store_docs`` says it."""
        if self._fh is None:
            self._fh = open(self.path, "rb")  # noqa: SIM115 (kept open across calls; closed by close())
        self._fh.seek(int(self.offsets[position]))
        try:
            return DocRow.from_json(orjson.loads(self._fh.readline())).rundoc()
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise StoreProblem(f"store {self.path.parent}: docs.jsonl row {self.keys[position]!r} is not a doc this "
                               f"version reads ({type(exc).__name__}: {exc}); skipped") from None

    def rundocs(self, positions: Sequence[int]) -> Iterator[RunDoc]:
        """The RunDocs at these positions (ascending), each read from its line."""
        try:
            for pos in positions:
                yield self.rundoc(int(pos))
        finally:
            self.close()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def docs_file_selection(ref: StoreRef) -> DocsFileSelection | None:
    """The store's last selection read in one pass over docs.jsonl without holding its docs; None when the store
    needs the whole-store reading (``store_docs``) that counts and names its problems: a legacy row, a line that is
    not a docs.jsonl row, rows missing from the selection or edited since the suite wrote them, mixed protocols.
    A store with no docs.jsonl, no selected row or an unknown protocol is a StoreProblem; a newer row, NewerRecord."""
    files = StoreLayout(ref.folder)
    if not files.docs.is_file():
        raise StoreProblem(f"store {ref.folder} has no docs.jsonl (the run stopped before selecting samples); skipped")
    keys, shas = PackedTexts(), PackedTexts()
    index, offsets, sums, protos, key_hashes = array("q"), array("q"), array("Q"), array("H"), array("q")
    proto_ids: dict[str | None, int] = {}
    with open(files.docs, "rb") as fh:
        offset = 0
        for raw in fh:
            line = raw.strip()
            if line:
                try:
                    row = DocRow.from_json(orjson.loads(line))
                except NewerRecord as exc:
                    raise NewerRecord(f"{files.docs}: {exc}") from None
                except ValueError:  # not JSON, or not a docs.jsonl row: the whole-store reading reports it
                    return None
                if row.legacy:
                    return None
                keys.append(row.key)
                shas.append(str(row.doc_sha))  # (a missing hash counts as its text wherever it is compared)
                index.append(row.index)
                offsets.append(offset)
                sums.append(line_hash(line))
                protos.append(proto_ids.setdefault(row.protocol, len(proto_ids)))
                key_hashes.append(hash(row.key))
            offset += len(raw)
    if len(np.unique(np.frombuffer(key_hashes, dtype=np.int64))) != len(key_hashes):
        return None  # a key written twice: the whole-store reading keeps the later row, as it always has
    results = ResultsRecord.read(files.results())
    selection = results.selection if results is not None else None
    idx = np.frombuffer(index, dtype=np.int64)
    order = np.argsort(idx, kind="stable")
    if len(order) > 1 and bool((np.diff(idx[order]) == 0).any()):  # rows share an index: docs.jsonl's (index, key)
        order = np.array(sorted(range(len(keys)), key=lambda i: (index[i], keys[i])), dtype=np.int64)
    selected = selected_index(selection)
    chosen = order[np.fromiter((selected(int(i)) for i in idx[order]), dtype=bool, count=len(order))]
    if not len(chosen):
        raise StoreProblem(f"store {ref.folder} has no usable rows in docs.jsonl; skipped")
    expected, known = expected_count(selection), read_doc_sums(files)
    if (expected is not None and len(chosen) != expected) or (known is not None and not np.isin(
            np.frombuffer(sums, dtype=np.uint64)[chosen], known).all()):
        return None  # rows missing or edited: counted and named by the whole-store reading
    used = np.unique(np.frombuffer(protos, dtype=np.uint16)[chosen])
    protocol = next(p for p, i in proto_ids.items() if i == int(used[0]))
    if len(used) > 1 or protocol is None:
        return None
    return DocsFileSelection(files.docs, keys.take(chosen), shas.take(chosen),
                             np.frombuffer(offsets, dtype=np.int64)[chosen].copy(), str(protocol))


@dataclass(frozen=True)
class Streamed:
    """A store re-scored by :func:`rescore_streamed`: its counts and parser, how many rows were scored again (the
    others were kept), how many of those say something new, and the successes before (None: not known)."""

    counts: StoreCounts
    parser: str
    metric_path: str
    rescored: int
    changed: int
    success_before: int | None
    legacy: bool = False
    notes: tuple[str, ...] = ()


def rescore_streamed(ref: StoreRef, parser: str | None = None, metric_path: str = DEFAULT_METRIC_PATH, *,
                     reuse: bool = True) -> Streamed:
    """Re-score a store as ``write_rescored(rescore(ref, parser, metric_path))`` does, in memory that does not hold
    its samples: one pass over docs.jsonl keeps each selected row's key, doc hash and place; ``score.follow`` scores
    the samples whose answer or doc changed since parsed.jsonl was written (every sample with ``reuse=False``, or
    under another parser or metric path), one at a time, and copies every other row; results.json gets the same counts
    and metrics. A legacy store, an unreadable docs.jsonl line or mixed protocols are left to ``rescore``, which
    reports them (raises StoreProblem then, as ``rescore`` does)."""
    files = StoreLayout(ref.folder)
    inputs_ns = inputs_written_ns(ref.folder)  # before docs and answers are read
    chosen = docs_file_selection(ref)
    if chosen is None:
        return _rescore_held(ref, parser, metric_path)
    protocol = chosen.protocol
    try:
        settings = protocol_settings(protocol)
    except ValueError as exc:
        raise StoreProblem(f"store {ref.folder}: {exc}; skipped") from None
    state = SampleStore(ref.folder, ref.answer_signature).read()
    followed = follow(files, chosen, state, ref.family, protocol,
                      parser=parser, metric_path=metric_path, reuse=reuse, inputs_ns=inputs_ns)
    c = followed.counts()
    counts = StoreCounts(
        selected=c["selected"], answered=c["answered"], success=int(followed.rows["success"].sum()),
        parse_failed=followed.status_counts()[SampleStatus.PARSE_FAILED], request_failed=c["request_failed"],
        pending=c["pending"], bad_lines=state.bad_lines, foreign_lines=state.foreign_lines,
        duplicates=state.duplicates)
    used = parser or settings.parser
    _write_results(ref, counts, followed.metrics(), protocol, used, settings.rules, metric_path, False)
    return Streamed(counts, used, metric_path, followed.rescored, followed.changed, None)


def _changed(before: dict[str, ParsedRow], rows: Sequence[ParsedRow]) -> int:
    return sum(1 for r in rows if before.get(r.key) is None or before[r.key].status != r.status
               or before[r.key].values != r.values)


def _rescore_held(ref: StoreRef, parser: str | None = None, metric_path: str = DEFAULT_METRIC_PATH,
                  write: bool = True) -> Streamed:
    """The whole-store re-score in memory (written unless ``write`` is false), counted as the streamed one is."""
    before = _previous(ref.folder)
    res = rescore(ref, parser, metric_path)
    if write:
        write_rescored(res)
    return Streamed(res.counts, res.parser, res.metric_path, len(res.rows), _changed(before, res.rows),
                    sum(1 for r in before.values() if r.success) if before else None, res.legacy, tuple(res.notes))


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
    rescored: int | None = None  # samples scored again (the others were kept as they were)


def _previous(folder: Path) -> dict[str, ParsedRow]:
    path = StoreLayout(folder).parsed()
    if not path.is_file():
        return {}
    return {r.key: r for r in iter_lines(path, ParsedRow.from_json)}


def reparse_stores(refs: list[StoreRef], *, write: bool = True, parser: str | None = None,
                   metric_path: str = DEFAULT_METRIC_PATH, force: bool = False) -> tuple[list[ParseOutcome], list[str]]:
    """Re-score the stores. Written (``write``): each follows its answers as a run's resume does (only the samples
    whose answer, doc or scoring changed are scored again; all of them with ``force``), streamed one sample at a
    time; a dry run scores every sample in memory and writes nothing."""
    outcomes: list[ParseOutcome] = []
    notes: list[str] = []
    for ref in refs:
        try:
            if write and _indexed(ref.folder):
                pre = _successes(ref.folder)  # read before parsed.jsonl is rewritten
                done = dataclasses.replace(rescore_streamed(ref, parser, metric_path, reuse=not force),
                                           success_before=pre)
            else:  # a dry run, or parsed.jsonl without the index that says what it holds
                done = _rescore_held(ref, parser, metric_path, write=write)
        except StoreProblem as exc:
            problem = str(exc)
        except OSError as exc:  # a store we may not read or write (permissions, a folder in a file's place)
            problem = f"store {ref.folder}: {exc.strerror or exc} ({exc.filename or 'a store file'}); skipped"
        else:
            notes.extend(done.notes)
            outcomes.append(ParseOutcome(ref, done.success_before, done.counts, done.changed, parser=done.parser,
                                         legacy=done.legacy, metric_path=done.metric_path, rescored=done.rescored))
            continue
        outcomes.append(ParseOutcome(ref, None, None, 0, problem))
        notes.append(problem)
    return outcomes, notes


def _indexed(folder: Path) -> bool:
    """Whether a store's parsed.jsonl is described by its index (or there is none yet): changes can be counted from
    the index, so the store is re-scored streamed."""
    files = StoreLayout(folder)
    return not files.parsed().is_file() or read_index(files.parsed_index(), files.parsed(), None) is not None


def _successes(folder: Path) -> int | None:
    """The successes parsed.jsonl holds (None: there is none): from its index where it describes this parsed.jsonl,
    else counted line by line."""
    files = StoreLayout(folder)
    path = files.parsed()
    if not path.is_file():
        return None
    index = read_index(files.parsed_index(), path, None)
    if index is not None:
        return int(index["success"].sum())
    return sum(1 for r in iter_lines(path, ParsedRow.from_json) if r.success)
