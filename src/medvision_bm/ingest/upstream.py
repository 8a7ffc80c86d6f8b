"""`medvision-bm import`: read upstream MedVision's lmms-eval result files into our sample stores.

Upstream's files (vendored lmms-eval 0.3.0 in master c221615, ``lmms_eval/loggers/evaluation_tracker.py``
``save_results_samples`` / ``save_results_aggregated``, ``lmms_eval/evaluator.py`` l.494-542; layout in the newer
``skills/.../results-parsing-and-metrics/references/output-files.md`` @39dd6bf):

    Results/<task_tag>/<model_name>/[<model_name_sanitized>/]<YYYYMMDD_HHMMSS>_samples_<task>.jsonl
    Results/<task_tag>/<model_name>/[<model_name_sanitized>/]<YYYYMMDD_HHMMSS>_results.json

One JSON line per sample: ``doc_id``, ``doc`` (the loader's row, every field, written with ``json.dumps(...,
default=handle_non_serializable)``: numpy ints become ints, anything else not JSON-native its ``str()``; NaN is
written as ``NaN``), ``target`` (``str(doc_to_target(doc))``), ``arguments``, ``resps`` (``[[<raw answer>]]``, every
item ``str()``-ed by ``sanitize_list``), ``filtered_resps`` (``[<answer after the task's filter>]``; the tasks have no
filter list, so lmms-eval's default take-first gives the raw answer again; upstream's ``parse_outputs`` later
rewrites it to the extracted numbers in ``parsed/`` copies), ``doc_hash``, ``prompt_hash``, ``target_hash``,
``input`` (the prompt text) and the per-sample metric dicts (``avgMAE``, ``avgMRE``, ``SuccessRate``; A/D ``MAE``,
``MRE``; newer ``nMAE`` ...). The results file holds ``results[<task>]`` (``"<metric>,none"`` keys), ``configs``,
``versions``, ``n-samples``, ``config`` (``model``, ``model_args``, ``gen_kwargs``, ``limit`` ...), ``git_hash``,
``date`` and the tracker's ``model_name``/``model_name_sanitized``. The vendored tracker writes under
``<output_path>/<model_name_sanitized>/`` (``sanitize_model_name``: the last two parts of ``pretrained=``, ``/`` ->
``__``); the newer docs show the files directly in the model folder; both are read (a folder named as the results
file's ``model_name_sanitized`` is skipped over to its parent for the model name). The tool-use entry point writes
``<task>_samples_<n>.jsonl`` (no timestamp: the file's mtime orders it). ``parsed/``, ``llm-parsed_*/`` and
``response_cache/`` are never read here (their ``filtered_resps`` are not raw answers); ``ingest/upstream_judged.py``
reads ``llm-parsed_<judge>/`` into the judged parses of the stores written here.

The raw answer is ``resps[0][0]`` (``filtered_resps[0]`` only when ``resps`` is absent). Every record is keyed to
one of our docs by what identifies the sample (image file below ``Datasets/``, ``slice_dim``, ``slice_idx``,
``label``, A/D ``metric_key``, ``dataset_name``, ``taskType``) and checked against its ``target``; a record that
matches none of ours (or whose target differs) is counted and reported, never scored. ``doc_id`` is not trusted: it
is a position that changes with the annotation version and the filters.

Signature (same scheme as ``store/signature.py``: ``answer_signature = digest(inputs)``, the store folder is its
first 12 hex digits): ``inputs`` hold what changes answers as far as upstream's files tell it (``imported``, the
lmms-eval model class, ``model_args``, ``gen_kwargs``, the task's ``generation_kwargs`` and
``lmms_eval_specific_kwargs``, the task's version, protocol, annotation pin and plan version of our docs, where the
docs came from); timestamps of one configuration therefore share one store, and settings that differ never mix.
What the answers were read from (every source file's path, sha256, timestamp and record count; lmms-eval's
``git_hash``/``date``/version where present) is provenance and sits beside the inputs in ``signature.json``
(``import``), outside the hash, so importing a newer timestamp later adds to the same store.

Several timestamps of one task: the newest answer per doc wins (timestamp, then file, then line); the answers a
newer one replaced are counted as superseded. The store keeps one segment, ``samples/upstream-import.jsonl``,
rewritten atomically with the winners, so importing the same files again changes nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from medvision_bm import limits
from medvision_bm.data.docs import Doc, View
from medvision_bm.data.image import header_zooms
from medvision_bm.data.layout import DataDir, parse_task_name
from medvision_bm.data.planner import ENV_DATA_DIR, DatasetContract
from medvision_bm.errors import UserError
from medvision_bm.io import dumps, jsonable, write_lines_atomic
from medvision_bm.paths import component_problem, relative_path_problem, safe_component, show
from medvision_bm.score.rescore import StoreProblem, rescore, write_rescored
from medvision_bm.store.discovery import StoreRef
from medvision_bm.store.layout import SIGNATURE, StoreLayout
from medvision_bm.store.records import (
    RESULTS_SCHEMA,
    AnswerRecord,
    AnswerStatus,
    DocRow,
    ResultsRecord,
    iter_lines,
)
from medvision_bm.store.samples import SampleStore
from medvision_bm.store.signature import SHORT, SIGNATURE_SCHEMA, digest, doc_sha
from medvision_bm.tasks.scaled_ps import DEFAULT_RANGE as DEFAULT_SCALED_PS_RANGE
from medvision_bm.tasks.scaled_ps import VARIANT as SCALED_PS_VARIANT
from medvision_bm.tasks.scaled_ps import scaled_view
from medvision_bm.tasks.scoring import target
from medvision_bm.tasks.upstream_prompts import scaled_ps_factors

#: The store segment an import owns (rewritten whole, one ok record per doc).
SEGMENT = "upstream-import.jsonl"
IMPORT_FORMAT = "upstream-lmms-eval"
_TS_RE = re.compile(r"^\d{8}_\d{6}$")
_SKIP_DIRS = {"parsed", "response_cache", "samples", "lmms_eval", "__pycache__"}
_NUM_RE = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)", re.IGNORECASE)
#: upstream's lmms-eval stamps files in its ``--timezone``, default Asia/Singapore (``utils.get_datetime_str``).
_UPSTREAM_TZ = timezone(timedelta(hours=8))


# ----------------------------------------------------------------------------------------------- upstream files


@dataclass
class UpstreamFile:
    path: Path
    task: str
    timestamp: str  # YYYYMMDD_HHMMSS, or the mtime in that form for files without one
    model: str
    results: dict[str, Any] | None
    results_path: Path | None


@dataclass
class Candidate:
    """One parsed upstream record: the answer and where it came from."""

    file: UpstreamFile
    line: int
    doc_id: Any
    doc: dict[str, Any]
    target: str | None
    text: str
    prompt: str | None
    extra: dict[str, Any] = field(default_factory=dict)  # the record's fields a reader asked to keep
    truncated_chars: int = 0  # characters cut from an answer over limits.MAX_ANSWER_CHARS

    @property
    def order(self) -> tuple[str, str, int]:
        """Which of two answers to one doc wins (the larger): the newer run, then the later file name; within one
        file the first line, as upstream's remove_duplicate_samples.py (@bfcf773) keeps the first by doc_id."""
        return (self.file.timestamp, str(self.file.path), -self.line)


@dataclass
class TaskImport:
    """What one (model, task) import did."""

    model: str
    task: str
    stores: list[Path] = field(default_factory=list)
    records: int = 0
    added: int = 0
    replaced: int = 0
    unchanged: int = 0
    superseded: int = 0
    unmatched: list[str] = field(default_factory=list)


@dataclass
class ImportReport:
    tasks: list[TaskImport] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)
    skipped_tasks: list[str] = field(default_factory=list)
    files: int = 0
    notes: list[str] = field(default_factory=list)

    def for_task(self, model: str, task: str) -> TaskImport | None:
        return next((t for t in self.tasks if t.model == model and t.task == task), None)


def _split_name(name: str) -> tuple[str | None, str] | None:
    """``<ts>_samples_<task>.jsonl`` -> (ts, task); ``<task>_samples_<n>.jsonl`` -> (None, task); else None."""
    if not name.endswith(".jsonl") or "_samples_" not in name:
        return None
    prefix, suffix = name[: -len(".jsonl")].split("_samples_", 1)
    if suffix.isdigit():
        return None, prefix
    ts = prefix.replace("-", "_") if _TS_RE.match(prefix.replace("-", "_")) else prefix
    return ts, suffix


#: The parts of an lmms-eval results file the import reads, and the JSON type each must have.
_RESULTS_SHAPE = {"results": dict, "configs": dict, "config": dict, "versions": dict, "n-samples": dict,
                  "model_name": str, "model_name_sanitized": str, "lmms_eval_version": str, "git_hash": str,
                  "date": (str, int, float)}


def _read_json(path: Path) -> dict[str, Any]:
    """An upstream results file: a one-line UserError when it is not a regular file, too large, not JSON, nested
    too deep, or not lmms-eval's shape (an object whose ``configs``, ``config`` ... are objects)."""
    fix = "fix or remove it (the samples file beside it is imported without it once it is gone)"
    try:
        data = limits.read_json_file(path, "upstream results file")
    except UserError as exc:
        raise UserError(f"{exc}; {fix}") from None
    if not isinstance(data, dict):
        raise UserError(f"upstream results file {path} holds a JSON {type(data).__name__}, not lmms-eval's object; "
                        f"{fix}")
    for key, kind in _RESULTS_SHAPE.items():
        if data.get(key) is not None and not isinstance(data[key], kind):
            raise UserError(f"upstream results file {path}: {key!r} is a JSON {type(data[key]).__name__}, not "
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
            split = _split_name(name)
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


def _model_of(folder: Path, root: Path, results: dict[str, Any] | None) -> str:
    """The upstream model folder: the file's folder, or its parent when the folder is lmms-eval's sanitized name."""
    sanitized = (results or {}).get("model_name_sanitized")
    if sanitized and folder.name == sanitized and folder != root:
        return folder.parent.name
    return folder.name


# ----------------------------------------------------------------------------------------------- records


def _answer_text(rec: dict[str, Any]) -> str | None:
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


def read_samples(uf: UpstreamFile, malformed: list[str], keep: Sequence[str] = ()) -> list[Candidate]:
    """The records of one samples file; a line that is not a usable record goes to ``malformed`` as file:line.
    ``keep``: record fields kept in ``Candidate.extra`` (a judged record's ``LLM_*`` fields)."""
    out: list[Candidate] = []
    try:
        fh = limits.open_regular(uf.path, "upstream samples file", limits.MAX_SAMPLES_FILE_BYTES)
    except UserError as exc:
        malformed.append(f"{exc} (not read)")
        return out
    except OSError as exc:
        malformed.append(f"{uf.path}: unreadable ({exc.strerror or exc})")
        return out
    with fh:
        for lineno, line in _lines(fh, uf.path, malformed):
            if len(out) >= limits.MAX_SAMPLES_RECORDS:
                malformed.append(f"{uf.path}:{lineno}: the file holds over {limits.MAX_SAMPLES_RECORDS} records "
                                 "(no upstream task has as many); the rest is not read")
                break
            cand = _candidate(uf, lineno, line, malformed, keep)
            if cand is not None:
                out.append(cand)
    return out


def _lines(fh: Any, path: Path, malformed: list[str]) -> Iterator[tuple[int, bytes]]:
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
        rec = limits.loads_json(line, "the record")  # Python's json: upstream writes NaN for failed metrics
    except (ValueError, UnicodeDecodeError) as exc:
        malformed.append(f"{uf.path}:{lineno}: not JSON ({getattr(exc, 'msg', None) or exc})")
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("doc"), dict):
        malformed.append(f"{uf.path}:{lineno}: not an lmms-eval sample record (no doc object)")
        return None
    text = _answer_text(rec)
    if text is None:
        malformed.append(f"{uf.path}:{lineno}: no answer text in resps/filtered_resps")
        return None
    text, cut = limits.cap_answer(text)  # as the run path stores an over-long answer
    target = rec.get("target")
    prompt = rec.get("input") if isinstance(rec.get("input"), str) else None
    return Candidate(uf, lineno, rec.get("doc_id"), rec["doc"], None if target is None else str(target),
                     text, prompt, {k: rec[k] for k in keep if k in rec}, truncated_chars=cut)


# ----------------------------------------------------------------------------------------------- matching


def _num(value: Any) -> Any:
    """A value as upstream wrote it, back to a number where it is one (``str()``-ed numpy scalars included)."""
    if isinstance(value, str):
        try:
            f = float(value)
        except ValueError:
            return value
        return int(f) if f.is_integer() and re.fullmatch(r"[-+]?\d+", value.strip()) else f
    if isinstance(value, list):
        return [_num(v) for v in value]
    if isinstance(value, dict):
        return {k: _num(v) for k, v in value.items()}
    return value


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None else int(float(value))
    except (TypeError, ValueError):
        return None


def relative_data_path(path: Any) -> str | None:
    """A path of upstream's row relative to ``<data_dir>/Datasets`` (the text after the last ``/Datasets/``)."""
    if not isinstance(path, str) or not path:
        return None
    p = path.replace("\\", "/")
    marker = "/Datasets/"
    if marker in p:
        p = p.rsplit(marker, 1)[1]
    elif p.startswith("Datasets/"):
        p = p[len("Datasets/"):]
    # what is left must stay below Datasets/: an absolute path or a '..' part is no file of the data (never read)
    return None if relative_path_problem(p) else p


def _metric_key(doc: dict[str, Any]) -> str | None:
    bp = doc.get("biometric_profile")
    if isinstance(bp, dict) and isinstance(bp.get("metric_key"), str):
        return bp["metric_key"]
    return None


def identity(doc: dict[str, Any]) -> tuple[Any, ...]:
    """What identifies one sample in upstream's row and in ours (image file matched separately, by path suffix)."""
    return (_int_or_none(doc.get("slice_dim")), _int_or_none(doc.get("slice_idx")), _int_or_none(doc.get("label")),
            _metric_key(doc))


def _targets_equal(upstream_target: str | None, ours: Sequence[float]) -> bool:
    if upstream_target is None:
        return True
    nums = [float(m) for m in _NUM_RE.findall(upstream_target)]
    if len(nums) != len(ours):
        return False
    return all(abs(a - b) <= 1e-6 + 1e-4 * abs(b) for a, b in zip(nums, ours))


class DocMatcher:
    """Our docs of one task, looked up by an upstream row; ``target_of(candidate, doc)`` is the target a record must
    state (default: the doc's own; a -CoT-scaledPS record's is scaled by its factors: ``Views``)."""

    def __init__(self, docs: Sequence[Any], target_of: Callable[[Candidate, Any], list[float]] | None = None) -> None:
        self._target_of = target_of or (lambda cand, doc: target(doc))
        self.by_id: dict[tuple[Any, ...], list[Any]] = {}
        for d in docs:
            key = (d.slice_dim, d.slice_idx, d.label, (d.biometric_profile or {}).get("metric_key")
                   if d.family == "AD" else None)
            self.by_id.setdefault(key, []).append(d)

    def match(self, cand: Candidate) -> tuple[Any | None, str]:
        up = cand.doc
        slice_dim, slice_idx, label, metric_key = identity(up)
        rel = relative_data_path(up.get("image_file"))
        candidates = self.by_id.get((slice_dim, slice_idx, label, metric_key), [])
        hits = [d for d in candidates if rel is not None and (rel == d.image_file or rel.endswith("/" + d.image_file)
                                                              or d.image_file.endswith("/" + rel))]
        if not hits:
            return None, (f"no doc of ours has image {rel or '?'} slice_dim {slice_dim} slice_idx {slice_idx}"
                          + (f" label {label}" if label is not None else "")
                          + (f" metric {metric_key}" if metric_key else ""))
        doc = hits[0]
        for name in ("dataset_name", "taskType"):
            if up.get(name) is not None and str(up[name]) != str(getattr(doc, name)):
                return None, f"{name} {up[name]!r} differs from ours ({getattr(doc, name)!r})"
        ours = self._target_of(cand, doc)
        if not _targets_equal(cand.target, ours):
            return None, f"target {cand.target} differs from ours {ours} ({_target_hint(doc)})"
        return doc, ""


def _target_hint(doc: Any) -> str:
    return ("a -CoT-scaledPS run asked with another factor range? pass its --scaled_ps_low/--scaled_ps_high"
            if doc.task.endswith(SCALED_PS_VARIANT) else "another annotation version?")


class Views:
    """The view of each matched record, made once: the native slice's (``native_view``), and for a -CoT-scaledPS
    T/L or A/D task also upstream's per-sample factors and the scaled target (upstream's
    ``doc_to_target_*_scaledPS``, ``tasks/scaled_ps.py``). The factors are drawn from the record's own doc fields,
    the image path exactly as upstream's loader wrote it (``_get_pixel_size_scale_factor`` hashes that path), in
    the factor range the run was asked with (``MEDVISION_SCALED_PS_LOW/HIGH`` upstream; not in its files)."""

    def __init__(self, tn: Any, data_root: Path | None, meta: Any, scaled_ps: tuple[float, float]) -> None:
        self.scaled = tn.variant == SCALED_PS_VARIANT and tn.family in ("TL", "AD")
        self.data_root, self.meta, self.scaled_ps = data_root, meta, scaled_ps
        self._made: dict[tuple[int, int], Any] = {}

    def of(self, cand: Candidate, doc: Any) -> Any:
        key = (id(cand), id(doc))
        if key not in self._made:
            view = native_view(doc, self.data_root)
            if self.scaled:
                up = cand.doc  # the fields as written: taskID "01" stays a string, as the seed hashes it
                label, task_id = up.get("label"), up.get("taskID")
                factors = scaled_ps_factors(str(up.get("image_file")), int(float(up["slice_dim"])),
                                            int(float(up["slice_idx"])),
                                            task_id if isinstance(task_id, str) else doc.taskID,
                                            None if label is None else str(label), doc.family, *self.scaled_ps)
                view = scaled_view(view, doc, self.data_root, self.scaled_ps, self.meta, factors=factors)
            self._made[key] = view
        return self._made[key]

    def target(self, cand: Candidate, doc: Any) -> list[float]:
        return target(doc, self.of(cand, doc)) if self.scaled else target(doc)


def docs_from_records(task: str, cands: Sequence[Candidate],
                      target_of: Callable[[Candidate, Any], list[float]] | None = None) -> tuple[dict[int, Any],
                                                                                                 list[str]]:
    """Our Docs built from the rows upstream's records carry (no data folder): per candidate index, the Doc
    (``target_of`` as for ``DocMatcher``)."""
    tn = parse_task_name(task)
    out: dict[int, Any] = {}
    problems: list[str] = []
    for i, c in enumerate(cands):
        up = _num(c.doc)
        try:
            image = relative_data_path(up["image_file"])
            if image is None:
                raise ValueError(f"image_file {show(up['image_file'])} is not a path below Datasets/ (absolute or "
                                 "with '..')")
            label = _int_or_none(up.get("label"))
            slice_dim, slice_idx = int(up["slice_dim"]), int(up["slice_idx"])
            key = f"{image}:d{slice_dim}:s{slice_idx}" + (f":l{label}" if label is not None else "")
            if tn.family == "AD":
                key += f":{up['biometric_profile']['metric_key']}"
            out[i] = Doc(
                key=key, task=task, family=tn.family, plane=tn.plane, split=tn.split,
                index=int(c.doc_id) if isinstance(c.doc_id, int) else -1, dataset_name=str(up["dataset_name"]),
                taskID=str(up.get("taskID") or tn.task_id), taskType=str(up.get("taskType") or tn.loader_task_type),
                image_file=image or "", mask_file=relative_data_path(up.get("mask_file")),
                landmark_file=relative_data_path(up.get("landmark_file")), slice_dim=slice_dim, slice_idx=slice_idx,
                label=label, image_size_2d=tuple(int(v) for v in up["image_size_2d"]),  # type: ignore[arg-type]
                pixel_size=tuple(float(v) for v in up["pixel_size"]),  # type: ignore[arg-type]
                image_size_3d=tuple(int(v) for v in up.get("image_size_3d") or (0, 0, 0)),  # type: ignore[arg-type]
                voxel_size=tuple(float(v) for v in up.get("voxel_size") or (0.0, 0.0, 0.0)),  # type: ignore[arg-type]
                bounding_boxes=up.get("bounding_boxes") if tn.family == "detect" else None,
                biometric_profile=up.get("biometric_profile") if tn.family != "detect" else None,
                meta={"source": "upstream record (imported without a data folder)"})

            dumps(out[i].to_json())  # NaN or infinity in the row: ValueError, reported below
            ours = target_of(c, out[i]) if target_of else target(out[i])
            if not _targets_equal(c.target, ours):
                del out[i]
                problems.append(f"{c.file.path}:{c.line}: target {c.target} differs from its own doc's {ours}")
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            out.pop(i, None)
            problems.append(f"{c.file.path}:{c.line}: doc lacks what a sample needs ({type(exc).__name__}: {exc})")
    return out, problems


# ----------------------------------------------------------------------------------------------- signature


def detect_protocol(cands: Sequence[Candidate]) -> str:
    """The upstream generation the answers were asked under, from the prompt text lmms-eval stored (``input``):
    newer prompts ask for ``<answer>`` tags (strict parser, ``current``), paper-era ones do not (``paper``)."""
    prompts = [c.prompt for c in cands if c.prompt]
    if not prompts:
        return "current"
    return "current" if any("<answer>" in p for p in prompts) else "paper"


def _task_config(uf: UpstreamFile) -> dict[str, Any]:
    res = jsonable(uf.results or {})  # our canonical dumps refuses the NaN and infinities upstream's files may hold
    cfg = (res.get("configs") or {}).get(uf.task) or {}
    top = res.get("config") or {}
    if not isinstance(cfg, dict) or not isinstance(top, dict):
        cfg, top = (cfg if isinstance(cfg, dict) else {}), (top if isinstance(top, dict) else {})
    return {
        "lmms_eval_model": top.get("model"),
        "model_args": top.get("model_args"),
        "gen_kwargs": top.get("gen_kwargs"),
        "task_generation_kwargs": cfg.get("generation_kwargs"),
        "lmms_eval_specific_kwargs": cfg.get("lmms_eval_specific_kwargs"),
        "task_version": (res.get("versions") or {}).get(uf.task),
        "results_file": uf.results is not None,
    }


def signature_inputs(*, model: str, task: str, family: str, variant: str, protocol: str, config: dict[str, Any],
                     planner_version: str | None, plan_version: str | None, filtering: bool | None,
                     docs_from: str, scaled_ps: tuple[float, float] | None = None) -> dict[str, Any]:
    extra = {"scaled_ps_range": list(scaled_ps)} if scaled_ps is not None else {}  # as the runner's signature
    return {
        **extra,
        "schema": SIGNATURE_SCHEMA,
        "imported": IMPORT_FORMAT,
        "model": {"record": None, "backend": IMPORT_FORMAT, "upstream_model_name": model,
                  "lmms_eval_model": config.get("lmms_eval_model"), "model_args": config.get("model_args")},
        "generation": {"gen_kwargs": config.get("gen_kwargs"),
                       "task_generation_kwargs": config.get("task_generation_kwargs")},
        "task": task,
        # family and variant as our task versions carry them (store/discovery.py reads the family from it)
        "task_version": f"upstream-{protocol}-{family}{variant}",
        "upstream_task_version": config.get("task_version"),
        "lmms_eval_specific_kwargs": config.get("lmms_eval_specific_kwargs"),
        "protocol": protocol,
        "planner_version": planner_version,
        "plan_version": plan_version,
        "sample_filtering": filtering,
        "docs_from": docs_from,
        "results_file": config.get("results_file"),
    }


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with limits.open_regular(path, "upstream samples file", limits.MAX_SAMPLES_FILE_BYTES) as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _epoch(ts: str) -> float | None:
    try:
        return datetime.strptime(ts, "%Y%m%d_%H%M%S").replace(tzinfo=_UPSTREAM_TZ).timestamp()
    except ValueError:
        return None


# ----------------------------------------------------------------------------------------------- import


def native_view(doc: Any, data_root: Path | None) -> Any:
    """The slice as stored (no model resize): what scoring reads of a view is the header pixel size (nMAE's
    diagonal); the rest describes the native slice, not what upstream's model perceived (that is in the prompt)."""
    if data_root is not None:
        zooms = header_zooms(data_root / "Datasets" / doc.image_file)
        keep = [a for a in range(3) if a != doc.slice_dim]
        px = (float(zooms[keep[0]]), float(zooms[keep[1]]))
    else:  # the row's float16 pixel size: nMAE's diagonal then differs from upstream's in the 4th digit
        px = (float(doc.pixel_size[0]), float(doc.pixel_size[1]))
    hw = (int(doc.image_size_2d[0]), int(doc.image_size_2d[1]))
    return View(image_hw=hw, pixel_hw_mm=px, canvas_hw=hw, content_hw=hw, stated_pixel_hw_mm=px, header_pixel_hw=px)


def _read_segment(path: Path) -> dict[str, AnswerRecord]:
    if not path.is_file():
        return {}
    return {r.key: r for r in iter_lines(path, AnswerRecord.from_json)}


def _write_store(folder: Path, answer_sig: str, inputs: dict[str, Any], rows: list[DocRow],
                 records: dict[str, AnswerRecord], sources: list[dict[str, Any]], ti: TaskImport,
                 model: str, task: str, family: str, losers: set[tuple[str, str]]) -> bool:
    """Create or update one imported store; True when its answers changed. ``losers`` holds the (timestamp, key) of
    the answers a newer one replaced so far; the ones lost to answers already in the store are added here."""
    store = SampleStore(folder, answer_sig)
    store.init(inputs)
    sig = store.signature()
    old_sources = {s["path"]: s for s in (sig.imported or {}).get("sources", [])}
    merged_sources = {**old_sources, **{s["path"]: s for s in sources}}
    block = {"format": IMPORT_FORMAT, "note": "answers imported from upstream MedVision lmms-eval result files; "
             "the inputs above are what those files tell of the settings",
             "docs_from": inputs["docs_from"], "sources": [merged_sources[k] for k in sorted(merged_sources)]}
    if sig.imported != block:
        dataclasses.replace(sig, imported=block).write(store.layout.signature)
    seg = store.layout.samples / SEGMENT
    existing = _read_segment(seg)
    merged = dict(existing)
    changed = False
    for key, rec in records.items():
        old = merged.get(key)
        if old is not None:
            (o_ts, _, _), (n_ts, _, _) = _order(old), _order(rec)
            if o_ts == n_ts and old.text == rec.text:
                ti.unchanged += 1  # the same answer (read again, or from a copy of the same file)
                continue
            if _order(old) >= _order(rec):
                losers.add((n_ts, key))  # older than the answer already imported
                continue
            losers.add((o_ts, key))
            ti.replaced += 1
        else:
            ti.added += 1
        merged[key] = rec
        changed = True
    ti.superseded += len(losers)
    store.write_docs(rows)
    if changed or not seg.is_file():
        ordered = sorted(merged.values(), key=lambda r: (r.index or 0, r.key))
        write_lines_atomic(seg, (r.line() + b"\n" for r in ordered))
    results_path = store.layout.results()
    if changed or not results_path.is_file():
        results = ResultsRecord.read(results_path) or ResultsRecord()
        dataclasses.replace(results, schema=RESULTS_SCHEMA, model_name=model, record=None, task=task, family=family,
                            protocol=inputs["protocol"], answer_signature=answer_sig, signature_inputs=inputs,
                            selection=None, error=None, imported_from=block,
                            written_by="medvision-bm import").write(results_path)
    return changed


def _order(rec: AnswerRecord) -> tuple[str, str, int]:
    src = rec.source or {}
    return (str(src.get("timestamp") or ""), str(src.get("file") or ""), -int(src.get("line") or 0))  # as .order


def import_upstream(upstream_dir: str | Path, results_dir: str | Path, *, model_name: str | None = None,
                    models: Sequence[str] | None = None, tasks: Sequence[str] | None = None,
                    data_dir: str | Path | None = None, use_data: bool | None = None,
                    protocol: str = "auto", score: bool = True, data: Any = None,
                    scaled_ps: tuple[float, float] = DEFAULT_SCALED_PS_RANGE) -> ImportReport:
    """Import every upstream samples file below ``upstream_dir`` (filtered by ``models``/``tasks``).

    ``data`` (a DataDir) or ``data_dir`` / MedVision_DATA_DIR give our docs; ``use_data=False`` (or no data folder
    at all) builds the docs from the records themselves. ``model_name`` stores everything under that name.
    ``scaled_ps``: the factor range the -CoT-scaledPS runs were asked with (upstream's default 0.5 to 3.0).
    """
    root = Path(upstream_dir).expanduser()
    if not root.is_dir():
        raise UserError(f"--upstream_results {root} is not a folder; pass upstream's Results/<task_tag> folder "
                        "(or Results/, or one model folder inside it)")
    results_root = Path(results_dir).expanduser().resolve()
    if model_name is not None:  # the run path's rule (runner.config): one folder name under --results_dir
        safe_component(model_name, "--model_name")
    report = ImportReport()
    files = find_upstream_files(root)
    if model_name and len({f.model for f in files}) > 1:
        raise UserError(f"--upstream_results {root} holds runs of several models "
                        f"({', '.join(sorted({f.model for f in files}))}); pass one model's folder with --model_name, "
                        "or drop --model_name to import each under its own name")
    if models:
        files = [f for f in files if f.model in models]
    if tasks:
        files = [f for f in files if f.task in tasks]
    if not files:
        report.notes.append(f"no upstream samples files (<timestamp>_samples_<task>.jsonl) below {root}"
                            + (" for the models/tasks asked" if models or tasks else ""))
        return report
    report.files = len(files)
    if data is None and use_data is not False:
        env_dir = os.environ.get(ENV_DATA_DIR, "").strip()
        if data_dir is not None or env_dir:
            data = DataDir(DatasetContract.resolve(data_dir))
        elif use_data:
            raise UserError("no data folder: pass --data_dir DIR or set MedVision_DATA_DIR")
    if data is None:
        report.notes.append("no data folder given: docs are built from the upstream records themselves "
                            "(label names and modality unknown, nMAE from the rows' float16 pixel size); "
                            "pass --data_dir to key answers to the data's docs")
    groups: dict[tuple[str, str], list[UpstreamFile]] = {}
    for f in files:
        why = None if model_name else component_problem(f.model)
        if why:  # a folder name the run path refuses as --model_name never names a folder of ours
            report.skipped_tasks.append(f"{f.task} ({show(f.model)}): the model folder's name {why}; import it with "
                                        "--model_name NAME")
            continue
        groups.setdefault((model_name or f.model, f.task), []).append(f)
    for (model, task), ufs in sorted(groups.items()):
        try:
            tn = parse_task_name(task)
        except UserError as exc:
            report.skipped_tasks.append(f"{task} ({model}): {exc}")
            continue
        ti = TaskImport(model, task)
        cands: list[Candidate] = []
        for uf in sorted(ufs, key=lambda u: (u.timestamp, str(u.path))):
            cands.extend(read_samples(uf, report.malformed))
        ti.records = len(cands)
        if not cands:
            report.tasks.append(ti)
            continue
        try:
            _import_task(ti, tn, cands, data, results_root, protocol, score, scaled_ps)
        except UserError as exc:
            report.skipped_tasks.append(f"{task} ({model}): {exc}")
            continue
        report.tasks.append(ti)
    return report


def _import_task(ti: TaskImport, tn: Any, cands: list[Candidate], data: Any, results_root: Path, protocol: str,
                 score: bool, scaled_ps: tuple[float, float] = DEFAULT_SCALED_PS_RANGE) -> None:
    task, family = ti.task, tn.family
    if data is not None:
        samples = data.samples(task)
        views = Views(tn, data.root, samples.meta_header, scaled_ps)
        matcher = DocMatcher(samples.docs(), views.target)
        matched: list[tuple[Candidate, Any]] = []
        for c in cands:
            doc, why = matcher.match(c)
            if doc is None:
                ti.unmatched.append(f"{c.file.path}:{c.line} (doc_id {c.doc_id}): {why}")
            else:
                matched.append((c, doc))
        planner, plan_version, filtering = data.planner_version, samples.plan_version, data.contract.filtering
    else:
        views = Views(tn, None, None, scaled_ps)
        built, problems = docs_from_records(task, cands, views.target)
        ti.unmatched.extend(problems)
        matched = [(c, built[i]) for i, c in enumerate(cands) if i in built]
        planner = plan_version = None
        filtering = None
    # group by configuration (answers under different upstream settings never share a store)
    by_sig: dict[str, dict[str, Any]] = {}
    config_of: dict[int, tuple[str, dict[str, Any]]] = {}  # per upstream file (id): its config and digest, once
    proto = protocol if protocol != "auto" else None
    for c, doc in matched:
        known = config_of.get(id(c.file))
        if known is None:
            cfg = _task_config(c.file)
            known = config_of[id(c.file)] = (digest(cfg), cfg)
        by_sig.setdefault(known[0], {"cfg": known[1], "items": [], "proto": proto})["items"].append((c, doc))
    for group in by_sig.values():
        items = group["items"]
        proto = group["proto"] or detect_protocol([c for c, _ in items])
        inputs = signature_inputs(model=ti.model, task=task, family=family, variant=tn.variant, protocol=proto,
                                  config=group["cfg"], planner_version=planner, plan_version=plan_version,
                                  filtering=filtering, docs_from="data" if data is not None else "records",
                                  scaled_ps=scaled_ps if views.scaled else None)
        answer_sig = digest(inputs)
        folder = results_root / ti.model / task / answer_sig[:SHORT]
        newest: dict[str, tuple[Candidate, Any]] = {}
        losers: set[tuple[str, str]] = set()
        for c, doc in items:
            old = newest.get(doc.key)
            if old is not None:
                if old[0].order > c.order:
                    losers.add((c.file.timestamp, doc.key))
                    continue
                losers.add((old[0].file.timestamp, doc.key))
            newest[doc.key] = (c, doc)
        rows: list[DocRow] = []
        records: dict[str, AnswerRecord] = {}
        sources: dict[str, dict[str, Any]] = {}
        for key, (c, doc) in newest.items():
            view = views.of(c, doc)
            sha = doc_sha(doc, view)
            rows.append(DocRow(key, doc.index, sha, doc.to_json(), view.to_json(), proto, tn.variant))
            records[key] = AnswerRecord(key=key, answer_signature=answer_sig, status=AnswerStatus.OK,
                                        index=doc.index, doc_sha=sha, text=c.text, time=_epoch(c.file.timestamp),
                                        source={"file": str(c.file.path.resolve()), "line": c.line,
                                                "timestamp": c.file.timestamp, "doc_id": jsonable(c.doc_id)},
                                        truncated_chars=c.truncated_chars)
        for c, _doc in items:
            p = str(c.file.path.resolve())
            if p not in sources:
                res = c.file.results or {}
                sources[p] = {"path": p, "sha256": _sha256(c.file.path), "timestamp": c.file.timestamp,
                              "results_file": str(c.file.results_path.resolve()) if c.file.results_path else None,
                              "results_sha256": _sha256(c.file.results_path) if c.file.results_path else None,
                              "lmms_eval_version": res.get("lmms_eval_version"), "git_hash": res.get("git_hash"),
                              "date": res.get("date"), "upstream_model_name": res.get("model_name"),
                              "records": 0}
            sources[p]["records"] += 1
        folder.mkdir(parents=True, exist_ok=True)
        with SampleStore(folder, answer_sig).writing():  # a concurrent import of this store waits here
            changed = _write_store(folder, answer_sig, inputs, rows, records, list(sources.values()), ti, ti.model,
                                   task, family, losers)
            ti.stores.append(folder)
            if score and (changed or _parse_stale(folder)):
                _score(folder, ti.model, task, family, answer_sig, inputs)


def _parse_stale(folder: Path) -> bool:
    """Whether the store's parse predates its segment (an import killed between writing and scoring)."""
    layout = StoreLayout(folder)
    parsed, seg = layout.parsed(), layout.samples / SEGMENT
    try:
        return parsed.stat().st_mtime_ns < seg.stat().st_mtime_ns
    except FileNotFoundError:
        return True


def _score(folder: Path, model: str, task: str, family: str, answer_sig: str, inputs: dict[str, Any]) -> None:
    """Parse and score the store at once (as `medvision-bm parse` would)."""
    try:
        write_rescored(rescore(StoreRef(folder, "", model, task, family, answer_sig, inputs, label=model)))
    except StoreProblem as exc:
        print(f"note: {exc}", file=sys.stderr)
