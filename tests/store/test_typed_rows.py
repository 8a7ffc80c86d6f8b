"""parsed.jsonl and docs.jsonl rows are read field by field through the typed readers: a field of another type or out
of bounds makes the line a bad line (skipped, counted, its sample re-scored or counted as missing), never a traceback
in parse or summarize and never a number taken for another."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from medvision_bm.store.records import DocRow, ParsedRow, RecordError
from phantom_runs import run_cli

TL_TASK = "PhantomCT_TumorLesionSize_Task01_Axial"


def _parsed_line(store: Path) -> dict:
    return json.loads((store / "parsed.jsonl").read_text().splitlines()[0])


def _tl_store(results: Path, model: str = "oracle") -> Path:
    return next((results / "MedVision-Phantom-TL" / model / TL_TASK).iterdir())


HOSTILE_PARSED = [
    ("metrics", {"MAE": "0.0"}, "metrics.MAE"),
    ("metrics", {"MAE": [1.0]}, "metrics.MAE"),
    ("metrics", [0.0], "metrics"),
    ("success", "false", "success"),
    ("success", 1, "success"),
    ("near_zero_gt", "no", "near_zero_gt"),
    ("index", "7", "index"),
    ("index", 10**30, "index"),
    ("index", 2.0, "index"),
    ("values", ["12.5"], "values[0]"),
    ("values", [float("inf")], "values[0]"),
    ("values", {"a": 1}, "values"),
    ("target", None, "target"),
    ("target", [1.0] * 65, "target"),
    ("slice_dim", 9, "slice_dim"),
    ("label", 1.5, "label"),
    ("reason", 5, "reason"),
    ("parser", None, "parser"),
    ("dataset", ["PhantomCT"], "dataset"),
    ("judge", [1], "judge"),
]


@pytest.mark.parametrize(("field", "value", "named"), HOSTILE_PARSED,
                         ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(HOSTILE_PARSED)])
def test_a_parsed_row_of_another_type_is_refused_naming_its_field(field: str, value: object, named: str) -> None:
    good = {"index": 0, "family": "TL", "task": TL_TASK, "rules": "upstream", "key": "k", "status": "ok",
            "success": True, "values": [1.0], "target": [1.0], "metrics": {"MAE": 0.0, "MRE": None},
            "parser": "strict-1", "reason": "", "near_zero_gt": False, "dataset": "PhantomCT", "label": 1,
            "slice_dim": 2}
    assert ParsedRow.from_json(good).metrics == {"MAE": 0.0, "MRE": None}
    with pytest.raises(RecordError) as err:
        ParsedRow.from_json({**good, field: value})
    assert named in str(err.value)


@pytest.mark.parametrize(("field", "value"), [("index", "3"), ("index", True), ("doc_sha", 5), ("protocol", ["x"]),
                                              ("variant", {"a": 1})])
def test_a_docs_row_of_another_type_is_refused_naming_its_field(field: str, value: object) -> None:
    good = {"key": "k", "index": 3, "doc_sha": "ab", "doc": {}, "view": {}, "protocol": "current", "variant": ""}
    assert DocRow.from_json(good).index == 3
    with pytest.raises(RecordError) as err:
        DocRow.from_json({**good, field: value})
    assert field in str(err.value)


@pytest.mark.parametrize(("field", "value"), [("metrics", {"MAE": "0.0", "MRE": 0.0, "nMAE": 0.0}),
                                              ("success", "false"), ("index", "0"), ("target", {"a": 1})])
def test_summarize_and_parse_take_a_hostile_parsed_row_for_a_bad_line(results_copy: Path, tmp_path: Path,
                                                                      field: str, value: object) -> None:
    store = _tl_store(results_copy)
    lines = (store / "parsed.jsonl").read_bytes().splitlines()
    first = orjson.loads(lines[0])
    lines[0] = orjson.dumps({**first, field: value})
    (store / "parsed.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    n_docs = len((store / "docs.jsonl").read_text().splitlines())
    out = tmp_path / "out"
    res = run_cli("summarize", "--results_dir", str(results_copy / "MedVision-Phantom-TL"), "--output_dir", str(out),
                  "--no_plots", "--n_boot", "200")
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    rows = json.loads((out / "summary.json").read_text())
    assert rows, "summary.json is empty"
    tasks = [r for r in csv_rows(out / "tasks_TL.csv") if r["label"] == "oracle" and r["task"] == TL_TASK]
    assert [(r["num_samples"], float(r["avgMAE"])) for r in tasks] == [(str(n_docs), 0.0)]  # the oracle's, re-scored
    res = run_cli("parse", "--results_dir", str(results_copy / "MedVision-Phantom-TL"))
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    rewritten = [orjson.loads(x) for x in (store / "parsed.jsonl").read_bytes().splitlines()]
    assert len(rewritten) == n_docs and all(type(r["success"]) is bool and type(r["index"]) is int for r in rewritten)


def csv_rows(path: Path) -> list[dict[str, str]]:
    import csv

    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))
