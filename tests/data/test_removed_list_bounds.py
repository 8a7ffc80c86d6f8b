"""The T/L removed-samples list read through the typed, bounded readers (medvision_bm.limits): an entry of the
wrong type or a number that upstream's ``int()`` could not take (YongchengYAO/MedVision
src/medvision_bm/benchmark/summarize_TL_task.py @28f6c67, ``_build_removed_set``), a file nested too deep, too large
or not regular is one line naming the file, never a traceback, a hang or gigabytes read."""

from __future__ import annotations

import json

import pytest

from medvision_bm import limits
from medvision_bm.data.removed_samples import LIST_FILENAME, RemovedLists, read_removed_list
from medvision_bm.errors import UserError
from mvtest_support import plant_non_regular, user_error_of

ENTRY = {"image_file": "Images/case_1.nii.gz", "slice_dim": "z", "slice_idx": 12, "task_ID": "01"}

HOSTILE = {
    "slice index -Infinity": {"slice_idx": float("-inf")},
    "slice index -3": {"slice_idx": -3},
    "slice index 1e30": {"slice_idx": 1e30},
    "slice index 2.5": {"slice_idx": 2.5},
    "task id of 400 digits": {"task_ID": int("7" * 400)},
    "task id as true": {"task_ID": True},
    "image file as null": {"image_file": None},
}


def _one_line(exc: BaseException, path) -> str:
    text = str(exc)
    assert "\n" not in text and str(path) in text and "--no_tl_filter" in text and len(text) < 400, text
    return text


@pytest.mark.parametrize("fields", list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_hostile_entry_is_one_line_naming_the_entry(tmp_path, fields):
    path = tmp_path / LIST_FILENAME
    path.write_text(json.dumps([ENTRY, {**ENTRY, **fields}]))
    with pytest.raises(UserError) as info:
        read_removed_list(path)
    assert "entry 1 " in _one_line(info.value, path)


def test_the_keys_of_a_good_list(tmp_path):
    path = tmp_path / LIST_FILENAME
    path.write_text(json.dumps([ENTRY, {**ENTRY, "slice_idx": 13.0, "slice_dim": "x"}]))
    assert read_removed_list(path) == {("Images/case_1.nii.gz", 2, 12, 1), ("Images/case_1.nii.gz", 0, 13, 1)}


def test_an_entry_that_is_no_object_and_a_list_nested_80000_deep_are_one_line(tmp_path):
    path = tmp_path / LIST_FILENAME
    path.write_text("[5]")
    with pytest.raises(UserError) as info:
        read_removed_list(path)
    assert "entry 0 is 5" in _one_line(info.value, path)
    path.write_text("[" * 80_000 + "]" * 80_000)
    with pytest.raises(UserError) as info:
        read_removed_list(path)
    assert "nested" in _one_line(info.value, path)


def test_a_list_larger_than_any_json_file_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / LIST_FILENAME
    with open(path, "wb") as fh:  # sparse: nothing is written to disk
        fh.truncate(limits.MAX_JSON_FILE_BYTES + 1)
    with pytest.raises(UserError) as info:
        read_removed_list(path)
    assert "over the" in _one_line(info.value, path)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_device_in_the_lists_place_is_one_line_not_a_hang_or_no_list(tmp_path, kind):
    folder = tmp_path / "Datasets" / "KiTS23"
    folder.mkdir(parents=True)
    path = folder / LIST_FILENAME
    plant_non_regular(path, kind)
    error = user_error_of(lambda: RemovedLists(tmp_path / "Datasets").get("KiTS23"))
    assert error is not None and "not a regular file" in _one_line(error, path)
