"""A smaller selection never shrinks what a finished store reports: a ``--sample_limit 8`` rerun over a complete
store asks nothing, says so, and leaves the store's parsed.jsonl and results.json on its wider selection, so every
later summary shows every answered sample."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from medvision_bm.runner.selection import selection_holds
from medvision_bm.store.records import Selection
from phantom_runs import run_baseline, run_cli

TL_TAG = "MedVision-Phantom-TL"


def _reported(results: Path) -> dict[str, tuple[int, int, str]]:
    """Per task: samples selected in results.json, rows of parsed.jsonl, and results.json's text."""
    out = {}
    for path in sorted(results.rglob("results.json")):
        rec = json.loads(path.read_text())
        rows = (path.parent / "parsed.jsonl").read_text().count("\n")
        out[rec["task"]] = (rec["counts"]["selected"], rows, path.read_text())
    return out


def test_a_limited_rerun_over_a_finished_store_keeps_its_wider_selection(tmp_path: Path, phantom_dir: Path,
                                                                         phantom_lists: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    results = tmp_path / "Results" / TL_TAG
    full = run_baseline("mean", "TL", phantom_dir, results, lists=phantom_lists)
    assert all(o.state == "done" for o in full)
    before = _reported(results)
    assert all(n > 8 and rows == n for n, rows, _ in before.values())
    capsys.readouterr()
    again = run_baseline("mean", "TL", phantom_dir, results, "--sample_limit", "8", lists=phantom_lists)
    notes = capsys.readouterr().err
    assert [(o.state, o.n_selected, o.n_asked) for o in again] == [("done", 8, 0)] * len(again)
    assert _reported(results) == before  # results.json and parsed.jsonl untouched
    for task, (n, _, _) in before.items():
        assert f"{task}: all 8 samples of this run are answered in the store's finished selection of {n}" in notes
    out = tmp_path / "report"
    res = run_cli("summarize", "--results_dir", str(tmp_path / "Results"), "--output_dir", str(out), "--families",
                  "TL", "--no_plots", "--n_boot", "100", "--browse_per_task", "0")
    assert res.returncode == 0, res.stderr
    runs = [line.split(",") for line in (out / "runs.csv").read_text().splitlines()]
    col = runs[0].index("selected")
    assert sorted(int(r[col]) for r in runs[1:]) == sorted(n for n, _, _ in before.values())


def test_a_rerun_that_asks_for_new_samples_reports_its_own_selection(tmp_path: Path, phantom_dir: Path,
                                                                     phantom_lists: Path) -> None:
    """The rule is kept to selections the store's finished one holds: a run that had to ask reports what it ran."""
    results = tmp_path / "Results" / TL_TAG
    run_baseline("mean", "TL", phantom_dir, results, "--sample_limit", "4", lists=phantom_lists)
    wider = run_baseline("mean", "TL", phantom_dir, results, "--sample_limit", "8", lists=phantom_lists)
    assert [(o.state, o.n_asked) for o in wider] == [("done", 4)] * len(wider)
    assert {n for n, _, _ in _reported(results).values()} == {8}


@pytest.mark.parametrize(("selection", "indices", "held"), [
    ({"all": 89}, [0, 5, 88], True), (None, [3], True), ({"limit": 8}, [0, 7], True), ({"limit": 8}, [0, 8], False),
    ({"indices": [1, 4, 9]}, [4, 9], True), ({"indices": [1, 4, 9]}, [4, 5], False), ({}, [2], True),
])
def test_which_recorded_selections_hold_a_run(selection, indices, held) -> None:
    recorded = None if selection is None else Selection.from_json(selection)
    assert selection_holds(recorded, np.asarray(indices)) is held
