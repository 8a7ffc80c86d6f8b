"""Process and equation accuracy over the stored -CoT answers of a summary: each run's answers streamed from its
store, the ground truth read from the data folder, upstream's per-sample and summary files written, the report's
tables (and the scaled-pixel-size view: does localization stay put while the lengths scale?).

Upstream's files, as its analyzers lay them out under ``Results/<task tag>/`` (``MedVision-TL-CoT``,
``MedVision-AD-CoT-scaledPS``, ...), go to ``upstream/<task tag>/``: ``<model>/<parsed dir>/samples_<task>
{_proc_acc,_eq_acc}[_filtered].jsonl``, ``<model>/<parsed dir>/summary_{proc,eq}_acc_{TL,AD}_metrics[_filtered].json``,
``<model>/summary_{proc,eq}_acc_{TL,AD}_model[_filtered].txt`` and ``summary_{proc,eq}_acc_{TL,AD}_task[_filtered]
.txt``. ``_filtered``: T/L under upstream's removed-samples filter (the samples the summary's tables use).
Memory: one store's keys and one answer at a time; per label 8 bytes a step value.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from medvision_bm.data.docs import Doc, RunDoc
from medvision_bm.data.landmarks import slice_landmarks
from medvision_bm.data.layout import parse_task_name
from medvision_bm.data.plan_files import plan_files
from medvision_bm.data.plans import read_task
from medvision_bm.data.task_meta import load_task_meta, resolve_ad_names
from medvision_bm.errors import UserError
from medvision_bm.io import atomic_path, write_text_atomic
from medvision_bm.report import process_accuracy as pa
from medvision_bm.report.groups import add_group_keys
from medvision_bm.report.upstream_summaries import STRICT_PARSED_DIR
from medvision_bm.report.views import View, fmt
from medvision_bm.store.judged import JUDGED_DIR, judged_parses, read_judged
from medvision_bm.store.layout import JudgedLayout, StoreLayout
from medvision_bm.store.records import DocRow, JudgeFile, iter_lines
from medvision_bm.store.samples import SampleStore
from medvision_bm.tasks import upstream_groups as ug
from medvision_bm.tasks.families import FAMILY_SPECS, family_spec
from medvision_bm.tasks.scaled_ps import VARIANT as SCALED_PS
from medvision_bm.tasks.scoring import diagonal_mm, target

if TYPE_CHECKING:
    from medvision_bm.data.task_meta import TaskMeta
    from medvision_bm.report.load import StoreInfo

#: The families whose answers are measurements (T/L, A/D): the ones whose -CoT answers report reasoning steps.
FAMILIES: tuple[str, ...] = tuple(f for f, s in FAMILY_SPECS.items() if s.measure)
KINDS = ("proc", "eq")
#: The aggregate of process accuracy over the LLM judge's step extractions (where a judged parse stored them).
JUDGE_STEPS = "proc_judge_steps"
_ANSWERED = ("ok", "parse_failed")


def cot_variant(task: str) -> str | None:
    """The task's variant when it is a -CoT one (``-CoT``, ``-CoT-scaledPS``, ``-CoT-woInstruct``), else None."""
    try:
        variant = parse_task_name(task).variant
    except UserError:
        return None
    return variant if variant.startswith("-CoT") else None


def task_tag(family: str, variant: str) -> str:
    """Upstream's results folder of a family and variant: ``MedVision-TL-CoT``."""
    return f"MedVision-{family}{variant}"


class GroundTruth:
    """The ground truth process accuracy needs beyond the doc: landmark positions (the data folder's landmark
    files) and which landmarks an A/D metric uses (the task metadata: upstream's benchmark plan)."""

    def __init__(self, data_dir: Path | None) -> None:
        self.data_dir = data_dir

    @functools.lru_cache(maxsize=256)  # noqa: B019 - one instance per summary; a task's metadata read once
    def _ad_meta(self, dataset: str, task_id: str) -> TaskMeta:
        assert self.data_dir is not None
        try:
            return load_task_meta(self.data_dir, dataset, "AD", task_id)
        except FileNotFoundError:
            plans = plan_files(self.data_dir / "Datasets" / dataset).get("biometry") or {}
            if not plans:
                raise
            newest = max(plans, key=lambda v: tuple(int(p) for p in v.split(".") if p.isdigit()))
            header = read_task(plans[newest], int(task_id) - 1).header
            return load_task_meta(self.data_dir, dataset, "AD", task_id, header)

    def points(self, doc: Doc, keys: Sequence[str]) -> list[list[float]]:
        """The relative (x, y) of each landmark key on the doc's slice."""
        if self.data_dir is None:
            raise ValueError("no data folder known (pass --data_dir)")
        if not doc.landmark_file:
            raise ValueError("the doc names no landmark file")
        found = slice_landmarks(self.data_dir / "Datasets" / doc.landmark_file, doc.slice_dim, doc.slice_idx)
        missing = [k for k in keys if k not in found]
        if missing:
            raise ValueError(f"landmark {missing[0]} not found in slice")
        return [pa.to_wh(found[k], doc.image_size_2d) for k in keys]

    def tl(self, rd: RunDoc) -> pa.TLTruth:
        doc = rd.doc
        major, minor = target(doc, rd.view)
        p1, p2, p3, p4 = self.points(doc, ("P1", "P2", "P3", "P4"))
        return pa.TLTruth(p1, p2, p3, p4, major, minor, _diagonal(rd))

    def ad(self, rd: RunDoc) -> pa.ADTruth:
        doc = rd.doc
        bp = doc.biometric_profile or {}
        if self.data_dir is None:
            raise ValueError("no data folder known (pass --data_dir)")
        try:
            keys = resolve_ad_names(self._ad_meta(doc.dataset_name, doc.taskID), bp).point_keys
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"benchmark_plan error: {exc}") from None
        points = self.points(doc, keys)
        return pa.ADTruth(str(bp.get("metric_type")), tuple(points), target(doc, rd.view)[0], _diagonal(rd))


def _diagonal(rd: RunDoc) -> float:
    """nMAE's denominator as upstream's analyzers take it: the native slice's physical diagonal from the doc's
    ``image_size_2d`` and ``pixel_size``; a -CoT-scaledPS sample's under its factors (``_compute_physical_diagonal``,
    here ``tasks.scoring.diagonal_mm``)."""
    if rd.view.pixel_scale_hw is not None:
        return diagonal_mm(rd.doc, rd.view)
    (h, w), (ph, pw) = rd.doc.image_size_2d, rd.doc.pixel_size
    return math.sqrt((h * ph) ** 2 + (w * pw) ** 2)


# ---------------------------------------------------------------------------------------------- one sample


def _base(rd: RunDoc, data_dir: Path | None, family: str, kind: str) -> pa.Record:
    doc = rd.doc
    image = f"{data_dir}/Datasets/{doc.image_file}" if data_dir is not None else doc.image_file
    bp = doc.biometric_profile or {}
    out: pa.Record
    if family_spec(family).axes:
        out = {"doc_id": doc.index, "dataset": doc.dataset_name, "taskID": doc.taskID, "taskType": doc.taskType,
               "image_file": image, "slice_dim": doc.slice_dim}
    elif kind == "proc":
        out = {"doc_id": doc.index, "dataset": doc.dataset_name, "task_type": doc.taskType,
               "metric_key": bp.get("metric_key"), "image_file": image}
        out["slice_dim"] = doc.slice_dim
    else:
        return {"doc_id": doc.index, "dataset": doc.dataset_name, "metric_type": bp.get("metric_type", ""),
                "metric_key": bp.get("metric_key"), "image_file": image}
    if kind == "proc":
        out.update(slice_idx=doc.slice_idx, image_size_2d=list(doc.image_size_2d), pixel_size=list(doc.pixel_size))
    return out


def process_record(rd: RunDoc, text: str, truth: GroundTruth,
                   steps: object = None) -> tuple[pa.Record, pa.Record | None]:
    """Upstream's ``_proc_acc.jsonl`` record of one answer (``error`` when the ground truth cannot be read); with
    ``steps`` (the LLM judge's step extractions of that answer) also the record of the steps as the judge read
    them."""
    family = rd.doc.family
    base = _base(rd, truth.data_dir, family, "proc")
    try:
        gt: pa.TLTruth | pa.ADTruth = truth.tl(rd) if family_spec(family).axes else truth.ad(rd)
    except (ValueError, UserError, KeyError, IndexError, TypeError) as exc:
        failed = {**base, "error": f"gt_extraction_failed: {exc}"}
        return failed, (None if steps is None else failed)
    raw = _scored(base, text, gt)
    if steps is None:
        return raw, None
    kind = "TL" if isinstance(gt, pa.TLTruth) else gt.metric_type
    return raw, _scored(base, pa.judge_found(steps, kind), gt)


def _scored(base: pa.Record, answer: str | pa.Found, gt: pa.TLTruth | pa.ADTruth) -> pa.Record:
    if isinstance(gt, pa.TLTruth):
        return {**base, **pa.tl_process(answer, gt)}
    return {**base, "metric_type": gt.metric_type, **pa.ad_process(answer, gt)}


def equation_record(rd: RunDoc, text: str, data_dir: Path | None) -> pa.Record:
    """Upstream's ``_eq_acc.jsonl`` record of one answer (needs no ground truth)."""
    doc = rd.doc
    if family_spec(doc.family).axes:
        if "Tumor" not in doc.taskType and "Lesion" not in doc.taskType:
            return {"doc_id": doc.index, "error": f"unexpected taskType: {doc.taskType!r}"}
        return {**_base(rd, data_dir, doc.family, "eq"), **pa.tl_equations(text)}
    out = _base(rd, data_dir, doc.family, "eq")
    metric_type = out["metric_type"]
    if not isinstance(metric_type, str) or metric_type not in ("distance", "angle"):
        out["error"] = f"unknown metric_type: {metric_type!r}"
        return out
    out.update(pa.ad_equations(text, metric_type))
    return out


# -------------------------------------------------------------------------------------------- one run


@dataclass
class RunSteps:
    """One run's (model's) analyses of one family and -CoT variant: per kind the per-label aggregate; per store
    the per-sample file written; and the scaled-pixel-size view's sums (answer and scaled truth over the unscaled
    truth)."""

    family: str
    variant: str
    label: str
    aggs: dict[str, pa.Aggregate] = field(default_factory=dict)
    n_success: int = 0
    n_tl: int = 0
    ratio_sum: float = 0.0
    ratio_n: int = 0
    scale_sum: float = 0.0
    scale_n: int = 0

    def summary(self, kind: str) -> dict[str, pa.SummaryRow]:
        return self.aggs[kind].summary()


def _answers(folder: Path, signature: str, keys: set[str]) -> Iterator[tuple[RunDoc, str]]:
    """Each selected key's doc and its counted answer text, in docs.jsonl order (one row read at a time)."""
    files = StoreLayout(folder)
    state = SampleStore(folder, signature).read()
    try:
        for row in iter_lines(files.docs, DocRow.from_json):
            if row.key not in keys or row.legacy:
                continue
            rec = state.answer(row.key, str(row.doc_sha))
            if rec is None or rec.text is None:
                continue
            keys.discard(row.key)
            yield row.rundoc(), rec.text
    finally:
        state.close()


def _labels(family: str, frame: pl.DataFrame) -> dict[str, str | None]:
    """Upstream's label of every sample of one store's frame (T/L: ``<label> @ <modality> (<plane>)``)."""
    if not family_spec(family).axes:
        return {}
    keyed, _ = add_group_keys(frame, family)
    return dict(zip(keyed["key"].to_list(), keyed["group"].to_list()))


def _ad_label(record: pa.Record) -> str | None:
    dataset, metric_type, metric_key = record.get("dataset"), record.get("metric_type"), record.get("metric_key")
    # the label's f-string formats each part as str() does
    return (ug.ad_label(str(dataset), str(metric_type), str(metric_key)) if dataset and metric_type and metric_key
            else None)


def analyze_store(run: RunSteps, rows: pl.DataFrame, folder: Path, signature: str, truth: GroundTruth,
                  files: dict[str, Path], judge_steps: dict[str, object] | None = None) -> None:
    """Stream one store's answers into ``run``; write its per-sample files (``files``: kind -> path) line by line,
    each through a temp file renamed when complete. ``judge_steps``: per key the LLM judge's step extractions
    (process accuracy of the steps as the judge read them, ``JUDGE_STEPS``)."""
    labels = _labels(run.family, rows)
    keys = set(rows["key"].to_list())
    with contextlib.ExitStack() as stack:
        sinks = {k: stack.enter_context(open(stack.enter_context(atomic_path(files[k])), "wb", buffering=1 << 20))
                 for k in KINDS}
        for rd, text in _answers(folder, signature, keys):
            steps = None if judge_steps is None else judge_steps.get(rd.doc.key)
            proc, judged = process_record(rd, text, truth, steps)
            eq = equation_record(rd, text, truth.data_dir)
            label = labels.get(rd.doc.key)
            for kind, rec in (("proc", proc), ("eq", eq), (JUDGE_STEPS, judged)):
                if rec is None:
                    continue
                agg = run.aggs.get(kind) or run.aggs.setdefault(kind, pa.Aggregate(run.family, "proc"))
                if family_spec(run.family).axes:
                    agg.add(None if "error" in rec else label, rec)
                else:
                    agg.add(_ad_label(rec), rec)
            _scaling(run, rd, proc)
            sinks["proc"].write((json.dumps(proc) + "\n").encode())  # upstream's json.dumps (NaN as NaN)
            sinks["eq"].write((json.dumps(eq) + "\n").encode())


def _scaling(run: RunSteps, rd: RunDoc, proc: pa.Record) -> None:
    """The scaled-pixel-size view's sums: the step-3 answer and the (scaled) truth over the unscaled truth."""
    if "error" in proc:
        return
    unscaled = target(rd.doc)[0]
    if not (math.isfinite(unscaled) and unscaled > 0):
        return
    truth = proc.get("gt_major_length", proc.get("gt_distance", proc.get("gt_angle")))
    if isinstance(truth, (int, float)):  # a ground truth number, or None
        run.scale_sum += truth / unscaled
        run.scale_n += 1
    pred = proc.get("step3_pred")
    if isinstance(pred, (int, float)):  # the step's number, or None
        run.ratio_sum += pred / unscaled
        run.ratio_n += 1


# -------------------------------------------------------------------------------------- the whole summary


@dataclass
class ProcessResult:
    """What the stage computed: the runs, the files written (relative to the output folder), notes, views."""

    runs: list[RunSteps] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    views: dict[str, list[View]] = field(default_factory=dict)

    def to_json(self) -> dict[str, dict[str, dict[str, dict[str, dict[str, pa.SummaryRow]]]]]:
        """Per family, variant and run: each kind's per-label rows."""
        out: dict[str, dict[str, dict[str, dict[str, dict[str, pa.SummaryRow]]]]] = {}
        for r in self.runs:
            entry = {"process": r.summary("proc"), "equation": r.summary("eq")}
            if JUDGE_STEPS in r.aggs:
                entry["process_judge_steps"] = r.summary(JUDGE_STEPS)
            out.setdefault(r.family, {}).setdefault(r.variant, {})[r.label] = entry
        return out


def judge_steps(store: StoreInfo) -> dict[str, object] | None:
    """Per key the step extractions of the judged parse a loaded store uses (its source), else of its only judged
    parse: the newest ok reply of that judge signature (``store.judged.read_judged``); None when there is none."""
    source = str(store.source).split("/")
    if len(source) >= 2 and source[0] == JUDGED_DIR:
        folder = StoreLayout(store.ref.folder).judged / source[1]
    else:
        found = judged_parses(store.ref.folder)
        if len(found) != 1:
            return None
        folder = found[0][0]
    try:
        signature = JudgeFile.read(JudgedLayout(folder).judge_file).judge_signature
    except (OSError, ValueError):
        return None
    replies, _ = read_judged(folder, signature)
    steps: dict[str, object] = {k: r["steps"] for k, r in replies.items() if r.get("status") == "ok" and r.get("steps") is not None}
    return steps or None


def _folder(label: str) -> str:
    return label.replace("/", "_")


def run_stage(out: Path, samples: dict[str, pl.DataFrame], stores: Sequence[StoreInfo], data_dir: Path | None,
              parsed_dir: str = STRICT_PARSED_DIR, tl_filtered: bool = False) -> ProcessResult:
    """Process and equation accuracy of every -CoT T/L and A/D run of a summary (``samples``: the loaded frames,
    after the T/L filter; ``stores``: the loaded stores) into ``out/upstream/``."""
    res = ProcessResult()
    truth = GroundTruth(data_dir)
    runs: dict[tuple[str, str, str], RunSteps] = {}
    chosen = sorted((s for s in stores if s.ref.family in FAMILIES and cot_variant(s.ref.task)),
                    key=lambda s: (s.ref.family, s.ref.task, s.ref.label))
    by_store: dict[str, dict[int, pl.DataFrame]] = {}  # per family: each store's answered rows, in frame order
    for s in chosen:
        fam, variant, label = s.ref.family, str(cot_variant(s.ref.task)), s.ref.label
        frame = samples.get(fam)
        if frame is None:
            continue
        if fam not in by_store:
            by_store[fam] = {int(k[0]): part for k, part in frame.filter(pl.col("status").is_in(_ANSWERED))
                             .partition_by("store", as_dict=True, maintain_order=True).items()}
        rows = by_store[fam].get(s.id)
        if rows is None or rows.height == 0:
            continue
        run = runs.get((fam, variant, label))
        if run is None:
            run = runs[(fam, variant, label)] = RunSteps(fam, variant, label,
                                                         {k: pa.Aggregate(fam, k) for k in KINDS})
        flt = "_filtered" if tl_filtered and family_spec(fam).axes else ""
        base = out / "upstream" / task_tag(fam, variant) / _folder(label) / parsed_dir
        paths = {k: base / f"samples_{s.ref.task}_{k}_acc{flt}.jsonl" for k in KINDS}
        analyze_store(run, rows, s.ref.folder, s.ref.answer_signature, truth, paths, judge_steps(s))
        res.files += [p.relative_to(out).as_posix() for p in paths.values()]
    res.runs = list(runs.values())
    res.files += _write_summaries(out, res.runs, parsed_dir, tl_filtered)
    if res.runs and data_dir is None:
        res.notes.append("process accuracy: no data folder known, so no ground-truth landmarks: every sample's "
                         "step record says gt_extraction_failed (pass --data_dir); equation accuracy needs none")
    for fam in FAMILIES:
        views = family_views(fam, [r for r in res.runs if r.family == fam])
        if views:
            res.views[fam] = views
    return res


def _write_summaries(out: Path, runs: Sequence[RunSteps], parsed_dir: str, tl_filtered: bool) -> list[str]:
    written: list[str] = []

    def put(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text)
        written.append(path.relative_to(out).as_posix())

    by_tag: dict[tuple[str, str], list[RunSteps]] = {}
    for r in runs:
        by_tag.setdefault((r.family, r.variant), []).append(r)
    for (fam, variant), group in sorted(by_tag.items()):
        flt = "_filtered" if tl_filtered and family_spec(fam).axes else ""
        folder = out / "upstream" / task_tag(fam, variant)
        for kind in KINDS:
            stem = f"summary_{kind}_acc_{fam}"
            for r in group:
                summary = r.summary(kind)
                put(folder / _folder(r.label) / parsed_dir / f"{stem}_metrics{flt}.json", pa.metrics_json(summary))
                put(folder / _folder(r.label) / f"{stem}_model{flt}.txt", pa.model_text(fam, kind, r.label, summary))
            put(folder / f"{stem}_task{flt}.txt", pa.task_text(fam, kind, [(r.label, r.summary(kind)) for r in group]))
    return written


# ------------------------------------------------------------------------------------------------ views

_TL_PROC_HEAD = ["Step 1 normL2", "Step 2 normL2", "Step 3 MRE", "Step 4 MRE", "Step 3 nMAE", "Step 4 nMAE"]
_AD_PROC_HEAD = ["Step 1 normL2", "Step 2 normL2", "Step 3 MRE", "Step 3 nMAE"]


def _success(run: RunSteps, kind: str = "proc") -> tuple[int, int]:
    labels = run.aggs[kind].labels.values()
    return sum(g.n_success for g in labels), sum(g.n_samples for g in labels)


def family_views(family: str, runs: Sequence[RunSteps]) -> list[View]:
    """The report's tables of one family: process accuracy and equation accuracy per run and -CoT variant, and the
    scaled-pixel-size view where a run has both -CoT and -CoT-scaledPS answers."""
    if not runs:
        return []
    name = family_spec(family).short
    proc_rows, eq_rows = [], []
    for r in sorted(runs, key=lambda r: (r.variant, r.label)):
        keys = pa.TL_PROC_KEYS if family_spec(family).axes else pa.AD_PROC_KEYS
        for kind, variant in (("proc", r.variant), (JUDGE_STEPS, f"{r.variant} (judge's steps)")):
            if kind not in r.aggs:
                continue
            proc = pa.overall(family, "proc", r.summary(kind))
            ok, n = _success(r, kind)
            proc_rows.append([r.label, variant, str(proc["n"]), *[fmt(proc[k]) for k in keys],
                              f"{ok}/{n}" if n else "–"])
        eq = pa.overall(family, "eq", r.summary("eq"))
        if family_spec(family).axes:
            eq_rows.append([r.label, r.variant, str(eq["n"]), fmt(eq["step3_avg_equation_MRE"]), str(eq["valid3"]),
                            fmt(eq["step4_avg_equation_MRE"]), str(eq["valid4"])])
        else:
            eq_rows.append([r.label, r.variant, str(eq["n"]), fmt(eq["step3_avg_equation_MRE"]), str(eq["valid"]),
                            str(eq["ignored"])])
    head = _TL_PROC_HEAD if family_spec(family).axes else _AD_PROC_HEAD
    steps = ("1-2 the axis endpoints, 3-4 the major and minor axis lengths" if family_spec(family).axes
             else "1-2 the landmarks (a distance) or the two lines' endpoints (an angle), 3 the measurement")
    views = [View(f"Process accuracy of -CoT answers: {name}", ["Run", "Variant", "N", *head, "All steps read"],
                  proc_rows,
                  f"Each reasoning step of the raw answer against the ground truth (steps {steps}): normalised L2 of "
                  "relative points (swapped endpoints not punished), MRE and nMAE of lengths; weighted over "
                  "upstream's labels by samples" + (", step 3 by the samples whose ground truth is at least "
                  f"{pa.AD_NEAR_ZERO_GT_THRESHOLD:g}" if family_spec(family).per_metric else "") + " (upstream's "
                  "analyze_process_accuracy_" + family + "). Lower is better. Rows \"(judge's steps)\": the same "
                  "rules over the steps the LLM judge extracted from the same answers (where a judged parse stored "
                  f"them). Files: upstream/MedVision-{family}-CoT*/.", [False, False, *([True] * (len(head) + 2))]),
             View(f"Equation accuracy of -CoT answers: {name}",
                  ["Run", "Variant", "N", *(["Step 3 equation MRE", "Valid 3", "Step 4 equation MRE", "Valid 4"]
                                            if family_spec(family).axes else ["Step 3 equation MRE", "Valid", "Ignored"])],
                  eq_rows,
                  "Does the model's own formula give its own answer? The last sqrt(...) (an angle: arccos(...), in "
                  "degrees) of a step's reasoning evaluated by a restricted evaluator, against that step's answer: "
                  "|answer - value| / |value|; a step without a formula is not counted (Valid). Says nothing about "
                  "the formula's inputs being right (process accuracy does).",
                  [False, False, *([True] * (5 if family_spec(family).axes else 4))])]
    scaled = scaled_view(family, runs)
    if scaled is not None:
        views.append(scaled)
    return views


def scaled_view(family: str, runs: Sequence[RunSteps]) -> View | None:
    """Per run with both -CoT and -CoT-scaledPS answers: the localization steps and the length step side by side,
    and the step-3 answer over the unscaled truth against the stated factor (a model that reads the stated pixel
    size scales its lengths with it while its points stay put)."""
    by = {(r.label, r.variant): r for r in runs}
    rows = []
    for label in sorted({r.label for r in runs}):
        plain, scaled = by.get((label, "-CoT")), by.get((label, SCALED_PS))
        if plain is None or scaled is None:
            continue
        a, b = (pa.overall(family, "proc", r.summary("proc")) for r in (plain, scaled))
        for key, what in (("step1_avg_normL2", "step 1 normL2"), ("step2_avg_normL2", "step 2 normL2"),
                          ("step3_avg_MRE", "step 3 MRE (against each variant's own truth)")):
            rows.append([label, what, fmt(a[key]), fmt(b[key])])
        rows.append([label, "step 3 answer ÷ unscaled truth (mean)", fmt(_ratio(plain)), fmt(_ratio(scaled))])
        rows.append([label, "stated factor (scaled ÷ unscaled truth, mean)", fmt(_factor(plain)),
                     fmt(_factor(scaled))])
    if not rows:
        return None
    return View(f"Scaled pixel size: {family_spec(family).short}", ["Run", "Quantity", "-CoT", "-CoT-scaledPS"],
                rows, "The -CoT-scaledPS prompts state the pixel size times a per-sample factor while the image stays "
                "the same (upstream's script/analyze/scaled-pixel-size). Localization (steps 1-2) should stay put; "
                "a model that reads the stated pixel size gives lengths that follow the factor (the answer ÷ unscaled "
                "truth row near the factor row).", [False, False, True, True])


def _ratio(run: RunSteps) -> float | None:
    return run.ratio_sum / run.ratio_n if run.ratio_n else None


def _factor(run: RunSteps) -> float | None:
    return run.scale_sum / run.scale_n if run.scale_n else None
