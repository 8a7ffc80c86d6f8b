"""Every size read from outside has one bound (medvision_bm.limits), checked before the input fills
memory or blocks: plan headers and cases, JSON nesting, upstream samples files (not regular, too many records, an
over-long answer), sample-index ranges and NIfTI headers that claim more voxels than their file can hold."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from medvision_bm import limits
from medvision_bm.data.plans import PlanError, plan_events, read_task
from medvision_bm.errors import UserError
from medvision_bm.runner.args import parse_indices


def task_headers(path):
    """Every task header of a plan, read by the plan reader without its cases."""
    return (ev[2] for ev in plan_events(path, lambda pos, split: False) if ev[0] == "header")


def _plan(path: Path, header_extra: str = "", case_text: str | None = None) -> Path:
    """A one-task detection plan in upstream's key order, with raw JSON spliced into its header or its one case."""
    case = case_text or json.dumps({"case_ID": "c1", "image_file": "img/c1.nii.gz", "slices": []})
    text = ('{"dataset_info": {}, "tasks_number": 1, "tasks": [{"task_ID": "01", "task_type": "Box-Size"'
            + header_extra + ', "train_cases": [], "test_cases_number": 1, "test_cases": [' + case + ']}]}')
    path.write_bytes(gzip.compress(text.encode(), compresslevel=1))
    return path


def _within(seconds: float, fn):
    """fn() in a thread; its result or exception, or a failure when it has not returned in ``seconds``."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still reading after {seconds} s"
    return box


def test_a_plan_header_holding_a_40_mb_string_is_refused_by_both_readers(tmp_path):
    path = _plan(tmp_path / "p.json.gz", header_extra=', "note": "' + "x" * (40 << 20) + '"')
    assert path.stat().st_size < 1 << 20  # a small file on disk, large only when inflated
    with pytest.raises(PlanError, match="header over 16 MiB"):
        list(task_headers(path))
    with pytest.raises(PlanError, match="header over 16 MiB"):
        read_task(path, 0)


def test_one_case_holding_a_100_mb_string_is_refused_before_it_is_parsed(tmp_path):
    big = json.dumps({"case_ID": "c1", "image_file": "img/c1.nii.gz", "blob": "y" * (100 << 20)})
    path = _plan(tmp_path / "p.json.gz", case_text=big)
    tracemalloc.start()
    try:
        with pytest.raises(PlanError, match=r"a case (in task 1 )?over 64 MiB"):
            list(read_task(path, 0).cases)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 400 << 20, peak


def test_a_case_nested_3000_deep_is_a_plan_error_not_a_recursion_error(tmp_path):
    deep = '{"case_ID": "c1", "x": ' + "[" * 3000 + "]" * 3000 + "}"
    path = _plan(tmp_path / "p.json.gz", case_text=deep + ', {"case_ID": "c2"}')
    with pytest.raises(PlanError, match="nested"):
        list(read_task(path, 0).cases)


def test_a_plan_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "benchmark_plan_detection_v1.0.0.json.gz"
    os.mkfifo(fifo)
    box = _within(10, lambda: list(task_headers(fifo)))  # a daemon thread: a reader that blocks is left behind
    assert isinstance(box.get("error"), PlanError) and "FIFO" in str(box["error"]), box


def test_json_text_nested_past_the_limit_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="the reply is nested"):
        limits.loads_json("[" * (limits.MAX_JSON_DEPTH + 5) + "]" * (limits.MAX_JSON_DEPTH + 5), "the reply")
    with pytest.raises(ValueError, match="the reply is nested too deep"):
        limits.loads_json('{"a":' * 50_000 + "1" + "}" * 50_000, "the reply")


@pytest.mark.parametrize("text", ["[0:99999999999999999999999]", "7-88888888888888888888", "[0,30000000,1]",
                                  "4," + "9" * 6000])
def test_sample_index_ranges_past_the_largest_task_are_refused_while_parsing_the_flag(text):
    start = time.monotonic()
    with pytest.raises(argparse.ArgumentTypeError, match=f"go up to {limits.MAX_SAMPLE_INDEX}"):
        parse_indices(text)
    assert time.monotonic() - start < 2
    assert parse_indices(f"{limits.MAX_SAMPLE_INDEX - 1}-{limits.MAX_SAMPLE_INDEX}") == [
        limits.MAX_SAMPLE_INDEX - 1, limits.MAX_SAMPLE_INDEX]


def _nifti_gz_claiming(path: Path, shape: tuple[int, int, int]) -> Path:
    import nibabel as nib

    header = nib.Nifti1Header()
    header.set_data_dtype(np.int16)
    header.set_data_shape(shape)
    header.set_zooms((1.0, 1.0, 1.0))
    raw = header.binaryblock + b"\x00" * (int(header["vox_offset"]) - 348) + b"\x00" * 64
    path.write_bytes(gzip.compress(raw))
    return path


def test_a_nifti_gz_header_claiming_6e9_voxels_in_a_small_file_is_refused_before_any_allocation(tmp_path):
    from medvision_bm.data.image import clear_cache, read_slice

    clear_cache()
    path = _nifti_gz_claiming(tmp_path / "vol.nii.gz", (20_000, 20_000, 15))
    assert path.stat().st_size < 4096
    tracemalloc.start()
    try:
        box = _within(30, lambda: read_slice(path, 2, 0))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    err = box.get("error")
    assert isinstance(err, UserError) and "header claims" in str(err) and str(path) in str(err), box
    assert peak < 64 << 20, peak


def test_limits_refuse_non_regular_files_and_files_over_their_limit(tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match="FIFO"):
        limits.read_bytes(fifo, "tracker file", 1 << 20)
    link = tmp_path / "zero.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(UserError, match="device"):
        limits.read_json_file(link, "results file")
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2048)
    with pytest.raises(limits.TooLarge, match="over the 1024 bytes"):
        limits.read_bytes(big, "results file", 1024)


def test_our_own_json_files_are_read_within_the_same_bounds(tmp_path):
    """io.read_json (results.json, signature.json, judge.json, caches) refuses what limits refuses of outside
    files, as a ValueError or OSError its callers already treat as a damaged file, never a RecursionError or a read
    that blocks or fills memory."""
    import os

    from medvision_bm.io import read_json
    from medvision_bm.store.records import ResultsRecord

    deep = tmp_path / "results.json"
    deep.write_text('{"counts": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ValueError, match="nested"):
        read_json(deep)
    assert ResultsRecord.read(deep) is None  # read as "no usable results file", as a garbled one is
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(limits.MAX_JSON_FILE_BYTES + 1)  # sparse: nothing is written or read
    with pytest.raises(ValueError, match="over the"):
        read_json(big)
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="FIFO"):
        read_json(fifo)  # returns at once: a pipe is never opened
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "missing.json")
    ok = tmp_path / "ok.json"
    ok.write_text('{"a": [1, 2.5, NaN]}')
    value = read_json(ok)
    assert value["a"][:2] == [1, 2.5] and value["a"][2] != value["a"][2]  # NaN read as before
