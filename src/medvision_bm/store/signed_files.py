"""The signature files of a store (``signature.json``: ``SignatureRecord``) and of a judged parse (``judge.json``:
``JudgeFile``): a signature, its inputs and where imported answers came from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from medvision_bm import limits
from medvision_bm.jsontypes import JsonObject, JsonValue
from medvision_bm.store.record_base import NO_EXTRA, JsonFile, RecordError, extra_of, newer

#: A signature is 16 hex digits; a longer text is no signature of this suite's.
_MAX_SIGNATURE_CHARS = 256


def _signed_to_json(key: str, signature: str, inputs: Mapping[str, JsonValue], schema: int,
                    imported: Mapping[str, JsonValue] | None, extra: Mapping[str, JsonValue]) -> JsonObject:
    """A signature file's JSON: the signature under ``key``, its inputs, schema, ``import`` block and the rest."""
    out: JsonObject = {key: signature, "inputs": dict(inputs), "schema": schema}
    if imported is not None:
        out["import"] = dict(imported)
    out.update(extra)
    return out


def _signed_from_json(obj: JsonValue, what: str, key: str, version: int, required: bool
                      ) -> tuple[str, JsonObject, int, JsonObject | None, Mapping[str, JsonValue]]:
    """(signature, inputs, schema, import block, other fields) of a signature file's JSON, the version checked (a
    file without ``schema`` is version 1; ``required``: a file without ``key`` is refused). A ``schema`` that is no
    integer or an ``import`` that is no object stays among the other fields, written back as it was."""
    if not isinstance(obj, dict):
        raise RecordError(f"{what} is not a JSON object")
    if required and key not in obj:
        raise RecordError(f"{what} has no {key}")
    schema = obj.get("schema", 1)
    if isinstance(schema, int) and schema > version:
        raise newer(what, schema, version)
    signature = obj.get(key, "")
    if type(signature) is not str or len(signature) > _MAX_SIGNATURE_CHARS:
        raise RecordError(f"{what} has {key} {limits.shown(signature)}, not a signature")
    inputs, imported = obj.get("inputs"), obj.get("import")
    known = {key, "inputs"} | ({"schema"} if isinstance(schema, int) else set()) | (
        {"import"} if imported is None or isinstance(imported, dict) else set())
    return (signature, inputs if isinstance(inputs, dict) else {}, schema if isinstance(schema, int) else 1,
            imported if isinstance(imported, dict) else None, extra_of(obj, frozenset(known)))


#: ``schema`` of signature.json.
STORE_SCHEMA = 1


@dataclass(frozen=True, slots=True)
class SignatureRecord(JsonFile):
    """``signature.json``: the answer signature that names the store and its inputs (never secrets); an imported
    store also says where its answers came from (``imported``, the file's ``import`` block)."""

    VERSION: ClassVar[int] = STORE_SCHEMA

    answer_signature: str
    inputs: Mapping[str, JsonValue]
    schema: int = STORE_SCHEMA
    imported: Mapping[str, JsonValue] | None = None
    extra: Mapping[str, JsonValue] = field(default_factory=lambda: NO_EXTRA)

    def to_json(self) -> JsonObject:
        return _signed_to_json("answer_signature", self.answer_signature, self.inputs, self.schema, self.imported,
                               self.extra)

    @classmethod
    def from_json(cls, obj: JsonValue) -> SignatureRecord:
        return cls(*_signed_from_json(obj, "signature.json", "answer_signature", cls.VERSION, required=True))


@dataclass(frozen=True, slots=True)
class JudgeFile(JsonFile):
    """``judged/<sig>/judge.json``: the judge signature of a judged parse and its inputs (judge model, weights,
    backend, prompt version and fingerprint, sampling); an imported judged parse also names the files it was read
    from (``imported``, the file's ``import`` block, outside the signature)."""

    VERSION: ClassVar[int] = 1

    judge_signature: str
    inputs: Mapping[str, JsonValue]
    schema: int = 1
    imported: Mapping[str, JsonValue] | None = None
    extra: Mapping[str, JsonValue] = field(default_factory=lambda: NO_EXTRA)

    def to_json(self) -> JsonObject:
        return _signed_to_json("judge_signature", self.judge_signature, self.inputs, self.schema, self.imported,
                               self.extra)

    @classmethod
    def from_json(cls, obj: JsonValue) -> JudgeFile:
        return cls(*_signed_from_json(obj, "judge.json", "judge_signature", cls.VERSION, required=False))
