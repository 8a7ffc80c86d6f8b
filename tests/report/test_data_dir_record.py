"""A run records the absolute data folder it read and its working directory; summarize finds the data folder (and
with it upstream's T/L removed-samples lists) from that record, so the same summary typed from two folders gives
the same files. Stores written before the record (a relative --data_dir in argv) still find their data."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from medvision_bm.store.records import ResultsRecord
from phantom_runs import cli_env, run_baseline

SUMMARY = ("--families", "TL", "--no_plots", "--n_boot", "100", "--browse_per_task", "0")


def summarize(cwd: Path, results: str, out: str, *extra: str) -> subprocess.CompletedProcess:
    """`medvision-bm summarize` typed in ``cwd`` with the paths as given (relative ones relative to ``cwd``)."""
    return subprocess.run([sys.executable, "-m", "medvision_bm.cli", "summarize", "--results_dir", results,
                           "--output_dir", out, *SUMMARY, *extra], cwd=cwd, env=cli_env(), capture_output=True,
                          text=True, timeout=300)


def tables(out: Path) -> dict[str, bytes]:
    """Every table and upstream file of a summary (summary.json and the HTML also name the output folder)."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and (p.suffix in (".csv", ".md", ".txt")
                                or (p.suffix == ".json" and p.relative_to(out).parts[0] == "upstream"))}


@pytest.fixture()
def workspace(tmp_path: Path, phantom_dir: Path, phantom_lists: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding ``Data`` (the phantom) and ``R3`` (the mean baseline's T/L run, typed ``--data_dir Data``
    from that folder, as docs/running-evaluations.md writes it), and an empty ``clone`` folder beside them."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "Data").symlink_to(phantom_dir, target_is_directory=True)
    (ws / "clone").mkdir()
    monkeypatch.chdir(ws)
    outcomes = run_baseline("mean", "TL", Path("Data"), Path("R3"), lists=phantom_lists)
    assert outcomes and all(o.state == "done" for o in outcomes), outcomes
    monkeypatch.chdir(tmp_path)
    return ws


def _results(ws: Path) -> list[Path]:
    found = sorted((ws / "R3").rglob("results.json"))
    assert found
    return found


def test_a_run_records_its_absolute_data_folder_and_working_directory(workspace: Path) -> None:
    for path in _results(workspace):
        rec = json.loads(path.read_text())
        assert rec["data_dir"] == str(workspace / "Data") and rec["cwd"] == str(workspace)
        assert "Data" in rec["argv"]  # the flag as typed stays in argv


def test_the_same_summary_typed_from_two_folders_gives_identical_files(workspace: Path) -> None:
    a = summarize(workspace, "R3", "out_a")
    b = summarize(workspace / "clone", "../R3", "../out_b")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    first, second = tables(workspace / "out_a"), tables(workspace / "out_b")
    assert "upstream/TL/summary_TL_task_filtered.txt" in first and "tl_filter.csv" in first
    assert first == second
    rows = [r for r in (workspace / "out_a" / "tl_filter.csv").read_text().splitlines()[1:] if r]
    assert rows and all(",filtered," in r for r in rows)  # the lists were read from the recorded data folder


@pytest.mark.parametrize("keep_cwd", [True, False], ids=["cwd-recorded", "nothing-recorded"])
def test_a_store_that_recorded_only_a_relative_data_dir_still_finds_it(workspace: Path, keep_cwd: bool) -> None:
    reference = summarize(workspace, "R3", "out_ref")
    assert reference.returncode == 0, reference.stderr
    for path in _results(workspace):  # as a run before the record wrote it: argv only (and maybe its cwd)
        old = ResultsRecord.read(path)
        assert old is not None
        dataclasses.replace(old, data_dir=None, cwd=old.cwd if keep_cwd else None).write(path)
    a = summarize(workspace, "R3", "out_a")
    b = summarize(workspace / "clone", "../R3", "../out_b")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert tables(workspace / "out_a") == tables(workspace / "out_b") == tables(workspace / "out_ref")


def test_no_data_folder_known_at_pin_1_0_0_is_a_one_line_error_unless_no_tl_filter(workspace: Path) -> None:
    for path in _results(workspace):  # a store that names no data folder at all, its data moved away
        old = ResultsRecord.read(path)
        assert old is not None
        argv = [a for a in old.argv if a not in ("--data_dir", "Data")]
        dataclasses.replace(old, data_dir=None, cwd=None, argv=argv).write(path)
    res = summarize(workspace / "clone", "../R3", "../out")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert "removed-samples filter" in line and "--no_tl_filter" in line and "--data_dir" in line
    assert not (workspace / "out").exists()
    ok = summarize(workspace / "clone", "../R3", "../out", "--no_tl_filter")
    assert ok.returncode == 0, ok.stderr
    assert (workspace / "out" / "upstream" / "TL" / "summary_TL_task.txt").is_file()
