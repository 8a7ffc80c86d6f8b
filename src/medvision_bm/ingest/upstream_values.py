"""`medvision-bm import` of upstream's per-sample files: ``summary_values_{TL,AD}_Task*.json`` (parsed values with
their doc metas, as ``Paper-results-backup/`` publishes them) -> sample stores with a judged parse, and the
comparison of their numbers with the ``summary_metrics_*.json`` beside them.

Upstream's files (docs/spec/upstream-summary-files.md; YongchengYAO/MedVision ``src/medvision_bm/benchmark/
summarize_TL_task.py`` @28f6c67, ``summarize_AD_task.py`` @286f632; the published
``Paper-results-backup/{TL,AD}/MedVision-V0-7B/llm-parsed_gemma-4-31b/`` @755a7bb): ``<model>/<parsed dir>/``
holds the values file and the metrics file of the same suffix; ``<parsed dir>`` is ``parsed`` (strict) or
``llm-parsed_<judge>``. A T/L file maps each group (``<label> @ <modality> (<plane>)``) to its ``targets``,
``responses`` and ``doc_metas``; an A/D file lists ``{label, targets, responses, doc_meta}`` records.

What a store is made of here: one doc per record (its key as the raw import keys a record without a data folder:
image below ``Datasets/``, ``slice_dim``, ``slice_idx``, T/L ``label``, A/D metric key), the task named from the
doc meta (dataset, family, ``taskID``, plane), the group's label name and modality (T/L, through upstream's
``label_map_rename``), the target from the record, no pixel size (the files hold none). The answer stored is the
record's response inside ``<answer>`` tags, so the strict parse reads the very numbers; the judged parse (its
folder named as upstream's ``<parsed dir>``) takes each sample's decision from the file (a response: decided; none:
undetermined) and its nMAE as upstream's summarizers read it, the precomputed ``nmae_precomputed`` of the doc meta.
Within a task the samples keep the file's order, so the per-group sums run in upstream's order.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from medvision_bm import limits
from medvision_bm.data import upstream_configs as cfg
from medvision_bm.data.docs import PLANE_OF_DIM, Doc, View
from medvision_bm.data.layout import parse_task_name
from medvision_bm.errors import UserError
from medvision_bm.ingest.upstream import signature_inputs
from medvision_bm.ingest.upstream_files import split_samples_name
from medvision_bm.ingest.upstream_judged import judge_inputs
from medvision_bm.ingest.upstream_match import items_of, native_view, relative_data_path, to_float, to_int
from medvision_bm.io import write_lines_atomic
from medvision_bm.jsontypes import JsonObject, JsonValue
from medvision_bm.paths import component_problem, show
from medvision_bm.score.judged import Decision, judged_row, judged_score, write_judged_parse
from medvision_bm.score.rescore import StoreProblem, rescore_streamed
from medvision_bm.store.discovery import StoreRef
from medvision_bm.store.layout import VALUES_FIRST_RECORD, VALUES_IMPORT_FORMAT, JudgedLayout, StoreLayout
from medvision_bm.store.records import AnswerRecord, AnswerStatus, DocRow, JudgeFile, ParsedRow
from medvision_bm.store.samples import SampleStore
from medvision_bm.store.signature import SHORT, digest, doc_sha
from medvision_bm.tasks import upstream_metrics as um
from medvision_bm.tasks.families import family_spec
from medvision_bm.tasks.scoring import protocol_settings, score_answer

VALUES_FORMAT = VALUES_IMPORT_FORMAT
SEGMENT = "upstream-values.jsonl"
PROTOCOL = "current"
_NAME_RE = re.compile(r"^summary_values_(?P<family>TL|AD)_Task(?P<rest>.*)\.json$")
_DIR_RE = re.compile(r"^(parsed|llm-parsed_.+)$")
_GROUP_RE = re.compile(r"^(?P<label>.+) @ (?P<modality>[^ ]+) \((?P<plane>[SCA])\)$")
_PLANE_DIM = {"S": 0, "C": 1, "A": 2}
#: A/D datasets whose tasks are split by measure (``..._BiometricsFromLandmarks_{Distance,Angle}_Task01_...`` in
#: upstream's tasks lists, ``tasks_list/tasks_MedVision-AD.json``); the others have one task per plane.
_MEASURE_SPLIT = ("Ceph-Biometrics-400",)


@dataclass(frozen=True)
class ValuesFile:
    """One upstream per-sample file: where it is, its family, the model and parsed folder it belongs to."""

    path: Path
    family: str
    model: str
    parsed_dir: str

    @property
    def metrics_path(self) -> Path:
        return self.path.with_name(self.path.name.replace("summary_values_", "summary_metrics_", 1))


@dataclass(frozen=True)
class ValueSample:
    """One record of a values file: its group (upstream's label), target and response strings and doc meta."""

    group: str
    target: str
    response: str
    meta: Mapping[str, JsonValue]


@dataclass
class ValuesImport:
    """What the import of one values file did and how its numbers compare with the metrics file beside it."""

    file: ValuesFile
    samples: int = 0
    stores: list[Path] = field(default_factory=list)
    compared: int = 0
    differ: list[str] = field(default_factory=list)
    metrics_found: bool = False

    def line(self) -> str:
        where = f"{self.file.model}/{self.file.parsed_dir}/{self.file.path.name}"
        head = f"{where}: {self.samples} sample(s) into {len(self.stores)} store(s)"
        if not self.metrics_found:
            return f"{head}; no {self.file.metrics_path.name} beside it, nothing compared"
        verdict = "all equal" if not self.differ else f"{len(self.differ)} differ"
        return f"{head}; {self.compared} numbers compared, {verdict}"


def find_values_files(root: Path) -> list[ValuesFile]:
    """Every ``summary_values_{TL,AD}_Task*.json`` in a ``parsed`` or ``llm-parsed_<judge>`` folder below ``root``."""
    out: list[ValuesFile] = []
    for dirpath, dirnames, filenames in os.walk(root.expanduser().resolve()):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        here = Path(dirpath)
        if not _DIR_RE.match(here.name):
            continue
        for name in sorted(filenames):
            m = _NAME_RE.match(name)
            if m:
                out.append(ValuesFile(here / name, m["family"], here.parent.name, here.name))
    return out


def has_raw_samples(model_dir: Path) -> bool:
    """Whether a model folder holds raw lmms-eval samples files (outside its parsed folders): the plain import
    keys those answers to their docs, and a values file beside them is a summary of the same answers."""
    for _dirpath, dirnames, filenames in os.walk(model_dir):
        dirnames[:] = [d for d in dirnames if not _DIR_RE.match(d) and d not in ("response_cache", "samples")
                       and not d.startswith(".")]
        if any(split_samples_name(name) is not None for name in filenames):
            return True
    return False


def _bad(vf: ValuesFile, what: str) -> UserError:
    return UserError(f"upstream values file {vf.path} {what}; it is not upstream's summary_values shape (fix or "
                     "remove it)")


def _sample(vf: ValuesFile, group: JsonValue, target: JsonValue, response: JsonValue, meta: JsonValue, where: str) -> ValueSample:
    if not isinstance(group, str) or not isinstance(target, str) or not isinstance(response, str) \
            or not isinstance(meta, dict):
        raise _bad(vf, f"has a record ({where}) whose label, target, response or doc meta is of the wrong type")
    for key in ("image_file", "slice_dim", "slice_idx", "image_size_2d", "taskID"):
        if key not in meta:
            raise _bad(vf, f"has a doc meta ({where}) without {key!r}")
    return ValueSample(group, target, response, meta)


def read_values(vf: ValuesFile) -> list[ValueSample]:
    """The records of one values file in its order; a one-line UserError naming the file when it is not one."""
    data: JsonValue = limits.read_json_file(vf.path, "upstream values file")
    out: list[ValueSample] = []
    if family_spec(vf.family).axes:
        if not isinstance(data, dict):
            raise _bad(vf, f"holds a JSON {type(data).__name__}, not an object of groups")
        for group, d in data.items():
            targets, responses, metas = (d.get(k) if isinstance(d, dict) else None
                                         for k in ("targets", "responses", "doc_metas"))
            if not (isinstance(targets, list) and isinstance(responses, list) and isinstance(metas, list)) \
                    or len({len(targets), len(responses), len(metas)}) != 1:
                raise _bad(vf, f"group {show(group)} lacks targets, responses and doc_metas of one length")
            for i, (t, r, m) in enumerate(zip(targets, responses, metas)):
                out.append(_sample(vf, group, t, r, m, f"{show(group)} #{i}"))
        return out
    if not isinstance(data, list):
        raise _bad(vf, f"holds a JSON {type(data).__name__}, not a list of records")
    for i, rec in enumerate(data):
        responses = rec.get("responses") if isinstance(rec, dict) else None
        if not isinstance(rec, dict) or not isinstance(responses, list) or len(responses) != 1:
            raise _bad(vf, f"has a record #{i} that is not {{label, targets, responses: [one], doc_meta}}")
        out.append(_sample(vf, rec.get("label"), rec.get("targets"), responses[0], rec.get("doc_meta"),
                           f"#{i}"))
    return out


# --------------------------------------------------------------------------------------------- docs of records


def _label_name(renamed: str) -> str:
    """A label name upstream's ``label_map_rename`` maps to ``renamed`` (the first in name order; the name itself
    when none does): the group key our report forms from it is the file's."""
    names = sorted(k for k, v in cfg.label_map_rename().items() if v == renamed)
    return names[0] if names else renamed


_MODALITY_NAMES = {code: name for name, code in um.MODALITY_CODES.items()}


def _doc(vf: ValuesFile, s: ValueSample, index: int) -> tuple[str, Doc]:
    """(task name, doc) of one record."""
    m = s.meta
    image = relative_data_path(m["image_file"])
    if image is None or "/" not in image:
        raise _bad(vf, f"names the image {show(m['image_file'])}, which is no path below Datasets/")
    dataset = image.split("/", 1)[0]
    try:
        slice_dim, slice_idx = to_int(m["slice_dim"]), to_int(m["slice_idx"])
        size = tuple(to_int(v) for v in items_of(m["image_size_2d"]))
        target: JsonValue = json.loads(s.target)
        task_id = str(m["taskID"])
    except (TypeError, ValueError) as exc:
        raise _bad(vf, f"has a record of {show(s.group)} whose doc meta or target cannot be read ({exc})") from None
    if slice_dim not in PLANE_OF_DIM or len(size) != 2:
        raise _bad(vf, f"has a record of {show(s.group)} with slice_dim {slice_dim} or image_size_2d {size}")
    plane = PLANE_OF_DIM[slice_dim]
    key = f"{image}:d{slice_dim}:s{slice_idx}"
    meta: JsonObject = {"source": f"upstream {vf.path.name}"}
    if family_spec(vf.family).axes:
        g = _GROUP_RE.match(s.group)
        if g is None or not isinstance(target, list) or len(target) != 2:
            raise _bad(vf, f"has the group {show(s.group)} or target {show(s.target)} T/L files do not hold")
        label = to_int(m["label"]) if m.get("label") is not None else None
        key += f":l{label}" if label is not None else ""
        meta.update(label_name=_label_name(g["label"]), image_modality=_MODALITY_NAMES.get(g["modality"],
                                                                                         g["modality"]))
        profile: JsonObject = {"metric_value_major_axis": [to_float(target[0])],
                               "metric_value_minor_axis": [to_float(target[1])], "metric_type": ["distance"]}
        task = f"{dataset}_TumorLesionSize_Task{task_id}_{plane}"
    else:
        mtype = str(m.get("metric_type") or "")
        prefix = f"{dataset}_{mtype}_"
        if not s.group.startswith(prefix) or isinstance(target, list):
            raise _bad(vf, f"has the label {show(s.group)}, not {prefix}<metric key>, or a target list")
        label, metric_key = None, s.group[len(prefix):]
        key += f":{metric_key}"
        profile = {"metric_value": to_float(target), "metric_type": mtype, "metric_key": metric_key}
        measure = f"_{mtype.capitalize()}" if dataset in _MEASURE_SPLIT else ""
        task = f"{dataset}_BiometricsFromLandmarks{measure}_Task{task_id}_{plane}"
    tn = parse_task_name(task)
    doc = Doc(key=key, task=task, family=vf.family, plane=plane, split=tn.split, index=index, dataset_name=dataset,
              taskID=task_id, taskType=tn.loader_task_type, image_file=image, mask_file=None, landmark_file=None,
              slice_dim=slice_dim, slice_idx=slice_idx, label=label, image_size_2d=(size[0], size[1]),
              pixel_size=(0.0, 0.0), image_size_3d=(0, 0, 0), voxel_size=(0.0, 0.0, 0.0),
              biometric_profile=profile, meta=meta)
    return task, doc


def _answer(response: str) -> str:
    """The stored answer: the response's numbers in ``<answer>`` tags (the strict parser reads them back)."""
    return f"<answer>{', '.join(p.strip() for p in response.split(','))}</answer>" if response.strip() \
        else "<answer></answer>"


def _precomputed(meta: Mapping[str, JsonValue]) -> float | None:
    """The sample's nMAE as upstream's summarizers read ``nmae_precomputed``: its value when it succeeded."""
    pre = meta.get("nmae_precomputed")
    if not isinstance(pre, dict) or not pre.get("success"):
        return None
    try:
        value = to_float(pre.get("NMAE"))
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


# --------------------------------------------------------------------------------------------- import


def import_values(root: str | Path, results_dir: str | Path, *, model_name: str | None = None,
                  models: list[str] | None = None) -> tuple[list[ValuesImport], list[str]]:
    """Import every values file below ``root`` into stores under ``results_dir`` (one judged parse each, named as
    the file's parsed folder); returns what each import did and notes."""
    notes: list[str] = []
    out: list[ValuesImport] = []
    for det in sorted(Path(root).expanduser().resolve().rglob("summary_values_detect_Task*.json")):
        notes.append(f"{det}: detection's per-sample file holds no doc metas (no image or slice to key a sample "
                     "by); not imported")
    for vf in find_values_files(Path(root)):
        if models and vf.model not in models:
            continue
        if has_raw_samples(vf.path.parent.parent):
            notes.append(f"{vf.path}: its model folder holds upstream's raw samples files, imported as answers; "
                         "the per-sample file is not imported beside them")
            continue
        model = model_name or vf.model
        why = component_problem(model)
        if why:
            notes.append(f"{vf.path}: the model folder's name {why}; import it with --model_name NAME")
            continue
        samples = read_values(vf)
        vi = ValuesImport(vf, samples=len(samples))
        by_task: dict[str, list[tuple[Doc, ValueSample]]] = {}
        first: dict[str, int] = {}  # each task's first record in the file: upstream's order of its files
        for n, s in enumerate(samples):
            task, doc = _doc(vf, s, 0)
            first.setdefault(task, n)
            items = by_task.setdefault(task, [])
            items.append((dataclasses.replace(doc, index=len(items)), s))
        judged_rows: list[tuple[str, ParsedRow]] = []
        for task, items in by_task.items():
            try:
                folder, rows = _write_task(Path(results_dir), model, task, vf, items, first[task])
            except StoreProblem as exc:
                notes.append(f"{vf.path}: {task} not scored ({exc})")
                continue
            vi.stores.append(folder)
            judged_rows += [(s.group, r) for (_, s), r in zip(items, rows)]
        _compare(vi, judged_rows)
        out.append(vi)
    return out, notes


def _write_task(results_dir: Path, model: str, task: str, vf: ValuesFile, items: list[tuple[Doc, ValueSample]],
                first_record: int) -> tuple[Path, list[ParsedRow]]:
    """One task's store (docs, the answers, the strict parse) and its judged parse; the judged rows in ``items``'
    order. ``first_record`` (the file's position of the task's first record) is kept in the signature's import
    block: summarize sums a group spanning several tasks in that order (``report.upstream_values.file_order``)."""
    tn = parse_task_name(task)
    inputs = signature_inputs(model=model, task=task, family=tn.family, variant=tn.variant, protocol=PROTOCOL,
                              config={}, planner_version=None, plan_version=None, filtering=None,
                              docs_from=VALUES_FORMAT)
    answer_sig = digest(inputs)
    folder = results_dir / model / task / answer_sig[:SHORT]
    folder.mkdir(parents=True, exist_ok=True)
    views = [native_view(doc, None) for doc, _ in items]
    shas = [doc_sha(doc, view) for (doc, _), view in zip(items, views)]
    store = SampleStore(folder, answer_sig)
    with store.writing():
        store.init(inputs)
        sig = store.signature()
        block: JsonObject = {"format": VALUES_FORMAT, "note": "answers made from upstream's per-sample values file (its parsed "
                 "responses in <answer> tags); no pixel size, so the strict parse has no nMAE",
                 "sources": [{"path": str(vf.path.resolve()), "records": len(items)}],
                 VALUES_FIRST_RECORD: first_record}
        if sig.imported != block:
            dataclasses.replace(sig, imported=block).write(store.layout.signature)
        store.write_docs(DocRow(doc.key, doc.index, sha, doc.to_json(), view.to_json(), PROTOCOL, tn.variant)
                         for (doc, _), view, sha in zip(items, views, shas))
        write_lines_atomic(store.layout.samples / SEGMENT, (
            AnswerRecord(key=doc.key, answer_signature=answer_sig, status=AnswerStatus.OK, index=doc.index,
                         doc_sha=sha, text=_answer(s.response), source={"file": str(vf.path.resolve())}).line()
            + b"\n" for (doc, s), sha in zip(items, shas)))
        ref = StoreRef(folder, "", model, task, tn.family, answer_sig, inputs, label=model)
        rescore_streamed(ref)
    return folder, _write_judged(ref, vf, items, views)


def _write_judged(ref: StoreRef, vf: ValuesFile, items: list[tuple[Doc, ValueSample]],
                  views: list[View]) -> list[ParsedRow]:
    """The judged parse: each record's response decided, its nMAE upstream's precomputed one."""
    settings = protocol_settings(PROTOCOL)
    parser, rules = settings.parser, settings.rules
    j_inputs: JsonObject = {**judge_inputs(vf.parsed_dir),
                "imported": VALUES_FORMAT, "decision": "the values file's responses"}
    j_sig = digest(j_inputs)
    jfolder = StoreLayout(ref.folder).judged_parse(j_sig).folder
    jfolder.mkdir(parents=True, exist_ok=True)
    rows: list[ParsedRow] = []
    undetermined = 0
    for (doc, s), view in zip(items, views):
        text = _answer(s.response)
        strict = score_answer(doc, view, text, parser, rules)
        numbers = tuple(p.strip() for p in s.response.split(",")) if s.response.strip() else None
        decision = (Decision("conclusion_in_format", "upstream summary_values", s.response, numbers) if numbers
                    else Decision("undetermined", "upstream summary_values: no response", ""))
        undetermined += numbers is None
        sc, decision = judged_score(doc, view, rules, strict, decision)
        row = judged_row(doc, rules, sc, strict, decision, text)
        rows.append(dataclasses.replace(row, metrics={**row.metrics, "nMAE": _precomputed(s.meta)}))
    n = len(rows)
    counts: JsonObject = {"selected": n, "answered": n, "judged": n, "judge_invalid": 0, "not_judged": 0,
                          "recovered": 0, "bad_lines": 0,
                          "modes": {"conclusion_in_format": n - undetermined, "undetermined": undetermined}}
    JudgeFile(j_sig, j_inputs, imported={"format": VALUES_FORMAT, "sources": [
        {"path": str(vf.path.resolve()), "records": n}]}).write(JudgedLayout(jfolder).judge_file)
    write_judged_parse(jfolder, ref, PROTOCOL, rules, rows, counts, j_sig, j_inputs, complete=True)
    return rows


def _groups(family: str, rows: list[tuple[str, ParsedRow]]) -> dict[str, dict[str, float] | None]:
    """Upstream's per-group dicts of the judged rows (in the file's order, per task), each sum in that order."""
    cols: dict[str, dict[str, list[float]]] = {}
    for group, r in rows:
        c = cols.setdefault(group, {"success": [], "MAE": [], "MRE": [], "nMAE": []})
        c["success"].append(bool(r.success))
        for m in ("MAE", "MRE", "nMAE"):
            v = r.metrics.get(m)
            c[m].append(math.nan if v is None else float(v))
    out: dict[str, dict[str, float] | None] = {}
    for group, c in cols.items():
        nmae = np.array(c["nMAE"], dtype=np.float64)
        out[group] = um.measure_columns(np.array(c["success"], dtype=bool), np.array(c["MAE"], dtype=np.float64),
                                        np.array(c["MRE"], dtype=np.float64), nmae, np.isfinite(nmae),
                                        family, "newer")
    return out


def _same(a: object, b: object) -> bool:
    """The same number to the last bit (NaN equal to NaN)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return isinstance(a, int | float) and isinstance(b, int | float) and a == b


def _compare(vi: ValuesImport, rows: list[tuple[str, ParsedRow]]) -> None:
    """Every number of the metrics file beside the values file against ours (the same float, NaN alike)."""
    path = vi.file.metrics_path
    if not path.is_file():
        return
    vi.metrics_found = True
    theirs: JsonValue = limits.read_json_file(path, "upstream metrics file")
    if not isinstance(theirs, dict):
        raise UserError(f"upstream metrics file {path} holds a JSON {type(theirs).__name__}, not an object of groups; "
                        "fix or remove it")
    ours = _groups(vi.file.family, rows)
    for group, d in theirs.items():
        mine = ours.get(group) or {}
        for k, v in (d.items() if isinstance(d, dict) else []):
            vi.compared += 1
            if not _same(mine.get(k), v):
                vi.differ.append(f"{group} {k}: ours {mine.get(k)!r}, upstream's {v!r}")


def _iter_lines(items: list[ValuesImport]) -> Iterator[str]:
    for vi in items:
        yield vi.line()
        yield from (f"  differs: {d}" for d in vi.differ[:10])


def report_lines(items: list[ValuesImport]) -> list[str]:
    """The import's lines: per values file what it stored and the comparison with its metrics file."""
    return list(_iter_lines(items))

