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
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from medvision_bm.data.docs import Doc
from medvision_bm.data.layout import DataDir, TaskName, parse_task_name
from medvision_bm.data.planner import ENV_DATA_DIR, DatasetContract
from medvision_bm.errors import UserError
from medvision_bm.ingest.upstream_files import (
    Candidate,
    UpstreamFile,
    file_sha256,
    find_upstream_files,
    imported_sources,
    iter_samples,
    key_fields,
)
from medvision_bm.ingest.upstream_match import DocMatcher, Views, doc_from_record
from medvision_bm.io import jsonable, write_lines_atomic
from medvision_bm.jsontypes import JsonObject, JsonValue
from medvision_bm.paths import component_problem, safe_component, show
from medvision_bm.score.rescore import StoreProblem, rescore_streamed
from medvision_bm.score.store_scoring import current_scoring
from medvision_bm.store.discovery import StoreRef
from medvision_bm.store.freshness import Fresh, parse_state
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

#: The store segment an import owns (rewritten whole, one ok record per doc).
SEGMENT = "upstream-import.jsonl"
IMPORT_FORMAT = "upstream-lmms-eval"
#: upstream's lmms-eval stamps files in its ``--timezone``, default Asia/Singapore (``utils.get_datetime_str``).
_UPSTREAM_TZ = timezone(timedelta(hours=8))


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


# ----------------------------------------------------------------------------------------------- signature


def _object(value: JsonValue) -> JsonObject:
    """An object of upstream's results file (``_read_json`` let only an object or null through), null as ``{}``."""
    return value if isinstance(value, dict) else {}


def _task_config(uf: UpstreamFile) -> JsonObject:
    # our canonical dumps refuses the NaN and infinities upstream's files may hold
    res = _object(jsonable(uf.results or {}))
    cfg = _object(res.get("configs")).get(uf.task) or {}
    top = res.get("config") or {}
    if not isinstance(cfg, dict) or not isinstance(top, dict):
        cfg, top = (cfg if isinstance(cfg, dict) else {}), (top if isinstance(top, dict) else {})
    return {
        "lmms_eval_model": top.get("model"),
        "model_args": top.get("model_args"),
        "gen_kwargs": top.get("gen_kwargs"),
        "task_generation_kwargs": cfg.get("generation_kwargs"),
        "lmms_eval_specific_kwargs": cfg.get("lmms_eval_specific_kwargs"),
        "task_version": _object(res.get("versions")).get(uf.task),
        "results_file": uf.results is not None,
    }


def signature_inputs(*, model: str, task: str, family: str, variant: str, protocol: str, config: Mapping[str, JsonValue],
                     planner_version: str | None, plan_version: str | None, filtering: bool | None,
                     docs_from: str, scaled_ps: tuple[float, float] | None = None) -> JsonObject:
    extra: JsonObject = {"scaled_ps_range": list(scaled_ps)} if scaled_ps is not None else {}  # as the runner's signature
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


def _epoch(ts: str) -> float | None:
    try:
        return datetime.strptime(ts, "%Y%m%d_%H%M%S").replace(tzinfo=_UPSTREAM_TZ).timestamp()
    except ValueError:
        return None


# ----------------------------------------------------------------------------------------------- import


def _read_segment(path: Path) -> dict[str, AnswerRecord]:
    if not path.is_file():
        return {}
    return {r.key: r for r in iter_lines(path, AnswerRecord.from_json)}


def _write_store(folder: Path, answer_sig: str, inputs: JsonObject, rows: Iterable[DocRow],
                 records: Iterable[AnswerRecord], sources: Mapping[str, JsonObject], ti: TaskImport,
                 model: str, task: str, family: str, losers: set[tuple[str, str]], data_dir: Path | None = None) -> bool:
    """Create or update one imported store; True when its answers changed. ``rows`` and ``records`` (one answer
    per doc) come in the segment's order, (index, key). ``losers`` holds the (timestamp, key) of the answers a newer
    one replaced so far; the ones lost to answers already in the store are added here. ``sources``: the files
    read, by path. A new store's segment is written as the records come, one at a time."""
    store = SampleStore(folder, answer_sig)
    store.init(inputs)
    store.refuse_newer()  # a newer version's records are refused before anything is rewritten
    sig = store.signature()
    merged_sources = {**imported_sources(sig.imported), **sources}
    block: JsonObject = {"format": IMPORT_FORMAT, "note": "answers imported from upstream MedVision lmms-eval result files; "
             "the inputs above are what those files tell of the settings",
             "docs_from": inputs["docs_from"], "sources": [merged_sources[k] for k in sorted(merged_sources)]}
    if sig.imported != block:
        dataclasses.replace(sig, imported=block).write(store.layout.signature)
    seg = store.layout.samples / SEGMENT
    # written in this order: docs.jsonl, results.json, the segment; the score after them rewrites results.json, so a
    # results.json older than the segment marks a store whose answers changed after its last score
    # (store.freshness.parse_state)
    if not seg.is_file():
        store.write_docs(rows)
        _write_results(store, model, task, family, answer_sig, inputs, block, data_dir)
        added = 0

        def lines() -> Iterator[bytes]:
            nonlocal added
            for rec in records:
                added += 1
                yield rec.line() + b"\n"

        write_lines_atomic(seg, lines())
        ti.added += added
        ti.superseded += len(losers)
        return True
    existing = _read_segment(seg)
    merged = dict(existing)
    changed = False
    for rec in records:
        key = rec.key
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
    if changed or not store.layout.results().is_file():
        _write_results(store, model, task, family, answer_sig, inputs, block, data_dir)
    if changed:
        ordered = sorted(merged.values(), key=lambda r: (r.index or 0, r.key))
        write_lines_atomic(seg, (r.line() + b"\n" for r in ordered))
    return changed


def _write_results(store: SampleStore, model: str, task: str, family: str, answer_sig: str, inputs: JsonObject,
                   block: JsonObject, data_dir: Path | None = None) -> None:
    """An imported store's results.json: what was imported and from where (its metrics come with its score), and
    the absolute data folder its docs were keyed to (none when they were built from the records)."""
    results_path = store.layout.results()
    results = ResultsRecord.read(results_path) or ResultsRecord()
    dataclasses.replace(results, schema=RESULTS_SCHEMA, model_name=model, record=None, task=task, family=family,
                        protocol=str(inputs["protocol"]), answer_signature=answer_sig, signature_inputs=inputs,
                        selection=None, error=None, imported_from=block,
                        data_dir=str(data_dir) if data_dir is not None else results.data_dir,
                        written_by="medvision-bm import").write(results_path)


def _order(rec: AnswerRecord) -> tuple[str, str, int]:
    src = rec.source or {}
    line = src.get("line")
    return (str(src.get("timestamp") or ""), str(src.get("file") or ""),  # as Candidate.order
            -int(line) if isinstance(line, int | float | str) and line else 0)


def import_upstream(upstream_dir: str | Path, results_dir: str | Path, *, model_name: str | None = None,
                    models: Sequence[str] | None = None, tasks: Sequence[str] | None = None,
                    data_dir: str | Path | None = None, use_data: bool | None = None,
                    protocol: str = "auto", score: bool = True, data: DataDir | None = None,
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
        try:
            _import_task(ti, tn, sorted(ufs, key=lambda u: (u.timestamp, str(u.path))), report.malformed, data,
                         results_root, protocol, score, scaled_ps)
        except UserError as exc:
            report.skipped_tasks.append(f"{task} ({model}): {exc}")
            continue
        report.tasks.append(ti)
    return report


def _import_task(ti: TaskImport, tn: TaskName, ufs: list[UpstreamFile], malformed: list[str], data: DataDir | None,
                 results_root: Path, protocol: str, score: bool,
                 scaled_ps: tuple[float, float] = DEFAULT_SCALED_PS_RANGE) -> None:
    """Import one (model, task): its files' records are read one at a time, each keyed to a doc as it is read and
    then cut to what identifies it (``key_fields``), so a task's records are never held whole."""
    task, family = ti.task, tn.family
    planner: str | None
    plan_version: str | None
    filtering: bool | None
    if data is not None:
        samples = data.samples(task)
        views = Views(tn, data.root, samples.meta_header, scaled_ps)
        matcher = DocMatcher(samples.docs(), views.target)
        planner, plan_version, filtering = data.planner_version, samples.plan_version, data.contract.filtering
    else:
        views = Views(tn, None, None, scaled_ps)
        planner = plan_version = None
        filtering = None
    groups: dict[str, _Group] = {}  # by configuration: answers under different upstream settings never share a store
    config_of: dict[int, str] = {}  # per upstream file (id): the digest of its configuration, once
    for uf in ufs:
        for c in iter_samples(uf, malformed):
            ti.records += 1
            if data is not None:
                doc, why = matcher.match(c)
                why = f"{c.file.path}:{c.line} (doc_id {c.doc_id}): {why}"
            else:
                doc, why = doc_from_record(tn, c, views.target)
            if doc is None:
                ti.unmatched.append(why)
                continue
            c.doc, c.target = key_fields(c.doc), None  # all a matched record is asked for from here on
            sig = config_of.get(id(c.file))
            if sig is None:
                cfg = _task_config(c.file)
                sig = config_of[id(c.file)] = digest(cfg)
                groups.setdefault(sig, _Group(cfg))
            groups[sig].add(c, doc)
    if not ti.records:
        return
    ctx = _TaskContext(ti, tn, views, planner, plan_version, filtering, data is not None, scaled_ps, results_root)
    proto = protocol if protocol != "auto" else None
    written = [_write_group(ctx, group, proto) for group in groups.values()]
    del groups  # the records are in the stores now: scoring reads them from there
    if data is not None:
        del matcher, samples
    for folder, answer_sig, inputs, changed in written:
        # scored under the writer lock again: every write is followed by its own score, so the last score of a
        # store comes after its last write, whatever concurrent imports did in between
        with SampleStore(folder, answer_sig).writing():
            if score and (changed or not isinstance(parse_state(folder, current_scoring), Fresh)):
                _score(folder, ti.model, task, family, answer_sig, inputs)


@dataclass
class _TaskContext:
    """What every configuration's store of one (model, task) import shares."""

    ti: TaskImport
    tn: TaskName
    views: Views
    planner: str | None
    plan_version: str | None
    filtering: bool | None
    from_data: bool
    scaled_ps: tuple[float, float]
    results_root: Path


@dataclass
class _Group:
    """The matched records of one configuration, as they are read: the newest answer per doc (the others counted
    as superseded, by timestamp), how many records each file gave, and whether the prompts asked for tags."""

    cfg: JsonObject
    newest: dict[str, tuple[Candidate, Doc]] = field(default_factory=dict)
    losers: set[tuple[str, str]] = field(default_factory=set)  # (timestamp, key) of the answers a newer one replaced
    files: dict[int, tuple[UpstreamFile, int]] = field(default_factory=dict)  # id(file) -> (file, records matched)
    prompted: bool = False
    tagged: bool = False

    def add(self, c: Candidate, doc: Doc) -> None:
        self.files[id(c.file)] = (c.file, self.files.get(id(c.file), (c.file, 0))[1] + 1)
        if c.prompt_tagged is not None:
            self.prompted, self.tagged = True, self.tagged or c.prompt_tagged
        old = self.newest.get(doc.key)
        if old is not None:
            if old[0].order > c.order:
                self.losers.add((c.file.timestamp, doc.key))
                return
            self.losers.add((old[0].file.timestamp, doc.key))
        self.newest[doc.key] = (c, doc)

    @property
    def protocol(self) -> str:
        """The upstream generation the answers were asked under, from the prompt text lmms-eval stored (``input``):
        newer prompts ask for ``<answer>`` tags (strict parser, ``current``), paper-era ones do not (``paper``)."""
        return "current" if self.tagged or not self.prompted else "paper"


def _write_group(ctx: _TaskContext, group: _Group, proto: str | None) -> tuple[Path, str, JsonObject, bool]:
    """Write the answers of one configuration into its store (under the store's writer lock); the store, its
    signature and inputs, and whether its answers changed."""
    ti, tn, views = ctx.ti, ctx.tn, ctx.views
    proto = proto or group.protocol
    inputs = signature_inputs(model=ti.model, task=ti.task, family=tn.family, variant=tn.variant, protocol=proto,
                              config=group.cfg, planner_version=ctx.planner, plan_version=ctx.plan_version,
                              filtering=ctx.filtering, docs_from="data" if ctx.from_data else "records",
                              scaled_ps=ctx.scaled_ps if views.scaled else None)
    answer_sig = digest(inputs)
    folder = ctx.results_root / ti.model / ti.task / answer_sig[:SHORT]
    newest, losers = group.newest, group.losers
    sources: dict[str, JsonObject] = {}
    records: dict[str, int] = {}  # per source: the records matched
    file_of: dict[int, tuple[str, float | None]] = {}  # per upstream file (id): its resolved path and epoch, once
    shas = {key: doc_sha(doc, views.of(c, doc)) for key, (c, doc) in newest.items()}
    order = sorted(newest, key=lambda k: (newest[k][1].index, k))  # docs.jsonl's and the segment's order

    def record(key: str) -> AnswerRecord:  # made when it is merged or written, never all held together
        c, doc = newest[key]
        known_file = file_of.get(id(c.file))
        if known_file is None:
            known_file = file_of[id(c.file)] = (str(c.file.path.resolve()), _epoch(c.file.timestamp))
        return AnswerRecord(key=key, answer_signature=answer_sig, status=AnswerStatus.OK, index=doc.index,
                            doc_sha=shas[key], text=c.text, time=known_file[1],
                            source={"file": known_file[0], "line": c.line, "timestamp": c.file.timestamp,
                                    "doc_id": jsonable(c.doc_id)},
                            truncated_chars=c.truncated_chars)

    def rows() -> Iterator[DocRow]:  # made as docs.jsonl is written (in its order), never held together
        for key in order:
            c, doc = newest[key]
            yield DocRow(key, doc.index, shas[key], doc.to_json(), views.of(c, doc).to_json(), proto, tn.variant)

    for uf, n_records in group.files.values():
        p = file_of[id(uf)][0] if id(uf) in file_of else str(uf.path.resolve())
        if p not in sources:
            res = uf.results or {}
            sources[p] = {"path": p, "sha256": file_sha256(uf.path), "timestamp": uf.timestamp,
                          "results_file": str(uf.results_path.resolve()) if uf.results_path else None,
                          "results_sha256": file_sha256(uf.results_path) if uf.results_path else None,
                          "lmms_eval_version": res.get("lmms_eval_version"), "git_hash": res.get("git_hash"),
                          "date": res.get("date"), "upstream_model_name": res.get("model_name"),
                          "records": 0}
        records[p] = records.get(p, 0) + n_records
    for p, n_records in records.items():
        sources[p]["records"] = n_records
    folder.mkdir(parents=True, exist_ok=True)
    with SampleStore(folder, answer_sig).writing():  # a concurrent import of this store waits here
        changed = _write_store(folder, answer_sig, inputs, rows(), (record(k) for k in order),
                               sources, ti, ti.model, ti.task, tn.family, losers, views.data_root)
    ti.stores.append(folder)
    return folder, answer_sig, inputs, changed


def _score(folder: Path, model: str, task: str, family: str, answer_sig: str, inputs: JsonObject) -> None:
    """Parse and score the store at once (as `medvision-bm parse` would), one sample at a time."""
    try:
        rescore_streamed(StoreRef(folder, "", model, task, family, answer_sig, inputs, label=model))
    except StoreProblem as exc:
        print(f"note: {exc}", file=sys.stderr)
