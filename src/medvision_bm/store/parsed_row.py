"""The row of ``parsed.jsonl`` and of a judged parse's (``ParsedRow``): a scored sample, its place and upstream's
grouping fields, every field read through its typed reader."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, TypedDict

import orjson

from medvision_bm import limits
from medvision_bm.data.docs import Doc
from medvision_bm.jsontypes import JsonObject, JsonValue
from medvision_bm.store.record_base import (
    MAX_NAME,
    NO_EXTRA,
    RecordError,
    extra_of,
    field_names,
    line_version,
)
from medvision_bm.tasks.families import per_metric
from medvision_bm.tasks.scoring import SampleScore
from medvision_bm.tasks.upstream_parse import SampleStatus


class GroupFields(TypedDict, total=False):
    """What upstream's aggregation groups a sample by, as a parsed row holds it (``metric_*``: A/D rows only)."""

    dataset: str
    label: int | None
    label_name: str | None
    modality: str
    slice_dim: int
    metric_type: str | None
    metric_key: str | None


def group_fields(doc: Doc) -> GroupFields:
    """What upstream's aggregation groups a sample by (label name, modality, plane; A/D metric)."""
    out: GroupFields = {"dataset": doc.dataset_name, "label": doc.label, "label_name": doc.meta.get("label_name"),
                           "modality": doc.modality, "slice_dim": doc.slice_dim}
    if per_metric(doc.family):
        bp = doc.biometric_profile or {}
        out["metric_type"], out["metric_key"] = bp.get("metric_type"), bp.get("metric_key")
    return out


@dataclass(frozen=True, slots=True)
class ParsedRow:
    """One line of ``parsed.jsonl`` (and of a judged parse's): a selected sample's place (index, family, task),
    upstream's grouping fields, the metric rules, and its score (``tasks.scoring.SampleScore``; the metric path it
    was scored on is in it). ``metric_type`` and ``metric_key`` are written for A/D rows only, ``judge`` (what the
    judge decided) for judged rows only."""

    VERSION: ClassVar[int] = 1

    index: int
    family: str
    task: str
    rules: str
    key: str
    status: SampleStatus
    success: bool
    values: list[float | None] | None
    target: list[float | None]  # (null where a target was not finite)
    metrics: Mapping[str, float | None]
    parser: str
    reason: str = ""
    near_zero_gt: bool = False
    metric_path: str | None = None
    dataset: str | None = None
    label: int | None = None
    label_name: str | None = None
    modality: str | None = None
    slice_dim: int | None = None
    metric_type: str | None = None
    metric_key: str | None = None
    judge: Mapping[str, JsonValue] | None = None
    extra: Mapping[str, JsonValue] = field(default_factory=lambda: NO_EXTRA)

    @classmethod
    def of_score(cls, doc: Doc, sc: SampleScore, rules: str, *, parser: str | None = None,
                 judge: Mapping[str, JsonValue] | None = None) -> ParsedRow:
        """The row of one scored sample (``parser`` overrides the score's: a judged parse names the judge's)."""
        d = sc.to_json()
        g = group_fields(doc)
        return cls(index=doc.index, family=doc.family, task=doc.task, rules=rules, key=d["key"],
                   status=sc.status, success=d["success"], values=d["values"], target=d["target"],
                   metrics=d["metrics"], parser=parser or d["parser"], reason=d["reason"],
                   near_zero_gt=d["near_zero_gt"], metric_path=d["metric_path"], dataset=g["dataset"],
                   label=g["label"], label_name=g["label_name"], modality=g["modality"], slice_dim=g["slice_dim"],
                   metric_type=g.get("metric_type"), metric_key=g.get("metric_key"), judge=judge)

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "index": self.index, "family": self.family, "task": self.task, "rules": self.rules,
            "dataset": self.dataset, "label": self.label, "label_name": self.label_name, "modality": self.modality,
            "slice_dim": self.slice_dim, "key": self.key, "status": self.status, "success": self.success,
            "values": None if self.values is None else list(self.values), "target": list(self.target),
            "metrics": dict(self.metrics), "parser": self.parser,
            "reason": self.reason, "near_zero_gt": self.near_zero_gt, "metric_path": self.metric_path}
        if per_metric(self.family):
            out["metric_type"], out["metric_key"] = self.metric_type, self.metric_key
        if self.judge is not None:
            out["judge"] = dict(self.judge)
        if self.extra:
            out.update(self.extra)
        return out

    def line(self) -> bytes:
        """The stored line with its newline (orjson: a million rows are written per full parse)."""
        return orjson.dumps(self.to_json(), option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)

    @classmethod
    def from_json(cls, obj: JsonValue) -> ParsedRow:
        """A decoded parsed.jsonl line, every field read through its typed reader (``limits``): a field of another
        type or out of bounds is a RecordError naming it (the line is skipped and counted as bad, never scored)."""
        key = obj.get("key") if isinstance(obj, dict) else None
        if not isinstance(obj, dict) or not isinstance(key, str):
            raise RecordError("a parsed.jsonl line without its key")
        line_version(cls, obj)
        raw_status = obj.get("status")
        if not isinstance(raw_status, str) or raw_status not in _SAMPLE_STATUSES:
            raise RecordError(f"a parsed.jsonl line with status {limits.shown(raw_status)}")
        try:
            return cls._typed(obj, key, SampleStatus(raw_status))
        except limits.BadField as exc:
            raise RecordError(f"a parsed.jsonl line whose {exc}") from None

    @classmethod
    def _typed(cls, obj: JsonObject, key: str, status: SampleStatus) -> ParsedRow:
        text, opt = limits.text_field, limits.optional
        metrics = obj.get("metrics")
        if metrics is None:
            metrics = {}
        if not isinstance(metrics, dict) or len(metrics) > _MAX_ROW_ITEMS:
            raise limits.BadField(f"metrics is {limits.shown(metrics)}, not an object of numbers")
        judge = opt(_judge_block, obj.get("judge"))
        return cls(index=limits.int_field(obj.get("index", 0), "index", -1), family=text(obj.get("family", ""), "family", 16),
                   task=text(obj.get("task", ""), "task", MAX_NAME), rules=text(obj.get("rules", ""), "rules", MAX_NAME),
                   key=key, status=status, success=limits.bool_field(obj.get("success", False), "success"),
                   values=opt(_numbers, obj.get("values"), "values"), target=_numbers(obj.get("target", []), "target"),
                   metrics={text(k, "a metric name", MAX_NAME): opt(limits.float_field, v, f"metrics.{k}")
                            for k, v in metrics.items()},
                   parser=text(obj.get("parser", ""), "parser", MAX_NAME),
                   reason=text(obj.get("reason") or "", "reason", limits.MAX_ANSWER_CHARS),
                   near_zero_gt=limits.bool_field(obj.get("near_zero_gt", False), "near_zero_gt"),
                   metric_path=opt(text, obj.get("metric_path"), "metric_path", MAX_NAME),
                   dataset=opt(text, obj.get("dataset"), "dataset", MAX_NAME),
                   label=opt(limits.int_field, obj.get("label"), "label", -(2**31), 2**31),
                   label_name=opt(text, obj.get("label_name"), "label_name", MAX_NAME),
                   modality=opt(text, obj.get("modality"), "modality", MAX_NAME),
                   slice_dim=opt(limits.int_field, obj.get("slice_dim"), "slice_dim", 0, 2),
                   metric_type=opt(text, obj.get("metric_type"), "metric_type", MAX_NAME),
                   metric_key=opt(text, obj.get("metric_key"), "metric_key", MAX_NAME), judge=judge,
                   extra=extra_of(obj, _PARSED_FIELDS))


#: The most items in one of a parsed row's lists or objects (a box has 4 numbers, a family at most 5 metrics).
_MAX_ROW_ITEMS = 64


def _judge_block(value: JsonValue) -> JsonObject:
    """A judged row's ``judge`` object (``score.judged.judged_row``), its known fields typed; else BadField."""
    if not isinstance(value, dict):
        raise limits.BadField(f"judge is {limits.shown(value)}, not an object")
    text, opt, out = limits.text_field, limits.optional, dict(value)
    for name in ("mode", "reason", "tier", "strict_pred", "judge_pred"):
        out[name] = opt(text, value.get(name), f"judge.{name}", limits.MAX_ANSWER_CHARS)
    strict = opt(_numbers, value.get("strict_values"), "judge.strict_values")
    out["strict_values"] = None if strict is None else list(strict)
    nums = value.get("judge_numbers")
    if nums is not None and (not isinstance(nums, list) or len(nums) > _MAX_ROW_ITEMS):
        raise limits.BadField(f"judge.judge_numbers is {limits.shown(nums)}, not a list of numbers as written")
    out["judge_numbers"] = None if nums is None else [text(n, "judge.judge_numbers", MAX_NAME) for n in nums]
    out["response_chars"] = opt(limits.int_field, value.get("response_chars"), "judge.response_chars")
    return {k: v for k, v in out.items() if k in value}


def _numbers(value: JsonValue, field: str) -> list[float | None]:
    """A parsed row's list of numbers (null where a number was not finite); else BadField."""
    if not isinstance(value, list) or len(value) > _MAX_ROW_ITEMS:
        raise limits.BadField(f"{field} is {limits.shown(value)}, not a list of numbers")
    return [limits.optional(limits.float_field, v, f"{field}[{i}]") for i, v in enumerate(value)]


_PARSED_FIELDS = field_names(ParsedRow) | {"v"}
_SAMPLE_STATUSES = frozenset(s.value for s in SampleStatus)
