"""The answer line of ``samples/<writer>.jsonl`` (``AnswerRecord``) and the checks a store's index makes of each
line without building it (``answer_problem``, ``answer_identity``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar, NamedTuple

import orjson

from medvision_bm import limits
from medvision_bm.io import dumps
from medvision_bm.jsontypes import JsonObject, JsonValue
from medvision_bm.models.base import GenResult
from medvision_bm.store.record_base import NO_EXTRA, RecordError, extra_of, field_names, line_version, newer

#: The token counts an answer line's ``usage`` may hold.
USAGE_FIELDS = ("input_tokens", "output_tokens", "reasoning_tokens")


_MAX_TOKENS, _MAX_ATTEMPTS, _MAX_LATENCY_S = limits.MAX_TOKENS, limits.MAX_ATTEMPTS, limits.MAX_LATENCY_S


def answer_problem(obj: Mapping[str, JsonValue], ok: bool) -> str | None:
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
    if v is not None and not ((type(v) is float or type(v) is int) and 0 <= v <= _MAX_LATENCY_S):  # NaN fails it
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
    error: JsonObject | None = None
    finish_reason: str | None = None
    usage: Mapping[str, JsonValue] = field(default_factory=lambda: NO_EXTRA)
    latency_s: float | None = None
    attempts: int | None = None
    time: float | None = None
    engine: Mapping[str, JsonValue] | None = None
    truncated_chars: int = 0
    source: Mapping[str, JsonValue] | None = None
    extra: Mapping[str, JsonValue] = field(default_factory=lambda: NO_EXTRA)

    @property
    def ok(self) -> bool:
        return self.status == AnswerStatus.OK

    @classmethod
    def of_result(cls, result: GenResult, *, index: int, doc_sha: str, answer_signature: str,
                  engine: Mapping[str, JsonValue] | None = None) -> AnswerRecord:
        """The record of a backend's result, stamped now."""
        usage = {k: limits.count_or_none(v, limits.MAX_TOKENS) for k, v in result.usage.to_json().items()}
        return cls(key=result.key, answer_signature=answer_signature,
                   status=AnswerStatus.OK if result.ok else AnswerStatus.FAILED, index=index, doc_sha=doc_sha,
                   text=result.text if result.ok else None,
                   error=result.error.to_json() if result.error else None, finish_reason=result.finish_reason,
                   usage=usage, latency_s=limits.seconds_within(float(result.latency_s)),
                   attempts=limits.count_or_none(result.attempts, limits.MAX_ATTEMPTS),
                   time=time.time(), engine=engine, truncated_chars=int(getattr(result, "truncated_chars", 0) or 0))

    def to_json(self) -> JsonObject:
        out: JsonObject = {
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
    def from_json(cls, obj: JsonValue) -> AnswerRecord:
        """A decoded answer line, refused (RecordError) where ``answer_problem`` finds one. A field the line holds
        with another type than its own (a text, an object) is kept among the other fields (``extra``): the record
        writes it back as it was."""
        key, sig, ok = _checked(obj)
        assert isinstance(obj, dict)  # _checked refused any other line
        get = obj.get
        # index, latency_s, attempts, time, usage and truncated_chars are of their types: answer_problem checked
        index, usage, latency, attempts, stamp, cut = (get("index"), get("usage"), get("latency_s"),
                                                       get("attempts"), get("time"), get("truncated_chars"))
        sha, text, error, finish, engine, source = (get("doc_sha"), get("text"), get("error"), get("finish_reason"),
                                                     get("engine"), get("source"))
        fields = _ANSWER_FIELDS
        if not (_fits(sha, str) and _fits(text, str) and _fits(error, dict) and _fits(finish, str)
                and _fits(engine, dict) and _fits(source, dict)):  # (rare: a field of another type is kept aside)
            fields = _ANSWER_FIELDS - {name for name, kind in _LOOSE.items() if not _fits(get(name), kind)}
        return cls(key=key, answer_signature=sig, status=AnswerStatus.OK if ok else AnswerStatus.FAILED,
                   index=index if isinstance(index, int) else None,
                   doc_sha=sha if isinstance(sha, str) else None, text=text if isinstance(text, str) else None,
                   error=error if isinstance(error, dict) else None,
                   finish_reason=finish if isinstance(finish, str) else None,
                   usage=usage if isinstance(usage, dict) else NO_EXTRA,
                   latency_s=latency if isinstance(latency, float | int) else None,
                   attempts=attempts if isinstance(attempts, int) else None,
                   time=stamp if isinstance(stamp, float | int) else None,
                   engine=engine if isinstance(engine, dict) else None,
                   truncated_chars=cut if isinstance(cut, int) else 0,
                   source=source if isinstance(source, dict) else None, extra=extra_of(obj, fields))

    @classmethod
    def from_line(cls, line: bytes) -> AnswerRecord:
        try:
            return cls.from_json(orjson.loads(line))
        except orjson.JSONDecodeError:
            raise RecordError("an answer line is not JSON") from None


_ANSWER_FIELDS = field_names(AnswerRecord) | {"v"}


def _checked(obj: JsonValue) -> tuple[str, str, bool]:
    """(key, answer signature, ok) of a decoded answer line that is an ``AnswerRecord`` (RecordError where it is not:
    ``answer_problem``; ``NewerRecord`` for a line of a newer version)."""
    if not isinstance(obj, dict):
        raise RecordError("an answer line is not a JSON object")
    key, sig = obj.get("key"), obj.get("answer_signature")
    if not isinstance(key, str) or not isinstance(sig, str):
        raise RecordError("an answer line without its key or answer signature")
    line_version(AnswerRecord, obj)
    ok = obj.get("status") == AnswerStatus.OK
    why = answer_problem(obj, ok)
    if why is not None:
        raise RecordError(why)
    return key, sig, ok


class AnswerText(NamedTuple):
    """What a reader of an answer's text needs of its line (``answer_text``): the ``AnswerRecord`` fields of that
    name, ``ok`` its status."""

    key: str
    answer_signature: str
    ok: bool
    doc_sha: str | None
    text: str | None
    error: JsonObject | None


def answer_text(obj: JsonValue) -> AnswerText:
    """``AnswerText`` of a decoded answer line, refused as ``AnswerRecord.from_json`` refuses it (the same checks),
    without building the whole record: the report's sample browser reads a few fields of tens of thousands."""
    key, sig, ok = _checked(obj)
    assert isinstance(obj, dict)  # _checked refused any other line
    sha, text, error = obj.get("doc_sha"), obj.get("text"), obj.get("error")
    return AnswerText(key, sig, ok, sha if isinstance(sha, str) else None, text if isinstance(text, str) else None,
                      error if isinstance(error, dict) else None)


def _fits(value: object, kind: type) -> bool:
    """Whether a field the answer record keeps loosely is absent (null) or of its JSON type."""
    return value is None or isinstance(value, kind)
#: The fields answer_problem leaves unchecked, with the JSON type the record holds of each.
_LOOSE: dict[str, type] = {"doc_sha": str, "text": str, "error": dict, "finish_reason": str, "engine": dict,
                           "source": dict}


def answer_identity(obj: JsonValue) -> tuple[str, str, bool, JsonValue] | None:
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
            raise newer("an answer line", v, AnswerRecord.VERSION)
        return None
    ok = obj.get("status") == "ok"
    if answer_problem(obj, ok) is not None:
        return None
    return key, sig, ok, obj.get("doc_sha")
