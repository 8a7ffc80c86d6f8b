"""The store's records: each file shape read and written by one class, byte for byte what the suite wrote before
the records existed (the stores in fixtures/pre_records), newer versions refused, and the one JSON rule for
non-finite numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from medvision_bm.errors import UserError
from medvision_bm.io import dumps, finite_or_none, jsonable
from medvision_bm.models.base import GenResult, RequestError, Usage
from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.records import (
    AnswerRecord,
    AnswerStatus,
    DocRow,
    JudgeFile,
    NewerRecord,
    ParsedRow,
    ResultsRecord,
    SignatureRecord,
    iter_lines,
)
from medvision_bm.store.samples import SampleStore
from medvision_bm.tasks.upstream_parse import Parser, SampleStatus

PRE = Path(__file__).parent / "fixtures" / "pre_records"
STORES = sorted(p.parent for p in PRE.glob("*/*/*/signature.json"))


def _lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().split(b"\n") if line]


def test_the_fixture_holds_every_file_shape():
    assert len(STORES) == 6
    for folder in STORES:
        files = StoreLayout(folder)
        assert files.signature.is_file() and files.docs.is_file() and files.parsed().is_file()
        assert files.results().is_file() and files.segments()


@pytest.mark.parametrize("folder", STORES, ids=lambda p: f"{p.parent.parent.name}-{p.parent.name[:14]}")
def test_lines_of_an_older_store_read_and_write_back_byte_for_byte(folder):
    files = StoreLayout(folder)
    statuses = set()
    for seg in files.segments():
        for line in _lines(seg):
            rec = AnswerRecord.from_line(line)
            assert rec.line() == line
            statuses.add(rec.status)
    assert statuses <= set(AnswerStatus)
    for line in _lines(files.docs):
        row = DocRow.from_json(json.loads(line))
        assert row.line() == line
        assert row.rundoc().doc.key == row.key
    for line in _lines(files.parsed()):
        obj = json.loads(line)
        row = ParsedRow.from_json(obj)
        assert row.to_json() == obj and json.loads(row.line()) == obj
        assert row.status in set(SampleStatus) and row.parser in set(Parser)
    for path, cls in ((files.results(), ResultsRecord), (files.signature, SignatureRecord)):
        obj = json.loads(path.read_text())
        assert cls.from_json(obj).to_json() == obj


def test_a_written_answer_line_has_the_fields_it_always_had(tmp_path):
    """The answer line's fields (the format's, as every store so far holds them) and canonical bytes."""
    store = SampleStore(tmp_path / "s", "sig")
    store.init({"task": "T"})
    w = store.writer()
    ok = w.append(GenResult("k0", "<answer>1</answer>", None, "stop", Usage(10, 2), 0.25, 1), index=0, doc_sha="d0")
    failed = w.append(GenResult("k1", None, RequestError("http", "HTTP 503", 503, True), None, Usage(), 1.5, 3),
                      index=1, doc_sha="d1")
    w.close()
    lines = _lines(next(store.layout.segments().__iter__()))
    fields = {"key", "index", "doc_sha", "status", "text", "error", "finish_reason", "usage", "latency_s",
              "attempts", "answer_signature", "time"}
    for rec, line in zip((ok, failed), lines):
        assert set(json.loads(line)) == fields
        assert line == dumps(json.loads(line)).encode()  # canonical: sorted keys, no spaces
        assert AnswerRecord.from_line(line) == rec
    assert json.loads(lines[0])["status"] == "ok" and json.loads(lines[1])["status"] == "failed"
    assert json.loads(lines[1])["error"] == {"kind": "http", "message": "HTTP 503", "status_code": 503,
                                             "retryable": True}
    state = store.read()
    assert state.answer("k0", "d0") == ok and state.failed["k1"] == failed


@pytest.mark.parametrize("cls,obj", [
    (AnswerRecord, {"key": "k", "answer_signature": "s", "status": "ok", "v": 2}),
    (DocRow, {"key": "k", "doc": {}, "view": {}, "v": 2}),
    (ParsedRow, {"key": "k", "status": "ok", "v": 2}),
    (ResultsRecord, {"schema": "medvision-results/2"}),
    (ResultsRecord, {"schema": "medvision-judged/9"}),
    (SignatureRecord, {"answer_signature": "a", "inputs": {}, "schema": 2}),
    (JudgeFile, {"judge_signature": "j", "inputs": {}, "schema": 2}),
])
def test_a_record_of_a_newer_version_is_refused_not_half_read(cls, obj):
    with pytest.raises(NewerRecord, match="update medvision-bm") as exc:
        cls.from_json(obj)
    assert isinstance(exc.value, UserError) and not isinstance(exc.value, ValueError)  # no reader skips it
    assert "\n" not in str(exc.value)


def test_a_file_of_a_newer_version_is_refused_naming_the_file(tmp_path):
    for name, cls, obj in (("results.json", ResultsRecord, {"schema": "medvision-results/2"}),
                           ("signature.json", SignatureRecord, {"answer_signature": "a", "inputs": {}, "schema": 2}),
                           ("judge.json", JudgeFile, {"judge_signature": "j", "inputs": {}, "schema": 2})):
        path = tmp_path / name
        path.write_text(json.dumps(obj))
        with pytest.raises(NewerRecord, match=f"^{path}: {name} of version"):
            cls.read(path)
    path = tmp_path / "parsed.jsonl"
    path.write_text('{"key":"k","status":"ok"}\nnot json\n{"key":"k2","status":"ok","v":2}\n')
    with pytest.raises(NewerRecord, match=f"^{path}: a ParsedRow line of version 2"):
        list(iter_lines(path, ParsedRow.from_json))


def test_a_store_refuses_answer_lines_of_a_newer_version(tmp_path):
    """Never read as another run's lines (the runner would ask those samples again into a newer store)."""
    store = SampleStore(tmp_path / "s", "sig")
    store.init({})
    store.layout.samples.mkdir(parents=True)
    seg = store.layout.samples / "w.jsonl"
    seg.write_text('{"key":"k0","answer_signature":"sig","status":"ok","doc_sha":"d","text":"a"}\n'
                   '{"key":"k1","answer_signature":"other","status":"ok","doc_sha":"d","text":"b"}\n')
    state = store.read()
    assert state.answered("k0", "d") and state.foreign_lines == 1
    with open(seg, "a") as fh:
        fh.write('{"key":"k1","answer_signature":"sig","status":"ok","doc_sha":"d","text":"b","v":2}\n')
    with pytest.raises(NewerRecord, match=f"^{seg}: an answer line of version 2"):
        store.read()


def test_unknown_fields_are_kept_when_a_record_is_written_again():
    obj = {"key": "k", "answer_signature": "s", "status": "ok", "text": "t", "index": 0, "doc_sha": "d",
           "error": None, "finish_reason": None, "usage": {}, "latency_s": None, "attempts": None, "time": 1.0,
           "note": {"added": "later"}}
    assert AnswerRecord.from_json(obj).to_json() == obj
    res = {"schema": "medvision-results/1", "metrics": {"n": 1}, "something_new": [1, 2]}
    assert ResultsRecord.from_json(res).to_json() == res


def test_non_finite_numbers_follow_one_rule_each():
    """Our numbers: None, NaN and the infinities are None (JSON has none of them, and upstream leaves non-finite
    values out of every mean). Data that is not ours: kept as text, so nothing is lost or made up."""
    for bad in (None, math.nan, math.inf, -math.inf, np.float32("nan"), np.float64("inf")):
        assert finite_or_none(bad) is None
    assert finite_or_none(3) == 3.0 and type(finite_or_none(3)) is float and finite_or_none(np.float32(0.5)) == 0.5
    data = {1: (math.nan, math.inf, -math.inf), "x": [np.float32(0.25), np.int64(4), "s", None, True],
            "o": object}
    out = jsonable(data)
    assert out == {"1": ["nan", "inf", "-inf"], "x": [0.25, 4.0, "s", None, True], "o": str(object)}
    dumps(out)  # the canonical writer, which refuses NaN, takes it
