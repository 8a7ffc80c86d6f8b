"""Bad data is a per-sample failure with its reason or a one-line error, never a traceback: judge
replies with numbers JSON cannot hold or nested past any reply, volumes that are not 3D or have no pixel size,
status and tracker files nested deep, landmark files of the wrong shape, a negative phantom seed,
contradictory set-up flags."""

from __future__ import annotations

import errno
import json

import numpy as np
import pytest

from medvision_bm.errors import UserError
from medvision_bm.io import dumps
from medvision_bm.judge.reply import decode_reply
from medvision_bm.judge.run import reply_record
from medvision_bm.models.base import GenResult
from mvtest_support import run_cli


@pytest.mark.parametrize("values", ["[-Infinity]", "[2.5, 1e400]", "[NaN, 3]"])
def test_a_judge_reply_with_numbers_json_cannot_hold_is_recorded_as_upstream_records_it_in_a_json_line(values):
    # upstream's decoder reads NaN/Infinity/1e400 as floats and counts them as numbers: the reply is ok
    # (YongchengYAO/MedVision judge_decode.py ``_is_number_list`` @2f20f64); no value of it is taken as an answer
    raw = '{"final_answer": {"status": "present", "span": "3 mm", "values": ' + values + '}, "steps": []}'
    rec = reply_record("k", "the answer is 3 mm", "sig", GenResult("k", raw), "TL", None)
    assert rec["status"] == "ok" and rec.get("judge_pred") is None, rec
    assert json.loads(dumps(rec))["raw"] == raw  # the record is a valid JSON line (the run's writer takes it)


def test_a_judge_reply_nested_60000_deep_is_no_json_object_not_a_recursion_error():
    obj, why = decode_reply('{"final_answer": ' + '{"a": ' * 60_000 + "1" + "}" * 60_001)
    assert obj is None and why in ("json_decode_error", "no_json_object")


def _nifti(path, shape, zooms):
    import nibabel as nib

    img = nib.Nifti1Image(np.zeros(shape, np.int16), np.eye(4))
    img.header.set_zooms(zooms)
    nib.save(img, str(path))
    return path


@pytest.mark.parametrize("shape, zooms, why", [((8, 9), (1.0, 1.0), "3D volumes only"),
                                               ((4, 5, 6), (1.0, float("nan"), 1.0), "positive number"),
                                               ((4, 5, 6), (1.0, 1.0, float("inf")), "positive number")])
def test_a_volume_that_is_not_3d_or_has_no_pixel_size_is_a_one_line_error_for_every_reader(tmp_path, shape, zooms,
                                                                                           why):
    from medvision_bm.data.image import clear_cache, header_zooms, read_slice

    clear_cache()
    path = _nifti(tmp_path / f"v{len(shape)}.nii.gz", shape, zooms)
    for read in (lambda: header_zooms(path), lambda: read_slice(path, 0, 0)):
        with pytest.raises(UserError, match=why) as exc:
            read()
        assert "\n" not in str(exc.value) and str(path) in str(exc.value)


def test_a_status_file_nested_deep_is_a_one_line_error(tmp_path):
    from medvision_bm.store.status import StatusFile

    status = tmp_path / "status.json"
    status.write_text('{"m": ' + "[" * 50_000 + "]" * 50_000 + "}")
    with pytest.raises(UserError, match="nested") as exc:
        StatusFile(status).read()
    assert str(status) in str(exc.value) and "\n" not in str(exc.value)


def test_a_tracker_file_nested_deep_counts_as_no_tracker(tmp_path):
    from medvision_bm.data.download import tracker_entries
    from medvision_bm.data.plan_files import data_release

    (tmp_path / ".downloaded_datasets.json").write_text("[" * 50_000 + "]" * 50_000)
    assert tracker_entries(tmp_path) == {}
    assert data_release(tmp_path) is None


@pytest.mark.parametrize("seed", ["-1", "-12345678901234567890"])
def test_make_phantom_with_a_negative_seed_is_a_one_line_error(tmp_path, seed):
    res = run_cli("data", "make-phantom", "--data_dir", str(tmp_path / "d"), "--seed", seed)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "--seed" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_env_setup_only_with_skip_env_setup_is_refused_before_any_set_up(tmp_path):
    res = run_cli("run", "--model", "oracle", "--env_setup_only", "--skip_env_setup", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "--env_setup_only" in res.stderr and "--skip_env_setup" in res.stderr
    assert "is ready" not in res.stderr


# ------------------------------------------------------------------------------- non-finite annotations in a plan
# Upstream keeps an A/D sample whatever its value (its loader drops none) and its eval-time scorer hands the value on
# as it is: a parsed, non-negative answer is a success with NaN errors (YongchengYAO/MedVision
# src/medvision_bm/medvision_lmms-eval/lmms_eval/tasks/medvision/medvision_utils.py
# doc_to_target_BiometricsFromLandmarks, process_results_BiometricsFromLandmarks @929f45a).


def _stored(doc):
    """The doc as a store's docs.jsonl gives it back (orjson writes NaN and Infinity as null)."""
    import orjson

    from medvision_bm.data.docs import Doc

    return Doc.from_json(orjson.loads(orjson.dumps(doc.to_json())))


@pytest.mark.parametrize("family, value", [("AD", float("-inf")), ("AD", float("nan")), ("TL", float("inf"))])
@pytest.mark.parametrize("metric_path", ["posthoc", "eval-time"])
def test_a_stored_doc_with_a_non_finite_annotation_scores_as_upstream_with_a_reason(family, value, metric_path):
    import dataclasses

    from fakes.samples import make_doc, make_view
    from medvision_bm.tasks.scoring import TARGET_NOT_FINITE, aggregate, failed_score, score_answer

    doc = make_doc(0, family=family)
    bp = dict(doc.biometric_profile)
    if family == "AD":
        bp["metric_value"] = value
    else:
        bp["metric_value_major_axis"] = [value]
    doc = _stored(dataclasses.replace(doc, biometric_profile=bp))
    view = make_view(doc)
    answer = "<answer>20</answer>" if family == "AD" else "<answer>20, 5</answer>"
    sc = score_answer(doc, view, answer, "strict-1", "newer", metric_path)
    assert sc.status == "ok" and sc.success, sc  # upstream: a parsed non-negative answer is a success
    assert sc.metrics["MAE"] is None and sc.metrics["MRE"] is None  # its errors NaN, in no mean
    assert TARGET_NOT_FINITE in sc.reason
    row = json.loads(dumps(sc.to_json()))  # a valid JSON line for parsed.jsonl
    assert row["target"][0] is None
    failed = failed_score(doc, view, "strict-1", "newer", "request_failed", "HTTP 500", metric_path)
    assert failed.reason.startswith("HTTP 500; ") and TARGET_NOT_FINITE in failed.reason
    task = aggregate(family, [sc, failed], "newer")
    assert task["n"] == 2 and task["n_success"] == 1


def test_nan_and_infinity_a_d_values_in_a_plan_are_noted_on_their_samples_and_the_task_is_scored(tmp_path, phantom_dir):
    import gzip
    import shutil

    from medvision_bm.tasks.scoring import TARGET_NOT_FINITE

    data = tmp_path / "Data"
    shutil.copytree(phantom_dir, data, ignore=shutil.ignore_patterns(".cache"))
    plan = data / "Datasets" / "PhantomXR" / "benchmark_plan_biometry_v1.0.0.json.gz"
    p = json.loads(gzip.decompress(plan.read_bytes()))
    planted = {"distance": float("nan"), "angle": float("inf")}  # one of each type, in the first test case
    first = p["tasks"][0]["test_cases"][0]
    for entry in first["slice_profiles_x"]:
        for m in entry["slice_profile"]:
            if m["metric_type"] in planted:
                m["metric_value"] = planted.pop(m["metric_type"])
    assert not planted
    plan.write_bytes(gzip.compress(json.dumps(p).encode()))  # Python's json writes NaN and Infinity
    tasks = {"PhantomXR_BiometricsFromLandmarks_Distance_Task01_Sagittal": 8,
             "PhantomXR_BiometricsFromLandmarks_Angle_Task01_Sagittal": 8}
    (tmp_path / "tasks.json").write_text(json.dumps(tasks))
    res = run_cli("run", "--model", "oracle", "--data_dir", str(data), "--tasks_list_json_path",
                  str(tmp_path / "tasks.json"), "--results_dir", str(tmp_path / "R"), "--task_status_json_path",
                  str(tmp_path / "status.json"), "--skip_env_setup", "--no_progress", cwd=tmp_path)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-3000:]
    for task in tasks:
        (parsed,) = (tmp_path / "R" / "oracle" / task).glob("*/parsed.jsonl")
        rows = [json.loads(line) for line in parsed.read_text().splitlines()]
        assert len(rows) == 8
        noted = [r for r in rows if TARGET_NOT_FINITE in r["reason"]]
        assert len(noted) == 1 and noted[0]["key"].startswith(f"PhantomXR/{first['image_file']}:")
        assert all(r["success"] for r in rows if r not in noted)  # the others scored as ever
        results = json.loads((parsed.parent / "results.json").read_text())
        assert results["complete"] and results["error"] is None and results["metrics"]["SuccessRate"] == 7 / 8


# ----------------------------------------------------------------------- odd annotated boxes: upstream's numbers, said
# Upstream converts the planner's box as given (medvision_utils.py doc_to_target_BoxCoordinate @929f45a) and its newer
# overlap metrics sort each box's corners, 0 where the boxes do not overlap (YongchengYAO/MedVision
# src/medvision_bm/utils/parse_utils.py cal_IoU, cal_Recall @1f4cc6c): restated here to hold the numbers.


def _upstream_newer_iou(p, t):
    px1, px2 = sorted(p[0::2])
    py1, py2 = sorted(p[1::2])
    tx1, tx2 = sorted(t[0::2])
    ty1, ty2 = sorted(t[1::2])
    ix1, iy1, ix2, iy2 = max(px1, tx1), max(py1, ty1), min(px2, tx2), min(py2, ty2)
    if ix1 >= ix2 or iy1 >= iy2:
        return 0.0
    inter = (ix2 - ix1) * (iy2 - iy1)
    union = (px2 - px1) * (py2 - py1) + (tx2 - tx1) * (ty2 - ty1) - inter
    return min(inter / union if union > 0 else 0.0, 1.0)


@pytest.mark.parametrize("box, notes", [
    (([3, 4], [27, 20]), ["outside"]),  # rows 3..27 on a 24-row slice
    (([-2, 5], [10, 12]), ["outside"]),  # a negative row
    (([2, 20], [12, 6]), ["inverted"]),  # columns 20 > 6
    (([14, 2], [4, -1]), ["outside", "inverted"]),
    (([5, 5], [5, 15]), ["no area"]),  # one row high
    (([2, 1], [12, 10]), []),  # an ordinary box says nothing
])
@pytest.mark.parametrize("rules", ["newer", "paper"])
def test_an_odd_annotated_box_is_scored_as_upstream_scores_it_and_the_sample_says_so(box, notes, rules):
    import dataclasses

    from fakes.samples import make_doc, make_view
    from medvision_bm.tasks.scoring import format_answer, score_answer, target

    doc = make_doc(0, family="detect")  # a 24 x 32 slice
    bb = dict(doc.bounding_boxes, min_coords=[box[0]], max_coords=[box[1]])
    doc = _stored(dataclasses.replace(doc, bounding_boxes=bb))
    view = make_view(doc)
    pred = [0.1, 0.2, 0.6, 0.7]
    sc = score_answer(doc, view, format_answer(pred), "strict-1", rules)
    assert sc.status == "ok"
    tgt = target(doc, view)
    (r0, c0), (r1, c1) = box
    assert tgt == [c0 / 32, (24 - r1) / 24, c1 / 32, (24 - r0) / 24]  # as given: neither clipped nor reordered
    if rules == "newer":
        p32 = [float(np.float32(v)) for v in pred]
        assert sc.metrics["IoU"] == pytest.approx(_upstream_newer_iou(p32, tgt), abs=1e-12)
    words = {"outside": "outside the 24 x 32 slice", "inverted": "is inverted", "no area": "has no area"}
    for name, phrase in words.items():
        assert (phrase in sc.reason) == (name in notes), (name, sc.reason)
    if "no area" in notes:
        assert sc.metrics["IoU"] == sc.metrics["Recall"] == 0.0


# ------------------------------------------------------------------------------------------------- a full disk
# /dev/full answers every write with ENOSPC: the real error of a full disk, on any Linux machine, without root.


def _full_disk_open(real_open):
    """An ``open`` for medvision_bm.io whose writes go to /dev/full (reads are untouched)."""

    def fake(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+"):
            return real_open("/dev/full", mode.replace("x", "w"), *args, **kwargs)
        return real_open(file, mode, *args, **kwargs)

    return fake


@pytest.mark.parametrize("writer", ["json", "lines", "text"])
def test_an_atomic_write_to_a_full_disk_names_its_target_and_leaves_nothing(tmp_path, monkeypatch, writer):
    import builtins

    import medvision_bm.io as mio

    target = tmp_path / "store" / f"out.{writer}"
    monkeypatch.setattr(mio, "open", _full_disk_open(builtins.open), raising=False)
    write = {"json": lambda: mio.write_json_atomic(target, {"a": 1}),
             "lines": lambda: mio.write_lines_atomic(target, ["x\n"] * 1000),
             "text": lambda: mio.write_text_atomic(target, "x" * 100_000)}[writer]
    with pytest.raises(OSError) as exc:
        write()
    assert exc.value.errno == errno.ENOSPC and exc.value.filename == str(target)
    assert list(target.parent.iterdir()) == []  # neither the target nor a temp file


def test_an_answer_appended_on_a_full_disk_names_the_segment():
    from medvision_bm.io import JsonlAppender

    with JsonlAppender("/dev/full") as app, pytest.raises(OSError) as exc:
        app.append({"key": "k", "text": "12 mm"})
    assert exc.value.errno == errno.ENOSPC and exc.value.filename == "/dev/full"


def test_a_run_on_a_full_disk_is_a_one_line_error_naming_the_path(tmp_path, phantom_dir, monkeypatch, capsys,
                                                                  clean_env):
    import builtins

    import medvision_bm.io as mio
    from medvision_bm.cli import main

    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({"PhantomXR_BiometricsFromLandmarks_Angle_Task01_Sagittal": 8}))
    monkeypatch.setattr(mio, "open", _full_disk_open(builtins.open), raising=False)
    rc = main(["run", "--model", "oracle", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tasks),
               "--results_dir", str(tmp_path / "R"), "--task_status_json_path", str(tmp_path / "status.json"),
               "--skip_env_setup", "--no_progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err[-3000:]
    (line,) = [ln for ln in err.splitlines() if "error:" in ln]
    assert "No space left on device" in line and str(tmp_path / "R") in line and "free space" in line


@pytest.mark.parametrize("limit", [None, "2"])
def test_a_negative_box_coordinate_in_a_plan_is_a_one_line_error_naming_the_plan(tmp_path, phantom_dir, phantom_lists,
                                                                               limit):
    """Upstream's loader stores box coordinates as uint16 (YongchengYAO/MedVision README.md, the version whose newest
    news entry is 2025-12-21, quoting MedVision.py: ``features_dict_BoxSize``, ``bounding_boxes`` ``min_coords`` and
    ``max_coords`` ``Sequence(Value("uint16"), length=2)``; R-old in docs/spec/data-loader.md), so a negative one
    cannot be a sample there either; here the task's reader says so in one line, with or without --sample_limit
    (which reads the plan through another index), and no traceback."""
    import gzip
    import shutil

    data = tmp_path / "Data"
    shutil.copytree(phantom_dir, data, ignore=shutil.ignore_patterns(".cache"))
    plan = data / "Datasets" / "PhantomCT" / "benchmark_plan_detection_v1.0.0.json.gz"
    p = json.loads(gzip.decompress(plan.read_bytes()))
    planted = 0
    for case in p["tasks"][0]["test_cases"][:1]:
        for axis in "xyz":
            for entry in case.get(f"slice_profiles_{axis}") or []:
                for item in entry["slice_profile"]:
                    for box in item["bboxes"]:
                        box["min_coords"][0] = -2
                        planted += 1
    assert planted
    plan.write_bytes(gzip.compress(json.dumps(p).encode()))
    task = "PhantomCT_BoxCoordinate_Task01_Axial"
    counts = json.loads((phantom_lists / "tasks_MedVision-Phantom-detect.json").read_text())
    (tmp_path / "tasks.json").write_text(json.dumps({task: counts[task]}))
    res = run_cli("run", "--model", "oracle", "--data_dir", str(data), "--tasks_list_json_path",
                  str(tmp_path / "tasks.json"), "--results_dir", str(tmp_path / "R"), "--task_status_json_path",
                  str(tmp_path / "status.json"), "--skip_env_setup", "--no_progress",
                  *(["--sample_limit", limit] if limit else []), cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    errors = [ln for ln in res.stderr.splitlines() if "error" in ln.lower()]
    assert len(errors) == 1 and str(plan) in errors[0] and "task 1" in errors[0], res.stderr[-3000:]
    assert not list((tmp_path / "R").rglob("parsed.jsonl"))  # nothing scored from the unreadable task


@pytest.mark.parametrize("content", [
    {"slice_landmarks_x": [5]},  # an entry that is no object
    {"slice_landmarks_x": {"0": {}}},  # the entries an object, not a list
    {"slice_landmarks_x": [{"slice_idx": 3, "landmarks": {"P1": [3, None, 7]}}]},  # a coordinate that is null
    {"slice_landmarks_x": [{"slice_idx": 3, "landmarks": 7}]},  # landmarks that are no object
])
def test_a_landmark_file_of_the_wrong_shape_is_a_one_line_error_naming_it(tmp_path, content):
    from medvision_bm.data.landmarks import slice_landmarks

    path = tmp_path / "case_1.json"
    path.write_text(json.dumps(content))
    with pytest.raises(UserError, match="cannot be read") as exc:
        slice_landmarks(path, 0, 3)
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)


def test_a_landmark_file_read_whole_gives_each_point_on_its_slice(tmp_path):
    from medvision_bm.data.landmarks import slice_landmarks

    path = tmp_path / "case_1.json"
    path.write_text(json.dumps({"slice_landmarks_y": [
        {"slice_idx": 2, "landmarks": [{"P1": [4, 2, 9], "P2": ["5.5", 2, 1], "ROI_pixels_count": 12}]},
        {"slice_idx": 3, "landmarks": {"P3": [0, 3, 0]}}]}))
    assert slice_landmarks(path, 1, 2) == {"P1": (4.0, 9.0), "P2": (5.5, 1.0)}
