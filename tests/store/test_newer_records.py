"""One version rule for every record a store holds, applied by every command that reads or writes it: a record of a
newer version (an answer line, a docs.jsonl or docs.gone.jsonl row, a parsed.jsonl row, results.json,
signature.json, a judged parse's files) is refused in one line naming its file, and nothing of the store is
rewritten."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pytest

from medvision_bm.cli.parse import cli_main as parse_main
from medvision_bm.store.records import NewerRecord, ParsedRow
from phantom_runs import run_baseline, run_cli

TASK = "PhantomMR_BoxCoordinate_Task01_Sagittal"


def run(data: Path, results: Path, lists: Path) -> None:
    tasks = lists / "one_task.json"
    tasks.write_text(json.dumps({TASK: 1}))
    outcomes = run_baseline("oracle", "detect", data, results, lists=lists, tasks_json=tasks)
    assert [o.state for o in outcomes] == ["done"], outcomes


@pytest.fixture(scope="module")
def filled(phantom_dir, tmp_path_factory) -> Path:
    """A results folder with one store the oracle filled (the module's tests copy it)."""
    root = tmp_path_factory.mktemp("filled")
    run(phantom_dir, root / "res", root)
    return root / "res"


def store_of(results: Path) -> Path:
    (folder,) = (results / "oracle" / TASK).iterdir()
    return folder


def newer_line(path: Path, at: int = 2) -> None:
    """Mark line ``at`` (not the first) of a JSON-lines file as written by version 2."""
    lines = path.read_bytes().splitlines()
    row = orjson.loads(lines[at])
    row["v"] = 2
    lines[at] = orjson.dumps(row, option=orjson.OPT_SORT_KEYS)
    path.write_bytes(b"\n".join(lines) + b"\n")


def newer_file(path: Path, schema: object) -> None:
    obj = json.loads(path.read_text())
    obj["schema"] = schema
    path.write_text(json.dumps(obj))


def make_newer(folder: Path, kind: str) -> Path:
    """Make one record of ``kind`` newer; returns its file."""
    if kind == "answer line":
        (path,) = sorted((folder / "samples").glob("*.jsonl"))
        newer_line(path)
    elif kind == "docs.gone.jsonl row":
        path = folder / "docs.gone.jsonl"
        row = orjson.loads((folder / "docs.jsonl").read_bytes().splitlines()[0])
        path.write_bytes(orjson.dumps({**row, "key": "gone:1", "v": 2}) + b"\n")
    elif kind in ("docs.jsonl row", "parsed.jsonl row"):
        path = folder / kind.split()[0]
        newer_line(path)
    elif kind == "results.json":
        path = folder / "results.json"
        newer_file(path, "medvision-results/2")
    else:
        path = folder / "signature.json"
        newer_file(path, 2)
    return path


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.startswith(".") and p.parent.name != "claims"}


KINDS = ["answer line", "docs.jsonl row", "docs.gone.jsonl row", "parsed.jsonl row", "results.json",
         "signature.json"]


@pytest.mark.parametrize("kind", KINDS)
def test_run_refuses_a_newer_record_naming_its_file_and_rewrites_nothing(filled, phantom_dir, tmp_path, kind):
    results = tmp_path / "res"
    shutil.copytree(filled, results)
    folder = store_of(results)
    path = make_newer(folder, kind)
    before = snapshot(folder)
    with pytest.raises(NewerRecord, match=rf"^{path}: .* of version .*update medvision-bm"):
        run(phantom_dir, results, tmp_path)
    assert snapshot(folder) == before


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "docs.gone.jsonl row"])
def test_parse_refuses_a_newer_record_in_one_line_naming_its_file(filled, tmp_path, capsys, kind):
    results = tmp_path / "res"
    shutil.copytree(filled, results)
    folder = store_of(results)
    path = make_newer(folder, kind)
    before = snapshot(folder)
    capsys.readouterr()
    assert parse_main(["--results_dir", str(results)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "update medvision-bm" in err[0], err
    assert snapshot(folder) == before


@pytest.mark.parametrize("kind", ["answer line", "parsed.jsonl row"])
def test_summarize_refuses_a_newer_record_in_one_line_naming_its_file(filled, tmp_path, kind):
    """The parsed rows it reads as they are, and the answers newer than them (a stopped run's) alike."""
    results = tmp_path / "res"
    shutil.copytree(filled, results)
    path = make_newer(store_of(results), kind)
    res = run_cli("summarize", "--results_dir", str(results), "--output_dir", str(tmp_path / "out"), "--no_plots")
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "update medvision-bm" in lines[0], res.stderr


def test_a_judged_parse_of_a_newer_version_is_never_rewritten(tmp_path):
    from medvision_bm.score.judged import write_judged_parse

    folder = tmp_path / "judged" / "abc"
    folder.mkdir(parents=True)
    for name, content in (("parsed.jsonl", b'{"key":"a","status":"ok"}\n{"key":"b","status":"ok","v":2}\n'),
                          ("results.json", b'{"schema":"medvision-judged/2"}')):
        other = tmp_path / "other"
        shutil.rmtree(other, ignore_errors=True)
        shutil.copytree(folder, other)
        (other / name).write_bytes(content)
        with pytest.raises(NewerRecord, match=rf"^{other / name}: "):
            write_judged_parse(other, None, "current", "upstream", [], {}, "sig", {}, complete=True)
        assert (other / name).read_bytes() == content
        assert [p.name for p in other.iterdir()] == [name]


def test_the_newer_line_search_finds_a_newer_row_anywhere_and_passes_older_ones(tmp_path):
    from medvision_bm.store.records import refuse_newer_lines

    path = tmp_path / "parsed.jsonl"
    rows = [orjson.dumps({"key": f"k{i}", "status": "ok", "reason": '"v": 2 in a text'}) for i in range(50)]
    path.write_bytes(b"\n".join(rows) + b"\n")
    refuse_newer_lines(path, ParsedRow)  # a "v" inside a value is no version
    path.write_bytes(b"\n".join([*rows[:30], b'{"key":"x","status":"ok","v" : 3}', *rows[30:]]))  # no last newline
    with pytest.raises(NewerRecord, match=rf"^{path}: a ParsedRow line of version 3"):
        refuse_newer_lines(path, ParsedRow)
    path.write_bytes(b"\n".join([*rows, b'{"key":"x","status":"ok","v":1}', b'{"v":"two"}']))
    refuse_newer_lines(path, ParsedRow)  # version 1 said, and a damaged line: each reader's to skip
