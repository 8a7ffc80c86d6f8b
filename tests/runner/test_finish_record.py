"""A rerun of a task its last run completed, with no answer segment, docs, parsed rows or results file changed since,
reads no answer and scores nothing, and writes the results.json a full check writes; any change of those files, of
the selection or a damaged record makes it check the store in full."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medvision_bm.runner import loop as loop_mod
from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.samples import SampleStore
from phantom_runs import run_baseline

TASK = "PhantomCT_BoxCoordinate_Task01_Axial"
#: results.json fields that differ between any two runs (when, and the run's own timing)
PER_RUN = ("timing",)


def run(tmp_path: Path, phantom_dir: Path, *extra: str) -> list:
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({TASK: 1}))
    outcomes = run_baseline("oracle", "detect", phantom_dir, tmp_path / "res", *extra, lists=tmp_path,
                            tasks_json=tasks)
    assert [o.state for o in outcomes] == ["done"], outcomes
    return outcomes


def files(tmp_path: Path) -> StoreLayout:
    (folder,) = (tmp_path / "res" / "oracle" / TASK).iterdir()
    return StoreLayout(folder)


def results(tmp_path: Path) -> dict:
    out = json.loads(files(tmp_path).results().read_text())
    return {k: v for k, v in out.items() if k not in PER_RUN}


class Reads:
    """Counts the store readings and follows of the runs made while it is installed."""

    def __init__(self, monkeypatch) -> None:
        self.reads = self.follows = 0
        real_read, real_follow = SampleStore.read, loop_mod.follow

        def read(store):
            self.reads += 1
            return real_read(store)

        def follow(*a, **k):
            self.follows += 1
            return real_follow(*a, **k)

        monkeypatch.setattr(SampleStore, "read", read)
        monkeypatch.setattr(loop_mod, "follow", follow)


def test_an_unchanged_finished_task_is_rerun_without_reading_an_answer(tmp_path, phantom_dir, clean_env, monkeypatch):
    run(tmp_path, phantom_dir)
    assert files(tmp_path).finished.is_file()
    files(tmp_path).finished.unlink()
    run(tmp_path, phantom_dir)  # a rerun that checks the store in full (nothing asked)
    full = results(tmp_path)
    reads = Reads(monkeypatch)
    (again,) = run(tmp_path, phantom_dir)
    assert (reads.reads, reads.follows) == (0, 0)
    assert again.n_asked == 0 and again.metrics == full["metrics"]
    assert results(tmp_path) == full  # the results.json a full check writes
    # and it stays so: the record was written again for the rewritten results.json
    run(tmp_path, phantom_dir)
    assert (reads.reads, reads.follows) == (0, 0)


def changes(layout: StoreLayout) -> dict:
    def append_duplicate() -> None:
        (segment,) = layout.segments()
        lines = segment.read_bytes().splitlines(keepends=True)
        with open(segment, "ab") as fh:
            fh.write(lines[0])  # a duplicate answer: counted in store_duplicates

    def touch(path: Path) -> None:
        path.write_bytes(path.read_bytes())

    def damage() -> None:
        layout.finished.write_bytes(b"{\"version\": 1, \"run_signature\": ")

    return {"appended answer": append_duplicate, "parsed rows": lambda: touch(layout.parsed()),
            "results": lambda: touch(layout.results()), "docs": lambda: touch(layout.docs),
            "damaged record": damage, "no record": lambda: layout.finished.unlink()}


@pytest.mark.parametrize("change", ["appended answer", "parsed rows", "results", "docs", "damaged record",
                                    "no record"])
def test_a_change_since_the_finish_checks_the_store_in_full(tmp_path, phantom_dir, clean_env, monkeypatch, change):
    run(tmp_path, phantom_dir)
    changes(files(tmp_path))[change]()
    reads = Reads(monkeypatch)
    run(tmp_path, phantom_dir)
    assert reads.reads == 1 and reads.follows == 1
    checked = results(tmp_path)
    if change == "appended answer":
        assert checked["counts"]["store_duplicates"] == 1
    files(tmp_path).finished.unlink()  # the same store checked in full once more: the same results
    run(tmp_path, phantom_dir)
    assert results(tmp_path) == checked


def test_another_selection_checks_the_store_in_full(tmp_path, phantom_dir, clean_env, monkeypatch):
    run(tmp_path, phantom_dir)
    reads = Reads(monkeypatch)
    (limited,) = run(tmp_path, phantom_dir, "--sample_limit", "3")
    assert reads.reads == 1 and limited.n_selected == 3


def test_an_incomplete_finish_leaves_no_record(tmp_path, phantom_dir, clean_env, monkeypatch):
    run(tmp_path, phantom_dir)
    assert files(tmp_path).finished.is_file()
    (segment,) = files(tmp_path).segments()
    lines = segment.read_bytes().splitlines(keepends=True)
    segment.write_bytes(b"".join(lines[1:]))  # one answer lost: the rerun asks it again
    reads = Reads(monkeypatch)
    (again,) = run(tmp_path, phantom_dir)
    assert reads.reads == 1 and again.n_asked == 1
    assert files(tmp_path).finished.is_file()  # complete again
