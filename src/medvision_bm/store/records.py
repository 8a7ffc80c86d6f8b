"""The records of a store's files: one frozen class per file shape, each with its version, ``to_json`` and
``from_json``. Nothing else builds one of these files as a dict or reads it field by field.

JSON lines (``AnswerRecord``, ``DocRow``, ``ParsedRow``) carry their version as ``"v"`` from version 2 on: a line
without one is version 1, which every line written so far is. So the lines of older stores read as they are, and a
line written now is byte for byte what the code before these records wrote (docs.jsonl rows are merged by their
bytes, answer lines are known by their hash). JSON files (``ResultsRecord``, ``SignatureRecord``, ``JudgeFile``)
carry theirs in ``schema``, as they always have. A record of a newer version than this code knows is refused with
a one-line error naming the file (``NewerRecord``, a user error that no reader skips as a damaged line), never half
read or overwritten. ``from_json`` keeps the fields it does not know (``extra``), so a file read and
written again loses nothing.
"""

from __future__ import annotations

import mmap
import os
import time
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import orjson

from medvision_bm import limits
from medvision_bm.data.docs import Doc, RunDoc, RunProtocol, rundoc_from_store_row
from medvision_bm.errors import UserError
from medvision_bm.io import dumps, read_json, write_json_atomic
from medvision_bm.models.base import GenResult
from medvision_bm.tasks.families import per_metric
from medvision_bm.tasks.scoring import SampleScore
from medvision_bm.tasks.upstream_parse import SampleStatus

NO_EXTRA: Mapping[str, Any] = MappingProxyType({})


class RecordError(ValueError):
    """A line or file that is not the record it should be (the message says why)."""


class NewerRecord(UserError):
    """A record written by a newer version of the suite than this one: refused, never half read or overwritten (a
    user error, not a damaged file: no reader skips it as a bad line)."""


def _newer(what: str, version: Any, known: Any) -> NewerRecord:
    return NewerRecord(f"{what} of version {version}; this version of medvision-bm reads up to {known}: update "
                       "medvision-bm to read it")


def _at(path: Path, exc: NewerRecord) -> NewerRecord:
    return NewerRecord(f"{path}: {exc}")


class _JsonFile:
    """Reading and writing of a record kept as one JSON file: ``from_json`` and ``to_json`` are the record's own."""

    __slots__ = ()

    @classmethod
    def from_json(cls, obj: Any) -> typing.Self:  # pragma: no cover - every record defines its own
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:  # pragma: no cover - every record defines its own
        raise NotImplementedError

    @classmethod
    def read(cls, path: Path) -> typing.Self:
        """The record in the file at ``path`` (OSError when missing; ValueError, RecordError included, when
        unreadable; ``NewerRecord``, naming the file, when a newer version wrote it). A non-finite number in it (NaN,
        Infinity: never written by this suite, whose files hold none) reads as null, the one rule for numbers
        (``io.finite_or_none``), so a file read can always be written again."""
        return _read_file(cls, path)

    def write(self, path: Path) -> None:
        write_json_atomic(path, self.to_json())


_R = typing.TypeVar("_R", bound=_JsonFile)


def _read_file(cls: type[_R], path: Path) -> _R:
    try:
        return cls.from_json(limits.finite_only(read_json(path)))
    except NewerRecord as exc:
        raise _at(path, exc) from None


#: A signature is 16 hex digits; a longer text is no signature of this suite's.
_MAX_SIGNATURE_CHARS = 256


def _signed_to_json(key: str, signature: str, inputs: Mapping[str, Any], schema: int,
                    imported: Mapping[str, Any] | None, extra: Mapping[str, Any]) -> dict[str, Any]:
    """A signature file's JSON: the signature under ``key``, its inputs, schema, ``import`` block and the rest."""
    out: dict[str, Any] = {key: signature, "inputs": inputs, "schema": schema}
    if imported is not None:
        out["import"] = imported
    out.update(extra)
    return out


def _signed_from_json(obj: Any, what: str, key: str, version: int, required: bool
                      ) -> tuple[str, dict[str, Any], Any, Any, Mapping[str, Any]]:
    """(signature, inputs, schema, import block, other fields) of a signature file's JSON, the version checked (a
    file without ``schema`` is version 1; ``required``: a file without ``key`` is refused)."""
    if not isinstance(obj, dict):
        raise RecordError(f"{what} is not a JSON object")
    if required and key not in obj:
        raise RecordError(f"{what} has no {key}")
    schema = obj.get("schema", 1)
    if isinstance(schema, int) and schema > version:
        raise _newer(what, schema, version)
    signature = obj.get(key, "")
    if type(signature) is not str or len(signature) > _MAX_SIGNATURE_CHARS:
        raise RecordError(f"{what} has {key} {limits.shown(signature)}, not a signature")
    inputs = obj.get("inputs")
    return (signature, inputs if isinstance(inputs, dict) else {}, schema, obj.get("import"),
            _extra(obj, frozenset({key, "inputs", "schema", "import"})))


#: The token counts an answer line's ``usage`` may hold.
USAGE_FIELDS = ("input_tokens", "output_tokens", "reasoning_tokens")


_MAX_TOKENS, _MAX_ATTEMPTS, _MAX_LATENCY_S = limits.MAX_TOKENS, limits.MAX_ATTEMPTS, limits.MAX_LATENCY_S


def answer_problem(obj: dict[str, Any], ok: bool) -> str | None:
    """Why a decoded answer line (``ok``: of a successful request) is no answer record, field by field (its text,
    usage, latency, attempts and stamps typed and bounded: ``limits``), or None when it is one. The same check for
    the store's index and for the record, so a line counted as answered always reads back and scores. (Written out
    for speed: the index checks each of a million lines.)"""
    get = obj.get
    if ok and type(get("text")) is not str:
        return f"an ok answer line whose text is {limits.shown(get('text'))}"
    usage = get("usage")
    if usage is not None:
        if type(usage) is not dict:
            return f"an answer line whose usage is {limits.shown(usage)}"
        for name in USAGE_FIELDS:
            v = usage.get(name)
            if v is not None and not (type(v) is int and 0 <= v <= _MAX_TOKENS):
                return f"an answer line whose usage.{name} is {limits.shown(v)}, not 0..{_MAX_TOKENS}"
    v = get("latency_s")
    if v is not None and not (type(v) in (float, int) and 0 <= v <= _MAX_LATENCY_S):  # NaN fails the comparison
        return f"an answer line whose latency_s is {limits.shown(v)}, not 0..{_MAX_LATENCY_S:g} seconds"
    v = get("attempts")
    if v is not None and not (type(v) is int and 0 <= v <= _MAX_ATTEMPTS):
        return f"an answer line whose attempts is {limits.shown(v)}, not 0..{_MAX_ATTEMPTS}"
    v = get("truncated_chars")
    if v is not None and not (type(v) is int and v >= 0):
        return f"an answer line whose truncated_chars is {limits.shown(v)}"
    v = get("index")
    if v is not None and type(v) is not int:
        return f"an answer line whose index is {limits.shown(v)}"
    v = get("time")
    if v is not None and type(v) not in (float, int):
        return f"an answer line whose time is {limits.shown(v)}"
    return None


class AnswerStatus(StrEnum):
    """How a request ended: an answer (``ok``) or a failure that is retried unless the run keeps it."""

    OK = "ok"
    FAILED = "failed"


class _Versioned(typing.Protocol):
    """A record class whose lines carry a version (``v``) up to its own."""

    VERSION: ClassVar[int]


def _line_version(cls: type[_Versioned], obj: dict[str, Any]) -> None:
    v = obj.get("v", 1)
    if type(v) is not int:
        raise RecordError(f"a {cls.__name__} line with version {v!r}")
    if v > cls.VERSION:
        raise _newer(f"a {cls.__name__} line", v, cls.VERSION)


def _extra(obj: Mapping[str, Any], known: frozenset[str]) -> Mapping[str, Any]:
    unknown = {k: v for k, v in obj.items() if k not in known}
    return unknown or NO_EXTRA


def _names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls) if f.name != "extra")


# ------------------------------------------------------------------------------------------- samples/*.jsonl


@dataclass(frozen=True, slots=True)
class AnswerRecord:
    """One line of ``samples/<writer>.jsonl``: a finished request of one sample (its answer or its failure).

    ``engine`` (the local engine's settings), ``truncated_chars`` (an over-long answer was cut) and ``source`` (where
    an imported answer came from) are written only when set."""

    VERSION: ClassVar[int] = 1
    _OPTIONAL: ClassVar[tuple[str, ...]] = ("engine", "truncated_chars", "source")

    key: str
    answer_signature: str
    status: AnswerStatus
    index: int | None = None
    doc_sha: str | None = None
    text: str | None = None
    error: dict[str, Any] | None = None
    finish_reason: str | None = None
    usage: Mapping[str, Any] = field(default_factory=lambda: NO_EXTRA)
    latency_s: float | None = None
    attempts: int | None = None
    time: float | None = None
    engine: Mapping[str, Any] | None = None
    truncated_chars: int = 0
    source: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: NO_EXTRA)

    @property
    def ok(self) -> bool:
        return self.status == AnswerStatus.OK

    @classmethod
    def of_result(cls, result: GenResult, *, index: int, doc_sha: str, answer_signature: str,
                  engine: Mapping[str, Any] | None = None) -> AnswerRecord:
        """The record of a backend's result, stamped now."""
        usage = {k: limits.count_or_none(v, limits.MAX_TOKENS) for k, v in result.usage.to_json().items()}
        return cls(key=result.key, answer_signature=answer_signature,
                   status=AnswerStatus.OK if result.ok else AnswerStatus.FAILED, index=index, doc_sha=doc_sha,
                   text=result.text if result.ok else None,
                   error=result.error.to_json() if result.error else None, finish_reason=result.finish_reason,
                   usage=usage, latency_s=limits.seconds_within(float(result.latency_s)),
                   attempts=limits.count_or_none(result.attempts, limits.MAX_ATTEMPTS),
                   time=time.time(), engine=engine, truncated_chars=int(getattr(result, "truncated_chars", 0) or 0))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key": self.key, "index": self.index, "doc_sha": self.doc_sha, "status": self.status, "text": self.text,
            "error": self.error, "finish_reason": self.finish_reason, "usage": dict(self.usage),
            "latency_s": self.latency_s, "attempts": self.attempts, "answer_signature": self.answer_signature,
            "time": self.time}
        if self.engine is not None:
            out["engine"] = dict(self.engine)
        if self.truncated_chars:
            out["truncated_chars"] = self.truncated_chars
        if self.source is not None:
            out["source"] = dict(self.source)
        if self.extra:
            out.update(self.extra)
        return out

    def line(self) -> bytes:
        """The stored line (without its newline): canonical JSON, so the same record is always the same bytes."""
        return dumps(self.to_json()).encode("utf-8")

    @classmethod
    def from_json(cls, obj: Any) -> AnswerRecord:
        if not isinstance(obj, dict):
            raise RecordError("an answer line is not a JSON object")
        key, sig = obj.get("key"), obj.get("answer_signature")
        if not isinstance(key, str) or not isinstance(sig, str):
            raise RecordError("an answer line without its key or answer signature")
        _line_version(cls, obj)
        ok = obj.get("status") == AnswerStatus.OK
        why = answer_problem(obj, ok)
        if why is not None:
            raise RecordError(why)
        usage = obj.get("usage")
        return cls(key=key, answer_signature=sig, status=AnswerStatus.OK if ok else AnswerStatus.FAILED,
                   index=obj.get("index"), doc_sha=obj.get("doc_sha"), text=obj.get("text"), error=obj.get("error"),
                   finish_reason=obj.get("finish_reason"), usage=usage if isinstance(usage, dict) else NO_EXTRA,
                   latency_s=obj.get("latency_s"), attempts=obj.get("attempts"), time=obj.get("time"),
                   engine=obj.get("engine"), truncated_chars=obj.get("truncated_chars") or 0,
                   source=obj.get("source"), extra=_extra(obj, _ANSWER_FIELDS))

    @classmethod
    def from_line(cls, line: bytes) -> AnswerRecord:
        try:
            return cls.from_json(orjson.loads(line))
        except orjson.JSONDecodeError:
            raise RecordError("an answer line is not JSON") from None


_ANSWER_FIELDS = _names(AnswerRecord) | {"v"}


def answer_identity(obj: Any) -> tuple[str, str, bool, Any] | None:
    """(key, answer signature, ok, doc hash) of a decoded answer line, without building its record: what a store's
    index reads of each of a million lines. None for a line that is not an answer (the record would refuse it: its
    fields are checked by ``answer_problem``, as the record's are); ``NewerRecord`` for an answer line of a newer
    version."""
    if type(obj) is not dict:
        return None
    key, sig = obj.get("key"), obj.get("answer_signature")
    if type(key) is not str or type(sig) is not str:
        return None
    v = obj.get("v", 1)
    if v != 1:
        if type(v) is int and v > AnswerRecord.VERSION:
            raise _newer("an answer line", v, AnswerRecord.VERSION)
        return None
    ok = obj.get("status") == "ok"
    if answer_problem(obj, ok) is not None:
        return None
    return key, sig, ok, obj.get("doc_sha")


# ------------------------------------------------------------------------------------------------ docs.jsonl


@dataclass(frozen=True, slots=True)
class DocRow:
    """One line of ``docs.jsonl``: a sample as it was asked (the data layer's doc, the view, protocol, variant) and
    its doc hash. Rows of stores written before the upstream data layer keep their doc as it was (``legacy``)."""

    VERSION: ClassVar[int] = 1

    key: str
    index: int
    doc_sha: str | None
    doc: Mapping[str, Any]
    view: Mapping[str, Any]
    protocol: str | None = RunProtocol.CURRENT
    variant: str | None = ""
    extra: Mapping[str, Any] = field(default_factory=lambda: NO_EXTRA)

    @classmethod
    def of(cls, rd: RunDoc, doc_sha: str) -> DocRow:
        return cls(rd.doc.key, rd.doc.index, doc_sha, rd.doc.to_json(), rd.view.to_json(), str(rd.protocol),
                   rd.variant)  # (the protocol as the text a line holds, not its enum)

    @property
    def legacy(self) -> bool:
        """Written before the upstream data layer (its doc has an ``annotation``)."""
        return "annotation" in self.doc

    def rundoc(self) -> RunDoc:
        """The sample as a RunDoc (a legacy row converted; raises KeyError, TypeError or ValueError on a row this
        version cannot read)."""
        return rundoc_from_store_row(self.to_json())

    def to_json(self) -> dict[str, Any]:
        out = {"key": self.key, "index": self.index, "doc_sha": self.doc_sha, "doc": self.doc, "view": self.view,
               "protocol": self.protocol, "variant": self.variant}
        if self.extra:
            out.update(self.extra)
        return out

    def line(self) -> bytes:
        """The stored line (without its newline): canonical JSON, the bytes docs.jsonl's merge compares."""
        return dumps(self.to_json()).encode("utf-8")

    @classmethod
    def from_json(cls, obj: Any) -> DocRow:
        if not isinstance(obj, dict) or not isinstance(obj.get("key"), str) or not isinstance(obj.get("doc"), dict):
            raise RecordError("a docs.jsonl line without its key or doc")
        _line_version(cls, obj)
        view = obj.get("view")
        text, opt = limits.text_field, limits.optional
        try:  # each field through its typed reader: a row of another type is a RecordError naming the field
            return cls(obj["key"], limits.int_field(obj.get("index", 0), "index", -1),
                       opt(text, obj.get("doc_sha"), "doc_sha", _MAX_NAME), obj["doc"],
                       view if isinstance(view, dict) else {}, opt(text, obj.get("protocol"), "protocol", _MAX_NAME),
                       opt(text, obj.get("variant"), "variant", _MAX_NAME), _extra(obj, _DOC_ROW_FIELDS))
        except limits.BadField as exc:
            raise RecordError(f"a docs.jsonl line whose {exc}") from None

    @property
    def order(self) -> tuple[int, str]:
        """Its place in docs.jsonl (and in a selection): by index, then key."""
        return self.index, self.key


_DOC_ROW_FIELDS = _names(DocRow) | {"v"}


# ---------------------------------------------------------------------------------------------- parsed.jsonl


def group_fields(doc: Doc) -> dict[str, Any]:
    """What upstream's aggregation groups a sample by (label name, modality, plane; A/D metric)."""
    out: dict[str, Any] = {"dataset": doc.dataset_name, "label": doc.label, "label_name": doc.meta.get("label_name"),
                           "modality": doc.modality, "slice_dim": doc.slice_dim}
    if per_metric(doc.family):
        bp = doc.biometric_profile or {}
        out.update(metric_type=bp.get("metric_type"), metric_key=bp.get("metric_key"))
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
    label: Any = None
    label_name: str | None = None
    modality: str | None = None
    slice_dim: int | None = None
    metric_type: str | None = None
    metric_key: str | None = None
    judge: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: NO_EXTRA)

    @classmethod
    def of_score(cls, doc: Doc, sc: SampleScore, rules: str, *, parser: str | None = None,
                 judge: Mapping[str, Any] | None = None) -> ParsedRow:
        """The row of one scored sample (``parser`` overrides the score's: a judged parse names the judge's)."""
        d = sc.to_json()
        g = group_fields(doc)
        return cls(index=doc.index, family=doc.family, task=doc.task, rules=rules, key=d["key"],
                   status=sc.status, success=d["success"], values=d["values"], target=d["target"],
                   metrics=d["metrics"], parser=parser or d["parser"], reason=d["reason"],
                   near_zero_gt=d["near_zero_gt"], metric_path=d["metric_path"], dataset=g["dataset"],
                   label=g["label"], label_name=g["label_name"], modality=g["modality"], slice_dim=g["slice_dim"],
                   metric_type=g.get("metric_type"), metric_key=g.get("metric_key"), judge=judge)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index, "family": self.family, "task": self.task, "rules": self.rules,
            "dataset": self.dataset, "label": self.label, "label_name": self.label_name, "modality": self.modality,
            "slice_dim": self.slice_dim, "key": self.key, "status": self.status, "success": self.success,
            "values": self.values, "target": self.target, "metrics": self.metrics, "parser": self.parser,
            "reason": self.reason, "near_zero_gt": self.near_zero_gt, "metric_path": self.metric_path}
        if per_metric(self.family):
            out["metric_type"], out["metric_key"] = self.metric_type, self.metric_key
        if self.judge is not None:
            out["judge"] = self.judge
        if self.extra:
            out.update(self.extra)
        return out

    def line(self) -> bytes:
        """The stored line with its newline (orjson: a million rows are written per full parse)."""
        return orjson.dumps(self.to_json(), option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)

    @classmethod
    def from_json(cls, obj: Any) -> ParsedRow:
        """A decoded parsed.jsonl line, every field read through its typed reader (``limits``): a field of another
        type or out of bounds is a RecordError naming it (the line is skipped and counted as bad, never scored)."""
        if not isinstance(obj, dict) or not isinstance(obj.get("key"), str):
            raise RecordError("a parsed.jsonl line without its key")
        _line_version(cls, obj)
        raw_status = obj.get("status")
        if not isinstance(raw_status, str) or raw_status not in _SAMPLE_STATUSES:
            raise RecordError(f"a parsed.jsonl line with status {limits.shown(raw_status)}")
        try:
            return cls._typed(obj, SampleStatus(raw_status))
        except limits.BadField as exc:
            raise RecordError(f"a parsed.jsonl line whose {exc}") from None

    @classmethod
    def _typed(cls, obj: dict[str, Any], status: SampleStatus) -> ParsedRow:
        text, opt = limits.text_field, limits.optional
        metrics = obj.get("metrics")
        if metrics is None:
            metrics = {}
        if not isinstance(metrics, dict) or len(metrics) > _MAX_ROW_ITEMS:
            raise limits.BadField(f"metrics is {limits.shown(metrics)}, not an object of numbers")
        judge = opt(_judge_block, obj.get("judge"))
        return cls(index=limits.int_field(obj.get("index", 0), "index", -1), family=text(obj.get("family", ""), "family", 16),
                   task=text(obj.get("task", ""), "task", _MAX_NAME), rules=text(obj.get("rules", ""), "rules", _MAX_NAME),
                   key=obj["key"], status=status, success=limits.bool_field(obj.get("success", False), "success"),
                   values=opt(_numbers, obj.get("values"), "values"), target=_numbers(obj.get("target", []), "target"),
                   metrics={text(k, "a metric name", _MAX_NAME): opt(limits.float_field, v, f"metrics.{k}")
                            for k, v in metrics.items()},
                   parser=text(obj.get("parser", ""), "parser", _MAX_NAME),
                   reason=text(obj.get("reason") or "", "reason", limits.MAX_ANSWER_CHARS),
                   near_zero_gt=limits.bool_field(obj.get("near_zero_gt", False), "near_zero_gt"),
                   metric_path=opt(text, obj.get("metric_path"), "metric_path", _MAX_NAME),
                   dataset=opt(text, obj.get("dataset"), "dataset", _MAX_NAME),
                   label=opt(limits.int_field, obj.get("label"), "label", -(2**31), 2**31),
                   label_name=opt(text, obj.get("label_name"), "label_name", _MAX_NAME),
                   modality=opt(text, obj.get("modality"), "modality", _MAX_NAME),
                   slice_dim=opt(limits.int_field, obj.get("slice_dim"), "slice_dim", 0, 2),
                   metric_type=opt(text, obj.get("metric_type"), "metric_type", _MAX_NAME),
                   metric_key=opt(text, obj.get("metric_key"), "metric_key", _MAX_NAME), judge=judge,
                   extra=_extra(obj, _PARSED_FIELDS))


#: The longest name a parsed row holds (a task, dataset, label name, parser, metric key) and the most items in one of
#: its lists or objects (a box has 4 numbers, a family at most 5 metrics).
_MAX_NAME, _MAX_ROW_ITEMS = 1000, 64


def _judge_block(value: Any) -> dict[str, Any]:
    """A judged row's ``judge`` object (``score.judged.judged_row``), its known fields typed; else BadField."""
    if not isinstance(value, dict):
        raise limits.BadField(f"judge is {limits.shown(value)}, not an object")
    text, opt, out = limits.text_field, limits.optional, dict(value)
    for name in ("mode", "reason", "tier", "strict_pred", "judge_pred"):
        out[name] = opt(text, value.get(name), f"judge.{name}", limits.MAX_ANSWER_CHARS)
    out["strict_values"] = opt(_numbers, value.get("strict_values"), "judge.strict_values")
    nums = value.get("judge_numbers")
    if nums is not None and (not isinstance(nums, list) or len(nums) > _MAX_ROW_ITEMS):
        raise limits.BadField(f"judge.judge_numbers is {limits.shown(nums)}, not a list of numbers as written")
    out["judge_numbers"] = None if nums is None else [text(n, "judge.judge_numbers", _MAX_NAME) for n in nums]
    out["response_chars"] = opt(limits.int_field, value.get("response_chars"), "judge.response_chars")
    return {k: v for k, v in out.items() if k in value}


def _numbers(value: Any, field: str) -> list[float | None]:
    """A parsed row's list of numbers (null where a number was not finite); else BadField."""
    if not isinstance(value, list) or len(value) > _MAX_ROW_ITEMS:
        raise limits.BadField(f"{field} is {limits.shown(value)}, not a list of numbers")
    return [limits.optional(limits.float_field, v, f"{field}[{i}]") for i, v in enumerate(value)]


_PARSED_FIELDS = _names(ParsedRow) | {"v"}
_SAMPLE_STATUSES = frozenset(s.value for s in SampleStatus)


def refuse_newer_line(cls: type[_Versioned], obj: Any, path: Path) -> None:
    """Raise ``NewerRecord`` naming ``path`` when ``obj`` (a decoded line of that file) is a ``cls`` line of a newer
    version; any other line passes (a damaged one is each reader's to skip)."""
    if type(obj) is dict:
        try:
            _line_version(cls, obj)
        except RecordError:
            pass
        except NewerRecord as exc:
            raise _at(path, exc) from None


def refuse_newer_lines(path: Path, cls: type[_Versioned]) -> None:
    """Raise ``NewerRecord`` naming ``path`` when any line of that JSON-lines file is a ``cls`` line of a newer
    version, before a writer rewrites it. Only the lines that hold a ``"v"`` key are decoded (a line without one is
    version 1): a file of a million lines is searched, not parsed. A missing or empty file passes."""
    if not path.is_file():  # missing, or not a regular file (a FIFO is never opened)
        return
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if not size:
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            at = mm.find(b'"v"')
            while at >= 0:
                start = mm.rfind(b"\n", 0, at) + 1
                end = mm.find(b"\n", at)
                end = size if end < 0 else end
                try:
                    obj = orjson.loads(mm[start:end])
                except orjson.JSONDecodeError:
                    obj = None
                refuse_newer_line(cls, obj, path)
                at = mm.find(b'"v"', end)


def iter_lines(path: Path, record: Callable[[Any], Any], on_bad: Callable[[], None] | None = None) -> Iterator[Any]:
    """The records of a JSON-lines file in file order (``record``: a ``from_json``); a line that is not JSON or not
    such a record is skipped and counted through ``on_bad``."""
    for _, rec in iter_lines_with(path, record, on_bad):
        yield rec


def iter_lines_with(path: Path, record: Callable[[Any], Any],
                    on_bad: Callable[[], None] | None = None) -> Iterator[tuple[bytes, Any]]:
    """``iter_lines`` with each record's line (stripped), as the file holds it."""
    with open(path, "rb") as fh:
        for raw in fh:
            line = raw.strip()
            if not line:
                continue
            try:
                rec = record(orjson.loads(line))
            except (orjson.JSONDecodeError, RecordError):
                if on_bad is not None:
                    on_bad()
                continue
            except NewerRecord as exc:
                raise _at(path, exc) from None
            yield line, rec


# ---------------------------------------------------------------------------------------------- JSON files


def _schema_version(schema: Any, prefix: str) -> int | None:
    """N of a ``prefix/N`` schema (None for another schema or none)."""
    if isinstance(schema, str) and schema.startswith(prefix + "/"):
        tail = schema[len(prefix) + 1:]
        return int(tail) if tail.isdigit() else None
    return None


RESULTS_SCHEMA = "medvision-results/1"
JUDGED_SCHEMA = "medvision-judged/1"


@dataclass(frozen=True, slots=True)
class ResultsRecord(_JsonFile):
    """``results.json``: a task's metrics and counts, and what they were made from. Written by the runner after a
    task, by `medvision-bm parse`, by the importer, and (``schema`` ``medvision-judged/1``, with ``judge_signature``
    and ``judge``) for a judged parse. Fields that are None are not written, except those the file read held as
    null (``nulls``): a file read and written again keeps its shape."""

    VERSION: ClassVar[int] = 1

    schema: str = RESULTS_SCHEMA
    model_name: str | None = None
    record: str | None = None
    task: str | None = None
    family: str | None = None
    task_version: str | None = None
    protocol: str | None = None
    parser_version: str | None = None
    metric_rules: str | None = None
    metric_path: str | None = None
    scoring_version: int | None = None
    perceived_size_rule: str | None = None
    planner_version: str | None = None
    plan_version: str | None = None
    sample_filtering: bool | None = None
    task_meta_source: str | None = None
    complete: bool | None = None
    answer_signature: str | None = None
    run_signature: str | None = None
    signature_inputs: Mapping[str, Any] | None = None
    selection: Mapping[str, Any] | None = None
    counts: Mapping[str, Any] | None = None
    metrics: Mapping[str, Any] | None = None
    usage: Mapping[str, Any] | None = None
    error: str | None = None
    versions: Mapping[str, Any] | None = None
    environment: Any = None
    git_commit: str | None = None
    argv: Any = None
    data_dir: str | None = None  # the absolute data folder the run read (its docs, images, lists)
    cwd: str | None = None  # the working directory of the run (a relative path in ``argv`` is relative to it)
    system_prompt: str | None = None
    timing: Mapping[str, Any] | None = None
    cost_usd: float | None = None
    scoring_digest: Mapping[str, Any] | None = None
    written_by: str | None = None
    metrics_at_run: Mapping[str, Any] | None = None
    parser_version_at_run: str | None = None
    legacy_store: bool | None = None
    legacy_note: str | None = None
    parsed_at: float | None = None
    imported_from: Mapping[str, Any] | None = None
    judge_signature: str | None = None
    judge: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: NO_EXTRA)
    nulls: frozenset[str] = frozenset()

    def to_json(self) -> dict[str, Any]:
        out = {f: getattr(self, f) for f in _RESULTS_FIELDS
               if getattr(self, f) is not None or f in self.nulls}
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, obj: Any) -> ResultsRecord:
        if not isinstance(obj, dict):
            raise RecordError("results.json is not a JSON object")
        for prefix, known in (("medvision-results", 1), ("medvision-judged", 1)):
            v = _schema_version(obj.get("schema"), prefix)
            if v is not None and v > known:
                raise _newer("results.json", obj["schema"], f"{prefix}/{known}")
        kw = {f: obj[f] for f in _RESULTS_FIELDS if f in obj}
        for name, value in kw.items():
            kinds = _RESULTS_TYPES.get(name)
            if value is not None and kinds is not None and (type(value) not in kinds):
                raise RecordError(f"results.json field {name} is {limits.shown(value)}, not {kinds[0].__name__}")
        kw.setdefault("schema", obj.get("schema"))
        return cls(**kw, extra=_extra(obj, frozenset(_RESULTS_FIELDS)),
                   nulls=frozenset(f for f in _RESULTS_FIELDS if f in obj and obj[f] is None))

    @classmethod
    def read(cls, path: Path) -> ResultsRecord | None:  # type: ignore[override]
        """The results file at ``path``; None when it is missing, unreadable or not a results file (``NewerRecord``
        when a newer version wrote it)."""
        try:
            return _read_file(cls, path)
        except (OSError, ValueError):  # RecordError is a ValueError
            return None


_RESULTS_FIELDS = tuple(f.name for f in fields(ResultsRecord) if f.name not in ("extra", "nulls"))
#: The JSON types each typed field of results.json may hold (by its annotation; ``Any`` fields are not checked): a
#: file whose field has another type is no results file of this suite's.
_JSON_KINDS: dict[str, tuple[type, ...]] = {"str": (str,), "bool": (bool,), "int": (int,), "float": (float, int),
                                            "Mapping[str, Any]": (dict,)}
_RESULTS_TYPES = {f.name: _JSON_KINDS[str(f.type).removesuffix(" | None")] for f in fields(ResultsRecord)
                  if str(f.type).removesuffix(" | None") in _JSON_KINDS}

#: ``schema`` of signature.json.
STORE_SCHEMA = 1


@dataclass(frozen=True, slots=True)
class SignatureRecord(_JsonFile):
    """``signature.json``: the answer signature that names the store and its inputs (never secrets); an imported
    store also says where its answers came from (``imported``, the file's ``import`` block)."""

    VERSION: ClassVar[int] = STORE_SCHEMA

    answer_signature: str
    inputs: Mapping[str, Any]
    schema: int = STORE_SCHEMA
    imported: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: NO_EXTRA)

    def to_json(self) -> dict[str, Any]:
        return _signed_to_json("answer_signature", self.answer_signature, self.inputs, self.schema, self.imported,
                               self.extra)

    @classmethod
    def from_json(cls, obj: Any) -> SignatureRecord:
        return cls(*_signed_from_json(obj, "signature.json", "answer_signature", cls.VERSION, required=True))


@dataclass(frozen=True, slots=True)
class JudgeFile(_JsonFile):
    """``judged/<sig>/judge.json``: the judge signature of a judged parse and its inputs (judge model, weights,
    backend, prompt version and fingerprint, sampling); an imported judged parse also names the files it was read
    from (``imported``, the file's ``import`` block, outside the signature)."""

    VERSION: ClassVar[int] = 1

    judge_signature: str
    inputs: Mapping[str, Any]
    schema: int = 1
    imported: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: NO_EXTRA)

    def to_json(self) -> dict[str, Any]:
        return _signed_to_json("judge_signature", self.judge_signature, self.inputs, self.schema, self.imported,
                               self.extra)

    @classmethod
    def from_json(cls, obj: Any) -> JudgeFile:
        return cls(*_signed_from_json(obj, "judge.json", "judge_signature", cls.VERSION, required=False))
