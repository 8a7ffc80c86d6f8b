"""The row of ``docs.jsonl`` (``DocRow``): a sample as it was asked, and its doc hash."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from medvision_bm import limits
from medvision_bm.data.docs import RunDoc, RunProtocol, rundoc_from_store_row
from medvision_bm.io import dumps
from medvision_bm.jsontypes import JsonValue
from medvision_bm.store.record_base import (
    MAX_NAME,
    NO_EXTRA,
    RecordError,
    extra_of,
    field_names,
    line_version,
)


@dataclass(frozen=True, slots=True)
class DocRow:
    """One line of ``docs.jsonl``: a sample as it was asked (the data layer's doc, the view, protocol, variant) and
    its doc hash. Rows of stores written before the upstream data layer keep their doc as it was (``legacy``)."""

    VERSION: ClassVar[int] = 1

    key: str
    index: int
    doc_sha: str | None
    doc: Mapping[str, object]
    view: Mapping[str, object]
    protocol: str | None = RunProtocol.CURRENT
    variant: str | None = ""
    extra: Mapping[str, JsonValue] = field(default_factory=lambda: NO_EXTRA)

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

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"key": self.key, "index": self.index, "doc_sha": self.doc_sha, "doc": dict(self.doc),
                           "view": dict(self.view), "protocol": self.protocol, "variant": self.variant}
        if self.extra:
            out.update(self.extra)
        return out

    def line(self) -> bytes:
        """The stored line (without its newline): canonical JSON, the bytes docs.jsonl's merge compares."""
        return dumps(self.to_json()).encode("utf-8")

    @classmethod
    def from_json(cls, obj: JsonValue) -> DocRow:
        key, doc = (obj.get("key"), obj.get("doc")) if isinstance(obj, dict) else (None, None)
        if not isinstance(obj, dict) or not isinstance(key, str) or not isinstance(doc, dict):
            raise RecordError("a docs.jsonl line without its key or doc")
        line_version(cls, obj)
        view = obj.get("view")
        text, opt = limits.text_field, limits.optional
        try:  # each field through its typed reader: a row of another type is a RecordError naming the field
            return cls(key, limits.int_field(obj.get("index", 0), "index", -1),
                       opt(text, obj.get("doc_sha"), "doc_sha", MAX_NAME), doc,
                       view if isinstance(view, dict) else {}, opt(text, obj.get("protocol"), "protocol", MAX_NAME),
                       opt(text, obj.get("variant"), "variant", MAX_NAME), extra_of(obj, _DOC_ROW_FIELDS))
        except limits.BadField as exc:
            raise RecordError(f"a docs.jsonl line whose {exc}") from None

    @property
    def order(self) -> tuple[int, str]:
        """Its place in docs.jsonl (and in a selection): by index, then key."""
        return self.index, self.key


_DOC_ROW_FIELDS = field_names(DocRow) | {"v"}
