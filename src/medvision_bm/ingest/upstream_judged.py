"""`medvision-bm import` of upstream's judged runs: ``llm-parsed_<judge>/`` records -> the judged parse of the store
that holds the same answers, so that ``summarize --parse judged`` reports upstream's judge.

Upstream's layout and fields (YongchengYAO/MedVision ``script/llm-parsing/apply_judge.py``, ``judge_io.py`` and
``judge_config.py`` @2f20f64): ``Results/<task_tag>/<model>/llm-parsed_<judge>/<same name as parsed/>.jsonl``, whose
names are the raw samples files' (``<ts>_samples_<task>.jsonl``); each record is its ``parsed/`` copy (the raw
lmms-eval record: ``doc_id``, ``doc``, ``target``, ``resps``) with ``filtered_resps`` replaced by
``LLM_filtered_resps`` (``[pred]``: the strict parser's numbers where it succeeded, the judge's span-verified numbers
for a recovery, "" otherwise, comma-joined), the metric blocks re-computed, ``LLM_judge_answer_mode`` (one of the four
answer modes), ``LLM_judge_SR`` and ``LLM_judge`` (``reason``, ``strict_pred``, ``judge_pred``, ``judge_span``,
``judge_model``, ``verify_tier``). ``llm-parsed_<judge>-limit<N>/`` folders are pilot runs over N records per file and
are not read.

Each judged record is keyed to our doc as a raw record is (``upstream.DocMatcher``) and counts only when the answer
the judge read (``resps[0][0]``) is the answer the store holds for that doc (the raw import keeps the newest
timestamp; a judged file of an older one is counted as superseded). Upstream's decision is taken as recorded (mode,
reason, predictions) and scored by our code exactly as a judge run here scores its own (``score/judged.py``): the
numbers a judged parse gives are the same whether the same verdicts came from upstream's judge or from
``medvision-bm judge``.

The judge signature names the upstream judge from its folder alone (``imported: upstream-llm-parsed``, the judge
``llm-parsed_<judge>`` names, the decision rule), so every folder of one model judged by that judge, imported at
once or one after the other, feeds one judged parse; the files it was read from (path, sha256, records) and the
``judge_model`` names their records give sit in ``judge.json`` beside it under ``import``, outside the hash.
Records are read one at a time and reduced to one verdict per doc as they come (a later record of a doc and answer
already judged is counted as a duplicate); a verdict an earlier import made is kept while it judges the answer the
store still holds (each verdict keeps a hash of the answer it judged). Layout: ``<store>/judged/<sig12>/`` with
``judge.json``, ``answers/upstream-import.jsonl`` (the verdict per sample, rewritten whole), ``parsed.jsonl`` and
``results.json``.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, SupportsInt, TypeGuard

import numpy as np
import orjson

from medvision_bm import limits
from medvision_bm.data.docs import RunDoc
from medvision_bm.data.layout import parse_task_name
from medvision_bm.errors import UserError
from medvision_bm.ingest.upstream_files import (
    Candidate,
    UpstreamFile,
    file_sha256,
    imported_sources,
    iter_samples,
    split_samples_name,
)
from medvision_bm.ingest.upstream_match import DocMatcher
from medvision_bm.io import atomic_path, dumps, jsonable
from medvision_bm.jsontypes import JsonObject, JsonValue
from medvision_bm.paths import component_problem, show
from medvision_bm.score.follow import ListSelection
from medvision_bm.score.judged import (
    ANSWER_MODES,
    SUCCESS_MODES,
    Decision,
    judged_row,
    judged_score,
    write_judged_parse,
)
from medvision_bm.score.rescore import DocsFileSelection, StoreProblem, docs_file_selection, store_docs
from medvision_bm.store.discovery import StoreRef
from medvision_bm.store.judged import JUDGE_PARSER_VERSION, judged_parses
from medvision_bm.store.layout import SIGNATURE, JudgedLayout, StoreLayout
from medvision_bm.store.records import JudgeFile, NewerRecord, ParsedRow, SignatureRecord
from medvision_bm.store.samples import SampleStore, StoreState, line_hash
from medvision_bm.store.signature import digest
from medvision_bm.tasks.families import family_spec
from medvision_bm.tasks.scoring import failed_score, protocol_settings, score_answer, target
from medvision_bm.tasks.upstream_parse import is_request_failure, parse_upstream

JUDGED_FORMAT = "upstream-llm-parsed"
SEGMENT = "upstream-import.jsonl"
_DIR_RE = re.compile(r"^llm-parsed(_.+)?$")
_LIMIT_RE = re.compile(r"-limit\d+$")
#: upstream's non-sample files in parsed folders (judge_config.py EXCLUDED_JSONL_STEMS @2f20f64)
_EXCLUDED_STEMS = ("_proc_acc", "_eq_acc", "_judge")
_KEEP = ("LLM_filtered_resps", "LLM_judge_answer_mode", "LLM_judge")


@dataclass
class JudgedFile:
    path: Path
    judge_dir: str  # llm-parsed_<judge>
    model_dir: Path
    task: str
    timestamp: str


@dataclass
class JudgedImport:
    """What one judged import into one store did."""

    model: str
    task: str
    judge_dir: str
    store: Path | None = None
    judged_folder: Path | None = None
    records: int = 0
    used: int = 0  # records whose answer is the store's
    superseded: int = 0  # records of an answer the store no longer holds (a newer timestamp replaced it)
    unmatched: list[str] = field(default_factory=list)
    strict_mismatch: int = 0  # records whose strict prediction our strict parser does not reproduce
    not_judged: int = 0  # strict failures of the store with no judged record
    duplicates: int = 0  # further records of a doc and answer already judged in this import (the later one wins)
    kept: int = 0  # verdicts an earlier import made that still judge the store's answers (kept as they are)
    notes: list[str] = field(default_factory=list)


def find_judged_files(root: Path) -> tuple[list[JudgedFile], list[str]]:
    """Every judged samples file below ``root`` and the pilot (``-limitN``) folders left out."""
    found: list[JudgedFile] = []
    skipped: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root.resolve()):
        if SIGNATURE in filenames:  # one of our stores
            dirnames[:] = []
            continue
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if not _DIR_RE.match(here.name):
            continue
        dirnames[:] = []
        if _LIMIT_RE.search(here.name):
            skipped.append(f"{here}: a --limit pilot of upstream's judge (N records per file); not imported")
            continue
        why = component_problem(here.name)
        if why:  # the plain import's rule for folder names: it names the judge in signatures and reports
            skipped.append(f"{show(str(here))}: the judged folder's name {why}; rename it and import again")
            continue
        for name in sorted(filenames):
            split = split_samples_name(name)
            if split is None or any(stem in name for stem in _EXCLUDED_STEMS):
                continue
            ts, task = split
            found.append(JudgedFile(here / name, here.name, here.parent, task, ts or ""))
    return found, skipped


def _raw_store_map(stores: list[Path]) -> dict[str, Path]:
    """Resolved path of every raw samples file an imported store was read from -> that store."""
    out: dict[str, Path] = {}
    for folder in stores:
        try:
            sig = SignatureRecord.read(StoreLayout(folder).signature)
        except (OSError, ValueError):
            continue
        for path in imported_sources(sig.imported):
            out[str(Path(path).resolve())] = folder
    return out


def _raw_of(jf: JudgedFile, by_raw: dict[str, Path]) -> Path | None:
    """The store holding the raw file a judged file was made from: the same name in the model folder or in
    lmms-eval's sanitized sub-folder of it."""
    name = jf.path.name
    model_dir = jf.model_dir.resolve()
    for raw, store in by_raw.items():
        p = Path(raw)
        if p.name == name and model_dir in (p.parent, p.parent.parent):
            return store
    return None


#: The longest judge weights name a record may give (a hub id or a checkpoint path; paths.component_problem's bound).
MAX_WEIGHTS_CHARS = 200


def _usable_weights(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and len(value) <= MAX_WEIGHTS_CHARS and value.isprintable()


def judge_inputs(judge_dir: str) -> JsonObject:
    """The judge signature's inputs of an imported upstream judge: taken from its folder alone (the judge that
    ``llm-parsed_<judge>`` names), so every folder of one model judged by that judge feeds one judged parse, whatever
    its records say (the judge models they name are kept in judge.json's ``import`` block)."""
    judge = judge_dir.removeprefix("llm-parsed_") if judge_dir != "llm-parsed" else "upstream"
    return {"parser_version": JUDGE_PARSER_VERSION, "imported": JUDGED_FORMAT, "judge_model": judge,
            "weights": judge, "backend": "upstream-llm-parsing", "provider": "upstream",
            "upstream_parsed_dir": judge_dir,
            "prompt_version": "upstream-llm-parsing (the prompt stamp is in its judge-out files)",
            "decision": "strict-first (upstream's LLM_judge_answer_mode)"}


def import_judged(root: str | Path, stores: list[Path], *, models: list[str] | None = None,
                  tasks: list[str] | None = None) -> tuple[list[JudgedImport], list[str], list[str]]:
    """Import every judged folder below ``root`` into the judged parses of ``stores`` (the stores the raw import
    wrote). Returns the imports, the malformed lines and notes."""
    files, notes = find_judged_files(Path(root).expanduser())
    if models:
        files = [f for f in files if f.model_dir.name in models]
    if tasks:
        files = [f for f in files if f.task in tasks]
    by_raw = _raw_store_map(stores)
    groups: dict[tuple[Path, str], list[JudgedFile]] = {}
    for jf in files:
        store = _raw_of(jf, by_raw)
        if store is None:
            notes.append(f"{jf.path}: no raw samples file {jf.path.name} of {jf.model_dir} was imported (the judged "
                         "records are keyed to the store of their raw file, whose _results.json holds the settings); "
                         "skipped")
            continue
        groups.setdefault((store, jf.judge_dir), []).append(jf)
    malformed: list[str] = []
    out: list[JudgedImport] = []
    for (store, judge_dir), jfs in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        try:
            out.append(_import_store(store, judge_dir, jfs, malformed))
            notes.extend(out[-1].notes)
        except (StoreProblem, UserError) as exc:
            notes.append(f"{store}: judged records of {judge_dir} not imported ({exc})")
    return out, malformed, notes


def _read(jfs: list[JudgedFile], malformed: list[str]) -> Iterator[Candidate]:
    """The judged records of ``jfs``, oldest file first, one at a time as read (never all held)."""
    for jf in sorted(jfs, key=lambda f: (f.timestamp, str(f.path))):
        uf = UpstreamFile(jf.path, jf.task, jf.timestamp, jf.model_dir.name, None, None)
        for c in iter_samples(uf, malformed, keep=_KEEP):
            mode, judge = c.extra.get("LLM_judge_answer_mode"), c.extra.get("LLM_judge")
            if mode not in ANSWER_MODES or not isinstance(judge, dict):
                malformed.append(f"{jf.path}:{c.line}: not a judged record (no LLM_judge_answer_mode / LLM_judge)")
                continue
            why = _judge_fields_problem(judge)
            if why:
                malformed.append(f"{jf.path}:{c.line}: not a judged record ({why})")
                continue
            yield c


def _text_hash(text: str | None) -> str | None:
    """What a verdict keeps of the answer it judged: a hash of its text (the store's answer may change later)."""
    return None if text is None else f"{line_hash(text.encode('utf-8', 'surrogatepass')):016x}"


def _judge_of(c: Candidate) -> JsonObject:
    """A judged record's ``LLM_judge`` object (``_read`` passes no record without one)."""
    judge = c.extra.get("LLM_judge")
    return judge if isinstance(judge, dict) else {}


def _verdict(c: Candidate, key: str, j_sig: str, answer: str | None) -> JsonObject:
    """A judged record as the judged parse keeps it (a line of ``answers/upstream-import.jsonl``): upstream's
    decision, where it came from, and the hash of the answer it judged (``answer``)."""
    j = _judge_of(c)
    pred = c.extra.get("LLM_filtered_resps")
    return {"key": key, "judge_signature": j_sig, "status": "imported", "mode": str(c.extra["LLM_judge_answer_mode"]),
            "reason": str(j.get("reason") or ""),
            "pred": str(pred[0]) if isinstance(pred, list) and pred and pred[0] is not None else "",
            "strict_pred": str(j.get("strict_pred") or ""), "judge_pred": str(j.get("judge_pred") or ""),
            "judge_span": j.get("judge_span") if isinstance(j.get("judge_span"), str) else None,
            "verify_tier": j.get("verify_tier") if isinstance(j.get("verify_tier"), str) else None,
            "judge_model": j.get("judge_model"), "answer": answer,
            "source": {"file": str(c.file.path.resolve()), "line": c.line, "doc_id": jsonable(c.doc_id)}}


def _held_time(verdict: Mapping[str, JsonValue], sources: Mapping[str, JsonObject]) -> str:
    """The timestamp of the file an earlier import's verdict came from ("" when judge.json does not say)."""
    src = verdict.get("source")
    path = src.get("file") if isinstance(src, dict) else None
    return str((sources.get(path) or {}).get("timestamp") or "") if isinstance(path, str) else ""


#: The LLM_judge fields an import keeps, each a text (or null) as upstream's judge writes them.
_JUDGE_TEXTS = ("reason", "strict_pred", "judge_pred", "judge_span", "verify_tier")


def _judge_fields_problem(judge: JsonObject) -> str | None:
    """Why a record's ``LLM_judge`` fields are not the texts upstream writes (a NaN span, a number as the reason),
    through the typed readers; None when they are."""
    try:
        for name in _JUDGE_TEXTS:
            limits.optional(limits.text_field, judge.get(name), f"LLM_judge.{name}", limits.MAX_ANSWER_CHARS)
    except limits.BadField as exc:
        return str(exc)
    return None


class _Verdicts:
    """Per selected sample, the verdict the judged parse will use, held as where its line is: in the answers file an
    earlier import wrote (``HELD``, kept while it judges the store's answer) or in a spool of this import's records
    (``FRESH``). A few bytes a sample; the lines are read back one at a time when the rows are written."""

    NONE, HELD, FRESH = 0, 1, 2

    def __init__(self, n: int, held_path: Path, spool: IO[bytes]) -> None:
        self.where = np.zeros(n, dtype=np.uint8)
        self.offset = np.zeros(n, dtype=np.int64)
        self.time = np.zeros(n, dtype=np.int32)  # an index of ``times``: the timestamp of a held verdict's file
        self.times: list[str] = []
        self.held_path, self.spool = held_path, spool
        self._held_fh: IO[bytes] | None = None

    def hold(self, pos: int, offset: int, timestamp: str) -> None:
        if timestamp not in self.times:
            self.times.append(timestamp)
        self.where[pos], self.offset[pos], self.time[pos] = self.HELD, offset, self.times.index(timestamp)

    def held_newer(self, pos: int, timestamp: str) -> bool:
        """An earlier import's verdict of this sample came from a newer file than ``timestamp``."""
        return self.where[pos] == self.HELD and self.times[int(self.time[pos])] > timestamp

    def add(self, pos: int, verdict: JsonObject) -> None:
        self.spool.seek(0, os.SEEK_END)
        self.where[pos], self.offset[pos] = self.FRESH, self.spool.tell()
        self.spool.write(dumps(verdict).encode("utf-8") + b"\n")

    def line(self, pos: int) -> bytes | None:
        where = self.where[pos]
        if where == self.NONE:
            return None
        if where == self.FRESH:
            fh = self.spool
        else:
            if self._held_fh is None:
                self._held_fh = open(self.held_path, "rb")  # noqa: SIM115 (closed by close())
            fh = self._held_fh
        fh.seek(int(self.offset[pos]))
        return fh.readline()

    def close(self) -> None:
        if self._held_fh is not None:
            self._held_fh.close()


def _hold_earlier(v: _Verdicts, keys: Sequence[str], answers: np.ndarray, answered: np.ndarray,
                  sources: Mapping[str, JsonObject]) -> None:
    """The verdicts an earlier import kept that still judge the store's answer (same key and answer hash), read one
    line at a time; others (an answer replaced since, a line without its answer's hash, a damaged line) are dropped."""
    if not v.held_path.is_file():
        return
    pos_of = {k: i for i, k in enumerate(keys)}
    with open(v.held_path, "rb") as fh:
        offset = 0
        for raw in fh:
            try:
                obj: JsonValue = orjson.loads(raw)
            except orjson.JSONDecodeError:
                obj = None
            key = obj.get("key") if isinstance(obj, dict) else None
            if isinstance(obj, dict) and isinstance(key, str) and obj.get("answer") is not None:
                pos = pos_of.get(key)
                if pos is not None and answered[pos] and _hex(answers[pos]) == obj["answer"]:
                    v.hold(pos, offset, _held_time(obj, sources))
            offset += len(raw)


def _hex(h: SupportsInt) -> str:
    return f"{int(h):016x}"


def _selection(ref: StoreRef) -> tuple[DocsFileSelection | ListSelection, str]:
    """The store's last selection, streamed from docs.jsonl (none of its docs held) or, where the store needs the
    whole-store reading that counts its problems, held (``store_docs``)."""
    sel = docs_file_selection(ref)
    if sel is not None:
        return sel, sel.protocol
    sd = store_docs(ref)
    return ListSelection(sd.rundocs, sd.shas), sd.protocol


def _import_store(folder: Path, judge_dir: str, jfs: list[JudgedFile], malformed: list[str]) -> JudgedImport:
    sig = SignatureRecord.read(StoreLayout(folder).signature)
    answer_sig, inputs = sig.answer_signature, dict(sig.inputs)
    task = folder.parent.name
    model = folder.parent.parent.name
    family = parse_task_name(task).family
    ref = StoreRef(folder, "", model, task, family, answer_sig, inputs, label=model)
    ji = JudgedImport(model, task, judge_dir, store=folder)
    sel, protocol = _selection(ref)
    state = SampleStore(folder, answer_sig).read()
    keys, shas = sel.keys, sel.shas
    n = len(keys)
    answers = np.zeros(n, dtype=np.uint64)  # the hash of the answer text the store holds, where ``answered``
    answered = np.zeros(n, dtype=bool)

    def indexed() -> Iterator[RunDoc]:  # one pass over the selection: the matcher's index and the answers' hashes
        for pos, rd in enumerate(sel.rundocs(range(n))):
            rec = state.answer(keys[pos], shas[pos])
            if rec is not None and rec.text is not None:
                answers[pos], answered[pos] = line_hash(rec.text.encode("utf-8", "surrogatepass")), True
            yield rd

    matcher = DocMatcher(indexed(), lambda c, rd: target(rd.doc, rd.view), fetch=sel.rundoc,
                         doc_of=lambda rd: rd.doc)
    j_inputs = judge_inputs(judge_dir)
    j_sig = digest(j_inputs)
    jfolder = StoreLayout(folder).judged_parse(j_sig).folder
    ji.judged_folder = jfolder
    files = JudgedLayout(jfolder)
    held = _held_judge_json(files.judge_file)
    block = held.get("import") or {}
    block = block if isinstance(block, dict) else {}  # (_held_judge_json let only an object through)
    old = imported_sources(block)
    jfolder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=jfolder) as spool:
        verdicts = _Verdicts(n, files.answers / SEGMENT, spool)
        _hold_earlier(verdicts, keys, answers, answered, old)
        per_file, names, bad = _take_records(jfs, malformed, matcher, answers, answered, verdicts, j_sig, ji)
        ji.used = int(np.count_nonzero(verdicts.where == _Verdicts.FRESH))
        ji.kept = int(np.count_nonzero(verdicts.where == _Verdicts.HELD))
        for name in sorted(bad)[:3]:
            malformed.append(f"{folder}: a judged record names the judge model {show(name)}, which is no model name "
                             f"(over {MAX_WEIGHTS_CHARS} characters, a control character or not text); left out")
        sources: dict[str, JsonObject] = {}
        for jf in jfs:
            key = str(jf.path.resolve())
            if per_file[key]:  # read (a regular file, within the limits)
                sources[key] = {"path": key, "sha256": file_sha256(jf.path), "timestamp": jf.timestamp,
                                "records": per_file[key]}
        merged = {**old, **sources}
        listed = block.get("judge_models")
        judges = {n for n in (listed if isinstance(listed, list) else []) if _usable_weights(n) and n} | names
        JudgeFile(j_sig, j_inputs, imported={"format": JUDGED_FORMAT, "sources": [merged[k] for k in sorted(merged)],
                                             "judge_models": [*sorted(judges)]}).write(files.judge_file)
        rules = protocol_settings(protocol).rules
        counts: JsonObject = {}
        try:
            with atomic_path(files.answers / SEGMENT) as tmp, open(tmp, "wb", buffering=1 << 20) as used:
                write_judged_parse(jfolder, ref, protocol, rules, _rows(sel, protocol, verdicts, state, ji, counts,
                                                                          used),
                                   counts, j_sig, j_inputs, complete=lambda: counts["not_judged"] == 0)
        finally:
            verdicts.close()
            sel.close()
    for other, jj in judged_parses(folder):  # an import of the same folder by an older version's signature rule
        o = jj.get("inputs")
        o = o if isinstance(o, dict) else {}
        if other != jfolder and o.get("imported") == JUDGED_FORMAT and o.get("upstream_parsed_dir") == judge_dir:
            ji.notes.append(f"{other}: an earlier import of {judge_dir} (signed by the judge model its records "
                            f"named); its verdicts are now in {jfolder.name}: move {other} away, as `summarize "
                            "--parse judged` reads one judged parse per store")
    return ji


def _take_records(jfs: list[JudgedFile], malformed: list[str], matcher: DocMatcher[RunDoc], answers: np.ndarray,
                  answered: np.ndarray, verdicts: _Verdicts, j_sig: str,
                  ji: JudgedImport) -> tuple[Counter[str], set[str], set[str]]:
    """Read the judged records one at a time, oldest file first (a newer timestamp's verdict on the same answer
    wins), into ``verdicts``; the records per file, the judge models they name and the names no model has."""
    per_file: Counter[str] = Counter()
    names: set[str] = set()  # the judge models the records name (kept in judge.json, outside the signature)
    bad: set[str] = set()
    for c in _read(jfs, malformed):
        ji.records += 1
        per_file[str(c.file.path.resolve())] += 1
        pos, rd, why = matcher.match_at(c)
        if pos is None or rd is None:
            ji.unmatched.append(f"{c.file.path}:{c.line} (doc_id {c.doc_id}): {why}")
            continue
        text_hash = _text_hash(c.text)
        if not answered[pos] or _hex(answers[pos]) != text_hash:
            ji.superseded += 1
            continue
        if verdicts.where[pos] == _Verdicts.FRESH:
            ji.duplicates += 1  # a later record of the same doc and answer: it wins, and is counted
        elif verdicts.held_newer(pos, c.file.timestamp):
            continue  # an earlier import's verdict from a newer file stands
        verdicts.add(pos, _verdict(c, rd.doc.key, j_sig, text_hash))
        name = _judge_of(c).get("judge_model")
        if _usable_weights(name):
            if name:
                names.add(name)
        elif name is not None:
            bad.add(name if isinstance(name, str) else repr(name))
    return per_file, names, bad


def _held_judge_json(path: Path) -> JsonObject:
    """The judge.json an earlier import wrote ({} when there is none); a one-line UserError when it is not one."""
    if not os.path.lexists(path):
        return {}
    held: JsonValue = limits.read_json_file(path, "judge file")
    if not isinstance(held, dict) or not isinstance(held.get("import") or {}, dict):
        raise UserError(f"judge file {path} is not the JSON object an import writes; move {path.parent} away and "
                        "import again")
    try:
        JudgeFile.from_json(held)  # a newer version's judge.json is refused, never rewritten
    except NewerRecord as exc:
        raise NewerRecord(f"{path}: {exc}") from None
    except ValueError:
        pass
    return held


def _rows(sel: DocsFileSelection | ListSelection, protocol: str, verdicts: _Verdicts, state: StoreState,
          ji: JudgedImport, counts: JsonObject, used: IO[bytes]) -> Iterator[ParsedRow]:
    """The judged parse's rows of every selected sample, made one at a time in selection order; each verdict used is
    written to ``used`` (the new answers file) as its row is made, and ``counts`` is filled when the last row is."""
    settings = protocol_settings(protocol)
    parser, rules = settings.parser, settings.rules
    modes: Counter[str] = Counter()
    tally = {"selected": 0, "answered": 0, "judged": 0, "judge_invalid": 0, "not_judged": 0, "recovered": 0,
             "bad_lines": 0}  # into ``counts`` when the last row is made
    for pos, rd in enumerate(sel.rundocs(range(len(sel.keys)))):
        doc, key = rd.doc, rd.doc.key
        tally["selected"] += 1
        rec = state.answer(key, sel.shas[pos])
        text = None if rec is None else rec.text
        if text is None:
            status = "request_failed" if key in state.failed else "missing"
            sc = failed_score(doc, rd.view, JUDGE_PARSER_VERSION, rules, status,
                              "request failed" if status == "request_failed" else "not answered yet")
            yield judged_row(doc, rules, sc, None, None, None)
            continue
        tally["answered"] += 1
        strict = score_answer(doc, rd.view, text, parser, rules)
        ours = parse_upstream(text, family_spec(doc.family).arity, parser).filtered_resps if strict.success else ""
        line = verdicts.line(pos)
        v: JsonValue = orjson.loads(line) if line else None
        if not isinstance(v, dict) or line is None:
            if strict.success:
                decision = Decision("conclusion_in_format", "no_judge_record", ours, tuple(ours.split(",")))
            else:
                decision = Decision("undetermined", "no_judge_record", "")
                tally["not_judged"] += not is_request_failure(text)
        else:
            tally["judged"] += 1
            reason, strict_pred, pred = str(v.get("reason") or ""), str(v.get("strict_pred") or ""), str(v.get("pred") or "")
            tally["judge_invalid"] += reason.startswith("judge_invalid")
            ji.strict_mismatch += bool(strict_pred.strip()) != strict.success
            judge_pred, mode = str(v.get("judge_pred") or ""), str(v.get("mode"))
            tier = v.get("verify_tier")
            answer = tuple(pred.split(",")) if mode in SUCCESS_MODES and pred.strip() else None
            decision = Decision(mode, reason, strict_pred, answer,
                                tuple(judge_pred.split(",")) if judge_pred.strip() else None,
                                tier if isinstance(tier, str) else None)
            used.write(line if line.endswith(b"\n") else line + b"\n")
        sc, decision = judged_score(doc, rd.view, rules, strict, decision)
        tally["recovered"] += decision.mode == "conclusion_off_format"
        modes[decision.mode] += 1
        yield judged_row(doc, rules, sc, strict, decision, text)
    counts.update(tally)
    ji.not_judged = tally["not_judged"]
    counts["modes"] = dict(modes)
    counts["strict_mismatch"] = ji.strict_mismatch
    counts["superseded"] = ji.superseded
    counts["duplicates"] = ji.duplicates
