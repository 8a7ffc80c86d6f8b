"""Discovery names a store by the folders above it (model, task, tag) and by its path as ``Path`` spells it,
whichever way the results folder is given (absolute, relative, ``.``); a folder that is no store is walked into."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medvision_bm.store.discovery import discover

TASK = "Bench01_BoxCoordinate_Task01_Axial"


def _store(folder: Path, **inputs: object) -> Path:
    folder.mkdir(parents=True)
    (folder / "signature.json").write_text(json.dumps({"answer_signature": "a" * 64, "inputs": inputs}))
    return folder


@pytest.fixture
def results(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    _store(root / "m1" / TASK / "aaaaaaaaaaaa")
    _store(root / "tagA" / "tagB" / "m2" / TASK / "bbbbbbbbbbbb")
    _store(root / "m3" / "Bench02_Unknown_Task01" / "cccccccccccc")  # no family: skipped with a note
    (root / "m1" / TASK / "dddddddddddd" / "signature.json").mkdir(parents=True)  # a folder, not a signature
    return root


@pytest.mark.parametrize("given", ["absolute", "relative", "dot"])
def test_stores_are_named_by_the_folders_above_them(results: Path, given: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    if given == "absolute":
        root, prefix = results, results
    else:
        monkeypatch.chdir(results.parent if given == "relative" else results)
        root = Path("results") if given == "relative" else Path(".")
        prefix = root
    refs, notes = discover(root)
    assert [(r.folder, r.model, r.task, r.tag, r.family) for r in sorted(refs, key=lambda r: r.model)] == [
        (prefix / "m1" / TASK / "aaaaaaaaaaaa", "m1", TASK, "", "detect"),
        (prefix / "tagA" / "tagB" / "m2" / TASK / "bbbbbbbbbbbb", "m2", TASK, "tagA/tagB", "detect")]
    assert notes == [f"store {prefix / 'm3' / 'Bench02_Unknown_Task01' / 'cccccccccccc'}: cannot tell the task "
                     "family of 'Bench02_Unknown_Task01'; skipped"]


def test_a_results_folder_that_is_a_store_or_a_task_folder_is_read(results: Path) -> None:
    store = results / "m1" / TASK / "aaaaaaaaaaaa"
    for root in (store, store.parent):
        refs, _ = discover(root)
        assert [(r.folder, r.model, r.task) for r in refs] == [(store, "m1", TASK)]
