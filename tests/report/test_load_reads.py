"""How load reads the stores: each parsed.jsonl once, all of a family's files parsed together, every row kept with
its own store whatever the file holds (a blank line, no row at all); discovery's walk skips hidden and linked
folders."""

from __future__ import annotations

import json
import os
from pathlib import Path

from test_upstream_tables import row, write_store

from medvision_bm.report.load import load
from medvision_bm.store.discovery import discover

TASKS = ("HandCT_TumorLesionSize_Task01_Axial", "HandMR_TumorLesionSize_Task01_Coronal",
         "KneeCT_TumorLesionSize_Task01_Sagittal")
OK = {"MAE": 1.0, "MRE": 0.05, "nMAE": 0.01}


def _keys_by_task(root: Path) -> dict[str, list[str]]:
    refs, _ = discover(root)
    loaded = load(refs)
    frame = loaded.samples["TL"]
    task_of = {s.id: s.ref.task for s in loaded.stores}
    out: dict[str, list[str]] = {}
    for store, key in frame.select("store", "key").iter_rows():
        out.setdefault(task_of[store], []).append(key)
    return out


def _stores(root: Path, counts: tuple[int, ...]) -> None:
    for task, n in zip(TASKS, counts):
        write_store(root, "m1", task, "TL", [row("TL", task, i, OK) for i in range(n)])


def test_rows_keep_their_store_across_files(tmp_path: Path) -> None:
    _stores(tmp_path, (3, 1, 2))
    got = _keys_by_task(tmp_path)
    assert got == {t: [f"{t}:{i}" for i in range(n)] for t, n in zip(TASKS, (3, 1, 2))}


def test_files_past_the_held_bytes_are_scanned_by_path_to_the_same_rows(tmp_path: Path, monkeypatch) -> None:
    """Past ``HELD_PARSE_BYTES`` of a family's parsed.jsonl, the files are scanned by path (memory does not grow
    with them): the same rows, each with its own store."""
    from medvision_bm.report import load as load_module

    _stores(tmp_path, (3, 1, 2))
    whole = load(discover(tmp_path)[0]).samples["TL"]
    scanned: list[int] = []
    real = load_module._scan_tolerant

    def spy(paths, schema, ids):
        scanned.append(len(paths))
        return real(paths, schema, ids)

    monkeypatch.setattr(load_module, "_scan_tolerant", spy)
    monkeypatch.setattr(load_module, "HELD_PARSE_BYTES", 10)
    got = _keys_by_task(tmp_path)
    assert scanned == [3], "the files scanned by path"
    assert got == {t: [f"{t}:{i}" for i in range(n)] for t, n in zip(TASKS, (3, 1, 2))}
    assert load(discover(tmp_path)[0]).samples["TL"].equals(whole)


def test_a_blank_line_moves_no_row_to_another_store(tmp_path: Path) -> None:
    """The reader skips blank lines: the rows of a file holding one are not one per newline, and each row still
    belongs to its own store."""
    _stores(tmp_path, (3, 1, 2))
    parsed = tmp_path / "m1" / TASKS[0] / ("0" * 12) / "parsed.jsonl"
    lines = parsed.read_text().splitlines(keepends=True)
    parsed.write_text(lines[0] + "\n" + "  \n" + "".join(lines[1:]))
    got = _keys_by_task(tmp_path)
    assert got == {t: [f"{t}:{i}" for i in range(n)] for t, n in zip(TASKS, (3, 1, 2))}


def test_a_store_without_rows_among_others(tmp_path: Path) -> None:
    _stores(tmp_path, (2, 0, 1))
    refs, _ = discover(tmp_path)
    loaded = load(refs)
    assert {s.ref.task for s in loaded.stores} == {TASKS[0], TASKS[2]}
    assert any(TASKS[1] in n and "skipped" in n for n in loaded.notes)
    assert sorted(loaded.samples["TL"]["key"].to_list()) == [f"{TASKS[0]}:0", f"{TASKS[0]}:1", f"{TASKS[2]}:0"]


def test_the_walk_skips_hidden_and_linked_folders(tmp_path: Path) -> None:
    root = tmp_path / "results"
    _stores(root, (1, 1))
    write_store(root / ".trash", "m2", TASKS[2], "TL", [row("TL", TASKS[2], 0, OK)])
    write_store(tmp_path / "elsewhere", "m3", TASKS[2], "TL", [row("TL", TASKS[2], 0, OK)])
    os.symlink(tmp_path / "elsewhere" / "m3", root / "m3", target_is_directory=True)
    refs, _ = discover(root)
    assert sorted((r.model, r.task) for r in refs) == [("m1", TASKS[0]), ("m1", TASKS[1])]
    assert all(r.folder.is_relative_to(root) for r in refs)


def test_a_store_at_the_root_itself(tmp_path: Path) -> None:
    write_store(tmp_path, "m1", TASKS[0], "TL", [row("TL", TASKS[0], 0, OK)])
    store = tmp_path / "m1" / TASKS[0] / ("0" * 12)
    refs, _ = discover(store)
    assert [r.folder for r in refs] == [store]
    assert json.loads((store / "signature.json").read_text())["inputs"]["task"] == refs[0].task
