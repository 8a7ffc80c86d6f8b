"""``results.json`` (``ResultsRecord``): a task's metrics and counts and what they were made from, as the runner,
`parse`, the importer and a judged parse write it, with its typed blocks (``Counts``, ``Usage``, ``Selection``).

A block reads any JSON object and writes it back as it was: a key it knows whose value has its type is a field,
any other key (or a known key holding another type, or null) is kept as it stands in ``extra``."""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar

from medvision_bm import limits
from medvision_bm.jsontypes import JsonObject, JsonValue
from medvision_bm.store.record_base import (
    NO_EXTRA,
    JsonFile,
    RecordError,
    newer,
    read_file,
    schema_version,
)

RESULTS_SCHEMA = "medvision-results/1"
JUDGED_SCHEMA = "medvision-judged/1"


def _fits(value: JsonValue, kind: str) -> bool:
    """Whether a JSON value has a block field's type (``kind``: the field's annotation, without ``| None``)."""
    if kind == "int":
        return type(value) is int
    if kind == "float":
        return type(value) in (float, int)
    if kind == "tuple[int, ...]":
        return type(value) is list and all(type(v) is int for v in value)
    if kind == "Mapping[str, int]":
        return type(value) is dict and all(type(v) is int for v in value.values())
    raise AssertionError(f"no JSON type for a block field of {kind}")  # pragma: no cover - a new field's type


class _Block:
    """A typed block of results.json: its fields from a JSON object, and back (see the module's docstring)."""

    __slots__ = ()

    extra: Mapping[str, JsonValue]

    @classmethod
    def from_json(cls, obj: Mapping[str, JsonValue]) -> typing.Self:
        kinds = _kinds(cls)
        kw: dict[str, object] = {}
        extra: dict[str, JsonValue] = {}
        for name, value in obj.items():
            kind = kinds.get(name)
            if kind is not None and _fits(value, kind):
                kw[name] = tuple(value) if isinstance(value, list) else value
            else:
                extra[name] = value
        kw["extra"] = extra or NO_EXTRA
        return cls(**kw)

    def to_json(self) -> JsonObject:
        out: JsonObject = {}
        for name in _kinds(type(self)):
            value = getattr(self, name)
            if value is not None:
                out[name] = list(value) if isinstance(value, tuple) else dict(value) if isinstance(value, Mapping) \
                    else value
        out.update(self.extra)
        return out


def _kinds(cls: type) -> dict[str, str]:
    """A block's fields by name, each with its annotation (without ``| None``)."""
    kinds = _BLOCK_KINDS.get(cls)
    if kinds is None:
        kinds = _BLOCK_KINDS[cls] = {f.name: str(f.type).removesuffix(" | None") for f in fields(cls)
                                     if f.name != "extra"}
    return kinds


_BLOCK_KINDS: dict[type, dict[str, str]] = {}


@dataclass(frozen=True, slots=True)
class Counts(_Block):
    """results.json ``counts``: how many samples the task has in each state and how many store lines were skipped
    (a run's and a parse's: ``of_run``, ``of_parse``), or what a judge decided (a judged parse's: ``of_judge``)."""

    selected: int | None = None
    answered: int | None = None
    request_failed: int | None = None
    pending: int | None = None
    asked_this_run: int | None = None
    scored_this_run: int | None = None
    store_bad_lines: int | None = None
    store_foreign_lines: int | None = None
    store_duplicates: int | None = None
    judged: int | None = None
    judge_invalid: int | None = None
    not_judged: int | None = None
    recovered: int | None = None
    bad_lines: int | None = None
    modes: Mapping[str, int] | None = None
    strict_mismatch: int | None = None
    superseded: int | None = None
    duplicates: int | None = None
    extra: Mapping[str, JsonValue] = field(default_factory=lambda: NO_EXTRA)

    @classmethod
    def of_run(cls, *, selected: int, answered: int, request_failed: int, pending: int, asked: int, scored: int,
               bad_lines: int, foreign_lines: int, duplicates: int) -> Counts:
        """A run's counts: the selection's states, what this run asked and scored, the store's skipped lines."""
        return cls(selected=selected, answered=answered, request_failed=request_failed, pending=pending,
                   asked_this_run=asked, scored_this_run=scored, store_bad_lines=bad_lines,
                   store_foreign_lines=foreign_lines, store_duplicates=duplicates)

    @classmethod
    def of_parse(cls, old: Counts | None, *, selected: int, answered: int, request_failed: int, pending: int,
                 bad_lines: int | None, foreign_lines: int | None, duplicates: int | None) -> Counts:
        """A parse's counts: the selection's states and the skipped lines now, over what the last run or parse
        recorded (a run's ``asked_this_run`` and ``scored_this_run`` stay; a count not taken is written as null)."""
        base = old if old is not None else cls()
        counted = {"selected": selected, "answered": answered, "request_failed": request_failed,
                   "pending": pending, "store_bad_lines": bad_lines, "store_foreign_lines": foreign_lines,
                   "store_duplicates": duplicates}
        extra = {k: v for k, v in base.extra.items() if k not in counted}
        extra.update((k, None) for k, v in counted.items() if v is None)  # written as null, as it always was
        return replace(base, selected=selected, answered=answered, request_failed=request_failed, pending=pending,
                       store_bad_lines=bad_lines, store_foreign_lines=foreign_lines, store_duplicates=duplicates,
                       extra=extra or NO_EXTRA)

    @classmethod
    def of_judge(cls, counts: Mapping[str, JsonValue]) -> Counts:
        """A judged parse's counts (selected, answered, judged, judge_invalid, not_judged, recovered, bad_lines,
        modes, and an import's strict_mismatch, superseded and duplicates), as the judge or the importer made them."""
        return cls.from_json(counts)


@dataclass(frozen=True, slots=True)
class Usage(_Block):
    """results.json ``usage``: a task's token, latency and attempt totals over its selected samples' answers."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    latency_s: float | None = None
    attempts: int | None = None
    length_cut: int | None = None
    extra: Mapping[str, JsonValue] = field(default_factory=lambda: NO_EXTRA)

    @classmethod
    def of_totals(cls, *, input_tokens: int, output_tokens: int, reasoning_tokens: int, latency_s: float,
                  attempts: int, length_cut: int) -> Usage:
        """A run's totals (``score.follow.Followed.usage``)."""
        return cls(input_tokens=input_tokens, output_tokens=output_tokens, reasoning_tokens=reasoning_tokens,
                   latency_s=latency_s, attempts=attempts, length_cut=length_cut)


@dataclass(frozen=True, slots=True)
class Selection(_Block):
    """results.json ``selection`` (and a run signature's): every sample of the task (``all``: how many it had),
    the first ``limit``, or the doc ``indices`` listed. An empty one (``{}``) is false and, like none, every sample
    of docs.jsonl."""

    all: int | None = None
    limit: int | None = None
    indices: tuple[int, ...] | None = None
    extra: Mapping[str, JsonValue] = field(default_factory=lambda: NO_EXTRA)

    @classmethod
    def chosen(cls, *, sample_indices: Iterable[int] | None, sample_limit: int | None, n_available: int
               ) -> Selection:
        """A run's selection: the indices asked for (sorted, once each), else a limit under the task's size, else
        all of its ``n_available`` samples."""
        if sample_indices is not None:
            return cls(indices=tuple(sorted(set(sample_indices))))
        if sample_limit is not None and sample_limit < n_available:
            return cls(limit=sample_limit)
        return cls(all=n_available)

    def __bool__(self) -> bool:
        return self.all is not None or self.limit is not None or self.indices is not None or bool(self.extra)

    def selected(self) -> Callable[[int], bool]:
        """Whether a doc index belongs to it: the ``indices`` listed, the first ``limit``, else every index."""
        if self.indices is not None:
            return frozenset(self.indices).__contains__
        limit = self.limit
        if limit is not None:
            return lambda index: index < limit
        return lambda index: True

    def expected(self) -> int | None:
        """How many samples it holds (None when unknown)."""
        if self.indices is not None:
            return len(set(self.indices))
        return self.limit if self.limit is not None else self.all



@dataclass(frozen=True, slots=True)
class ResultsRecord(JsonFile):
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
    signature_inputs: Mapping[str, JsonValue] | None = None
    selection: Selection | None = None
    counts: Counts | None = None
    metrics: Mapping[str, JsonValue] | None = None
    usage: Usage | None = None
    error: str | None = None
    versions: Mapping[str, JsonValue] | None = None
    environment: JsonValue = None
    git_commit: str | None = None
    argv: JsonValue = None
    data_dir: str | None = None  # the absolute data folder the run read (its docs, images, lists)
    cwd: str | None = None  # the working directory of the run (a relative path in ``argv`` is relative to it)
    system_prompt: str | None = None
    timing: Mapping[str, JsonValue] | None = None
    cost_usd: float | None = None
    scoring_digest: Mapping[str, JsonValue] | None = None
    written_by: str | None = None
    metrics_at_run: Mapping[str, JsonValue] | None = None
    parser_version_at_run: str | None = None
    legacy_store: bool | None = None
    legacy_note: str | None = None
    parsed_at: float | None = None
    imported_from: Mapping[str, JsonValue] | None = None
    judge_signature: str | None = None
    judge: Mapping[str, JsonValue] | None = None
    extra: Mapping[str, JsonValue] = field(default_factory=lambda: NO_EXTRA)
    nulls: frozenset[str] = frozenset()

    def to_json(self) -> JsonObject:
        out = {f: getattr(self, f) for f in _RESULTS_FIELDS
               if getattr(self, f) is not None or f in self.nulls}
        for name in _BLOCKS:
            block = out.get(name)
            if block is not None:
                out[name] = block.to_json()
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, obj: JsonValue) -> ResultsRecord:
        if not isinstance(obj, dict):
            raise RecordError("results.json is not a JSON object")
        for prefix, known in (("medvision-results", 1), ("medvision-judged", 1)):
            v = schema_version(obj.get("schema"), prefix)
            if v is not None and v > known:
                raise newer("results.json", obj["schema"], f"{prefix}/{known}")
        # Any: the fields go to the constructor by name, each value checked against its field's JSON type here; one
        # pass over the file's keys (a results.json holds a few of the fields)
        kw: dict[str, Any] = {}
        extra: dict[str, JsonValue] = {}
        nulls: list[str] = []
        wrong: list[str] = []
        for name, value in obj.items():
            if name not in _RESULTS_ORDER:
                extra[name] = value
            elif value is None:
                kw[name] = None
                nulls.append(name)
            else:
                kinds = _RESULTS_TYPES.get(name)
                if kinds is not None and type(value) not in kinds:
                    wrong.append(name)
                block = _BLOCKS.get(name)
                # a block's value is an object here (its JSON type was checked above)
                kw[name] = block.from_json(value) if block is not None and isinstance(value, dict) else value
        if wrong:  # the first wrong field in the record's order is named
            name = min(wrong, key=_RESULTS_ORDER.__getitem__)
            kinds = _RESULTS_TYPES[name]
            raise RecordError(f"results.json field {name} is {limits.shown(obj[name])}, not {kinds[0].__name__}")
        kw.setdefault("schema", obj.get("schema"))
        return cls(**kw, extra=extra or NO_EXTRA, nulls=frozenset(nulls))

    @classmethod
    def read(cls, path: str | Path) -> ResultsRecord | None:  # type: ignore[override]
        """The results file at ``path``; None when it is missing, unreadable or not a results file (``NewerRecord``
        when a newer version wrote it)."""
        try:
            return read_file(cls, path)
        except (OSError, ValueError):  # RecordError is a ValueError
            return None


_RESULTS_FIELDS = tuple(f.name for f in fields(ResultsRecord) if f.name not in ("extra", "nulls"))
#: Each field's place among them (the fields a file may hold, and the order a wrong one is named in).
_RESULTS_ORDER = {name: n for n, name in enumerate(_RESULTS_FIELDS)}
#: The JSON types each typed field of results.json may hold (by its annotation; ``JsonValue`` fields are not checked): a
#: file whose field has another type is no results file of this suite's.
_JSON_KINDS: dict[str, tuple[type, ...]] = {"str": (str,), "bool": (bool,), "int": (int,), "float": (float, int),
                                            "Mapping[str, JsonValue]": (dict,), "Selection": (dict,), "Counts": (dict,),
                                            "Usage": (dict,)}
#: The fields of results.json read as typed blocks.
_BLOCKS: dict[str, type[Counts | Usage | Selection]] = {"selection": Selection, "counts": Counts, "usage": Usage}
_RESULTS_TYPES = {f.name: _JSON_KINDS[str(f.type).removesuffix(" | None")] for f in fields(ResultsRecord)
                  if str(f.type).removesuffix(" | None") in _JSON_KINDS}
