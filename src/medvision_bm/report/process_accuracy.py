"""Upstream's process accuracy and equation accuracy of one -CoT answer, their per-label aggregation and their
summary texts (docs/spec/process-and-equation-accuracy.md).

Process accuracy scores each reasoning step against the ground truth: YongchengYAO/MedVision
``script/analyze/process-accuracy/analyze_process_accuracy_TL.py`` @0b7106d (T/L: step 1 and 2 the major and
minor axis endpoints as normalised L2 with the swapped pairing, step 3 and 4 the lengths as MRE and nMAE, the
``<answer>major, minor</answer>`` fallback) and ``analyze_process_accuracy_AD.py`` @286f632 (A/D: step 1 and 2 the
landmarks, or the two lines' endpoints with the swapped pairing, step 3 the distance as MRE and nMAE or the angle as
MRE; a ground truth below ``AD_NEAR_ZERO_GT_THRESHOLD`` leaves step 3 out of the means; ``-CoT-scaledPS``: the scaled
target and diagonal). Equation accuracy checks the model's own formula against its own step answer:
``script/analyze/equation-accuracy/analyze_equation_accuracy_TL.py`` @28f6c67 and ``..._AD.py`` @286f632, evaluated
by ``report.equation_eval``. Both read the raw answer only.
"""

from __future__ import annotations

import json
import math
import re
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypedDict

import numpy as np

from medvision_bm.report.equation_eval import EquationError, evaluate, last_call, to_expression
from medvision_bm.tasks.families import family_spec
from medvision_bm.tasks.upstream_metrics import AD_NEAR_ZERO_GT_THRESHOLD

Point = Sequence[float]
NAN = float("nan")
_EPS = 1e-15

# ------------------------------------------------------------------------------------------ the answer's steps

_REL = r"(?:0(?:\.\d+)?|1(?:\.0+)?)"  # a relative coordinate as upstream's step patterns read it
_NUM = r"\d+(?:\.\d+)?"  # a non-negative number
_PAIR = rf"\(\s*({_REL})\s*,\s*({_REL})\s*\)"
_TWO_PAIRS = rf"{_PAIR}\s*,\s*{_PAIR}"


def _step_patterns(k: int, body: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Step ``k``'s answer read after its reasoning block, and (fallback) the answer block alone."""
    answer = rf"<step-{k}-answer>.*?{body}.*?</step-{k}-answer>"
    return (re.compile(rf"<step-{k}-reasoning>.*?</step-{k}-reasoning>\s*.*?{answer}", re.S),
            re.compile(answer, re.S))


_TL_STEPS = {1: _step_patterns(1, _TWO_PAIRS), 2: _step_patterns(2, _TWO_PAIRS),
             3: _step_patterns(3, f"({_NUM})"), 4: _step_patterns(4, f"({_NUM})")}
_AD_DISTANCE_STEPS = {1: _step_patterns(1, _PAIR), 2: _step_patterns(2, _PAIR), 3: _step_patterns(3, f"({_NUM})")}
_AD_ANGLE_STEPS = {1: _step_patterns(1, _TWO_PAIRS), 2: _step_patterns(2, _TWO_PAIRS),
                   3: _step_patterns(3, f"({_NUM})")}
_TOOL_TWO = re.compile(rf"<answer>\s*({_NUM})\s*,\s*({_NUM})\s*</answer>", re.S)
_TOOL_ONE = re.compile(rf"<answer>\s*({_NUM})\s*</answer>", re.S)


def _step(patterns: tuple[re.Pattern[str], re.Pattern[str]], text: str) -> list[float] | None:
    m = patterns[0].search(text) or patterns[1].search(text)
    return None if m is None else [float(g) for g in m.groups()]


def reasoning_block(text: str, k: int) -> str | None:
    """What ``<step-k-reasoning>`` holds (stripped), or None."""
    m = re.search(rf"<step-{k}-reasoning>(.*?)</step-{k}-reasoning>", text, re.S)
    return m.group(1).strip() if m else None


def step_answer(text: str, k: int) -> float | None:
    """The first number inside ``<step-k-answer>``, or None."""
    m = re.search(rf"<step-{k}-answer>.*?({_NUM}).*?</step-{k}-answer>", text, re.S)
    return float(m.group(1)) if m else None


# ------------------------------------------------------------------------------------------------ the metrics

def norm_l2(p: Point, g: Point) -> float:
    """The distance of two relative points over sqrt(2) (the image's relative diagonal)."""
    return math.sqrt((p[0] - g[0]) ** 2 + (p[1] - g[1]) ** 2) / math.sqrt(2)


def paired_norm_l2(pred: Sequence[float], g1: Point, g2: Point) -> float:
    """Two predicted endpoints against two true ones, in the pairing that fits better (a swapped pair is not
    punished): the smaller mean of the two per-point distances."""
    a, b = pred[0:2], pred[2:4]
    return min((norm_l2(a, g1) + norm_l2(b, g2)) / 2, (norm_l2(a, g2) + norm_l2(b, g1)) / 2)


def mre(pred: float, gt: float) -> float:
    """Upstream's ``|pred - gt| / (gt + 1e-15)`` (the ground truth not in absolute value)."""
    return abs(pred - gt) / (gt + _EPS)


def nmae(pred: float, gt: float, diagonal: float) -> float:
    return abs(pred - gt) / (diagonal + _EPS)


def equation_mre(model_value: float, evaluated: float) -> float:
    return abs(model_value - evaluated) / (abs(evaluated) + _EPS)


def to_wh(row_col: Point, image_hw: Sequence[int]) -> list[float]:
    """A landmark's array position (row, col) on the native slice -> the relative (x, y) of the answer's frame
    (origin at the lower-left corner): ``[col / W, 1 - row / H]``."""
    return [row_col[1] / image_hw[1], 1.0 - row_col[0] / image_hw[0]]


# --------------------------------------------------------------------------------------- per-sample records

@dataclass(frozen=True)
class TLTruth:
    """A T/L sample's ground truth: the four endpoints (relative x, y) and the two lengths (the scaled ones for a
    -CoT-scaledPS sample), and nMAE's diagonal."""

    p1: Point
    p2: Point
    p3: Point
    p4: Point
    major: float
    minor: float
    diagonal: float


@dataclass(frozen=True)
class ADTruth:
    """An A/D sample's ground truth: ``points`` are the distance's two landmarks or the angle's four line
    endpoints (relative x, y), ``value`` the metric (scaled for -CoT-scaledPS); ``diagonal`` for distances."""

    metric_type: str
    points: tuple[Point, ...]
    value: float
    diagonal: float


Found = dict[int, "list[float] | None"]
#: A per-sample record (upstream's ``_proc_acc`` / ``_eq_acc`` line): texts, numbers, points, None.
Record = dict[str, object]
#: How many numbers each step reports (the judge's STEP_SPECS, upstream's judge_config.py): T/L, A/D distance, angle.
STEP_VALUES: dict[str, tuple[int, ...]] = {"TL": (4, 4, 1, 1), "distance": (2, 2, 1), "angle": (4, 4, 1)}


def tl_found(text: str) -> Found:
    """The numbers each T/L step reports in the raw answer (upstream's patterns; steps 3 and 4 from
    ``<answer>major, minor</answer>`` when neither step tag gave a length)."""
    found: Found = {k: _step(_TL_STEPS[k], text) for k in (1, 2, 3, 4)}
    if found[3] is None and found[4] is None:
        m = _TOOL_TWO.search(text)
        if m:
            found[3], found[4] = [float(m.group(1))], [float(m.group(2))]
    return found


def ad_found(text: str, metric_type: str) -> Found:
    """The numbers each A/D step reports in the raw answer (step 3 also from ``<answer>x</answer>``)."""
    steps = _AD_DISTANCE_STEPS if metric_type == "distance" else _AD_ANGLE_STEPS
    found: Found = {k: _step(steps[k], text) for k in (1, 2)}
    found[3] = _step(steps[3], text) or _tool_one(text)
    return found


def judge_found(steps: object, kind: str) -> Found:
    """The numbers each step reports as the LLM judge extracted them (its reply's ``steps``: index, status,
    values); a step counts when it is ``present`` with as many numbers as the step reports (``kind``: TL,
    distance or angle)."""
    sizes = STEP_VALUES[kind]
    found: Found = dict.fromkeys(range(1, len(sizes) + 1))
    for step in steps if isinstance(steps, list) else ():
        if not isinstance(step, dict) or step.get("status") != "present":
            continue
        k, values = step.get("index"), step.get("values")
        if isinstance(k, int) and 1 <= k <= len(sizes) and isinstance(values, list) and len(values) == sizes[k - 1]:
            try:
                found[k] = [float(v) for v in values]
            except (TypeError, ValueError):
                continue
    return found


def tl_process(text: str | Found, gt: TLTruth) -> Record:
    """The step fields of a T/L sample (the keys and order of upstream's ``analyze_tl_sample``); ``text``: the raw
    answer, or the steps already found (``judge_found``)."""
    found = tl_found(text) if isinstance(text, str) else text
    out: Record = {"metric_type": "tl", "gt_P1_wh": list(gt.p1), "gt_P2_wh": list(gt.p2),
                   "gt_P3_wh": list(gt.p3), "gt_P4_wh": list(gt.p4), "gt_major_length": gt.major,
                   "gt_minor_length": gt.minor}
    for k, (g1, g2) in ((1, (gt.p1, gt.p2)), (2, (gt.p3, gt.p4))):
        pred = found[k]
        out[f"step{k}_pred"] = pred
        out[f"step{k}_normL2"] = None if pred is None else paired_norm_l2(pred, g1, g2)
    for k, truth in ((3, gt.major), (4, gt.minor)):
        value = found[k]
        _length(out, k, None if value is None else value[0], truth, gt.diagonal)
    return out


def _length(out: Record, k: int, pred: float | None, truth: float, diagonal: float) -> None:
    out[f"step{k}_pred"] = pred
    out[f"step{k}_MRE"] = None if pred is None else mre(pred, truth)
    out[f"step{k}_nMAE"] = None if pred is None else nmae(pred, truth, diagonal)


def ad_process(text: str | Found, gt: ADTruth) -> Record:
    """The step fields of an A/D sample (upstream's ``analyze_distance_sample`` / ``analyze_angle_sample``);
    ``text``: the raw answer, or the steps already found."""
    found = ad_found(text, gt.metric_type) if isinstance(text, str) else text
    if gt.metric_type == "distance":
        out: Record = {"metric_type": "distance", "gt_landmark_1_wh": list(gt.points[0]),
                       "gt_landmark_2_wh": list(gt.points[1]), "gt_distance": gt.value}
        for k in (1, 2):
            pred = found[k]
            out[f"step{k}_pred"] = pred
            out[f"step{k}_normL2"] = None if pred is None else norm_l2(pred, gt.points[k - 1])
        value = found[3]
        _length(out, 3, None if value is None else value[0], gt.value, gt.diagonal)
        return out
    out = {"metric_type": "angle", "gt_line1_point1_wh": list(gt.points[0]), "gt_line1_point2_wh": list(gt.points[1]),
           "gt_line2_point1_wh": list(gt.points[2]), "gt_line2_point2_wh": list(gt.points[3]), "gt_angle": gt.value}
    for k in (1, 2):
        pred = found[k]
        out[f"step{k}_pred"] = pred
        out[f"step{k}_normL2"] = None if pred is None else paired_norm_l2(pred, *gt.points[2 * k - 2:2 * k])
    value = found[3]
    out["step3_pred"] = None if value is None else value[0]
    out["step3_MRE"] = None if value is None else mre(value[0], gt.value)
    return out


def _value(record: Mapping[str, object], name: str) -> float | None:
    """A step value of a record built here (a number, or None where the step gave none)."""
    v = record.get(name)
    if v is None or isinstance(v, (int, float)):
        return v
    raise TypeError(f"{name} is {v!r}, not a number")


def _tool_one(text: str) -> list[float] | None:
    m = _TOOL_ONE.search(text)
    return None if m is None else [float(m.group(1))]


def _equation(out: Record, text: str, k: int, function: str, degrees: bool) -> None:
    """Step ``k``'s ``model_answer``, ``raw_expr``, ``python_eval``, ``equation_MRE`` (and ``eval_error``)."""
    model_value = step_answer(text, k)
    out.update({f"step{k}_model_answer": model_value, f"step{k}_raw_expr": None, f"step{k}_python_eval": None,
                f"step{k}_equation_MRE": None})
    reasoning = reasoning_block(text, k)
    if reasoning is None:
        return
    raw = last_call(reasoning, function)
    out[f"step{k}_raw_expr"] = raw
    if raw is None or model_value is None:
        return
    try:
        value = evaluate(to_expression(raw, degrees=degrees))
    except EquationError as exc:
        out[f"step{k}_eval_error"] = str(exc)
        return
    out[f"step{k}_python_eval"] = value
    out[f"step{k}_equation_MRE"] = equation_mre(model_value, value)


def tl_equations(text: str) -> Record:
    """Steps 3 and 4 (the axis lengths' ``sqrt``). Upstream's fallback for an answer given through one
    ``<tool_call>`` runs the model's code; the suite never runs model output, so such a step has no equation."""
    out: Record = {"metric_type": "tl"}
    _equation(out, text, 3, "sqrt", False)
    _equation(out, text, 4, "sqrt", False)
    return out


def ad_equations(text: str, metric_type: str) -> Record:
    """Step 3: a distance's ``sqrt``, or an angle's ``arccos`` read in degrees."""
    out: Record = {"metric_type": metric_type}
    angle = metric_type == "angle"
    _equation(out, text, 3, "arccos" if angle else "sqrt", angle)
    return out


# -------------------------------------------------------------------------------------- per-label aggregation

def _mean(values: array[float]) -> float:
    """numpy's mean (its pairwise sum, as upstream's ``np.mean`` of a list), NaN for none."""
    return float(np.mean(np.frombuffer(values, dtype=np.float64))) if len(values) else NAN


class SummaryRow(TypedDict, total=False):
    """One label's row of upstream's ``summary_{proc,eq}_acc_{TL,AD}_metrics.json`` (the keys of its family and kind)."""

    metric_type: object  # (A/D) the records' metric_type
    step1_avg_normL2: float
    step2_avg_normL2: float
    step3_avg_MRE: float
    step4_avg_MRE: float
    step3_avg_nMAE: float
    step4_avg_nMAE: float
    step3_avg_equation_MRE: float
    step4_avg_equation_MRE: float
    n_samples: int
    n_valid: int
    n_valid_3: int
    n_valid_4: int
    n_ignored: int
    success_rate: float


@dataclass
class _Label:
    metric_type: object = None  # the records' metric_type as they hold it
    n_samples: int = 0
    n_success: int = 0
    n_valid: int = 0
    n_ignored: int = 0
    values: dict[str, array[float]] = field(default_factory=dict)

    def add(self, name: str, value: float | None) -> None:
        if value is not None:
            self.values.setdefault(name, array("d")).append(value)

    def mean(self, name: str) -> float:
        return _mean(self.values.get(name, array("d")))

    def count(self, name: str) -> int:
        return len(self.values.get(name, ()))


@dataclass
class Aggregate:
    """Per upstream label, the step values of one run's samples (8 bytes a value, never the records); ``kind``:
    ``proc`` or ``eq``, ``family``: TL or AD."""

    family: str
    kind: str
    labels: dict[str, _Label] = field(default_factory=dict)

    def add(self, label: str | None, record: Mapping[str, object]) -> None:
        """One per-sample record under its label (None: not aggregated, as upstream's failed label lookup)."""
        if label is None:
            return
        metric_type = record.get("metric_type")
        g = self.labels.setdefault(label, _Label(metric_type))
        g.n_samples += 1
        if family_spec(self.family).axes and self.kind == "proc":
            for name in ("step1_normL2", "step2_normL2", "step3_MRE", "step4_MRE", "step3_nMAE", "step4_nMAE"):
                g.add(name, _value(record, name))
            g.n_success += all(record.get(n) is not None for n in ("step1_normL2", "step2_normL2", "step3_MRE",
                                                                    "step4_MRE"))
        elif family_spec(self.family).per_metric and self.kind == "proc":
            truth = _value(record, "gt_distance" if metric_type == "distance" else "gt_angle")
            ignored = truth is not None and truth < AD_NEAR_ZERO_GT_THRESHOLD
            g.n_ignored += ignored
            g.n_valid += not ignored
            g.add("step1_normL2", _value(record, "step1_normL2"))
            g.add("step2_normL2", _value(record, "step2_normL2"))
            if not ignored:
                g.add("step3_MRE", _value(record, "step3_MRE"))
                g.add("step3_nMAE", _value(record, "step3_nMAE"))
            g.n_success += all(record.get(n) is not None for n in ("step1_normL2", "step2_normL2", "step3_MRE"))
        elif family_spec(self.family).axes:
            g.add("step3", _value(record, "step3_equation_MRE"))
            g.add("step4", _value(record, "step4_equation_MRE"))
        else:
            value = _value(record, "step3_equation_MRE")
            if value is not None:
                evaluated = _value(record, "step3_python_eval")
                if evaluated is not None and evaluated < AD_NEAR_ZERO_GT_THRESHOLD:
                    g.n_ignored += 1
                else:
                    g.add("step3", value)

    def summary(self) -> dict[str, SummaryRow]:
        """Upstream's ``summary_{proc,eq}_acc_{TL,AD}_metrics.json`` content (labels in first-seen order)."""
        return {label: self._row(g) for label, g in self.labels.items()}

    def _row(self, g: _Label) -> SummaryRow:
        rate = g.n_success / g.n_samples if g.n_samples > 0 else 0.0
        if family_spec(self.family).axes and self.kind == "proc":
            return {"step1_avg_normL2": g.mean("step1_normL2"), "step2_avg_normL2": g.mean("step2_normL2"),
                    "step3_avg_MRE": g.mean("step3_MRE"), "step4_avg_MRE": g.mean("step4_MRE"),
                    "step3_avg_nMAE": g.mean("step3_nMAE"), "step4_avg_nMAE": g.mean("step4_nMAE"),
                    "n_samples": g.n_samples, "success_rate": rate}
        if family_spec(self.family).per_metric and self.kind == "proc":
            return {"metric_type": g.metric_type, "step1_avg_normL2": g.mean("step1_normL2"),
                    "step2_avg_normL2": g.mean("step2_normL2"), "step3_avg_MRE": g.mean("step3_MRE"),
                    "step3_avg_nMAE": g.mean("step3_nMAE"), "n_samples": g.n_samples, "n_valid": g.n_valid,
                    "n_ignored": g.n_ignored, "success_rate": rate}
        if family_spec(self.family).axes:
            return {"step3_avg_equation_MRE": g.mean("step3"), "step4_avg_equation_MRE": g.mean("step4"),
                    "n_samples": g.n_samples, "n_valid_3": g.count("step3"), "n_valid_4": g.count("step4")}
        return {"metric_type": g.metric_type, "step3_avg_equation_MRE": g.mean("step3"), "n_samples": g.n_samples,
                "n_valid": g.count("step3"), "n_ignored": g.n_ignored}


# ------------------------------------------------------------------------------------ upstream's summary texts

Summary = Mapping[str, SummaryRow]
TL_PROC_KEYS = ("step1_avg_normL2", "step2_avg_normL2", "step3_avg_MRE", "step4_avg_MRE", "step3_avg_nMAE",
                "step4_avg_nMAE")
AD_PROC_KEYS = ("step1_avg_normL2", "step2_avg_normL2", "step3_avg_MRE", "step3_avg_nMAE")
_AD_GROUPS = (("FeTA24_distance", "FeTA-Distance"), ("Ceph-Biometrics-400_angle", "Ceph-Angle"),
              ("Ceph-Biometrics-400_distance", "Ceph-Distance"))


def _g(row: Mapping[str, object], key: str) -> float:
    """A row's number (NaN for none)."""
    v = row.get(key, NAN)
    if v is None:
        return NAN
    if isinstance(v, (int, float)):
        return float(v)
    raise TypeError(f"{key} is {v!r}, not a number")


def _weighted(summary: Summary, keys: Sequence[str], weight: Callable[[str, SummaryRow], int],
              skip: Callable[[SummaryRow], bool]) -> dict[str, float]:
    wsum = dict.fromkeys(keys, 0.0)
    wcount = dict.fromkeys(keys, 0)
    for row in summary.values():
        if skip(row):
            continue
        for k in keys:
            v = _g(row, k)
            if not math.isnan(v):
                w = weight(k, row)
                wsum[k] += v * w
                wcount[k] += w
    return {k: wsum[k] / wcount[k] if wcount[k] > 0 else NAN for k in keys}


def _by_samples(summary: Summary) -> list[tuple[str, SummaryRow]]:
    return sorted(summary.items(), key=lambda kv: kv[1].get("n_samples", 0), reverse=True)


def ad_groups(summary: Summary) -> list[tuple[str, list[SummaryRow]]]:
    """Upstream's A/D group rows: FeTA-Distance, Ceph-Angle, Ceph-Distance, then Distance (both distance groups)
    and Angle across datasets (labels of other datasets are in none)."""
    groups: dict[str, list[SummaryRow]] = {name: [] for _, name in _AD_GROUPS}
    for label, row in summary.items():
        name = next((n for part, n in _AD_GROUPS if part in label), None)
        if name is not None:
            groups[name].append(row)
    return [("FeTA-Distance", groups["FeTA-Distance"]), ("Ceph-Angle", groups["Ceph-Angle"]),
            ("Ceph-Distance", groups["Ceph-Distance"]), ("Distance", groups["FeTA-Distance"] + groups["Ceph-Distance"]),
            ("Angle", groups["Ceph-Angle"])]


def _group_mean(rows: Sequence[SummaryRow], key: str, weight_key: Literal["n_samples", "n_valid"]) -> float:
    s, n = 0.0, 0
    for row in rows:
        v, w = _g(row, key), row.get(weight_key, 0)
        if not math.isnan(v):
            s += v * w
            n += w
    return s / n if n > 0 else NAN


def _tl_proc_block(model: str, summary: Summary, task_file: bool) -> list[str]:
    total = sum(r.get("n_samples", 0) for r in summary.values() if r.get("n_samples", 0) > 0)
    w = _weighted(summary, TL_PROC_KEYS, lambda k, r: r.get("n_samples", 0), lambda r: r.get("n_samples", 0) <= 0)
    nmae_head = f"{'S3_nMAE':<8} | {'S4_nMAE':<8}" if task_file else f"{'nMAE (step 3)':<14} | {'nMAE (step 4)':<14}"
    lines = [f"\nModel: {model}",
             f"Weighted Average → Step1_normL2: {w['step1_avg_normL2']:.4f}, Step2_normL2: {w['step2_avg_normL2']:.4f}, "
             f"Step3_MRE: {w['step3_avg_MRE']:.4f}, Step4_MRE: {w['step4_avg_MRE']:.4f}, "
             f"nMAE (step 3): {w['step3_avg_nMAE']:.4f}, nMAE (step 4): {w['step4_avg_nMAE']:.4f} "
             f"(Total Samples: {total})",
             "\nLabel-specific metrics:",
             f"{'Label':<52} | {'S1_MAE':<8} | {'S2_MAE':<8} | {'S3_MRE':<8} | {'S4_MRE':<8} | {nmae_head} | "
             f"{'SR':<6} | {'Samples':<8}",
             "-" * (140 if task_file else 152)]
    width = 14 if task_file else 8
    for label, r in _by_samples(summary):
        lines.append(f"{label:<52} | {_g(r, 'step1_avg_normL2'):<8.4f} | {_g(r, 'step2_avg_normL2'):<8.4f} | "
                     f"{_g(r, 'step3_avg_MRE'):<8.4f} | {_g(r, 'step4_avg_MRE'):<8.4f} | "
                     f"{_g(r, 'step3_avg_nMAE'):<{width}.4f} | {_g(r, 'step4_avg_nMAE'):<{width}.4f} | "
                     f"{_g(r, 'success_rate'):<6.4f} | {r.get('n_samples', 0):<8}")
    return lines


def _ad_proc_block(model: str, summary: Summary, task_file: bool) -> list[str]:
    live = {k: r for k, r in summary.items() if r.get("n_samples", 0) > 0}
    total_n = sum(r["n_samples"] for r in live.values())
    total_v = sum(r.get("n_valid", r["n_samples"]) for r in live.values())
    w = _weighted(live, AD_PROC_KEYS, lambda k, r: r.get("n_valid", r["n_samples"]) if k in (
        "step3_avg_MRE", "step3_avg_nMAE") else r["n_samples"], lambda r: False)
    lines = [f"\nModel: {model}",
             f"Weighted Average → Step1_normL2: {w['step1_avg_normL2']:.4f}, Step2_normL2: {w['step2_avg_normL2']:.4f}, "
             f"Step3_MRE: {w['step3_avg_MRE']:.4f}, nMAE (step 3): {w['step3_avg_nMAE']:.4f} "
             f"(Valid: {total_v}, Total: {total_n})",
             "\nGroup averages:",
             f"{'Group':<15} | {'Step1_normL2':<10} | {'Step2_normL2':<10} | {'Step3_MRE':<10} | "
             + (f"{'nMAE':<10}" if task_file else f"{'nMAE (step 3)':<14}") + f" | {'Valid':<7} | {'Samples':<8}",
             "-" * (83 if task_file else 87)]
    for name, rows in ad_groups(live):
        valid = sum(r.get("n_valid", r.get("n_samples", 0)) for r in rows)
        lines.append(f"{name:<15} | {_group_mean(rows, 'step1_avg_normL2', 'n_samples'):<10.4f} | "
                     f"{_group_mean(rows, 'step2_avg_normL2', 'n_samples'):<10.4f} | "
                     f"{_group_mean(rows, 'step3_avg_MRE', 'n_valid'):<10.4f} | "
                     f"{_group_mean(rows, 'step3_avg_nMAE', 'n_valid'):<14.4f} | {valid:<7} | "
                     f"{sum(r.get('n_samples', 0) for r in rows):<8}")
    lines += ["\nLabel-specific metrics:",
              f"{'Label':<50} | {'Type':<8} | {'Step1_normL2':<10} | {'Step2_normL2':<10} | {'Step3_MRE':<10} | "
              + (f"{'nMAE':<10}" if task_file else f"{'nMAE (step 3)':<14}")
              + f" | {'SR':<6} | {'Ignored':<8} | {'Samples':<8}",
              "-" * (140 if task_file else 144)]
    width = 14 if task_file else 10
    for label, r in _by_samples(summary):
        lines.append(f"{label:<50} | {r.get('metric_type', '') or '':<8} | {_g(r, 'step1_avg_normL2'):<10.4f} | "
                     f"{_g(r, 'step2_avg_normL2'):<10.4f} | {_g(r, 'step3_avg_MRE'):<10.4f} | "
                     f"{_g(r, 'step3_avg_nMAE'):<{width}.4f} | {_g(r, 'success_rate'):<6.4f} | "
                     f"{r.get('n_ignored', 0):<8} | {r.get('n_samples', 0):<8}")
    return lines


def _tl_eq_block(model: str, summary: Summary) -> list[str]:
    live = {k: r for k, r in summary.items() if r.get("n_samples", 0) > 0}
    w = _weighted(live, ("step3_avg_equation_MRE", "step4_avg_equation_MRE"), lambda k, r: r["n_samples"],
                  lambda r: False)
    lines = [f"\nModel: {model}",
             f"Weighted Average → Step3_eq_MRE: {w['step3_avg_equation_MRE']:.4f}, "
             f"Step4_eq_MRE: {w['step4_avg_equation_MRE']:.4f} "
             f"(Total Samples: {sum(r['n_samples'] for r in live.values())})",
             "\nLabel-specific metrics:",
             f"{'Label':<52} | {'S3_eq_MRE':<12} | {'S4_eq_MRE':<12} | {'Valid3':<7} | {'Valid4':<7} | "
             f"{'Samples':<8}",
             "-" * 110]
    for label, r in _by_samples(summary):
        lines.append(f"{label:<52} | {_g(r, 'step3_avg_equation_MRE'):<12.4f} | "
                     f"{_g(r, 'step4_avg_equation_MRE'):<12.4f} | {r.get('n_valid_3', 0):<7} | "
                     f"{r.get('n_valid_4', 0):<7} | {r.get('n_samples', 0):<8}")
    return lines


def _ad_eq_block(model: str, summary: Summary) -> list[str]:
    live = {k: r for k, r in summary.items() if r.get("n_valid", 0) > 0}
    w = _weighted(live, ("step3_avg_equation_MRE",), lambda k, r: r["n_valid"], lambda r: False)
    valid = sum(r["n_valid"] for r in live.values() if not math.isnan(_g(r, "step3_avg_equation_MRE")))
    lines = [f"\nModel: {model}",
             f"Weighted Average → Step3_eq_MRE: {w['step3_avg_equation_MRE']:.4f} (Valid: {valid}, "
             f"Total: {sum(r.get('n_samples', 0) for r in live.values())})",
             "\nGroup averages:",
             f"{'Group':<15} | {'Step3_eq_MRE':<14} | {'Valid':<8} | {'Samples':<8}",
             "-" * 53]
    for name, rows in ad_groups(live):
        lines.append(f"{name:<15} | {_group_mean(rows, 'step3_avg_equation_MRE', 'n_valid'):<14.4f} | "
                     f"{sum(r.get('n_valid', 0) for r in rows):<8} | {sum(r.get('n_samples', 0) for r in rows):<8}")
    lines += ["\nLabel-specific metrics:",
              f"{'Label':<50} | {'Type':<8} | {'Step3_eq_MRE':<14} | {'Valid':<6} | {'Ignored':<7} | {'Samples':<8}",
              "-" * 112]
    for label, r in _by_samples(summary):
        lines.append(f"{label:<50} | {r.get('metric_type', '') or '':<8} | "
                     f"{_g(r, 'step3_avg_equation_MRE'):<14.4f} | {r.get('n_valid', 0):<6} | "
                     f"{r.get('n_ignored', 0):<7} | {r.get('n_samples', 0):<8}")
    return lines


def _block(family: str, kind: str, model: str, summary: Summary, task_file: bool) -> list[str]:
    if kind == "proc":
        return (_tl_proc_block if family_spec(family).axes else _ad_proc_block)(model, summary, task_file)
    return (_tl_eq_block if family_spec(family).axes else _ad_eq_block)(model, summary)


def model_text(family: str, kind: str, model: str, summary: Summary) -> str:
    """Upstream's ``summary_{proc,eq}_acc_{TL,AD}_model[_filtered].txt`` of one model."""
    return "\n".join(_block(family, kind, model, summary, False))


def task_text(family: str, kind: str, runs: Sequence[tuple[str, Summary]]) -> str:
    """Upstream's ``summary_{proc,eq}_acc_{TL,AD}_task[_filtered].txt``: one block per model (sorted by name)."""
    what = "Process Accuracy" if kind == "proc" else "Equation Accuracy"
    lines = [f"\n\n========== MODEL SUMMARIES ({what} - {family} Task) ==========\n"]
    for model, summary in sorted(runs, key=lambda r: r[0]):
        lines += _block(family, kind, model, summary, True)
        lines.append("\n" + "=" * 100 + "\n")
    return "\n".join(lines)


def overall(family: str, kind: str, summary: Summary) -> dict[str, float]:
    """The numbers of upstream's ``Weighted Average`` line of a model (``n``: its samples; equation accuracy also
    the valid and ignored counts), for the report's tables."""
    live = {k: r for k, r in summary.items() if r.get("n_samples", 0) > 0}
    n = sum(r["n_samples"] for r in live.values())
    if kind == "proc" and family_spec(family).axes:
        return {"n": n, **_weighted(live, TL_PROC_KEYS, lambda k, r: r["n_samples"], lambda r: False)}
    if kind == "proc":
        return {"n": n, **_weighted(live, AD_PROC_KEYS, lambda k, r: r.get("n_valid", r["n_samples"]) if k in (
            "step3_avg_MRE", "step3_avg_nMAE") else r["n_samples"], lambda r: False)}
    if family_spec(family).axes:
        return {"n": n, "valid3": sum(r.get("n_valid_3", 0) for r in live.values()),
                "valid4": sum(r.get("n_valid_4", 0) for r in live.values()),
                **_weighted(live, ("step3_avg_equation_MRE", "step4_avg_equation_MRE"), lambda k, r: r["n_samples"],
                            lambda r: False)}
    valid = {k: r for k, r in live.items() if r.get("n_valid", 0) > 0}
    return {"n": n, "valid": sum(r["n_valid"] for r in valid.values()),
            "ignored": sum(r.get("n_ignored", 0) for r in live.values()),
            **_weighted(valid, ("step3_avg_equation_MRE",), lambda k, r: r["n_valid"], lambda r: False)}


def metrics_json(summary: Summary) -> str:
    """``json.dump(summary, indent=2)`` as upstream writes it (NaN spelled ``NaN``)."""
    return json.dumps(summary, indent=2)
