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

The judge signature names the upstream judge (``imported: upstream-llm-parsed``, the ``llm-parsed_<judge>`` folder,
the ``judge_model`` the records name, the decision rule); the files it was read from (path, sha256, records) sit in
``judge.json`` beside it under ``import``, outside the hash, so re-importing refreshed files updates the same
judged parse. Layout: ``<store>/judged/<sig12>/`` with ``judge.json``, ``answers/upstream-import.jsonl`` (upstream's
verdict per sample, rewritten whole), ``parsed.jsonl`` and ``results.json``.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medvision_bm import limits
from medvision_bm.data.layout import parse_task_name
from medvision_bm.errors import UserError
from medvision_bm.ingest.upstream_files import (
    Candidate,
    UpstreamFile,
    file_sha256,
    read_samples,
    split_samples_name,
)
from medvision_bm.ingest.upstream_match import DocMatcher
from medvision_bm.io import dumps, jsonable, write_lines_atomic
from medvision_bm.paths import component_problem, show
from medvision_bm.score.judged import (
    ANSWER_MODES,
    SUCCESS_MODES,
    Decision,
    judged_row,
    judged_score,
    write_judged_parse,
)
from medvision_bm.score.rescore import StoreProblem, store_docs
from medvision_bm.store.discovery import StoreRef
from medvision_bm.store.judged import JUDGE_PARSER_VERSION
from medvision_bm.store.layout import SIGNATURE, JudgedLayout, StoreLayout
from medvision_bm.store.records import JudgeFile, ParsedRow, SignatureRecord
from medvision_bm.store.samples import SampleStore
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
        for src in (sig.imported or {}).get("sources") or []:
            if isinstance(src, dict) and isinstance(src.get("path"), str):
                out[str(Path(src["path"]).resolve())] = folder
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


def _weights(names: set[str]) -> str:
    """The judge weights the records name (a local checkpoint path shortened to its folder name); names that are
    too long or hold control characters are left out (``_usable_weights``)."""
    short = sorted({n.rstrip("/").split("/")[-1] if n.startswith(("/", ".")) else n for n in names if n})
    return "+".join(short) or "unknown"


def _usable_weights(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_WEIGHTS_CHARS and value.isprintable()


def judge_inputs(judge_dir: str, weights: str) -> dict[str, Any]:
    """The judge signature's inputs of an imported upstream judge."""
    return {"parser_version": JUDGE_PARSER_VERSION, "imported": JUDGED_FORMAT,
            "judge_model": judge_dir.removeprefix("llm-parsed_") or "upstream", "weights": weights,
            "backend": "upstream-llm-parsing", "provider": "upstream", "upstream_parsed_dir": judge_dir,
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
        except (StoreProblem, UserError) as exc:
            notes.append(f"{store}: judged records of {judge_dir} not imported ({exc})")
    return out, malformed, notes


def _read(jfs: list[JudgedFile], malformed: list[str]) -> list[Candidate]:
    cands: list[Candidate] = []
    for jf in sorted(jfs, key=lambda f: (f.timestamp, str(f.path))):
        uf = UpstreamFile(jf.path, jf.task, jf.timestamp, jf.model_dir.name, None, None)
        for c in read_samples(uf, malformed, keep=_KEEP):
            mode = c.extra.get("LLM_judge_answer_mode")
            if mode not in ANSWER_MODES or not isinstance(c.extra.get("LLM_judge"), dict):
                malformed.append(f"{jf.path}:{c.line}: not a judged record (no LLM_judge_answer_mode / LLM_judge)")
                continue
            why = _judge_fields_problem(c.extra["LLM_judge"])
            if why:
                malformed.append(f"{jf.path}:{c.line}: not a judged record ({why})")
                continue
            cands.append(c)
    return cands


#: The LLM_judge fields an import keeps, each a text (or null) as upstream's judge writes them.
_JUDGE_TEXTS = ("reason", "strict_pred", "judge_pred", "judge_span", "verify_tier")


def _judge_fields_problem(judge: dict[str, Any]) -> str | None:
    """Why a record's ``LLM_judge`` fields are not the texts upstream writes (a NaN span, a number as the reason),
    through the typed readers; None when they are."""
    try:
        for name in _JUDGE_TEXTS:
            limits.optional(limits.text_field, judge.get(name), f"LLM_judge.{name}", limits.MAX_ANSWER_CHARS)
    except limits.BadField as exc:
        return str(exc)
    return None


def _import_store(folder: Path, judge_dir: str, jfs: list[JudgedFile], malformed: list[str]) -> JudgedImport:
    sig = SignatureRecord.read(StoreLayout(folder).signature)
    answer_sig, inputs = sig.answer_signature, dict(sig.inputs)
    task = folder.parent.name
    model = folder.parent.parent.name
    family = parse_task_name(task).family
    ref = StoreRef(folder, "", model, task, family, answer_sig, inputs, label=model)
    ji = JudgedImport(model, task, judge_dir, store=folder)
    sd = store_docs(ref)
    state = SampleStore(folder, answer_sig).read()
    views = {rd.doc.key: rd.view for rd in sd.rundocs}
    matcher = DocMatcher([rd.doc for rd in sd.rundocs], lambda c, d: target(d, views[d.key]))
    texts: dict[str, str | None] = {}
    for rd in sd.rundocs:
        rec = state.answer(rd.doc.key, sd.shas[rd.doc.key])
        if rec is not None:
            texts[rd.doc.key] = rec.text
    verdicts: dict[str, Candidate] = {}
    cands = _read(jfs, malformed)
    ji.records = len(cands)
    for c in cands:  # oldest file first: a newer timestamp's verdict on the same answer wins
        doc, why = matcher.match(c)
        if doc is None:
            ji.unmatched.append(f"{c.file.path}:{c.line} (doc_id {c.doc_id}): {why}")
        elif texts.get(doc.key) != c.text:
            ji.superseded += 1
        else:
            verdicts[doc.key] = c
    ji.used = len(verdicts)
    names = {c.extra["LLM_judge"].get("judge_model") or "" for c in verdicts.values()}
    for name in sorted(n for n in names if not _usable_weights(n))[:3]:
        malformed.append(f"{folder}: a judged record names the judge model {show(name)}, which is no model name "
                         f"(over {MAX_WEIGHTS_CHARS} characters, a control character or not text); left out")
    weights = _weights({n for n in names if _usable_weights(n)})
    j_inputs = judge_inputs(judge_dir, weights)
    j_sig = digest(j_inputs)
    jfolder = StoreLayout(folder).judged_parse(j_sig).folder
    ji.judged_folder = jfolder
    rows, counts, answers = _rows(sd, texts, verdicts, state, ji, j_sig)
    jfolder.mkdir(parents=True, exist_ok=True)
    read = {str(c.file.path.resolve()): c.file.path for c in cands}  # regular files, read within the limits
    sources: dict[str, dict[str, Any]] = {key: {"path": key, "sha256": file_sha256(path), "timestamp": jf.timestamp}
               for jf in jfs if (key := str(jf.path.resolve())) in read and (path := read[key])}
    for c in cands:
        sources[str(c.file.path.resolve())]["records"] = sources[str(c.file.path.resolve())].get("records", 0) + 1
    files = JudgedLayout(jfolder)
    held = _held_judge_json(files.judge_file)
    old = {s["path"]: s for s in (held.get("import") or {}).get("sources") or [] if isinstance(s, dict)}
    merged = {**old, **sources}
    JudgeFile(j_sig, j_inputs, imported={"format": JUDGED_FORMAT,
                                         "sources": [merged[k] for k in sorted(merged)]}).write(files.judge_file)
    write_lines_atomic(files.answers / SEGMENT, (dumps(a) + "\n" for a in answers))
    rules = protocol_settings(sd.protocol)["rules"]
    write_judged_parse(jfolder, ref, sd.protocol, rules, rows, counts, j_sig, j_inputs,
                       complete=counts["not_judged"] == 0)
    return ji


def _held_judge_json(path: Path) -> dict[str, Any]:
    """The judge.json an earlier import wrote ({} when there is none); a one-line UserError when it is not one."""
    if not os.path.lexists(path):
        return {}
    held = limits.read_json_file(path, "judge file")
    if not isinstance(held, dict) or not isinstance(held.get("import") or {}, dict):
        raise UserError(f"judge file {path} is not the JSON object an import writes; move {path.parent} away and "
                        "import again")
    return held


def _rows(sd: Any, texts: dict[str, str | None], verdicts: dict[str, Candidate], state: Any, ji: JudgedImport,
          j_sig: str) -> tuple[list[ParsedRow], dict[str, Any], list[dict[str, Any]]]:
    settings = protocol_settings(sd.protocol)
    parser, rules = settings["parser"], settings["rules"]
    rows: list[ParsedRow] = []
    answers: list[dict[str, Any]] = []
    modes: Counter[str] = Counter()
    counts: dict[str, Any] = {"selected": 0, "answered": 0, "judged": 0, "judge_invalid": 0, "not_judged": 0,
                              "recovered": 0, "bad_lines": 0}
    for rd in sd.rundocs:
        doc, key = rd.doc, rd.doc.key
        counts["selected"] += 1
        text = texts.get(key)
        if text is None:
            status = "request_failed" if key in state.failed else "missing"
            sc = failed_score(doc, rd.view, JUDGE_PARSER_VERSION, rules, status,
                              "request failed" if status == "request_failed" else "not answered yet")
            rows.append(judged_row(doc, rules, sc, None, None, None))
            continue
        counts["answered"] += 1
        strict = score_answer(doc, rd.view, text, parser, rules)
        ours = parse_upstream(text, family_spec(doc.family).arity, parser).filtered_resps if strict.success else ""
        c = verdicts.get(key)
        if c is None:
            if strict.success:
                decision = Decision("conclusion_in_format", "no_judge_record", ours, tuple(ours.split(",")))
            else:
                decision = Decision("undetermined", "no_judge_record", "")
                counts["not_judged"] += not is_request_failure(text)
        else:
            j = c.extra["LLM_judge"]
            counts["judged"] += 1
            reason = str(j.get("reason") or "")
            counts["judge_invalid"] += reason.startswith("judge_invalid")
            strict_pred = str(j.get("strict_pred") or "")
            ji.strict_mismatch += bool(strict_pred.strip()) != strict.success
            pred = c.extra.get("LLM_filtered_resps")
            pred = str(pred[0]) if isinstance(pred, list) and pred and pred[0] is not None else ""
            judge_pred = str(j.get("judge_pred") or "")
            mode = str(c.extra["LLM_judge_answer_mode"])
            answer = tuple(pred.split(",")) if mode in SUCCESS_MODES and pred.strip() else None
            decision = Decision(mode, reason, strict_pred, answer,
                                tuple(judge_pred.split(",")) if judge_pred.strip() else None,
                                j.get("verify_tier") if isinstance(j.get("verify_tier"), str) else None)
            answers.append({"key": key, "judge_signature": j_sig, "status": "imported", "mode": mode,
                            "reason": reason, "pred": pred, "strict_pred": strict_pred, "judge_pred": judge_pred,
                            "judge_span": j.get("judge_span"), "verify_tier": decision.tier,
                            "judge_model": j.get("judge_model"),
                            "source": {"file": str(c.file.path.resolve()), "line": c.line,
                                       "doc_id": jsonable(c.doc_id)}})
        sc, decision = judged_score(doc, rd.view, rules, strict, decision)
        counts["recovered"] += decision.mode == "conclusion_off_format"
        modes[decision.mode] += 1
        rows.append(judged_row(doc, rules, sc, strict, decision, text))
    ji.not_judged = counts["not_judged"]
    counts["modes"] = dict(modes)
    counts["strict_mismatch"] = ji.strict_mismatch
    counts["superseded"] = ji.superseded
    return rows, counts, answers
