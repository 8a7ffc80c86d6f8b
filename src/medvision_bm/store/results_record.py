"""``results.json`` (``ResultsRecord``): a task's metrics and counts and what they were made from, as the runner,
`parse`, the importer and a judged parse write it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

from medvision_bm import limits
from medvision_bm.store.record_base import (
    NO_EXTRA,
    JsonFile,
    RecordError,
    extra_of,
    newer,
    read_file,
    schema_version,
)

RESULTS_SCHEMA = "medvision-results/1"
JUDGED_SCHEMA = "medvision-judged/1"


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
            v = schema_version(obj.get("schema"), prefix)
            if v is not None and v > known:
                raise newer("results.json", obj["schema"], f"{prefix}/{known}")
        kw = {f: obj[f] for f in _RESULTS_FIELDS if f in obj}
        for name, value in kw.items():
            kinds = _RESULTS_TYPES.get(name)
            if value is not None and kinds is not None and (type(value) not in kinds):
                raise RecordError(f"results.json field {name} is {limits.shown(value)}, not {kinds[0].__name__}")
        kw.setdefault("schema", obj.get("schema"))
        return cls(**kw, extra=extra_of(obj, frozenset(_RESULTS_FIELDS)),
                   nulls=frozenset(f for f in _RESULTS_FIELDS if f in obj and obj[f] is None))

    @classmethod
    def read(cls, path: Path) -> ResultsRecord | None:  # type: ignore[override]
        """The results file at ``path``; None when it is missing, unreadable or not a results file (``NewerRecord``
        when a newer version wrote it)."""
        try:
            return read_file(cls, path)
        except (OSError, ValueError):  # RecordError is a ValueError
            return None


_RESULTS_FIELDS = tuple(f.name for f in fields(ResultsRecord) if f.name not in ("extra", "nulls"))
#: The JSON types each typed field of results.json may hold (by its annotation; ``Any`` fields are not checked): a
#: file whose field has another type is no results file of this suite's.
_JSON_KINDS: dict[str, tuple[type, ...]] = {"str": (str,), "bool": (bool,), "int": (int,), "float": (float, int),
                                            "Mapping[str, Any]": (dict,)}
_RESULTS_TYPES = {f.name: _JSON_KINDS[str(f.type).removesuffix(" | None")] for f in fields(ResultsRecord)
                  if str(f.type).removesuffix(" | None") in _JSON_KINDS}
