"""results.json's typed blocks (counts, usage, selection): every object a file holds reads and writes back as it was
(unknown keys, nulls and values of another type included), each writer's constructor gives the shape that writer
wrote, and a selection answers which samples it holds."""

from __future__ import annotations

import json

import pytest

from medvision_bm.io import write_json_atomic
from medvision_bm.store.records import Counts, ResultsRecord, Selection, Usage

RUN_COUNTS = {"selected": 8, "answered": 7, "request_failed": 1, "pending": 0, "asked_this_run": 8,
              "scored_this_run": 7, "store_bad_lines": 0, "store_foreign_lines": 2, "store_duplicates": 0}
JUDGED_COUNTS = {"selected": 4, "answered": 4, "judged": 3, "judge_invalid": 1, "not_judged": 0, "recovered": 2,
                 "bad_lines": 0, "modes": {"conclusion_in_format": 3, "undetermined": 1}}


@pytest.mark.parametrize("block", [
    {"counts": RUN_COUNTS}, {"counts": JUDGED_COUNTS},
    {"counts": {"selected": 3, "store_bad_lines": None, "later_count": 5, "answered": "7", "modes": {"a": 1.5}}},
    {"usage": {"input_tokens": 10, "output_tokens": 4, "reasoning_tokens": 0, "latency_s": 1, "attempts": 2,
               "length_cut": 0, "cached_tokens": 3}},
    {"selection": {"limit": 8}}, {"selection": {"all": 34}}, {"selection": {"indices": [1, 4, 9]}},
    {"selection": {}}, {"selection": None}, {"selection": {"indices": [1, "x"], "shard": "1/2"}},
])
def test_a_results_file_reads_and_writes_back_byte_for_byte(tmp_path, block):
    path, again = tmp_path / "results.json", tmp_path / "again.json"
    write_json_atomic(path, {"schema": "medvision-results/1", "task": "T", **block})
    ResultsRecord.read(path).write(again)
    assert again.read_bytes() == path.read_bytes()


def test_a_block_field_holds_only_its_type_and_the_rest_is_kept_aside():
    counts = Counts.from_json({"selected": 3, "answered": "7", "pending": True, "later_count": 5})
    assert (counts.selected, counts.answered, counts.pending) == (3, None, None)
    assert dict(counts.extra) == {"answered": "7", "pending": True, "later_count": 5}
    assert Selection.from_json({"indices": [2, 1]}).indices == (2, 1)
    assert Usage.from_json({"latency_s": 2}).latency_s == 2 and Usage.from_json({"latency_s": "2"}).latency_s is None


def test_a_field_of_another_json_type_is_no_results_file(tmp_path):
    path = tmp_path / "results.json"
    for bad in ({"counts": [1, 2]}, {"selection": "all"}, {"usage": 3}):
        write_json_atomic(path, {"schema": "medvision-results/1", **bad})
        assert ResultsRecord.read(path) is None, bad


def test_a_parse_updates_the_states_and_keeps_what_the_run_counted():
    run = Counts.from_json({**RUN_COUNTS, "later_count": 1})
    parsed = Counts.of_parse(run, selected=9, answered=9, request_failed=0, pending=0, bad_lines=None,
                             foreign_lines=1, duplicates=0)
    assert parsed.to_json() == {**RUN_COUNTS, "later_count": 1, "selected": 9, "answered": 9, "request_failed": 0,
                                "store_bad_lines": None, "store_foreign_lines": 1}
    fresh = Counts.of_parse(None, selected=2, answered=1, request_failed=0, pending=1, bad_lines=0, foreign_lines=0,
                            duplicates=0)
    assert set(fresh.to_json()) == {"selected", "answered", "request_failed", "pending", "store_bad_lines",
                                    "store_foreign_lines", "store_duplicates"}


def test_a_run_writes_every_count_it_keeps():
    counts = Counts.of_run(selected=8, answered=7, request_failed=1, pending=0, asked=8, scored=7, bad_lines=0,
                           foreign_lines=2, duplicates=0)
    assert counts.to_json() == RUN_COUNTS
    assert Counts.of_judge(JUDGED_COUNTS).to_json() == JUDGED_COUNTS


@pytest.mark.parametrize(("indices", "limit", "n", "written"), [
    ([9, 1, 4, 1], None, 20, {"indices": [1, 4, 9]}), (None, 8, 20, {"limit": 8}), (None, 20, 20, {"all": 20}),
    (None, None, 34, {"all": 34}),
])
def test_a_runs_selection_is_written_as_it_was_chosen(indices, limit, n, written):
    selection = Selection.chosen(sample_indices=indices, sample_limit=limit, n_available=n)
    assert json.loads(json.dumps(selection.to_json())) == written


@pytest.mark.parametrize(("recorded", "held", "expected"), [
    ({"limit": 3}, [0, 1, 2], 3), ({"all": 5}, [0, 1, 2, 3, 4, 5, 6], 5), ({"indices": [4, 2, 4]}, [2, 4], 2),
    ({}, [0, 1, 2, 3, 4, 5, 6], None),
])
def test_a_selection_says_which_indices_it_holds_and_how_many(recorded, held, expected):
    selection = Selection.from_json(recorded)
    assert [i for i in range(7) if selection.selected()(i)] == held
    assert selection.expected() == expected
    assert bool(selection) is bool(recorded)
