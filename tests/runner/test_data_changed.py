"""A store reports exactly the samples its last run selected at the data it read. When the data under the same plan
version loses, gains or re-keys samples, the docs.jsonl rows the data no longer has are set apart (docs.gone.jsonl,
counted and named in one line, never scored), so `parse` and `summarize` score the samples the run reported; a
docs.jsonl row edited by hand is never scored in place of the plan's."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import orjson
import pytest

from medvision_bm.cli.parse import cli_main as parse_main
from medvision_bm.data.phantom import make_phantom
from phantom_runs import run_baseline, run_cli

TASK = "PhantomCT_BoxCoordinate_Task01_Axial"  # detection: a case holds several samples of this task
FAMILY = "detect"


@pytest.fixture(scope="module")
def reseeded(tmp_path_factory) -> Path:
    """The phantom made with another seed: the same plan versions, other cases (samples gone, new and re-keyed)."""
    root = tmp_path_factory.mktemp("phantom-seed3")
    make_phantom(root, seed=3)
    return root


def data_copy(phantom_dir: Path, tmp_path: Path, name: str = "data") -> Path:
    dst = tmp_path / name
    shutil.copytree(phantom_dir, dst)
    return dst


def drop_case(data: Path, dataset: str, case_id: str) -> None:
    """Remove one test case from every plan of ``dataset`` (the plan file names, so their versions, unchanged)."""
    for plan in (data / "Datasets" / dataset).glob("benchmark_plan_*.json.gz"):
        obj = json.loads(gzip.decompress(plan.read_bytes()))
        for task in obj["tasks"]:
            task["test_cases"] = [c for c in task["test_cases"] if c["case_ID"] != case_id]
            task["test_cases_number"] = len(task["test_cases"])
        plan.write_bytes(gzip.compress(json.dumps(obj).encode()))


def run(data: Path, results: Path, tmp_path: Path, *extra: str) -> int:
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({TASK: 1}))
    outcomes = run_baseline("oracle", FAMILY, data, results, *extra, lists=tmp_path, tasks_json=tasks)
    assert [o.state for o in outcomes] == ["done"], outcomes
    return outcomes[0].n_selected


def store(results: Path) -> Path:
    (folder,) = (results / "oracle" / TASK).iterdir()
    return folder


def keys(path: Path) -> list[str]:
    return [orjson.loads(line)["key"] for line in path.read_bytes().splitlines() if line.strip()] \
        if path.is_file() else []


def parse_count(results: Path) -> tuple[int, int]:
    """(selected in results.json, rows of parsed.jsonl) after `medvision-bm parse`."""
    assert parse_main(["--results_dir", str(results)]) == 0
    folder = store(results)
    counts = json.loads((folder / "results.json").read_text())["counts"]
    return counts["selected"], len(keys(folder / "parsed.jsonl"))


def summarize_count(results: Path, out: Path) -> int:
    res = run_cli("summarize", "--results_dir", str(results), "--output_dir", str(out), "--no_plots", "--n_boot",
                  "100")
    assert res.returncode == 0, res.stderr
    (entry,) = json.loads((out / "summary.json").read_text())["runs"]
    return entry["selected"]


def test_a_removed_case_leaves_parse_and_summarize_the_runs_count(phantom_dir, tmp_path, capsys):
    data, results = data_copy(phantom_dir, tmp_path), tmp_path / "res"
    first = run(data, results, tmp_path)
    before = keys(store(results) / "docs.jsonl")
    case = before[-1].split("/")[-1].split(".")[0]  # the case of the last sample: its samples leave the data
    drop_case(data, "PhantomCT", case)
    capsys.readouterr()
    second = run(data, results, tmp_path)
    err = capsys.readouterr().err
    gone = [k for k in before if f"/{case}." in k]
    assert gone and second == first - len(gone)
    folder = store(results)
    assert keys(folder / "docs.gone.jsonl") == gone  # set apart, in docs.jsonl's order
    assert sorted(keys(folder / "docs.jsonl")) == sorted(set(before) - set(gone))
    (line,) = [x for x in err.splitlines() if "no longer in the data" in x]  # counted and named in one line
    assert f"{len(gone)} sample(s)" in line and gone[0] in line and "docs.gone.jsonl" in line
    (folder / "parsed.jsonl").unlink()  # summarize re-scores the store from its docs and answers
    assert summarize_count(results, tmp_path / "sum0") == second
    assert parse_count(results) == (second, second)
    assert summarize_count(results, tmp_path / "sum1") == second
    # the old data again: the rows come back from the data, the run's count is the old one
    shutil.rmtree(data)
    assert run(data_copy(phantom_dir, tmp_path), results, tmp_path) == first
    assert not (folder / "docs.gone.jsonl").exists()
    assert parse_count(results) == (first, first)


@pytest.mark.parametrize("extra", [(), ("--sample_limit", "12"), ("--sample_indices", "0,3,5,40")],
                         ids=["all", "limit", "indices"])
def test_data_made_again_with_another_seed_gives_parse_the_runs_samples(phantom_dir, reseeded, tmp_path, extra):
    """Samples gone, new and re-keyed at once, for every kind of selection."""
    results = tmp_path / "res"
    run(phantom_dir, results, tmp_path, *extra)
    old = set(keys(store(results) / "docs.jsonl"))
    n = run(reseeded, results, tmp_path, *extra)
    folder = store(results)
    parsed_before = keys(folder / "parsed.jsonl")  # the run's own rows: its selection, in order
    assert len(parsed_before) == n
    assert set(keys(folder / "docs.gone.jsonl")) <= old - set(parsed_before)
    assert parse_count(results) == (n, n)
    assert keys(folder / "parsed.jsonl") == parsed_before
    assert summarize_count(results, tmp_path / "sum") == n


def test_an_edited_docs_row_is_never_scored_in_place_of_the_plans(phantom_dir, tmp_path, capsys):
    results = tmp_path / "res"
    n = run(phantom_dir, results, tmp_path)
    folder = store(results)
    docs = folder / "docs.jsonl"
    lines = docs.read_bytes().splitlines()
    row = orjson.loads(lines[2])
    plan_boxes = row["doc"]["bounding_boxes"]
    row["doc"]["bounding_boxes"] = {**plan_boxes, "min_coords": [[0, 0]], "max_coords": [[1, 1]]}
    lines[2] = orjson.dumps(row, option=orjson.OPT_SORT_KEYS)
    docs.write_bytes(b"\n".join(lines) + b"\n")
    parsed = {orjson.loads(x)["key"]: orjson.loads(x) for x in (folder / "parsed.jsonl").read_bytes().splitlines()}
    target = parsed[row["key"]]["target"]
    capsys.readouterr()
    assert parse_count(results) == (n, n - 1)  # counted, as missing; never scored on the edited box
    out = capsys.readouterr()
    assert row["key"] in out.err and "changed since medvision-bm wrote" in out.err
    counts = json.loads((folder / "results.json").read_text())["counts"]
    assert counts["pending"] == 1 and counts["answered"] == n - 1
    run(phantom_dir, results, tmp_path)  # restores the row from the data, and its score
    after = {orjson.loads(x)["key"]: orjson.loads(x) for x in (folder / "parsed.jsonl").read_bytes().splitlines()}
    assert after[row["key"]]["target"] == target and after[row["key"]]["status"] == "ok"
    assert json.loads((folder / "results.json").read_text())["counts"]["pending"] == 0
    assert parse_count(results) == (n, n)


def test_a_store_an_older_version_left_with_vanished_samples_is_never_reported_with_them(phantom_dir, tmp_path):
    """docs.jsonl and parsed.jsonl holding rows of samples the data no longer has, beside a run's selection of fewer
    (what an older version wrote): parse and summarize say so in one line instead of reporting them; a run of the
    same command sets them apart."""
    data, results = data_copy(phantom_dir, tmp_path), tmp_path / "res"
    run(data, results, tmp_path)
    folder = store(results)
    old_parsed = {orjson.loads(x)["key"]: x for x in (folder / "parsed.jsonl").read_bytes().splitlines()}
    case = keys(folder / "docs.jsonl")[0].split("/")[-1].split(".")[0]
    drop_case(data, "PhantomCT", case)
    n = run(data, results, tmp_path)
    gone_rows = (folder / "docs.gone.jsonl").read_bytes()
    gone = keys(folder / "docs.gone.jsonl")
    # the older version's store: the vanished rows kept in docs.jsonl and scored into parsed.jsonl
    (folder / "docs.gone.jsonl").unlink()
    (folder / ".docs.sums").unlink()
    with open(folder / "docs.jsonl", "ab") as fh:
        fh.write(gone_rows)
    with open(folder / "parsed.jsonl", "ab") as fh:
        fh.write(b"".join(old_parsed[k] + b"\n" for k in gone))
    res = run_cli("summarize", "--results_dir", str(results), "--output_dir", str(tmp_path / "out"), "--no_plots")
    assert f"holds {n + len(gone)} rows for the last run's selection of {n}" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    summary = tmp_path / "out" / "summary.json"
    assert not summary.exists() or not json.loads(summary.read_text())["runs"]
    res = run_cli("parse", "--results_dir", str(results))
    assert "rerun the run command to set them apart" in res.stderr and "Traceback" not in res.stderr
    assert run(data, results, tmp_path) == n
    assert keys(folder / "docs.gone.jsonl") == gone
    assert parse_count(results) == (n, n)
