"""Score stored answers as upstream MedVision does: target, parser, per-sample metrics and task metrics.

A run's protocol picks upstream's generation: ``current`` (the newest code: the strict ``<answer>`` parser, corners
sorted before the overlap metrics, nMAE, Acc@IoU) or ``paper`` (master c221615: the last-k-numbers parser over the
whole answer, corners as given). The metric names and denominators are upstream's (``tasks/upstream_metrics.py``);
this module only joins them to our docs and stored answers.

Upstream computes a sample's numbers in two places, and the metric path picks which one a score follows
(``METRIC_PATHS``; docs/spec/scoring-rules.md):

``posthoc`` (default)  the post-hoc scorers that made the published tables: ``utils/parse_utils.py`` ``cal_metrics``
                       @2f20f64 (which ``script/llm-parsing/apply_judge.py`` @2f20f64 scores judged answers with) and
                       ``benchmark/summarize_{TL,AD}_task.py`` (master c221615, @286f632). A negative A/D prediction
                       is a success with its error; every relative error divides by ``gt + 1e-15``.
``eval-time``          the evaluation-time ``process_results_*`` of ``medvision_utils.py`` (master c221615; @e3cf881),
                       which wrote upstream's ``<ts>_results.json``: a negative A/D prediction is a failure, and under
                       the paper protocol the T/L relative error divides by ``gt`` itself (master; newer code adds
                       1e-15 there too).

Both paths leave an A/D sample whose ground truth is below 0.1 out of the task under the newer rules (upstream's
summarizer drops it before counting; eval time excludes it from the success rate).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np

from medvision_bm.data.docs import Doc, RunProtocol, View
from medvision_bm.io import finite_or_none
from medvision_bm.tasks import upstream_metrics as um
from medvision_bm.tasks.families import SAMPLE_METRICS, family_spec
from medvision_bm.tasks.metrics import SampleContext, metric_spec
from medvision_bm.tasks.upstream_parse import Parser, SampleStatus, UpstreamParse, parse_upstream


@dataclass(frozen=True, slots=True)
class ProtocolSettings:
    """What a run protocol scores with: its default parser and its metric rules (upstream's newer or paper-era)."""

    parser: Parser
    rules: str


PROTOCOLS: dict[str, ProtocolSettings] = {
    RunProtocol.CURRENT.value: ProtocolSettings(Parser.STRICT, "newer"),
    RunProtocol.PAPER.value: ProtocolSettings(Parser.LASTK, "paper"),
}
DEFAULT_PROTOCOL = RunProtocol.CURRENT
PARSERS: tuple[str, ...] = tuple(Parser)
#: Upstream's two places that turn an answer into numbers (see the module docstring); the first is the default.
METRIC_PATHS: tuple[str, ...] = ("posthoc", "eval-time")
DEFAULT_METRIC_PATH = "posthoc"


def check_metric_path(metric_path: str) -> str:
    if metric_path not in METRIC_PATHS:
        raise ValueError(f"unknown metric path {metric_path!r}; known: {', '.join(METRIC_PATHS)}")
    return metric_path


def protocol_settings(protocol: str) -> ProtocolSettings:
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    return PROTOCOLS[protocol]


def target(doc: Doc, view: View | None = None) -> list[float]:
    """The numbers a perfect answer gives (upstream ``doc_to_target_*``; a ``-CoT-scaledPS`` sample's view carries
    its scaled target, upstream's ``doc_to_target_*_scaledPS``).

    Detection: ``[min_col / W, (H - max_row) / H, max_col / W, (H - min_row) / H]`` of the (only) box, from its
    inclusive array indices on the native slice of size ``image_size_2d`` = (H, W): relative coordinates with the
    origin at the lower-left corner, lower-left corner first (medvision_utils.py ``doc_to_target_BoxCoordinate``,
    master c221615 and @0a4c5e2). T/L: (major, minor) mm of the first measured cluster. A/D: the metric value.

    A plan's NaN or Infinity reaches a store's ``docs.jsonl`` as ``null`` (JSON has neither); both read back as NaN,
    the value upstream's ``doc_to_target_*`` hands on as it is (see :data:`TARGET_NOT_FINITE`).
    """
    if view is not None and view.scaled_target is not None:
        return [_gt(v) for v in view.scaled_target]
    if family_spec(doc.family).has_boxes:
        bb = doc.bounding_boxes or {}
        (r0, c0), (r1, c1) = bb["min_coords"][0], bb["max_coords"][0]
        h, w = doc.image_size_2d
        return [c0 / w, (h - r1) / h, c1 / w, (h - r0) / h]
    bp = doc.biometric_profile or {}
    if family_spec(doc.family).axes:
        return [_gt(bp["metric_value_major_axis"][0]), _gt(bp["metric_value_minor_axis"][0])]
    return [_gt(bp["metric_value"])]


def _gt(value: float | str | None) -> float:
    return math.nan if value is None else float(value)


#: The reason a sample whose annotation is NaN or Infinity carries. Upstream's loader keeps such a sample (it never
#: drops an A/D one); its eval-time scoring hands the value on as it is and scores a parsed answer as a success whose
#: errors are NaN (``medvision_utils.py`` ``doc_to_target_BiometricsFromLandmarks``,
#: ``process_results_BiometricsFromLandmarks`` @929f45a), so the error means, which take finite values only, leave
#: it out. Its post-hoc scorer defines no number here (``utils/parse_utils.py`` ``cal_metrics`` @1f4cc6c evaluates
#: the stored target text ``nan`` outside its ``try`` and stops), so both metric paths follow the eval-time rule.
TARGET_NOT_FINITE = ("the annotation's target is not a finite number (NaN or Infinity in the plan): scored as "
                     "upstream scores it, its errors NaN and left out of every mean")


#: The notes a detection sample whose annotated box upstream scores as it is carries (``box_notes``). Upstream
#: neither clips nor checks the planner's box: ``doc_to_target_BoxCoordinate`` converts it as given
#: (``medvision_utils.py`` @929f45a); the newer overlap metrics sort each box's corners first and return 0 for
#: boxes that do not overlap, as a box of no area never does (``cal_IoU`` ... ``cal_Recall`` in
#: ``utils/parse_utils.py`` @1f4cc6c); the paper rules take the corners as given. The numbers stay upstream's; the notes say why they look so.
BOX_OUTSIDE = "the annotation's box reaches outside the {h} x {w} slice: scored as upstream scores it, unclipped"
BOX_INVERTED = {
    "newer": ("the annotation's box is inverted (a min corner past its max): upstream's newer rules sort the corners "
              "before the overlap metrics; MAE compares them as given"),
    "paper": "the annotation's box is inverted (a min corner past its max): the paper rules take its corners as given",
}
BOX_EMPTY = ("the annotation's box has no area: every answer's overlap metrics are 0 (upstream finds no overlap "
             "before it would look at the area)")


def box_notes(doc: Doc, rules: str) -> list[str]:
    """What is odd about a detection sample's annotated box (outside its slice, inverted, of no area); [] if none."""
    if family_spec(doc.family).measure:
        return []
    bb = doc.bounding_boxes or {}
    (r0, c0), (r1, c1) = bb["min_coords"][0], bb["max_coords"][0]
    h, w = doc.image_size_2d
    notes = []
    if min(r0, c0, r1, c1) < 0 or max(r0, r1) > h - 1 or max(c0, c1) > w - 1:  # inclusive indices
        notes.append(BOX_OUTSIDE.format(h=h, w=w))
    if r0 > r1 or c0 > c1:
        notes.append(BOX_INVERTED[rules])
    if r0 == r1 or c0 == c1:
        notes.append(BOX_EMPTY)
    return notes


def _with_notes(doc: Doc, tgt: Sequence[float], rules: str, reason: str) -> str:
    """``reason`` and the notes on the sample's annotation (non-finite target, odd box), joined by "; "."""
    notes = box_notes(doc, rules)
    if not all(math.isfinite(v) for v in tgt):
        notes.append(TARGET_NOT_FINITE)
    return "; ".join([reason, *notes] if reason else notes)


def diagonal_mm(doc: Doc, view: View) -> float:
    """nMAE's denominator: the physical diagonal of the native slice (image_size_2d x header pixel size, each side
    times its scaledPS factor where the sample has them: upstream's ``_compute_physical_diagonal``)."""
    return um.slice_diagonal_mm(doc.image_size_2d, view.header_pixel_hw, view.pixel_scale_hw or (1.0, 1.0))


def format_answer(values: Sequence[float]) -> str:
    """An answer both parsers read back as these numbers (positional notation, no exponent: the paper-era parser
    reads no exponents; shortest digits that round-trip, so the float32 upstream reads is the value's own)."""
    body = ", ".join(np.format_float_positional(float(v), unique=True, trim="-") for v in values)
    return f"<answer>{body}</answer>"


class ScoreJson(TypedDict):
    """``SampleScore.to_json``: one scored sample as a parsed row carries it (non-finite numbers as None)."""

    key: str
    status: str
    success: bool
    values: list[float | None] | None
    target: list[float | None]
    metrics: dict[str, float | None]
    parser: str
    reason: str
    near_zero_gt: bool
    metric_path: str


@dataclass(frozen=True)
class SampleScore:
    key: str
    status: SampleStatus
    values: tuple[float, ...] | None
    target: tuple[float, ...]
    metrics: dict[str, float | None] = field(default_factory=dict)
    parser: str = ""
    reason: str = ""
    near_zero_gt: bool = False
    metric_path: str = DEFAULT_METRIC_PATH

    @property
    def success(self) -> bool:
        return self.status == SampleStatus.OK

    def to_json(self) -> ScoreJson:
        return {"key": self.key, "status": self.status, "success": self.success,
                "values": [finite_or_none(v) for v in self.values] if self.values is not None else None,
                "target": [finite_or_none(v) for v in self.target],
                "metrics": self.metrics, "parser": self.parser, "reason": self.reason,
                "near_zero_gt": self.near_zero_gt, "metric_path": self.metric_path}


def _upstream_sample(doc: Doc, view: View, parsed: UpstreamParse | None, tgt: list[float], rules: str,
                     metric_path: str) -> um.DetectionSample | um.MeasureSample:
    """Upstream's per-sample record of the family (its failure values when ``parsed`` is None)."""
    spec = family_spec(doc.family)
    if not spec.measure:
        return um.detection_sample(parsed, tgt, rules=rules)
    diag = diagonal_mm(doc, view) if rules == "newer" else None
    eval_time = metric_path == "eval-time"
    if not spec.per_metric:
        eps = 0.0 if eval_time and rules == "paper" else um.RELATIVE_ERROR_EPS
        return um.tl_sample(parsed, tgt, diag, relative_eps=eps)
    return um.ad_sample(parsed, tgt[0], str(doc.metric_type), diag, reject_negative=eval_time)


def _sample_metrics(doc: Doc, view: View, parsed: UpstreamParse | None, rules: str,
                    metric_path: str) -> dict[str, float | None]:
    """The family's per-sample metrics (each record's function, by name, in the family's order)."""
    tgt = target(doc, view)
    ctx = SampleContext(_upstream_sample(doc, view, parsed, tgt, rules, metric_path),
                        tuple(parsed.values) if parsed is not None and parsed.values is not None else None,
                        tuple(tgt))
    out: dict[str, float | None] = {}
    for name in SAMPLE_METRICS[doc.family]:
        value = metric_spec(name).value
        assert value is not None  # a family's metric columns all have a function (tasks.metrics.family_metrics)
        out[name] = value(ctx)
    return out


def score_answer(doc: Doc, view: View, text: str | None, parser: str, rules: str,
                 metric_path: str = DEFAULT_METRIC_PATH) -> SampleScore:
    """Parse one raw answer with ``parser`` and score it with upstream's ``rules`` ("newer" | "paper") on
    ``metric_path`` ("posthoc" | "eval-time")."""
    check_metric_path(metric_path)
    tgt = tuple(target(doc, view))
    near_zero = _near_zero_gt(doc, rules, tgt)
    if text is None:
        metrics = _sample_metrics(doc, view, None, rules, metric_path)
        return SampleScore(doc.key, SampleStatus.MISSING, None, tgt, metrics, parser,
                           _with_notes(doc, tgt, rules, "no answer stored"), near_zero, metric_path)
    parsed = parse_upstream(text, family_spec(doc.family).arity, parser)
    status, reason = parsed.status, parsed.reason
    if metric_path == "eval-time" and parsed.ok and family_spec(doc.family).per_metric and parsed.values \
            and um.negative_prediction(parsed.values[0]):
        status, reason = SampleStatus.PARSE_FAILED, "negative A/D prediction (upstream's eval-time scoring fails it)"
    metrics = _sample_metrics(doc, view, parsed if status == SampleStatus.OK else None, rules, metric_path)
    values = tuple(parsed.values) if parsed.ok and parsed.values is not None else None
    return SampleScore(doc.key, status, values, tgt, metrics, parser, _with_notes(doc, tgt, rules, reason), near_zero,
                       metric_path)


class ScoreMemo:
    """Scores of answers made while a task runs, for the task's scoring afterwards: each answer is scored as it
    lands (the runner's score checkpoints) or when lmms-eval's ``process_results`` hook is handed it, whichever comes
    first, and the other takes that score instead of scoring the same answer again (each answer is scored once). One memo lives for one run of the harness over one task: what it holds
    belongs to that task's samples (keyed by sample key, answer text, parser, rules and metric path)."""

    def __init__(self) -> None:
        self._scores: dict[tuple[str, str, str, str, str], SampleScore] = {}

    def score(self, doc: Doc, view: View, text: str | None, parser: str, rules: str,
              metric_path: str = DEFAULT_METRIC_PATH) -> SampleScore:
        """``score_answer``, remembered (an answer scored already, as it landed, is not scored again)."""
        if text is None:
            return score_answer(doc, view, text, parser, rules, metric_path)
        key = (doc.key, text, parser, rules, metric_path)
        sc = self._scores.get(key)
        if sc is None:
            sc = self._scores[key] = score_answer(doc, view, text, parser, rules, metric_path)
        return sc

    def take(self, key: str, text: str | None, parser: str, rules: str, metric_path: str) -> SampleScore | None:
        """The score of this very answer made during the task, if any (handed out once)."""
        return None if text is None else self._scores.pop((key, text, parser, rules, metric_path), None)

    def clear(self) -> None:
        """Forget every score held (a part of a task is done and its scores are persisted elsewhere)."""
        self._scores.clear()

    def __len__(self) -> int:
        return len(self._scores)


#: The memo of the task the harness is running now (``memo_of_task``); None outside a task run.
_ACTIVE_MEMO: ScoreMemo | None = None


@contextmanager
def memo_of_task(memo: ScoreMemo | None = None) -> Iterator[ScoreMemo]:
    """Collect the scores the hooks make while a task runs (``hook_score``) in ``memo`` (default: a fresh one)."""
    global _ACTIVE_MEMO
    memo = _ACTIVE_MEMO = memo if memo is not None else ScoreMemo()
    try:
        yield memo
    finally:
        _ACTIVE_MEMO = None


def hook_score(doc: Doc, view: View, text: str | None, parser: str, rules: str) -> SampleScore:
    """What lmms-eval's ``process_results`` hook scores an answer with: ``score_answer`` on the default metric
    path, remembered for the runner's scoring when a task run collects them (``memo_of_task``)."""
    memo = _ACTIVE_MEMO
    if memo is None:
        return score_answer(doc, view, text, parser, rules)
    return memo.score(doc, view, text, parser, rules)


def _near_zero_gt(doc: Doc, rules: str, tgt: tuple[float, ...]) -> bool:
    """Upstream's newer rules leave out an A/D sample whose ground truth is near zero."""
    return family_spec(doc.family).per_metric and rules == "newer" and tgt[0] < um.AD_NEAR_ZERO_GT_THRESHOLD


def failed_score(doc: Doc, view: View, parser: str, rules: str, status: str, reason: str,
                 metric_path: str = DEFAULT_METRIC_PATH) -> SampleScore:
    """A sample whose request failed (or is pending): scored as a failure with upstream's failure values."""
    check_metric_path(metric_path)
    tgt = tuple(target(doc, view))
    metrics = _sample_metrics(doc, view, None, rules, metric_path)
    near_zero = _near_zero_gt(doc, rules, tgt)
    return SampleScore(doc.key, SampleStatus(status), None, tgt, metrics, parser, _with_notes(doc, tgt, rules, reason),
                       near_zero, metric_path)


#: The order of the status codes in ``ScoreColumns.status``.
STATUS_CODES: tuple[SampleStatus, ...] = tuple(SampleStatus)
_CODE: dict[object, int] = {s.value: i for i, s in enumerate(STATUS_CODES)}  # looked up with a row's status


@dataclass(frozen=True)
class ScoreColumns:
    """Per selected sample of a task (in selection order), all its task metrics are made of: the status (an index
    of ``STATUS_CODES``), success, whether upstream leaves it out (``near_zero_gt``), and the family's
    ``SAMPLE_METRICS`` (NaN where a row has none)."""

    status: np.ndarray  # uint8, (n,)
    success: np.ndarray  # bool, (n,)
    near_zero: np.ndarray  # bool, (n,)
    metrics: np.ndarray  # float64, (n, len(SAMPLE_METRICS[family]))

    @classmethod
    def of_rows(cls, family: str, rows: Iterable[Mapping[str, object]]) -> ScoreColumns:
        """The columns of parsed rows (``SampleScore.to_json`` fields: status, success, near_zero_gt, metrics)."""
        cols = ColumnsBuilder(family)
        for r in rows:
            cols.add(r)
        return cols.columns()


class ColumnsBuilder:
    """``ScoreColumns`` filled one parsed row at a time (a few bytes a row: the rows themselves are not kept)."""

    def __init__(self, family: str) -> None:
        self.names = SAMPLE_METRICS[family]
        self.status, self.success, self.near_zero, self.metrics = array("B"), array("B"), array("B"), array("d")

    def add(self, row: Mapping[str, object]) -> None:
        """One row's ``SampleScore.to_json`` fields (status, success, near_zero_gt, metrics)."""
        self.status.append(_CODE[row["status"]])
        self.success.append(bool(row["success"]))
        self.near_zero.append(bool(row.get("near_zero_gt")))
        m = row["metrics"]
        if type(m) is not dict and not isinstance(m, Mapping):  # (the exact type first: an ABC check is slow)
            raise AttributeError(f"'{type(m).__name__}' object has no attribute 'get'")
        for name in self.names:
            v = m.get(name)
            if v is None:
                self.metrics.append(np.nan)
            elif type(v) is float or type(v) is int or isinstance(v, int | float):
                self.metrics.append(v)
            else:
                raise TypeError(f"must be real number, not {type(v).__name__}")

    def columns(self) -> ScoreColumns:
        k = len(self.names)
        return ScoreColumns(np.frombuffer(self.status, dtype=np.uint8).copy(),
                            np.frombuffer(self.success, dtype=np.uint8).astype(bool),
                            np.frombuffer(self.near_zero, dtype=np.uint8).astype(bool),
                            np.frombuffer(self.metrics, dtype=np.float64).reshape(-1, k).copy())


def aggregate_columns(family: str, cols: ScoreColumns, rules: str) -> dict[str, float | None]:
    """Task metrics: upstream's keys and denominators (``tasks.upstream_metrics``), plus our counts."""
    kept = ~cols.near_zero
    success, m, status = cols.success[kept], cols.metrics[kept], cols.status[kept]
    index = {name: j for j, name in enumerate(SAMPLE_METRICS[family])}  # columns are looked up by name

    def col(name: str) -> np.ndarray:
        return m[:, index[name]]

    if not family_spec(family).measure:
        upstream = um.detection_columns(success, col("MAE"), col("IoU"), col("F1"), col("Precision"), col("Recall"),
                                        rules=rules)
    else:  # nMAE is NaN where upstream's nMAE did not succeed
        upstream = um.measure_columns(success, col("MAE"), col("MRE"), col("nMAE"), ~np.isnan(col("nMAE")), family,
                                      rules)
    out: dict[str, float | None] = {k: finite_or_none(v) if isinstance(v, float) else v for k, v in (upstream or {}).items()}
    n_kept = int(np.count_nonzero(kept))
    out.update({
        "n": len(kept), "n_scored": n_kept, "n_near_zero_gt_excluded": len(kept) - n_kept,
        "n_success": int(np.count_nonzero(success)),
        "n_parse_failed": int(np.count_nonzero(status == _CODE[SampleStatus.PARSE_FAILED])),
        "n_request_failed": int(np.count_nonzero(status == _CODE[SampleStatus.REQUEST_FAILED])),
        "n_missing": int(np.count_nonzero(status == _CODE[SampleStatus.MISSING])),
    })
    return out


def aggregate_rows(family: str, rows: Sequence[Mapping[str, object]], rules: str) -> dict[str, float | None]:
    """Task metrics from parsed rows (``SampleScore.to_json`` fields)."""
    return aggregate_columns(family, ScoreColumns.of_rows(family, rows), rules)


def aggregate(family: str, scores: Sequence[SampleScore], rules: str) -> dict[str, float | None]:
    return aggregate_rows(family, [s.to_json() for s in scores], rules)
