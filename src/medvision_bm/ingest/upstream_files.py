"""Upstream's lmms-eval result files: finding the raw samples files below a folder (with the results file beside
each) and reading their records as :class:`Candidate` answers, every bad line reported, never raised (the format is
described in ``ingest/upstream.py``)."""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from medvision_bm import limits
from medvision_bm.errors import UserError
from medvision_bm.jsontypes import JsonObject, JsonValue
from medvision_bm.store.layout import SIGNATURE

if TYPE_CHECKING:
    from medvision_bm.data.docs import Doc, View

_TS_RE = re.compile(r"^\d{8}_\d{6}$")
_SKIP_DIRS = {"parsed", "response_cache", "samples", "lmms_eval", "__pycache__"}

# ----------------------------------------------------------------------------------------------- upstream files


@dataclass
class UpstreamFile:
    path: Path
    task: str
    timestamp: str  # YYYYMMDD_HHMMSS, or the mtime in that form for files without one
    model: str
    results: JsonObject | None
    results_path: Path | None


#: The fields of upstream's row that key a record to one of our docs and draw a -CoT-scaledPS sample's factors
#: (``upstream_match``); a record keeps only these once it is matched (a task holds up to ~900k records).
KEY_FIELDS = ("dataset_name", "taskID", "taskType", "image_file", "slice_dim", "slice_idx", "label")


def key_fields(doc: JsonObject) -> JsonObject:
    """The part of upstream's row that identifies its sample: ``KEY_FIELDS`` and an A/D row's metric key."""
    out: JsonObject = {k: doc[k] for k in KEY_FIELDS if k in doc}
    bp = doc.get("biometric_profile")
    if isinstance(bp, dict) and "metric_key" in bp:
        out["biometric_profile"] = {"metric_key": bp["metric_key"]}
    return out


@dataclass(slots=True)
class Candidate:
    """One parsed upstream record: the answer and where it came from. ``doc`` is upstream's row as read; a reader
    that has matched the record may cut it to ``key_fields``. Of the prompt only whether it asks for ``<answer>``
    tags is kept (None: the record holds no prompt)."""

    file: UpstreamFile
    line: int
    doc_id: JsonValue
    doc: JsonObject
    target: str | None
    text: str
    prompt_tagged: bool | None
    extra: JsonObject = field(default_factory=dict)  # the record's fields a reader asked to keep
    truncated_chars: int = 0  # characters cut from an answer over limits.MAX_ANSWER_CHARS
    view: tuple[Doc, View] | None = None  # (doc, view): the view made of this record for that doc (upstream_match.Views)

    @property
    def order(self) -> tuple[str, str, int]:
        """Which of two answers to one doc wins (the larger): the newer run, then the later file name; within one
        file the first line, as upstream's remove_duplicate_samples.py (@bfcf773) keeps the first by doc_id."""
        return (self.file.timestamp, str(self.file.path), -self.line)


def imported_sources(block: Mapping[str, JsonValue] | None) -> dict[str, JsonObject]:
    """The files an import block (signature.json's or judge.json's ``import``) lists as its sources, by path (an
    entry that is no object with a path is left out)."""
    listed = (block or {}).get("sources")
    out: dict[str, JsonObject] = {}
    for entry in listed if isinstance(listed, list) else []:
        path = entry.get("path") if isinstance(entry, dict) else None
        if isinstance(entry, dict) and isinstance(path, str):
            out[path] = entry
    return out


def split_samples_name(name: str) -> tuple[str | None, str] | None:
    """``<ts>_samples_<task>.jsonl`` -> (ts, task); ``<task>_samples_<n>.jsonl`` -> (None, task); else None."""
    if not name.endswith(".jsonl") or "_samples_" not in name:
        return None
    prefix, suffix = name[: -len(".jsonl")].split("_samples_", 1)
    if suffix.isdigit():
        return None, prefix
    ts = prefix.replace("-", "_") if _TS_RE.match(prefix.replace("-", "_")) else prefix
    return ts, suffix


#: The parts of an lmms-eval results file the import reads, and the JSON type each must have.
_RESULTS_SHAPE: dict[str, type | tuple[type, ...]] = {"results": dict, "configs": dict, "config": dict, "versions": dict, "n-samples": dict,
                  "model_name": str, "model_name_sanitized": str, "lmms_eval_version": str, "git_hash": str,
                  "date": (str, int, float)}


def _read_json(path: Path) -> JsonObject:
    """An upstream results file: a one-line UserError when it is not a regular file, too large, not JSON, nested
    too deep, or not lmms-eval's shape (an object whose ``configs``, ``config`` ... are objects)."""
    fix = "fix or remove it (the samples file beside it is imported without it once it is gone)"
    try:
        data: JsonValue = limits.read_json_file(path, "upstream results file")
    except UserError as exc:
        raise UserError(f"{exc}; {fix}") from None
    if not isinstance(data, dict):
        raise UserError(f"upstream results file {path} holds a JSON {type(data).__name__}, not lmms-eval's object; "
                        f"{fix}")
    for key, kind in _RESULTS_SHAPE.items():
        value = data.get(key)
        if value is not None and not isinstance(value, kind):
            raise UserError(f"upstream results file {path}: {key!r} is a JSON {type(value).__name__}, not "
                            f"what lmms-eval writes; {fix}")
    return data


def find_upstream_files(root: Path) -> list[UpstreamFile]:
    """Every raw lmms-eval samples file below ``root`` (step-2/-4 copies and response caches left out)."""
    found: list[UpstreamFile] = []
    root = root.resolve()
    for dirpath, dirnames, filenames in os.walk(root):
        if SIGNATURE in filenames:  # one of our stores
            dirnames[:] = []
            continue
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith((".", "llm-parsed")))
        here = Path(dirpath)
        for name in sorted(filenames):
            split = split_samples_name(name)
            if split is None:
                continue
            ts, task = split
            path = here / name
            results_path = here / f"{name.split('_samples_', 1)[0]}_results.json" if ts else None
            results = _read_json(results_path) if results_path and results_path.exists() else None
            if ts is None or not _TS_RE.match(ts):
                ts = time.strftime("%Y%m%d_%H%M%S", time.localtime(path.stat().st_mtime))
            found.append(UpstreamFile(path, task, ts, _model_of(here, root, results), results,
                                      results_path if results is not None else None))
    return found


def _model_of(folder: Path, root: Path, results: JsonObject | None) -> str:
    """The upstream model folder: the file's folder, or its parent when the folder is lmms-eval's sanitized name."""
    sanitized = (results or {}).get("model_name_sanitized")
    if sanitized and folder.name == sanitized and folder != root:
        return folder.parent.name
    return folder.name


# ----------------------------------------------------------------------------------------------- records


def _answer_text(rec: JsonObject) -> str | None:
    resps = rec.get("resps")
    if isinstance(resps, list) and resps:
        first = resps[0]
        if isinstance(first, list) and first and isinstance(first[0], str):
            return first[0]
        if isinstance(first, str):
            return first
        return None
    filtered = rec.get("filtered_resps")
    if isinstance(filtered, list) and filtered and isinstance(filtered[0], str):
        return filtered[0]
    return None


def iter_samples(uf: UpstreamFile, malformed: list[str], keep: Sequence[str] = ()) -> Iterator[Candidate]:
    """The records of one samples file, one at a time as read; a line that is not a usable record goes to
    ``malformed`` as file:line. ``keep``: record fields kept in ``Candidate.extra`` (a judged record's ``LLM_*``
    fields)."""
    try:
        fh = limits.open_regular(uf.path, "upstream samples file", limits.MAX_SAMPLES_FILE_BYTES)
    except UserError as exc:
        malformed.append(f"{exc} (not read)")
        return
    except OSError as exc:
        malformed.append(f"{uf.path}: unreadable ({exc.strerror or exc})")
        return
    read = 0
    with fh:
        for lineno, line in _lines(fh, uf.path, malformed):
            if read >= limits.MAX_SAMPLES_RECORDS:
                malformed.append(f"{uf.path}:{lineno}: the file holds over {limits.MAX_SAMPLES_RECORDS} records "
                                 "(no upstream task has as many); the rest is not read")
                break
            cand = _candidate(uf, lineno, line, malformed, keep)
            if cand is not None:
                read += 1
                yield cand


def _lines(fh: IO[bytes], path: Path, malformed: list[str]) -> Iterator[tuple[int, bytes]]:
    """(line number, stripped line) of a samples file, read line by line; a line over limits.MAX_RECORD_BYTES is
    skipped unread (to its end) and reported."""
    lineno = 0
    while True:
        raw = fh.readline(limits.MAX_RECORD_BYTES + 1)
        if not raw:
            return
        lineno += 1
        if len(raw) > limits.MAX_RECORD_BYTES and not raw.endswith(b"\n"):
            malformed.append(f"{path}:{lineno}: a record over {limits.size_text(limits.MAX_RECORD_BYTES)} "
                             "(not read)")
            while raw and not raw.endswith(b"\n"):
                raw = fh.readline(1 << 24)
            continue
        line = raw.strip()
        if line:
            yield lineno, line


def _candidate(uf: UpstreamFile, lineno: int, line: bytes, malformed: list[str],
               keep: Sequence[str]) -> Candidate | None:
    """One record of a samples file as a Candidate, or None (and the reason in ``malformed``)."""
    try:
        rec: JsonValue = limits.loads_json(line, "the record")  # Python's json: upstream writes NaN for failed metrics
    except (ValueError, UnicodeDecodeError) as exc:
        malformed.append(f"{uf.path}:{lineno}: not JSON ({getattr(exc, 'msg', None) or exc})")
        return None
    doc = rec.get("doc") if isinstance(rec, dict) else None
    if not isinstance(rec, dict) or not isinstance(doc, dict):
        malformed.append(f"{uf.path}:{lineno}: not an lmms-eval sample record (no doc object)")
        return None
    text = _answer_text(rec)
    if text is None:
        malformed.append(f"{uf.path}:{lineno}: no answer text in resps/filtered_resps")
        return None
    text, cut = limits.cap_answer(text)  # as the run path stores an over-long answer
    target = rec.get("target")
    prompt = rec.get("input")
    tagged = ("<answer>" in prompt) if isinstance(prompt, str) and prompt else None
    return Candidate(uf, lineno, rec.get("doc_id"), doc, None if target is None else str(target),
                     text, tagged, {k: rec[k] for k in keep if k in rec}, truncated_chars=cut)


def file_sha256(path: Path) -> str:
    """The sha256 of an upstream file (read as one, within the samples file's size limit): its provenance."""
    h = hashlib.sha256()
    with limits.open_regular(path, "upstream samples file", limits.MAX_SAMPLES_FILE_BYTES) as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
