"""An answer line's fields are typed and bounded by one check (``records.answer_problem``) that the store's index and
the record share, and a backend's out-of-bounds numbers are never stored: every line counted as an answer reads
back."""

from __future__ import annotations

import json
import math

import pytest

from medvision_bm import limits
from medvision_bm.models.base import GenResult, Usage
from medvision_bm.store.records import AnswerRecord, NewerRecord, RecordError, answer_identity, answer_text


def _line(**fields):
    base = {"key": "k1", "answer_signature": "s" * 16, "status": "ok", "text": "3.5", "index": 0,
            "doc_sha": "0" * 16, "usage": {"input_tokens": 10, "output_tokens": 2}, "latency_s": 0.5,
            "attempts": 1, "time": 1.0}
    base.update(fields)
    return base


BAD = [{"text": None}, {"text": ["3"]}, {"usage": {"output_tokens": 2.5}}, {"usage": {"input_tokens": -1}},
       {"usage": {"reasoning_tokens": limits.MAX_TOKENS + 1}}, {"usage": ["x"]}, {"latency_s": math.nan},
       {"latency_s": -0.1}, {"latency_s": 2e7}, {"attempts": True}, {"attempts": 10**7}, {"index": "4"},
       {"time": "noon"}, {"truncated_chars": -5}]


@pytest.mark.parametrize("fields", BAD, ids=[str(b)[:40] for b in BAD])
def test_the_index_and_the_record_refuse_the_same_lines(fields):
    obj = _line(**fields)
    assert answer_identity(obj) is None
    with pytest.raises(RecordError, match="answer line"):
        AnswerRecord.from_json(obj)


@pytest.mark.parametrize("obj", [*(_line(**b) for b in BAD), _line(v=0), _line(v="1"), _line(key=3), [1],
                                 _line(doc_sha=5, error="x"), _line(status="failed", text=None, error={"m": 1})])
def test_the_browsers_reading_of_a_line_refuses_and_keeps_what_the_record_does(obj):
    try:
        rec = AnswerRecord.from_json(obj)
    except RecordError:
        with pytest.raises(RecordError):
            answer_text(obj)
        return
    assert answer_text(obj) == (rec.key, rec.answer_signature, rec.ok, rec.doc_sha, rec.text, rec.error)


def test_the_browsers_reading_refuses_a_newer_line():
    with pytest.raises(NewerRecord):
        answer_text(_line(v=AnswerRecord.VERSION + 1))


def test_a_good_line_and_a_failed_line_without_text_are_records():
    assert answer_identity(_line()) == ("k1", "s" * 16, True, "0" * 16)
    failed = _line(status="failed", text=None, usage={}, latency_s=None, attempts=None)
    assert answer_identity(failed) == ("k1", "s" * 16, False, "0" * 16)
    assert not AnswerRecord.from_json(failed).ok


def test_a_servers_out_of_bounds_counts_are_not_stored_and_the_line_reads_back():
    result = GenResult("k1", "7", usage=Usage(input_tokens=10**30, output_tokens=-3, reasoning_tokens=4),
                       latency_s=1e308, attempts=10**9)
    rec = AnswerRecord.of_result(result, index=0, doc_sha="0" * 16, answer_signature="s" * 16)
    assert dict(rec.usage) == {"input_tokens": None, "output_tokens": None, "reasoning_tokens": 4}
    assert rec.latency_s == limits.MAX_LATENCY_S and rec.attempts is None
    assert AnswerRecord.from_line(rec.line()) == rec


@pytest.mark.parametrize("read,value,args,why", [
    (limits.int_field, 10**400, (), "an integer of"), (limits.int_field, math.inf, (), "not an integer"),
    (limits.int_field, True, (), "not an integer"), (limits.int_field, 11, (0, 10), "outside 0..10"),
    (limits.float_field, math.nan, (), "not a finite number"), (limits.float_field, "1", (), "not a number"),
    (limits.float_field, 10**400, (), "not a finite number"), (limits.text_field, 5, (), "not a text"),
    (limits.bool_field, "yes", (), "not true or false"), (limits.object_field, [1], (), "a list, not an object"),
    (limits.object_field, "x" * 500, (), "not an object"), (limits.list_field, {}, (), "an object, not a list"),
    (limits.list_field, [1, 2, 3], (2,), "has 3 items, over its 2")])
def test_the_typed_field_readers_name_the_field_and_cut_the_value(read, value, args, why):
    with pytest.raises(limits.BadField, match=why) as info:
        read(value, "the field", *args)
    assert str(info.value).startswith("the field ") and len(str(info.value)) < 120


def test_the_object_and_list_readers_hand_back_the_value_they_checked():
    obj, items = {"a": 1}, [1, "b"]
    assert limits.object_field(obj, "f") is obj and limits.list_field(items, "f", 2) is items


def test_the_number_rule_takes_what_float_takes_and_refuses_the_rest_as_float_does():
    import numpy as np

    from medvision_bm.io import finite_or_none

    assert finite_or_none(0.5) == 0.5 and finite_or_none(3) == 3.0 and finite_or_none("2.5") == 2.5
    assert finite_or_none(np.float32(0.25)) == 0.25 and finite_or_none(np.int64(4)) == 4.0
    assert finite_or_none(math.inf) is None and finite_or_none(math.nan) is None and finite_or_none(None) is None
    for bad in ([1.0], {"x": 1}):
        with pytest.raises(TypeError) as ours:
            finite_or_none(bad)
        with pytest.raises(TypeError) as builtin:
            float(bad)
        assert str(ours.value) == str(builtin.value)


def test_a_lenient_integer_takes_what_int_takes_but_nothing_unbounded():
    assert limits.int_field(7.0, "f", lenient=True) == 7 and limits.int_field(" 12", "f", lenient=True) == 12
    for value in (7.5, math.inf, math.nan, "1e3", "9" * 30):
        with pytest.raises(limits.BadField):
            limits.int_field(value, "f", lenient=True)


def test_finite_only_replaces_every_non_finite_number_at_any_depth():
    value = {"a": [1.0, math.nan, {"b": -math.inf}], "c": math.inf, "d": "NaN"}
    assert limits.finite_only(value) == {"a": [1.0, None, {"b": None}], "c": None, "d": "NaN"}


@pytest.mark.parametrize("field,value", [("counts", "many"), ("metrics", [1, 2]), ("complete", "yes"),
                                         ("scoring_version", 2.5), ("model_name", 7), ("cost_usd", "free")])
def test_a_results_file_whose_typed_field_has_another_type_is_no_results_file(tmp_path, field, value):
    from medvision_bm.store.records import Counts, ResultsRecord

    good = ResultsRecord(model_name="m", counts=Counts(selected=1), complete=True, cost_usd=0.5).to_json()
    path = tmp_path / "results.json"
    path.write_text(json.dumps({**good, field: value}))
    with pytest.raises(RecordError, match=f"results.json field {field} is"):
        ResultsRecord.from_json(json.loads(path.read_text()))
    assert ResultsRecord.read(path) is None  # unreadable: parse writes a new one
    path.write_text(json.dumps(good))
    assert ResultsRecord.read(path) == ResultsRecord.from_json(good)


def test_a_results_file_with_several_wrong_fields_names_the_first_of_the_record():
    from medvision_bm.store.records import ResultsRecord

    # the file's own order puts the later field first: the record's order decides which is named
    with pytest.raises(RecordError, match=r"results\.json field model_name is"):
        ResultsRecord.from_json({"cost_usd": "free", "counts": {"selected": 1}, "model_name": 7})


def test_a_results_file_keeps_its_nulls_blocks_and_unknown_fields():
    from medvision_bm.store.records import Counts, ResultsRecord, Selection

    obj = {"later": [1], "counts": {"selected": 2, "mine": "x"}, "error": None, "selection": {"limit": 3},
           "schema": "medvision-results/1", "metrics": None}
    rec = ResultsRecord.from_json(obj)
    assert rec.counts == Counts(selected=2, extra={"mine": "x"}) and rec.selection == Selection(limit=3)
    assert rec.nulls == {"error", "metrics"} and dict(rec.extra) == {"later": [1]}
    assert rec.to_json() == obj
