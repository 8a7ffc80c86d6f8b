"""The dataset layer: planner/ACK/data_dir contract, layout errors, slices, and the phantom generator."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from medvision_bm.data.layout import DataDir, load_tasks_list, parse_task_name
from medvision_bm.data.phantom import DEFAULT_SEED, make_phantom
from medvision_bm.data.planner import (
    LATEST_RELEASE,
    PLANNER_VERSIONS,
    resolve_data_dir,
    resolve_planner_version,
)
from medvision_bm.data.slices import clear_caches, render_slice, slice_to_display
from medvision_bm.errors import UserError
from medvision_bm.geometry import box_from_mask
from medvision_bm.tasks.metrics import target


# ------------------------------------------------------------------ planner versions and the data dir
def test_default_planner_version_is_the_latest():
    assert resolve_planner_version({}) == LATEST_RELEASE == PLANNER_VERSIONS[-1]


def test_pinning_an_older_version_needs_the_ack():
    old = PLANNER_VERSIONS[0]
    with pytest.raises(UserError, match=f"MedVision_ACK_RELEASE={LATEST_RELEASE}"):
        resolve_planner_version({"MedVision_PLANNER_VERSION": old})
    with pytest.raises(UserError, match="latest release"):
        resolve_planner_version({"MedVision_PLANNER_VERSION": old, "MedVision_ACK_RELEASE": old})
    assert resolve_planner_version({"MedVision_PLANNER_VERSION": f"v{old}", "MedVision_ACK_RELEASE": LATEST_RELEASE}) == old


def test_unknown_planner_version_is_named():
    with pytest.raises(UserError, match=r"'9\.9\.9' is not a planner version"):
        resolve_planner_version({"MedVision_PLANNER_VERSION": "9.9.9"})


def test_data_dir_and_env_must_agree(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert resolve_data_dir(a, {"MedVision_DATA_DIR": str(a)}) == a.resolve()
    assert resolve_data_dir(None, {"MedVision_DATA_DIR": str(b)}) == b.resolve()
    with pytest.raises(UserError, match="name different folders"):
        resolve_data_dir(a, {"MedVision_DATA_DIR": str(b)})
    with pytest.raises(UserError, match="--data_dir"):
        resolve_data_dir(None, {})


# ------------------------------------------------------------------ layout errors
def test_missing_data_dir_and_missing_datasets(tmp_path):
    with pytest.raises(UserError, match=r"does not exist.*make-phantom"):
        DataDir(tmp_path / "nope", LATEST_RELEASE)
    with pytest.raises(UserError, match="no Datasets/"):
        DataDir(tmp_path, LATEST_RELEASE)


def test_unknown_task_names(phantom_dir):
    data = DataDir(phantom_dir, LATEST_RELEASE)
    with pytest.raises(UserError, match="does not follow"):
        data.docs("not-a-task")
    with pytest.raises(UserError, match="dataset 'Nowhere' is not under"):
        data.docs("Nowhere_BoxCoordinate_Task01_Axial")
    with pytest.raises(UserError, match="is not in dataset PhantomCT"):
        data.docs("PhantomCT_BoxCoordinate_Task09_Axial")


def test_missing_plan_for_a_version(tmp_path, phantom_dir):
    root = tmp_path / "d"
    shutil.copytree(phantom_dir, root)
    for p in (root / "Datasets" / "PhantomMR" / "BenchmarkPlans").glob(f"*v{PLANNER_VERSIONS[0]}*"):
        p.unlink()
    with pytest.raises(UserError, match=f"no benchmark plan for planner version {PLANNER_VERSIONS[0]}"):
        DataDir(root, PLANNER_VERSIONS[0]).docs("PhantomMR_BoxCoordinate_Task01_Axial")


def test_malformed_tasks_lists(tmp_path):
    p = tmp_path / "t.json"
    p.write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        load_tasks_list(p)
    p.write_text("[1, 2]")
    with pytest.raises(UserError, match="non-empty JSON object"):
        load_tasks_list(p)
    p.write_text(json.dumps({"PhantomCT_BoxCoordinate_Task01_Axial": "ten"}))
    with pytest.raises(UserError, match="non-negative integer"):
        load_tasks_list(p)
    with pytest.raises(UserError, match="does not exist"):
        load_tasks_list(tmp_path / "missing.json")


def test_task_name_pattern():
    tn = parse_task_name("Ceph-Biometrics-400_BiometricsFromLandmarks_Distance_Task01_Sagittal-CoT")
    assert (tn.dataset, tn.family, tn.task_id, tn.plane) == ("Ceph-Biometrics-400", "AD", "Task01", "Sagittal")


# ------------------------------------------------------------------ slices
def _write_volume(path: Path, array: np.ndarray, spacing=(0.5, 0.75, 2.0)) -> None:
    img = nib.Nifti1Image(array.astype(np.float32), np.diag([*spacing, 1.0]))
    img.header.set_zooms(spacing)
    nib.save(img, str(path))


def test_slice_axis_index_orientation_and_reshape(tmp_path):
    vol = np.zeros((6, 5, 4), np.float32)
    vol[1, 3, 2] = 100.0  # i=1 (column), j=3 (row from the bottom) in axial slice k=2
    path = tmp_path / "v.nii.gz"
    _write_volume(path, vol)
    clear_caches()
    img = np.asarray(render_slice(path, 2, 2))
    assert img.shape == (5, 6, 3)  # rows = j axis (5), columns = i axis (6)
    rows, cols = np.nonzero(img[..., 0] == 255)
    assert (rows.tolist(), cols.tolist()) == ([5 - 1 - 3], [1])
    assert np.asarray(render_slice(path, 2, 1)).max() == 0  # another slice is empty
    small = render_slice(path, 2, 2, reshape_hw=(10, 3))
    assert small.size == (3, 10)  # PIL size is (width, height)
    assert slice_to_display(vol, 0, 1).shape == (4, 5)  # sagittal: rows = k, columns = j


def test_corrupt_and_truncated_nifti_give_one_line_errors(tmp_path):
    vol = np.random.default_rng(0).normal(size=(8, 8, 4))
    good = tmp_path / "good.nii.gz"
    _write_volume(good, vol)
    truncated = tmp_path / "trunc.nii.gz"
    truncated.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    garbage = tmp_path / "garbage.nii.gz"
    garbage.write_bytes(gzip.compress(b"this is not a nifti file at all" * 20))
    clear_caches()
    for bad in (truncated, garbage):
        with pytest.raises(UserError, match="corrupt or truncated") as info:
            render_slice(bad, 2, 1)
        assert "\n" not in str(info.value) and bad.name in str(info.value)
    with pytest.raises(UserError, match="does not exist"):
        render_slice(tmp_path / "missing.nii.gz", 2, 0)
    with pytest.raises(UserError, match="outside image"):
        render_slice(good, 2, 99)


# ------------------------------------------------------------------ the phantom
def test_phantom_is_deterministic_and_seeded(tmp_path, phantom_dir):
    again = tmp_path / "again"
    make_phantom(again, seed=DEFAULT_SEED)
    for plan in sorted(phantom_dir.glob("Datasets/*/BenchmarkPlans/*.json.gz")):
        assert (again / plan.relative_to(phantom_dir)).read_bytes() == plan.read_bytes()
    img = sorted(phantom_dir.glob("Datasets/PhantomCT/Images/*.nii.gz"))[0]
    assert (again / img.relative_to(phantom_dir)).read_bytes() == img.read_bytes()
    other = tmp_path / "other"
    make_phantom(other, seed=DEFAULT_SEED + 1)
    assert (other / img.relative_to(phantom_dir)).read_bytes() != img.read_bytes()


def test_committed_task_lists_match_the_default_seed(tmp_path, repo_root, phantom_dir):
    data = DataDir(phantom_dir, LATEST_RELEASE)
    tasks = data.tasks()
    committed: dict[str, int] = {}
    for fam in ("detect", "TL", "AD"):
        committed.update(load_tasks_list(repo_root / "tasks_list" / f"tasks_MedVision-Phantom-{fam}.json"))
    assert committed == tasks
    assert len(tasks) >= 9 and all(n > 0 for n in tasks.values())


def test_both_planner_versions_exist_with_train_and_test_splits(phantom_dir):
    for version in PLANNER_VERSIONS:
        data = DataDir(phantom_dir, version)
        for task in data.tasks():
            assert data.docs(task, "test") and data.docs(task, "train")
    counts = [sum(DataDir(phantom_dir, v).tasks().values()) for v in PLANNER_VERSIONS]
    assert counts[0] != counts[1]


def test_phantom_annotations_agree_with_masks_and_pixels(phantom_dir):
    data = DataDir(phantom_dir, LATEST_RELEASE)
    for task in data.tasks():
        for doc in data.docs(task)[:4]:
            root = phantom_dir / "Datasets" / doc.dataset
            assert doc.key and doc.pixel_hw_mm[0] > 0 and len(target(doc)) in (1, 2, 4)
            if doc.family == "detect":
                mask = np.asarray(nib.load(str(root / doc.mask)).dataobj)
                m2 = slice_to_display(mask, doc.slice_dim, doc.slice_idx) == doc.label
                assert box_from_mask(m2) == doc.annotation["box_px"]
            if doc.family == "AD":
                img = np.asarray(render_slice(root / doc.image, doc.slice_dim, doc.slice_idx, window=doc.window))
                for x, y in doc.annotation["landmarks"].values():
                    # a landmark is rendered visibly: its pixel stands out from the median of the image
                    assert img[int(y), int(x), 0] > np.median(img[..., 0]) + 60
    v = DataDir(phantom_dir, LATEST_RELEASE).docs("PhantomCT_TumorLesionSize_Task01_Axial")
    assert all(d.annotation["major_axis_mm"] >= d.annotation["minor_axis_mm"] > 0 for d in v)
