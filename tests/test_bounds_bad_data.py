"""Issue 24 E: bad data is a per-sample failure with its reason or a one-line error, never a traceback: judge
replies with numbers JSON cannot hold or nested past any reply, volumes that are not 3D or have no pixel size,
status and tracker files nested deep, a negative phantom seed, contradictory set-up flags."""

from __future__ import annotations

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
def test_a_judge_reply_with_numbers_json_cannot_hold_is_an_invalid_reply_stored_as_a_json_line(values):
    raw = '{"final_answer": {"status": "present", "span": "3 mm", "values": ' + values + '}, "steps": []}'
    rec = reply_record("k", "the answer is 3 mm", "sig", GenResult("k", raw), "TL", None)
    assert rec["status"] == "invalid" and rec["reason"] == "non_numeric_values", rec
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
    from medvision_bm.data.plans import data_release

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
