"""A rerun of an unchanged plan takes the task's selection (keys, doc indices, doc hashes, run signature) from the
store's saved copy instead of walking the data; a changed plan, limit, data file, task setting or a damaged saved
copy makes it again, equal to one made from scratch."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from medvision_bm.data.layout import DataDir
from medvision_bm.models.registry import get_record
from medvision_bm.runner import selection_cache
from medvision_bm.runner.args import build_parser
from medvision_bm.runner.backends import build_backend
from medvision_bm.runner.config import build_config
from medvision_bm.runner.loop import PreparedTask, prepare_task
from medvision_bm.runner.selection import StreamedSelection
from medvision_bm.store.layout import StoreLayout
from phantom_runs import DirectRunner, run_baseline

TASK = "PhantomCT_BoxCoordinate_Task01_Axial"


@pytest.fixture()
def data(phantom_dir, tmp_path) -> Path:
    dst = tmp_path / "data"
    shutil.copytree(phantom_dir, dst)
    return dst


def argv(data: Path, tmp_path: Path, *extra: str) -> list[str]:
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({TASK: 1}))
    return ["--data_dir", str(data), "--tasks_list_json_path", str(tasks), "--results_dir", str(tmp_path / "res"),
            "--skip_update_status", "--skip_env_setup", "--no_progress", *extra]


def prepared(data: Path, tmp_path: Path, *extra: str) -> PreparedTask:
    record = get_record("oracle")
    args = argv(data, tmp_path, *extra)
    cfg = build_config(build_parser(record, "test").parse_args(args), record, args)
    return prepare_task(cfg, DataDir(cfg.contract), TASK)


def from_scratch(data: Path, tmp_path: Path, monkeypatch, *extra: str) -> PreparedTask:
    """The task prepared with no saved selection looked at."""
    with monkeypatch.context() as m:
        m.setattr(selection_cache, "load", lambda *a, **k: None)
        prep = prepared(data, tmp_path, *extra)
    assert not prep.selection_reused
    return prep


def first_run(data: Path, tmp_path: Path, *extra: str) -> None:
    outcomes = run_baseline("oracle", "detect", data, tmp_path / "res", *extra, lists=tmp_path,
                            tasks_json=tmp_path / "tasks.json")
    assert [o.state for o in outcomes] == ["done"], outcomes


def assert_same(got: PreparedTask, want: PreparedTask) -> None:
    a, b = got.samples, want.samples
    assert list(a.keys) == list(b.keys)
    assert a.indices.tolist() == b.indices.tolist()
    assert list(a.shas) == list(b.shas)
    assert a.meta_source == b.meta_source
    assert a.docs_digest() == b.docs_digest()
    assert got.run_sig == want.run_sig and got.answer_sig == want.answer_sig
    # the docs are built again from the data, as asked
    assert [rd.doc.key for rd in a.rundocs([0, len(a) - 1])] == [b.keys[0], b.keys[len(b) - 1]]


def saved(tmp_path: Path) -> Path:
    (folder,) = (tmp_path / "res" / "oracle" / TASK).iterdir()
    return StoreLayout(folder).selection_cache


def test_an_unchanged_plan_reuses_the_saved_selection(data, tmp_path, clean_env, monkeypatch):
    argv(data, tmp_path)
    first_run(data, tmp_path)
    assert saved(tmp_path).is_file()
    with monkeypatch.context() as m:
        m.setattr(StreamedSelection, "walk", lambda *a, **k: pytest.fail("the selection was walked again"))
        again = prepared(data, tmp_path)
    assert again.selection_reused
    assert_same(again, from_scratch(data, tmp_path, monkeypatch))


def test_a_changed_limit_makes_the_selection_again(data, tmp_path, clean_env, monkeypatch):
    argv(data, tmp_path)
    first_run(data, tmp_path, "--sample_limit", "3")
    assert prepared(data, tmp_path, "--sample_limit", "3").selection_reused
    other = prepared(data, tmp_path, "--sample_limit", "5")
    assert not other.selection_reused and len(other.samples) == 5
    assert_same(other, from_scratch(data, tmp_path, monkeypatch, "--sample_limit", "5"))


def test_a_changed_plan_makes_the_selection_again(data, tmp_path, clean_env, monkeypatch):
    argv(data, tmp_path)
    first_run(data, tmp_path)
    before = prepared(data, tmp_path)
    for plan in (data / "Datasets" / "PhantomCT").glob("benchmark_plan_*.json.gz"):
        obj = json.loads(gzip.decompress(plan.read_bytes()))
        for task in obj["tasks"]:  # the first test case dropped, the plan's name (its version) kept
            task["test_cases"] = task["test_cases"][1:]
            task["test_cases_number"] = len(task["test_cases"])
        plan.write_bytes(gzip.compress(json.dumps(obj).encode()))
    after = prepared(data, tmp_path)
    assert not after.selection_reused
    assert list(after.samples.keys) != list(before.samples.keys)
    assert_same(after, from_scratch(data, tmp_path, monkeypatch))


def test_an_edited_data_file_makes_the_selection_again(data, tmp_path, clean_env, monkeypatch):
    argv(data, tmp_path)
    first_run(data, tmp_path)
    before = prepared(data, tmp_path)
    assert before.selection_reused
    image = before.samples.all_rundocs()[0].doc.image_file
    path = data / "Datasets" / image
    img = nib.load(path)
    zooms = img.header.get_zooms()
    edited = nib.Nifti1Image(np.asanyarray(img.dataobj), img.affine, img.header)
    edited.header.set_zooms(tuple(z * 1.5 for z in zooms))  # another pixel size: the docs' views change
    nib.save(edited, path)
    after = prepared(data, tmp_path)
    assert not after.selection_reused
    assert list(after.samples.shas) != list(before.samples.shas)
    assert after.run_sig != before.run_sig
    assert_same(after, from_scratch(data, tmp_path, monkeypatch))


@pytest.mark.parametrize("damage", ["truncated", "flipped", "garbage", "foreign"])
def test_a_damaged_saved_selection_is_ignored_and_made_again(data, tmp_path, clean_env, monkeypatch, damage):
    argv(data, tmp_path)
    first_run(data, tmp_path)
    path = saved(tmp_path)
    raw = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "flipped":  # a byte of the stored keys changed: the zip's checksum no longer matches
        at = raw.index(b"PhantomCT/")
        path.write_bytes(raw[:at] + b"X" + raw[at + 1:])
    elif damage == "garbage":
        path.write_bytes(b"not a selection")
    else:  # another run's selection saved under this store's name (its key differs)
        other = prepared(data, tmp_path, "--sample_limit", "2")
        selection_cache.persist(path, other.selection_key, selection_cache.Selected(other.samples, other.shas_digest,
                                                                                 False))
    again = prepared(data, tmp_path)
    assert not again.selection_reused
    assert_same(again, from_scratch(data, tmp_path, monkeypatch))
    first_run(data, tmp_path)  # the rerun saves it again: the next one reuses it
    assert prepared(data, tmp_path).selection_reused


def test_another_view_setting_makes_the_selection_again(data, tmp_path, clean_env, monkeypatch):
    argv(data, tmp_path)
    first_run(data, tmp_path, "--sample_limit", "3")
    keep = prepared(data, tmp_path, "--sample_limit", "3")
    assert keep.selection_reused
    monkeypatch.setattr(selection_cache, "view_settings", lambda cfg, variant: {"reshape": [336, 336]})
    assert not prepared(data, tmp_path, "--sample_limit", "3").selection_reused


def test_a_task_skipped_as_done_saves_its_selection_for_the_next_rerun(data, tmp_path, clean_env, monkeypatch):
    record = get_record("oracle")
    args = [a for a in argv(data, tmp_path, "--sample_limit", "3") if a != "--skip_update_status"]
    args += ["--task_status_json_path", str(tmp_path / "status.json")]

    def run() -> str:
        cfg = build_config(build_parser(record, "test").parse_args(args), record, args)
        (outcome,) = DirectRunner(cfg, build_backend).run()
        return outcome.state

    assert run() == "done"
    saved(tmp_path).unlink()  # as a store written before selections were saved
    assert run() == "skipped"  # done by the status file: its selection walked, and saved
    assert prepared(data, tmp_path, "--sample_limit", "3").selection_reused
