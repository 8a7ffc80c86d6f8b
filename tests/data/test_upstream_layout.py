"""The data layer on small ``Data/`` folders in upstream MedVision's exact layout (built in each test).

Sources are the tags of docs/spec/data-loader.md section 0 (upstream YongchengYAO/MedVision unless named):

* R-old  ``README.md`` as of 2025-12-21 (its newest news entry): quote of the paper-era ``MedVision.py``
         ``_generate_examples`` + feature dicts
* R-new  ``README.md`` @36704bd (dataset release v1.2.1): the newer loader (``n_total_clusters`` filter, v1.0.0 fallback)
* BP     ``medvision_ds/utils/benchmark_planner.py`` (v1.0.0 era, the package the Hugging Face dataset ships)
         ``flatten_slice_profiles_2d``
* C      ``skills/medvision/sub-skills/dataset-and-tasks/references/concepts.md`` @39dd6bf
* DL     ``.../references/data-layout.md`` @39dd6bf (plan schema, key order, layout)
* TS     ``.../references/troubleshooting.md`` @39dd6bf
* TK     ``.../references/task-lists.md`` @39dd6bf
* EV     ``skills/medvision/sub-skills/environment-setup/references/environment-variables.md`` @39dd6bf
         (``_enforce_release_ack``, ``_normalize_requested``)
* PU     ``src/medvision_bm/utils/plan_utils.py`` @9fff178 (ceiling rule)
* SD     ``src/medvision_bm/utils/summarize_datasets.py`` @1df0ffe (re-count of the loader filters)
* REL    ``docs/dataset-release/release-v1.1.0.md`` @2093f97, ``-v1.1.1`` @fe27464, ``-v1.2.0`` @36704bd,
         ``-v1.2.1`` @36704bd, ``-v1.4.0`` @75cd023
* MM     shaunakkarnik/MedMeasure ``medmeasure/data.py`` @4039669 (row-by-row check of the loader's order)
* EX     ``script/visualization/export_explorer_data.py`` @9ce7f0a (landmark folder stamping)
* INST   ``src/medvision_bm/utils/data_utils.py`` ``tasks_to_configs``, master c221615
"""

from __future__ import annotations

import gzip
import json
import os

import nibabel as nib
import pytest

import medvision_bm.data.plans as plans_mod
import medvision_bm.data.samples as samples_mod
from medvision_bm.data.docs import UPSTREAM_FIELDS
from medvision_bm.data.layout import VARIANTS, DataDir, parse_task_name
from medvision_bm.data.planner import LATEST_RELEASE, DatasetContract
from medvision_bm.data.plans import PlanError
from medvision_bm.errors import UserError
from upstream_fixtures import (
    ad_entry,
    ad_metric,
    bbox,
    case,
    det_entry,
    det_item,
    env,
    f16,
    garble_keeping_size_and_mtime,
    open_data,
    plan,
    random_plan,
    reference_rows,
    reorder,
    task,
    tl_cluster,
    tl_entry,
    write_plan,
    write_volumes,
)


@pytest.fixture(autouse=True)
def _no_outside_cache(monkeypatch):
    """Indexes go under each test's own data folder."""
    monkeypatch.delenv("MEDVISION_CACHE_DIR", raising=False)


def one_line_error(excinfo) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg, msg
    return msg


def det_plan(test_cases, train_cases=None, dataset="KiTS23"):
    return plan(dataset, [task("detection", train_cases or [], test_cases)])


def tl_plan(test_cases, target=2, train_cases=None, dataset="KiTS23"):
    return plan(dataset, [task("biometry", train_cases or [], test_cases, target_label=target,
                               landmark_folder=f"Landmarks-Label{target}")])


def keys_of(docs):
    return [(d.image_file.split("/")[-1].split(".")[0], d.slice_idx, d.label) for d in docs]


# =============================================================================================== filters


def test_detection_label_with_more_than_one_box_is_dropped(tmp_path):
    # R-old: "if len(bounding_boxes) > 1: continue"; SD keeps iff len(bboxes) == 1 ("MedVision.py" 9192).
    c = case("case_00001", z=[det_entry(5, det_item(1, bbox((0, 0), (15, 15)), bbox((20, 20), (15, 15))),
                                        det_item(2, bbox((3, 3), (12, 12))))])
    write_plan(tmp_path, "KiTS23", "detection", "1.0.0", det_plan([c]))
    docs = open_data(tmp_path).samples("KiTS23_BoxCoordinate_Task01_Axial").docs()
    assert [(d.slice_idx, d.label) for d in docs] == [(5, 2)]
    lifted = open_data(tmp_path, filtering="true").samples("KiTS23_BoxCoordinate_Task01_Axial").docs()
    assert [(d.slice_idx, d.label) for d in lifted] == [(5, 1), (5, 2)]
    assert lifted[0].bounding_boxes["min_coords"] == [[0, 0], [20, 20]]  # both boxes, dict of lists


@pytest.mark.parametrize(("dims", "kept"), [((9, 20), False), ((20, 9), False), ((9, 9), False),
                                            ((10, 10), True), ((10, 40), True), ((40, 10), True)])
def test_box_under_10_px_on_either_side_is_dropped(tmp_path, dims, kept):
    # R-old: "Skip cases with a bounding box size smaller than 10 pixels in any dimension" (dimensions[0] < 10 or
    # dimensions[1] < 10); SD keeps iff dims[0] >= 10 and dims[1] >= 10 ("MedVision.py" 9195-8).
    c = case("case_00001", z=[det_entry(4, det_item(1, bbox((2, 3), dims)), det_item(2, bbox((1, 1), (30, 30))))])
    write_plan(tmp_path, "KiTS23", "detection", "1.0.0", det_plan([c]))
    docs = open_data(tmp_path).samples("KiTS23_BoxCoordinate_Task01_Axial").docs()
    assert [d.label for d in docs] == ([1, 2] if kept else [2])
    if kept:
        assert docs[0].bounding_boxes["dimensions"] == [list(dims)]


def test_tl_slice_with_more_than_one_cluster_is_dropped(tmp_path):
    # R-new + REL v1.1.0: plans from 1.1.0 carry n_total_clusters; "n_total_clusters > 1" drops the slice even when
    # only one cluster was measured (the raw component count, before the size threshold).
    c = case("case_00001", landmark_folder="Landmarks-Label2-v1.1.1", z=[
        tl_entry(3, tl_cluster(20.0, 10.0), n_total=1),
        tl_entry(4, tl_cluster(21.0, 11.0), n_total=2),
        tl_entry(5, tl_cluster(22.0, 12.0), tl_cluster(5.0, 3.0), n_total=2),
        tl_entry(6, tl_cluster(23.0, 13.0), n_total=1)])
    write_plan(tmp_path, "KiTS23", "biometry", "1.1.1", tl_plan([c]))
    docs = open_data(tmp_path).samples("KiTS23_TumorLesionSize_Task01_Axial").docs()
    assert [d.slice_idx for d in docs] == [3, 6]
    assert [d.biometric_profile["metric_value_major_axis"] for d in docs] == [[20.0], [23.0]]


def test_tl_v100_plans_fall_back_to_the_number_of_measured_clusters(tmp_path):
    # R-old / R-new fallback: a v1.0.0 entry has no n_total_clusters, so "len(biometric_profile) > 1" drops it (SD
    # "MedVision.py" 9337-45). BP: a cluster lacking its L-3-4 metric is left out of biometric_profile, so it does
    # not count.
    c = case("case_00001", landmark_folder="Landmarks-Label2", z=[
        tl_entry(3, tl_cluster(20.0, 10.0)),
        tl_entry(4, tl_cluster(21.0, 11.0), tl_cluster(6.0, 4.0)),
        tl_entry(5, tl_cluster(22.0, 12.0), tl_cluster(6.0, 4.0, keys=("L-1-2",)))])
    write_plan(tmp_path, "KiTS23", "biometry", "1.0.0", tl_plan([c]))
    docs = open_data(tmp_path, pin="1.0.0", ack=LATEST_RELEASE).samples("KiTS23_TumorLesionSize_Task01_Axial").docs()
    assert [d.slice_idx for d in docs] == [3, 5]
    assert docs[1].biometric_profile["metric_value_major_axis"] == [22.0]


def test_angle_distance_rows_are_never_dropped_and_split_by_metric_type(tmp_path):
    # R-old: A/D configs have no filter; the _Distance/_Angle configs keep only their metric_type (C: taskType
    # "Biometrics-From-Landmarks-Distance"/"-Angle"); one row per metric of a slice entry, several entries may share
    # a slice_idx (docs/spec/data-loader.md sections 2.4 and 9).
    c = case("001", mask_folder=None, landmark_folder="Landmarks", shape=(1, 60, 80), voxel=(0.1, 0.1, 0.1), x=[
        ad_entry(0, ad_metric("angle", "A-L_2_5-L_2_6", 2.87)),
        ad_entry(0, ad_metric("distance", "L-1-10", 71.3)),
        ad_entry(0, ad_metric("distance", "L-2-3", 1.0), ad_metric("angle", "A-L_1_2-L_3_4", 175.0))])
    write_plan(tmp_path, "Ceph-Biometrics-400", "biometry", "1.0.0",
               plan("Ceph-Biometrics-400", [task("biometry", [], [c], biometrics_map=[{"metric_type": "angle"}])]))
    for filtering in (None, "true"):
        data = open_data(tmp_path, filtering=filtering)
        dist = data.samples("Ceph-Biometrics-400_BiometricsFromLandmarks_Distance_Task01_Sagittal").docs()
        angle = data.samples("Ceph-Biometrics-400_BiometricsFromLandmarks_Angle_Task01_Sagittal").docs()
        both = data.samples("Ceph-Biometrics-400_BiometricsFromLandmarks_Task01_Sagittal").docs()
        assert [d.biometric_profile["metric_key"] for d in dist] == ["L-1-10", "L-2-3"]
        assert [d.biometric_profile["metric_key"] for d in angle] == ["A-L_2_5-L_2_6", "A-L_1_2-L_3_4"]
        assert [d.biometric_profile["metric_key"] for d in both] == ["A-L_2_5-L_2_6", "L-1-10", "L-2-3",
                                                                     "A-L_1_2-L_3_4"]
        assert [d.index for d in dist] == [0, 1] and [d.index for d in angle] == [0, 1]
        assert {d.taskType for d in dist} == {"Biometrics-From-Landmarks-Distance"}
        assert {d.taskType for d in angle} == {"Biometrics-From-Landmarks-Angle"}
        assert {d.taskType for d in both} == {"Biometrics-From-Landmarks"}
        assert all(d.label is None and d.mask_file is None for d in both)


@pytest.mark.parametrize(("value", "lifted"), [("true", True), ("TRUE", True), ("True", True), ("1", False),
                                               ("yes", False), ("false", False), ("", False), (None, False),
                                               (" true", False), ("true\n", False), ("true ", False)])
def test_disable_sample_filtering_only_for_the_word_true(tmp_path, value, lifted):
    # C: MedVision_DISABLE_SAMPLE_FILTERING is "compared case-insensitively to \"true\""; TS: "=1" has no effect.
    # "Compared case-insensitively" is the loader's ``value.lower() == "true"``: nothing is stripped, so surrounding
    # white space leaves the filters on.
    det = case("case_00001", z=[det_entry(1, det_item(1, bbox((0, 0), (5, 5))), det_item(2, bbox((0, 0), (12, 12))))])
    tl = case("case_00001", landmark_folder="Landmarks-Label2-v1.4.0",
              z=[tl_entry(1, tl_cluster(9.0, 4.0), tl_cluster(8.0, 3.0), n_total=2), tl_entry(2, tl_cluster(9.0, 4.0),
                                                                                              n_total=1)])
    write_plan(tmp_path, "KiTS23", "detection", "1.0.0", det_plan([det]))
    write_plan(tmp_path, "KiTS23", "biometry", "1.4.0", tl_plan([tl]))
    data = open_data(tmp_path, filtering=value)
    assert data.contract.filtering is (not lifted)
    assert len(data.samples("KiTS23_BoxCoordinate_Task01_Axial")) == (2 if lifted else 1)
    tl_docs = data.samples("KiTS23_TumorLesionSize_Task01_Axial").docs()
    assert [d.slice_idx for d in tl_docs] == ([1, 2] if lifted else [2])
    if lifted:  # REL v1.4.0: a lifted T/L row carries one biometric_profile element per measured cluster
        assert tl_docs[0].biometric_profile["metric_value_major_axis"] == [9.0, 8.0]


# =============================================================================================== order


def test_rows_follow_plan_order_and_doc_id_is_the_position_after_filtering(tmp_path):
    # R-old: for each case of <split>_cases (plan order), each entry of slice_profiles_<axis> (list order), each item
    # of slice_profile (list order); rows yielded in candidate order. MM: doc_id = position among kept rows
    # ("loader_index = len(result)"), not the HF key idx.
    tiny = bbox((0, 0), (4, 4))
    big = bbox((0, 0), (12, 12))
    cases = [
        case("case_b", z=[det_entry(7, det_item(3, tiny), det_item(1, big)), det_entry(3, det_item(2, big))]),
        case("case_a", z=[det_entry(9, det_item(5, big), det_item(4, big))]),
        case("case_c", z=[det_entry(0, det_item(1, tiny))]),
        case("case_d", z=[det_entry(2, det_item(1, big))]),
    ]
    write_plan(tmp_path, "KiTS23", "detection", "1.0.0", det_plan(cases, train_cases=[case("case_t", z=[
        det_entry(1, det_item(1, big))])]))
    samples = open_data(tmp_path).samples("KiTS23_BoxCoordinate_Task01_Axial")
    docs = samples.docs()
    assert keys_of(docs) == [("case_b", 7, 1), ("case_b", 3, 2), ("case_a", 9, 5), ("case_a", 9, 4),
                             ("case_d", 2, 1)]
    assert [d.index for d in docs] == [0, 1, 2, 3, 4]
    assert keys_of(samples.docs([0])) == [("case_b", 7, 1)]  # the first kept row, not the dropped label-3 one
    assert [d.index for d in samples.docs([4, 0, 2])] == [4, 0, 2]
    assert samples.docs([4, 0, 2])[0].key == docs[4].key
    with pytest.raises(UserError, match=r"sample index 5 is out of range .*\(5 samples\)"):
        samples.docs([5])
    train = open_data(tmp_path).samples("KiTS23_BoxCoordinate_Task01_Axial_Train").docs()
    assert keys_of(train) == [("case_t", 1, 1)] and train[0].split == "train"


def test_each_plane_reads_its_own_slice_profiles(tmp_path):
    # R-old: Sagittal -> slice_profiles_x, Coronal -> _y, Axial -> _z; a missing key means no rows.
    big = bbox((0, 0), (12, 12))
    c = case("case_00001", x=[det_entry(1, det_item(1, big))], y=[det_entry(2, det_item(2, big))],
             z=[det_entry(3, det_item(3, big))])
    del c["slice_profiles_y"]
    write_plan(tmp_path, "KiTS23", "detection", "1.0.0", det_plan([c]))
    data = open_data(tmp_path)
    assert keys_of(data.samples("KiTS23_BoxCoordinate_Task01_Sagittal").docs()) == [("case_00001", 1, 1)]
    assert len(data.samples("KiTS23_BoxCoordinate_Task01_Coronal")) == 0
    assert keys_of(data.samples("KiTS23_BoxCoordinate_Task01_Axial").docs()) == [("case_00001", 3, 3)]


# =============================================================================================== values


def kits23_detection(tmp_path):
    """A KiTS23 detection case (upstream's key names, illustrative values; docs/spec/data-loader.md section 2.3)."""
    c = case("case_00123", shape=(512, 512, 88), voxel=(0.781, 0.781, 3.0), z=[det_entry(57,
        det_item(1, {"min_coords": [212, 268], "max_coords": [258, 331], "center_coords": [235, 299],
                     "dimensions": [47, 64], "sizes": [36.707, 49.984], "mask_image_ratio": 0.0071}),
        det_item(2, {"min_coords": [230, 300], "max_coords": [236, 309], "center_coords": [233, 304],
                     "dimensions": [7, 10], "sizes": [5.467, 7.81], "mask_image_ratio": 0.0002}))])
    write_plan(tmp_path, "KiTS23", "detection", "1.0.0", det_plan([c]))


def test_detection_row_of_the_kits23_example(tmp_path):
    # R-old feature dicts: pixel_size/voxel_size Sequence(float16), bounding_boxes Sequence({... dimensions uint16,
    # sizes float16}) read back as a dict of lists, mask_image_ratio not in the schema; paths joined onto
    # <data_dir>/Datasets/<dataset>. (float16 of 36.707 is 36.71875, of 49.984 is 49.96875.)
    kits23_detection(tmp_path)
    docs = open_data(tmp_path).samples("KiTS23_BoxCoordinate_Task01_Axial").docs()
    assert len(docs) == 1
    row = docs[0].upstream_row(tmp_path)
    assert row == {
        "dataset_name": "KiTS23", "taskID": "01", "taskType": "Box-Size",
        "image_file": f"{tmp_path}/Datasets/KiTS23/Images/case_00123.nii.gz",
        "mask_file": f"{tmp_path}/Datasets/KiTS23/Masks/case_00123.nii.gz",
        "slice_dim": 2, "slice_idx": 57, "label": 1, "image_size_2d": [512, 512],
        "pixel_size": [0.78076171875, 0.78076171875], "image_size_3d": [512, 512, 88],
        "voxel_size": [0.78076171875, 0.78076171875, 3.0],
        "bounding_boxes": {"min_coords": [[212, 268]], "max_coords": [[258, 331]], "center_coords": [[235, 299]],
                           "dimensions": [[47, 64]], "sizes": [[36.71875, 49.96875]]}}
    assert list(row) == [k for k in UPSTREAM_FIELDS if k in row]  # the loader's key order


def test_tl_row_of_the_kits23_example_has_the_target_label(tmp_path):
    # R-old: label = plan["tasks"][int(taskID)-1]["target_label"], not the labels on the slice; biometric_profile
    # Sequence of {..., metric_value_* float16}; landmark path from the (v1.4.0-stamped) plan.
    c = case("case_00123", landmark_folder="Landmarks-Label2-v1.4.0", shape=(512, 512, 88),
             voxel=(0.781, 0.781, 3.0), z=[tl_entry(41, tl_cluster(38.52, 29.07), n_total=1),
                                          tl_entry(42, tl_cluster(13.147, 9.0), n_total=2)])
    write_plan(tmp_path, "KiTS23", "biometry", "1.4.0", tl_plan([c], target=2))
    docs = open_data(tmp_path).samples("KiTS23_TumorLesionSize_Task01_Axial").docs()
    assert len(docs) == 1
    row = docs[0].upstream_row(tmp_path)
    assert row == {
        "dataset_name": "KiTS23", "taskID": "01", "taskType": "Tumor-Lesion-Size",
        "image_file": f"{tmp_path}/Datasets/KiTS23/Images/case_00123.nii.gz",
        "mask_file": f"{tmp_path}/Datasets/KiTS23/Masks/case_00123.nii.gz",
        "landmark_file": f"{tmp_path}/Datasets/KiTS23/Landmarks-Label2-v1.4.0/case_00123.json.gz",
        "slice_dim": 2, "slice_idx": 41, "label": 2, "image_size_2d": [512, 512],
        "pixel_size": [0.78076171875, 0.78076171875], "image_size_3d": [512, 512, 88],
        "voxel_size": [0.78076171875, 0.78076171875, 3.0],
        "biometric_profile": {"metric_type": ["distance"], "metric_map_name": ["lines_map"],
                              "metric_key_major_axis": ["L-1-2"], "metric_value_major_axis": [38.53125],
                              "metric_key_minor_axis": ["L-3-4"], "metric_value_minor_axis": [29.0625],
                              "metric_unit": ["mm"]}}


def test_tl_label_is_the_task_target_label_for_every_row(tmp_path):
    # R-old: the T/L label comes from the task header, whatever else is on the slice.
    cases = [case(f"c{i}", landmark_folder="Landmarks-Label6-v1.1.1",
                  z=[tl_entry(s, tl_cluster(10.0 + s, 5.0), n_total=1) for s in (2, 4)]) for i in range(2)]
    write_plan(tmp_path, "KiTS23", "biometry", "1.1.1", tl_plan(cases, target=6))
    docs = open_data(tmp_path).samples("KiTS23_TumorLesionSize_Task01_Axial").docs()
    assert [d.label for d in docs] == [6, 6, 6, 6]


def test_ad_row_of_the_ceph_example(tmp_path):
    # R-old: A/D biometric_profile is one metric dict (scalars), metric_value float16.
    c = case("001", mask_folder=None, landmark_folder="Landmarks", shape=(1, 1935, 2400), voxel=(0.1, 0.1, 0.1),
             x=[ad_entry(0, ad_metric("angle", "A-L_2_5-L_2_6", 2.87)),
                ad_entry(0, ad_metric("distance", "L-1-10", 71.3))])
    write_plan(tmp_path, "Ceph-Biometrics-400", "biometry", "1.0.0",
               plan("Ceph-Biometrics-400", [task("biometry", [], [c])]))
    data = open_data(tmp_path)
    angle = data.samples("Ceph-Biometrics-400_BiometricsFromLandmarks_Angle_Task01_Sagittal").docs()[0]
    row = angle.upstream_row(tmp_path)
    assert row["biometric_profile"] == {"metric_type": "angle", "metric_map_name": "angles_map",
                                        "metric_key": "A-L_2_5-L_2_6", "metric_value": 2.869140625,
                                        "metric_unit": "degree", "slice_dim": 0}
    assert row["image_size_2d"] == [1935, 2400] and row["pixel_size"] == [f16(0.1), f16(0.1)]
    assert row["landmark_file"] == f"{tmp_path}/Datasets/Ceph-Biometrics-400/Landmarks/001.json.gz"
    assert "label" not in row and "mask_file" not in row
    dist = data.samples("Ceph-Biometrics-400_BiometricsFromLandmarks_Distance_Task01_Sagittal").docs()[0]
    assert dist.biometric_profile["metric_value"] == 71.3125


@pytest.mark.parametrize(("plane", "dim", "size_2d", "pixel"), [
    ("Sagittal", 0, [24, 10], [0.75, 2.5]), ("Coronal", 1, [30, 10], [f16(0.781), 2.5]),
    ("Axial", 2, [30, 24], [f16(0.781), 0.75])])
def test_image_size_2d_and_pixel_size_drop_the_slice_axis(tmp_path, plane, dim, size_2d, pixel):
    # BP flatten: image_size_2d / pixel_size = array_size / voxel_size without the slice axis, in array order.
    big = bbox((0, 0), (10, 10))
    entries = {a: [det_entry(1, det_item(1, big))] for a in "xyz"}
    c = case("c1", shape=(30, 24, 10), voxel=(0.781, 0.75, 2.5), **entries)
    write_plan(tmp_path, "KiTS23", "detection", "1.0.0", det_plan([c]))
    doc = open_data(tmp_path).samples(f"KiTS23_BoxCoordinate_Task01_{plane}").docs()[0]
    assert doc.slice_dim == dim
    assert list(doc.image_size_2d) == size_2d and list(doc.pixel_size) == pixel
    assert list(doc.image_size_3d) == [30, 24, 10] and list(doc.voxel_size) == [f16(0.781), 0.75, 2.5]


def test_upstream_row_paths_are_absolute_and_name_the_files_on_disk(tmp_path):
    # R-old: "image_file": os.path.join(dataset_dir, case["image_file"]); DL: absolute paths rooted at
    # <data_dir>/Datasets/<dataset>/.
    cases = [case(f"case_{i:05d}", shape=(16, 14, 6), voxel=(0.8, 0.9, 2.0),
                  z=[det_entry(2, det_item(1, bbox((0, 0), (10, 10))))]) for i in range(2)]
    write_plan(tmp_path, "KiTS23", "detection", "1.0.0", det_plan(cases))
    write_volumes(tmp_path, "KiTS23", cases)
    data = open_data(tmp_path)
    for doc in data.samples("KiTS23_BoxCoordinate_Task01_Axial").docs():
        assert doc.image_file.startswith("KiTS23/Images/")  # docs are relative to Datasets/
        row = doc.upstream_row(data.root)
        assert os.path.isabs(row["image_file"]) and os.path.isfile(row["image_file"])
        assert os.path.isfile(row["mask_file"])
        assert list(nib.load(row["image_file"]).shape) == row["image_size_3d"]


# =============================================================================================== versions


def tl_folder(tmp_path, tl_versions, dataset="KiTS23", with_ad=True):
    """A data folder as a release ships it: detection 1.0.0, T/L biometry at ``tl_versions``, Ceph A/D 1.0.0."""
    big = bbox((0, 0), (12, 12))
    write_plan(tmp_path, dataset, "detection", "1.0.0", det_plan([case("c1", z=[det_entry(1, det_item(1, big))])],
                                                                dataset=dataset))
    for v in tl_versions:
        folder = "Landmarks-Label2" + ("" if v == "1.0.0" else f"-v{v}")
        c = case("c1", landmark_folder=folder,
                 z=[tl_entry(int(v.replace(".", "")), tl_cluster(10.0, 5.0), n_total=None if v == "1.0.0" else 1)])
        write_plan(tmp_path, dataset, "biometry", v, tl_plan([c], dataset=dataset))
    if with_ad:
        c = case("001", mask_folder=None, landmark_folder="Landmarks", shape=(1, 40, 50),
                 x=[ad_entry(0, ad_metric("distance", "L-1-2", 12.0))])
        write_plan(tmp_path, "Ceph-Biometrics-400", "biometry", "1.0.0",
                   plan("Ceph-Biometrics-400", [task("biometry", [], [c])]))


TL = "KiTS23_TumorLesionSize_Task01_Axial"
DET = "KiTS23_BoxCoordinate_Task01_Axial"
AD = "Ceph-Biometrics-400_BiometricsFromLandmarks_Distance_Task01_Sagittal"


def test_ceiling_takes_the_newest_plan_at_or_below_the_pin(tmp_path):
    # PU resolve_plan_path: newest version <= pin ("the loader's ceiling rule"); C: per (dataset, plan kind).
    tl_folder(tmp_path, ["1.0.0", "1.1.1"])
    at_110 = open_data(tmp_path, pin="1.1.0", ack="1.1.1").samples(TL)
    assert at_110.plan_version == "1.0.0"
    assert at_110.docs()[0].landmark_file == "KiTS23/Landmarks-Label2/c1.json.gz"  # EX: 1.0.0 is not stamped
    assert at_110.docs()[0].slice_idx == 100  # the 1.0.0 plan's content
    at_111 = open_data(tmp_path, pin="1.1.1").samples(TL)
    assert at_111.plan_version == "1.1.1"
    assert at_111.docs()[0].landmark_file == "KiTS23/Landmarks-Label2-v1.1.1/c1.json.gz"
    for pin in ("1.3.0", "latest"):  # nothing newer on disk: the ceiling is the newest there
        assert open_data(tmp_path, pin=pin).samples(TL).plan_version == "1.1.1"
    assert open_data(tmp_path, pin="1.1.1").samples(DET).plan_version == "1.0.0"  # detection never regenerated


def test_dataset_first_published_later_is_not_published_at_an_older_pin(tmp_path):
    # TS/EV: nothing published <= pin -> "MedVision: annotation not published at the selected version" ("This
    # dataset/task first ships at vX"; ACK does not help). DEEP-PSMA/LIDC-IDRI/LNQ2023 first ship at 1.2.0 (C).
    tl_folder(tmp_path, ["1.2.0", "1.4.0"], dataset="LNQ2023", with_ad=False)
    (tmp_path / "Datasets/LNQ2023/benchmark_plan_detection_v1.0.0.json.gz").rename(
        tmp_path / "Datasets/LNQ2023/benchmark_plan_detection_v1.2.0.json.gz")
    for name in ("LNQ2023_TumorLesionSize_Task01_Axial", "LNQ2023_BoxCoordinate_Task01_Axial"):
        with pytest.raises(UserError) as ei:
            open_data(tmp_path, pin="1.0.0", ack=LATEST_RELEASE).samples(name)
        msg = one_line_error(ei)
        assert "annotation not published at the selected version" in msg
        assert "first ships at v1.2.0" in msg and "LNQ2023" in msg
        assert str(tmp_path / "Datasets" / "LNQ2023") in msg and "benchmark_plan_" in msg  # the files it saw
        assert "Pin a later version or remove the task" in msg
    assert open_data(tmp_path, pin="1.2.0", ack="1.4.0").samples("LNQ2023_TumorLesionSize_Task01_Axial"
                                                                 ).plan_version == "1.2.0"


def test_withdrawn_mama_mia_1_2_0_never_resolves(tmp_path):
    # REL v1.2.1: MAMA-MIA and PI-CAI 1.2.0 annotations withdrawn ("1.2.1 is now the earliest version either dataset
    # offers"); TS/EV: "MedVision: annotation WITHDRAWN at the selected version". A stale 1.2.0 file on an old disk
    # must not resolve (docs/spec/data-loader.md section 4; PU does not model it).
    tl_folder(tmp_path, ["1.2.0", "1.2.1", "1.4.0"], dataset="MAMA-MIA", with_ad=False)
    name = "MAMA-MIA_TumorLesionSize_Task01_Axial"
    with pytest.raises(UserError) as ei:
        open_data(tmp_path, pin="1.2.0", ack="1.4.0").samples(name)
    msg = one_line_error(ei)
    assert "annotation WITHDRAWN at the selected version" in msg and "MAMA-MIA" in msg and "1.2.1" in msg
    assert open_data(tmp_path, pin="1.3.0", ack="1.4.0").samples(name).plan_version == "1.2.1"
    assert open_data(tmp_path, pin="latest").samples(name).plan_version == "1.4.0"
    # only the withdrawn file on disk
    for v in ("1.2.1", "1.4.0"):
        (tmp_path / f"Datasets/MAMA-MIA/benchmark_plan_biometry_v{v}.json.gz").unlink()
    with pytest.raises(UserError, match="WITHDRAWN"):
        open_data(tmp_path, pin="1.2.0").samples(name)
    with pytest.raises(UserError, match=r"has no biometry plan .*found: .*benchmark_plan_biometry_v1\.2\.0"):
        open_data(tmp_path, pin="latest").samples(name)


@pytest.mark.parametrize("pin", ["1.2.0", "1.3.0", "latest"])
def test_paused_afids_is_refused_at_every_pin(tmp_path, pin):
    # TS/EV: AFIDs, PDDCA, VerSe biometry "MedVision: annotation paused pending investigation", at every pin.
    c = case("sub-01", mask_folder=None, landmark_folder="Landmarks", x=[ad_entry(3, ad_metric("distance", "L-1-2",
                                                                                              30.0))])
    write_plan(tmp_path, "AFIDs", "biometry", "1.2.0", plan("AFIDs", [task("biometry", [], [c])]))
    with pytest.raises(UserError) as ei:
        open_data(tmp_path, pin=pin, ack=LATEST_RELEASE).samples("AFIDs_BiometricsFromLandmarks_Task01_Sagittal")
    assert "annotation paused pending investigation" in one_line_error(ei)


# ---- every planner/ACK pair upstream launchers export (EV _enforce_release_ack; REL v1.1.1, v1.2.0, v1.4.0)


def test_pin_1_0_0_with_ack_1_1_1_on_a_1_1_1_folder(tmp_path):
    # REL v1.1.1: pin below latest needs MedVision_ACK_RELEASE=1.1.1; EV: accepted = the pair's newest (1.1.1 here).
    tl_folder(tmp_path, ["1.0.0", "1.1.0", "1.1.1"])
    data = open_data(tmp_path, pin="1.0.0", ack="1.1.1")
    assert data.samples(TL).plan_version == "1.0.0"
    assert data.samples(DET).plan_version == "1.0.0"
    assert data.samples(AD).plan_version == "1.0.0"


def test_pin_1_0_0_with_ack_1_4_0_on_a_1_4_0_folder(tmp_path):
    # REL v1.4.0 / LO newest: `MedVision_PLANNER_VERSION=1.0.0 MedVision_ACK_RELEASE=1.4.0` reproduces the paper.
    tl_folder(tmp_path, ["1.0.0", "1.1.0", "1.1.1", "1.4.0"])
    data = open_data(tmp_path, pin="1.0.0", ack="1.4.0")
    assert [data.samples(t).plan_version for t in (TL, DET, AD)] == ["1.0.0"] * 3


def test_pin_1_0_0_with_ack_1_1_1_on_a_1_4_0_folder_is_refused(tmp_path):
    # EV: pin < newest(dataset, kind) and ACK not in {newest, release} -> "MedVision: outdated annotation version —
    # acknowledgement required", "Dataset: X (plan kind: biometry)", both accepted values printed. Notes section 4:
    # "A launcher's MedVision_ACK_RELEASE='1.1.1' with pin 1.0.0 therefore fails on T/L configs under the 1.4.0 loader."
    tl_folder(tmp_path, ["1.0.0", "1.1.0", "1.1.1", "1.4.0"])
    data = open_data(tmp_path, pin="1.0.0", ack="1.1.1")
    with pytest.raises(UserError) as ei:
        data.samples(TL)
    msg = one_line_error(ei)
    assert "outdated annotation version — acknowledgement required" in msg
    assert "Dataset: KiTS23 (plan kind: biometry)" in msg
    assert "MedVision_ACK_RELEASE to 1.4.0" in msg and "'1.1.1'" in msg
    # detection and A/D at 1.0.0 are their newest: the same environment reads them
    assert data.samples(DET).plan_version == "1.0.0" and data.samples(AD).plan_version == "1.0.0"


def test_detection_and_ad_at_1_0_0_need_no_ack(tmp_path):
    # REL v1.4.0: pin 1.0.0 needs the ACK only for the T/L datasets' biometry; detection and A/D need nothing.
    tl_folder(tmp_path, ["1.0.0", "1.4.0"])
    data = open_data(tmp_path, pin="1.0.0", ack=None)
    assert data.samples(DET).plan_version == "1.0.0" and data.samples(AD).plan_version == "1.0.0"
    with pytest.raises(UserError, match=r"acknowledgement required.*MedVision_ACK_RELEASE to 1\.4\.0"):
        data.samples(TL)


def test_tracker_release_does_not_widen_the_ack(tmp_path):
    # EV _enforce_release_ack: the pair's newest or the loader release; our extra value (the folder's own release, so
    # that a folder downloaded at 1.1.1 takes its launchers' ACK=1.1.1) is never lower than the plans on disk.
    tl_folder(tmp_path, ["1.0.0", "1.4.0"])
    (tmp_path / ".downloaded_datasets.json").write_text(json.dumps({"medvision_ds": "1.1.1"}))
    with pytest.raises(UserError, match="acknowledgement required"):
        open_data(tmp_path, pin="1.0.0", ack="1.1.1").samples(TL)


def test_latest_pins_the_release(tmp_path):
    # EV: `latest` = the release hardcoded in MedVision.py (1.4.0).
    tl_folder(tmp_path, ["1.0.0", "1.4.0"])
    data = open_data(tmp_path, pin="latest")
    assert data.planner_version == LATEST_RELEASE == "1.4.0"
    assert data.samples(TL).plan_version == "1.4.0"
    assert open_data(tmp_path, pin=" 1.4.0 ").planner_version == "1.4.0"  # EV: surrounding whitespace stripped


@pytest.mark.parametrize(("value", "banner"), [
    ("v1.1.1", "invalid MedVision_PLANNER_VERSION"), ("1.2", "invalid MedVision_PLANNER_VERSION"),
    ("1.1.5", "unknown MedVision_PLANNER_VERSION"), ("2.0.0", "unknown MedVision_PLANNER_VERSION"),
    (None, "annotation version selection required"), ("", "annotation version selection required")])
def test_bad_planner_versions(tmp_path, value, banner):
    # EV _normalize_requested / TS banners: unset -> "annotation version selection required"; not latest/X.Y.Z ->
    # "invalid ... Got: '<value>'"; well-formed but unpublished -> "unknown".
    tl_folder(tmp_path, ["1.0.0"])
    with pytest.raises(UserError) as ei:
        DatasetContract.resolve(tmp_path, env(pin=value))
    msg = one_line_error(ei)
    assert banner in msg
    if value:
        assert repr(value) in msg


# =============================================================================================== layout


def test_sub_dataset_folders_and_modality_image_folders(tmp_path):
    # DL / file-structure.md: one plan per parent dataset; case paths name the sub-dataset and modality folder
    # (AMOS22 task 1 "AMOS22-CT/Images", task 2 "AMOS22-MRI/Images"; BraTS24 "BraTS24-GLI/Images-t2f"); rows carry
    # the parent dataset_name.
    big = bbox((0, 0), (12, 12))
    ct = [case("amos_0001", image_folder="AMOS22-CT/Images", mask_folder="AMOS22-CT/Masks",
               z=[det_entry(3, det_item(1, big))])]
    mr = [case("amos_0507", image_folder="AMOS22-MRI/Images", mask_folder="AMOS22-MRI/Masks",
               z=[det_entry(4, det_item(2, big))])]
    write_plan(tmp_path, "AMOS22", "detection", "1.0.0",
               plan("AMOS22", [task("detection", [], ct, task_no=1, image_folder="AMOS22-CT/Images"),
                               task("detection", [], mr, task_no=2, image_folder="AMOS22-MRI/Images")]))
    write_volumes(tmp_path, "AMOS22", ct + mr)
    gli = [case("BraTS-GLI-00001-000", image_folder="BraTS24-GLI/Images-t2f", mask_folder="BraTS24-GLI/Masks",
                landmark_folder="BraTS24-GLI/Landmarks-Label1-v1.4.0", z=[tl_entry(50, tl_cluster(30.0, 20.0),
                                                                                    n_total=1)])]
    write_plan(tmp_path, "BraTS24", "biometry", "1.4.0", plan("BraTS24", [task(
        "biometry", [], gli, image_folder="BraTS24-GLI/Images-t2f", target_label=1,
        landmark_folder="BraTS24-GLI/Landmarks-Label1-v1.4.0")]))
    write_volumes(tmp_path, "BraTS24", gli)
    data = open_data(tmp_path)
    assert data.datasets() == ["AMOS22", "BraTS24"]
    d1 = data.samples("AMOS22_BoxCoordinate_Task01_Axial").docs()[0]
    d2 = data.samples("AMOS22_BoxCoordinate_Task02_Axial").docs()[0]
    assert d1.image_file == "AMOS22/AMOS22-CT/Images/amos_0001.nii.gz" and d1.taskID == "01"
    assert d2.image_file == "AMOS22/AMOS22-MRI/Images/amos_0507.nii.gz" and d2.taskID == "02"
    assert d2.mask_file == "AMOS22/AMOS22-MRI/Masks/amos_0507.nii.gz" and d2.dataset_name == "AMOS22"
    t = data.samples("BraTS24_TumorLesionSize_Task01_Axial").docs()[0]
    row = t.upstream_row(data.root)
    assert row["image_file"] == str(data.root / "Datasets/BraTS24/BraTS24-GLI/Images-t2f/BraTS-GLI-00001-000.nii.gz")
    assert row["landmark_file"].endswith("BraTS24/BraTS24-GLI/Landmarks-Label1-v1.4.0/BraTS-GLI-00001-000.json.gz")
    for doc in (d1, d2, t):
        r = doc.upstream_row(data.root)
        assert all(os.path.isfile(r[k]) for k in ("image_file", "mask_file", "landmark_file") if k in r)


def test_versioned_landmark_folders_coexist(tmp_path):
    # REL v1.1.0 / EX: from v1.1.0 the T/L planner stamps "-v{version}" on landmark_folder (Landmarks-Label2-v1.1.1/),
    # v1.0.0 uses the bare folder; both live side by side and the plan names the one to read.
    tl_folder(tmp_path, ["1.0.0", "1.1.0", "1.1.1", "1.4.0"], with_ad=False)
    for pin, folder in (("1.0.0", "Landmarks-Label2"), ("1.1.0", "Landmarks-Label2-v1.1.0"),
                        ("1.1.1", "Landmarks-Label2-v1.1.1"), ("1.2.1", "Landmarks-Label2-v1.1.1"),
                        ("1.4.0", "Landmarks-Label2-v1.4.0")):
        doc = open_data(tmp_path, pin=pin, ack=LATEST_RELEASE).samples(TL).docs()[0]
        assert doc.landmark_file == f"KiTS23/{folder}/c1.json.gz", pin


def test_tasks_listing_names_every_config_with_samples(tmp_path):
    # C: configs per family/plane; Ceph-Biometrics-400 has one config per metric type (_Distance / _Angle).
    tl_folder(tmp_path, ["1.0.0", "1.4.0"])
    c = case("001", mask_folder=None, landmark_folder="Landmarks", shape=(1, 40, 50),
             x=[ad_entry(0, ad_metric("distance", "L-1-2", 12.0)), ad_entry(0, ad_metric("angle", "A-1", 20.0))])
    write_plan(tmp_path, "Ceph-Biometrics-400", "biometry", "1.0.0", plan("Ceph-Biometrics-400", [task(
        "biometry", [], [c], biometrics_map=[{"metric_type": "distance"}, {"metric_type": "angle"}])]))
    assert open_data(tmp_path).tasks() == {
        "Ceph-Biometrics-400_BiometricsFromLandmarks_Angle_Task01_Sagittal": 1,
        "Ceph-Biometrics-400_BiometricsFromLandmarks_Distance_Task01_Sagittal": 1,
        "KiTS23_BoxCoordinate_Task01_Axial": 1, "KiTS23_TumorLesionSize_Task01_Axial": 1}


# =============================================================================================== task names


@pytest.mark.parametrize(("name", "family", "measure", "task_id", "plane", "split", "variant", "config"), [
    ("KiTS23_BoxCoordinate_Task01_Axial", "detect", None, "01", "Axial", "test", "",
     "KiTS23_BoxSize_Task01_Axial_Test"),
    ("KiTS23_BoxSize_Task01_Axial_Test", "detect", None, "01", "Axial", "test", "",
     "KiTS23_BoxSize_Task01_Axial_Test"),
    ("AMOS22_BoxCoordinate_Task02_Coronal_Train", "detect", None, "02", "Coronal", "train", "",
     "AMOS22_BoxSize_Task02_Coronal_Train"),
    ("MSD_TumorLesionSize_Task06_Axial-CoT", "TL", None, "06", "Axial", "test", "CoT",
     "MSD_TumorLesionSize_Task06_Axial_Test"),
    ("Ceph-Biometrics-400_BiometricsFromLandmarks_Distance_Task01_Sagittal", "AD", "Distance", "01", "Sagittal",
     "test", "", "Ceph-Biometrics-400_BiometricsFromLandmarks_Distance_Task01_Sagittal_Test"),
    ("Ceph-Biometrics-400_BiometricsFromLandmarks_Angle_Task01_Sagittal-336x336", "AD", "Angle", "01", "Sagittal",
     "test", "336x336", "Ceph-Biometrics-400_BiometricsFromLandmarks_Angle_Task01_Sagittal_Test"),
    ("AbdomenAtlas1.0Mini_BoxCoordinate_Task01_Axial_Test-560x560", "detect", None, "01", "Axial", "test",
     "560x560", "AbdomenAtlas1.0Mini_BoxSize_Task01_Axial_Test"),
])
def test_task_names(name, family, measure, task_id, plane, split, variant, config):
    # C/TK: {dataset}_{annotation-type}[_{Distance|Angle}]_{TaskNN}_{plane}_{Train|Test}; INST tasks_to_configs
    # appends _Train/_Test and replaces BoxCoordinate by BoxSize; variant suffixes from tasks_list/*-336x336.json
    # (master c221615) and tasks_MedVision-TL-CoT.json (feat/sft-cot 837709e) never reach the config.
    tn = parse_task_name(name)
    assert (tn.family, tn.measure, tn.task_id, tn.plane, tn.split, plain(tn.variant)) == (
        family, measure, task_id, plane, split, variant)
    assert tn.config == config
    assert tn.task_pos == int(task_id) - 1


def test_box_size_and_box_coordinate_read_the_same_docs(tmp_path):
    kits23_detection(tmp_path)
    data = open_data(tmp_path)
    a = data.samples("KiTS23_BoxCoordinate_Task01_Axial").docs()
    b = data.samples("KiTS23_BoxSize_Task01_Axial_Test").docs()
    assert [d.upstream_row(tmp_path) for d in a] == [d.upstream_row(tmp_path) for d in b]


def plain(variant: str) -> str:
    """A variant without its leading dash (layout.VARIANTS may spell them either way)."""
    return variant[1:] if variant.startswith("-") else variant


@pytest.mark.parametrize("variant", [plain(v) for v in VARIANTS if v])
def test_every_variant_suffix_reads_the_base_task_data(tmp_path, variant):
    kits23_detection(tmp_path)
    data = open_data(tmp_path)
    tn = parse_task_name(f"KiTS23_BoxCoordinate_Task01_Axial-{variant}")
    assert plain(tn.variant) == variant and tn.base == "KiTS23_BoxCoordinate_Task01_Axial"
    docs = data.samples(tn.name).docs()
    base = data.samples(tn.base).docs()
    assert [d.upstream_row(tmp_path) for d in docs] == [d.upstream_row(tmp_path) for d in base]
    assert docs[0].task == tn.name


def test_unknown_suffix_names_the_known_variants():
    for name, shown in (("KiTS23_BoxCoordinate_Task01_Axial-CoT2", "'-CoT2'"),
                        ("KiTS23_BoxCoordinate_Task01_Axial_local_ds", "'_local_ds'")):
        with pytest.raises(UserError) as ei:
            parse_task_name(name)
        msg = one_line_error(ei)
        assert shown in msg and name in msg and "unknown" in msg
        assert all(f"-{plain(v)}" in msg for v in VARIANTS if v)


def test_mask_size_and_malformed_names_are_refused():
    with pytest.raises(UserError, match="MaskSize tasks are not part of the MedVision benchmark"):
        parse_task_name("KiTS23_MaskSize_Task01_Axial")
    with pytest.raises(UserError, match="_Distance token belongs to BiometricsFromLandmarks"):
        parse_task_name("KiTS23_TumorLesionSize_Distance_Task01_Axial")
    with pytest.raises(UserError, match="does not follow"):
        parse_task_name("KiTS23_BoxCoordinate_Task01_Transverse")


# =============================================================================================== index cache


def counting_reads(monkeypatch):
    calls = []
    real = samples_mod.read_task

    def spy(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(samples_mod, "read_task", spy)
    return calls


def test_second_open_does_not_read_the_plan(tmp_path, monkeypatch):
    kits23_detection(tmp_path)
    calls = counting_reads(monkeypatch)
    first = open_data(tmp_path).samples("KiTS23_BoxCoordinate_Task01_Axial").docs()
    assert len(calls) == 1
    assert any((tmp_path / ".cache/medvision_bm/plan-index").iterdir())
    again = open_data(tmp_path).samples("KiTS23_BoxCoordinate_Task01_Axial")
    assert len(calls) == 1
    assert again.docs() == first
    # other planes and the other split of the same (task, family, filter switch) share nothing but are cached too
    assert len(open_data(tmp_path).samples("KiTS23_BoxCoordinate_Task01_Sagittal")) == 0
    assert len(calls) == 1
    # the plan overwritten with garbage of the same size and the same mtime: its change time and gzip trailer differ,
    # so the index is never served for it; the plan is read again and refused
    path = tmp_path / "Datasets/KiTS23/benchmark_plan_detection_v1.0.0.json.gz"
    garble_keeping_size_and_mtime(path)
    with pytest.raises(PlanError, match="is not a gzip file"):
        open_data(tmp_path).samples("KiTS23_BoxCoordinate_Task01_Axial")
    assert len(calls) == 2


def test_a_changed_plan_rebuilds_the_index(tmp_path, monkeypatch):
    kits23_detection(tmp_path)
    calls = counting_reads(monkeypatch)
    assert len(open_data(tmp_path).samples(DET)) == 1
    path = tmp_path / "Datasets/KiTS23/benchmark_plan_detection_v1.0.0.json.gz"
    big = bbox((0, 0), (12, 12))
    write_plan(tmp_path, "KiTS23", "detection", "1.0.0", det_plan([case("c9", z=[
        det_entry(1, det_item(1, big)), det_entry(2, det_item(1, big))])]))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert keys_of(open_data(tmp_path).samples(DET).docs()) == [("c9", 1, 1), ("c9", 2, 1)]
    assert len(calls) == 2
    # the filter switch has its own index
    assert len(open_data(tmp_path, filtering="true").samples(DET)) == 2
    assert len(calls) == 3


def test_a_failed_build_leaves_no_index_behind(tmp_path):
    path = write_plan(tmp_path, "KiTS23", "detection", "1.0.0", {"dataset_info": {}})
    with pytest.raises(PlanError):
        open_data(tmp_path).samples(DET)
    index_root = tmp_path / ".cache/medvision_bm/plan-index"
    assert not index_root.is_dir() or not any(index_root.iterdir())
    kits23_detection(tmp_path)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert len(open_data(tmp_path).samples(DET)) == 1


# =============================================================================================== streaming reader


def spy_fallback(monkeypatch):
    calls = []
    real = plans_mod._full_events

    def spy(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(plans_mod, "_full_events", spy)
    return calls


def test_task_keys_in_another_order_give_the_same_docs(tmp_path, monkeypatch):
    # DL gives upstream's writing order (task_ID first ... train_cases_number, train_cases, test_cases_number,
    # test_cases); a plan written in another order must still read the same (slower path).
    p = random_plan("TL", seed=7)
    fast_dir, slow_dir = tmp_path / "fast", tmp_path / "slow"
    write_plan(fast_dir, "Rand", "biometry", "1.4.0", p)
    shuffled = dict(p, tasks=[reorder(t, ["test_cases_number", "test_cases", "labels_map"],
                                      ["train_cases", "target_label", "task_ID"]) for t in p["tasks"]])
    keys = list(shuffled["tasks"][0])
    assert keys[0] == "test_cases_number" and keys[-1] == "task_ID"
    write_plan(slow_dir, "Rand", "biometry", "1.4.0", shuffled)
    calls = spy_fallback(monkeypatch)
    for pos in (1, 2):
        for split in ("Test", "Train"):
            name = f"Rand_TumorLesionSize_Task{pos:02d}_Axial_{split}"
            n_before = len(calls)
            fast = open_data(fast_dir, filtering="true").samples(name)
            assert len(calls) == n_before
            slow = open_data(slow_dir, filtering="true").samples(name)
            assert len(calls) == n_before + 1
            assert fast.docs() == slow.docs() and len(fast) > 0
            assert fast.index.header["target_label"] == slow.index.header["target_label"] == pos + 1
    assert open_data(slow_dir).tasks() == open_data(fast_dir).tasks()


def test_a_case_the_fast_path_cannot_cut_is_read_by_the_full_parser(tmp_path, monkeypatch):
    # A third case whose first key is not case_ID makes the splitter give up mid-stream: the cases already read are
    # kept and the rest comes from the full parser.
    p = random_plan("detect", seed=5, n_test=5)
    test_cases = p["tasks"][0]["test_cases"]
    test_cases[2] = reorder(test_cases[2], ["image_file"], [])
    path = write_plan(tmp_path, "Rand", "detection", "1.0.0", p)
    calls = spy_fallback(monkeypatch)
    root = tmp_path.resolve()
    data = open_data(tmp_path, filtering="true")
    for dim, plane in enumerate(("Sagittal", "Coronal", "Axial")):
        got = [d.upstream_row(root) for d in data.samples(f"Rand_BoxCoordinate_Task01_{plane}").docs()]
        assert got == reference_rows(root, "Rand", p, 0, "test", "detect", dim, filtering=False)
    assert len(calls) == 1  # one index build for the three planes, one fallback inside it
    assert [c["case_ID"] for c in plans_mod.read_task(path, 0, "test").cases] == [c["case_ID"] for c in test_cases]


def test_nan_in_a_plan_is_read_as_pythons_json_reads_it(tmp_path, monkeypatch):
    # Python's json.dump writes NaN and json.load (upstream's reader) accepts it; orjson refuses it, so such a case is
    # parsed by Python's json on the fast path.
    p = random_plan("TL", seed=4, n_test=3)
    entries = [e for c in p["tasks"][0]["test_cases"] for a in "xyz" for e in c[f"slice_profiles_{a}"]]
    entries[0]["slice_profile"][0][0]["metric_value"] = float("nan")
    path = write_plan(tmp_path, "Rand", "biometry", "1.4.0", p)
    assert b"NaN" in gzip.decompress(path.read_bytes())
    calls = spy_fallback(monkeypatch)
    cases = list(plans_mod.read_task(path, 0, "test").cases)
    assert [c["case_ID"] for c in cases] == [c["case_ID"] for c in p["tasks"][0]["test_cases"]]
    assert calls == []


@pytest.mark.parametrize("family", ["detect", "TL", "AD"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_plans_match_the_plain_reference_flatten(tmp_path, family, seed):
    # every config (task, split, plane, metric type, filter switch) of a random plan, against reference_rows()
    kind, token = {"detect": ("detection", "BoxCoordinate"), "TL": ("biometry", "TumorLesionSize"),
                   "AD": ("biometry", "BiometricsFromLandmarks")}[family]
    p = random_plan(family, seed, versioned_tl=seed != 2)
    write_plan(tmp_path, "Rand", kind, "1.0.0", p, indent=1 if seed == 3 else None)
    root = tmp_path.resolve()
    for filtering in (True, False):
        data = open_data(tmp_path, filtering=None if filtering else "true")
        for pos in (0, 1):
            for split in ("train", "test"):
                for dim, plane in enumerate(("Sagittal", "Coronal", "Axial")):
                    for measure in ((None, "Distance", "Angle") if family == "AD" else (None,)):
                        name = (f"Rand_{token}{'_' + measure if measure else ''}_Task{pos + 1:02d}_{plane}_"
                                f"{split.capitalize()}")
                        got = [d.upstream_row(root) for d in data.samples(name).docs()]
                        assert got == reference_rows(root, "Rand", p, pos, split, family, dim, measure,
                                                     filtering), name


@pytest.mark.parametrize("chunk", [1, 7, 64, 65, 300, 4096])
def test_chunk_boundaries_anywhere_keep_the_fast_path(tmp_path, monkeypatch, chunk):
    p = random_plan("detect", seed=11, n_train=2, n_test=2)
    for t in p["tasks"]:
        t.pop("test_cases_number")  # also: plans without the case counts
    path = write_plan(tmp_path, "Rand", "detection", "1.0.0", p, indent=1)
    monkeypatch.setattr(plans_mod, "_CHUNK", chunk)
    calls = spy_fallback(monkeypatch)
    plain = json.loads(gzip.decompress(path.read_bytes()))
    for pos in (0, 1):
        for split in ("train", "test"):
            read = plans_mod.read_task(path, pos, split)
            assert list(read.cases) == plain["tasks"][pos][f"{split}_cases"]
            assert read.header["task_ID"] == f"{pos + 1:02d}"
    headers = [ev[2] for ev in plans_mod.plan_events(path, lambda pos, split: False) if ev[0] == "task"]
    assert [h["task_ID"] for h in headers] == ["01", "02"]
    assert calls == []


def test_the_task_is_picked_by_position(tmp_path):
    # R-old/R-new: benchmark_plan["tasks"][int(taskID) - 1]; BP stamps task_ID = 1-based position, so a plan with a
    # mis-stamped task_ID still reads by position.
    tasks = [task("biometry", [], [case(f"t{n}", landmark_folder=f"Landmarks-Label{n}",
                                        z=[tl_entry(n, tl_cluster(10.0 * n, 5.0), n_total=1)])],
                  task_no=n, target_label=n, landmark_folder=f"Landmarks-Label{n}", task_id=tid)
             for n, tid in ((1, "01"), (2, "07"), (3, "03"))]
    write_plan(tmp_path, "MSD", "biometry", "1.4.0", plan("MSD", tasks))
    data = open_data(tmp_path)
    for n in (1, 2, 3):
        doc = data.samples(f"MSD_TumorLesionSize_Task{n:02d}_Axial").docs()[0]
        assert (doc.label, doc.slice_idx, doc.taskID) == (n, n, f"{n:02d}")
        assert doc.image_file == f"MSD/Images/t{n}.nii.gz"


# =============================================================================================== bad input


def plan_path(tmp_path):
    return tmp_path / "Datasets/KiTS23/benchmark_plan_detection_v1.0.0.json.gz"


def assert_plan_error(tmp_path, *fragments):
    with pytest.raises(UserError) as ei:
        open_data(tmp_path).samples(DET)
    msg = one_line_error(ei)
    assert str(plan_path(tmp_path)) in msg and "re-download" in msg, msg
    for f in fragments:
        assert f in msg, msg
    return msg


def test_plan_that_is_not_gzip(tmp_path):
    plan_path(tmp_path).parent.mkdir(parents=True)
    plan_path(tmp_path).write_text(json.dumps(det_plan([])))
    assert_plan_error(tmp_path, "is not a gzip file")


def test_truncated_plan(tmp_path):
    cases = [case(f"c{i}", z=[det_entry(s, det_item(1, bbox((s, 0), (12, 12)))) for s in range(200)])
             for i in range(5)]
    path = write_plan(tmp_path, "KiTS23", "detection", "1.0.0", det_plan(cases))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert_plan_error(tmp_path, "truncated or corrupt")


def test_gzip_of_truncated_json(tmp_path):
    cases = [case(f"c{i}", z=[det_entry(s, det_item(1, bbox((s, 0), (12, 12)))) for s in range(20)])
             for i in range(3)]
    text = json.dumps(det_plan(cases)).encode()
    plan_path(tmp_path).parent.mkdir(parents=True)
    plan_path(tmp_path).write_bytes(gzip.compress(text[: int(len(text) * 0.8)]))
    assert_plan_error(tmp_path, "is not valid JSON (parse error: premature EOF)")
    p = det_plan(cases)
    p["tasks"][0]["test_cases_number"] = 4  # the count in the header disagrees with the list
    plan_path(tmp_path).write_bytes(gzip.compress(json.dumps(p).encode()))
    os.utime(plan_path(tmp_path), ns=(0, 10**18))
    assert_plan_error(tmp_path, "lists 4 test cases but 3 could be read")


@pytest.mark.parametrize(("content", "why"), [
    ({"dataset_info": {}, "cases": []}, "is not a MedVision benchmark plan (no \"tasks\" list)"),
    ([1, 2, 3], "is not a MedVision benchmark plan"), ({"tasks": "none"}, "has 0 task(s)"),
    ({"tasks": [{"name": "x", "train_cases": []}]}, "task 1 has no test_cases list"),
    ({"tasks": [{"name": "x", "test_cases": [1]}]}, "task 1 has a case this reader does not understand")])
def test_plan_of_an_unknown_schema(tmp_path, content, why):
    # valid gzip JSON that is not a plan of DL's schema
    plan_path(tmp_path).parent.mkdir(parents=True)
    plan_path(tmp_path).write_bytes(gzip.compress(json.dumps(content).encode()))
    assert_plan_error(tmp_path, why)


def test_plan_without_the_task_asked_for(tmp_path):
    kits23_detection(tmp_path)
    with pytest.raises(UserError) as ei:
        open_data(tmp_path).samples("KiTS23_BoxCoordinate_Task03_Axial")
    msg = one_line_error(ei)
    assert str(plan_path(tmp_path)) in msg and "has 1 task(s), no Task03" in msg


def test_case_the_reader_does_not_understand(tmp_path):
    c = case("c1", z=[det_entry(1, det_item(1, bbox((0, 0), (12, 12))))])
    del c["image_file_info"]
    write_plan(tmp_path, "KiTS23", "detection", "1.0.0", det_plan([c]))
    with pytest.raises(UserError) as ei:
        open_data(tmp_path).samples(DET)
    msg = one_line_error(ei)
    assert str(plan_path(tmp_path)) in msg and "re-download the plan" in msg and "voxel_size" in msg


def test_task_with_no_plan_at_or_below_the_pin(tmp_path):
    big = bbox((0, 0), (12, 12))
    write_plan(tmp_path, "PI-CAI", "detection", "1.2.1", det_plan([case("c1", z=[det_entry(1, det_item(1, big))])],
                                                                 dataset="PI-CAI"))
    with pytest.raises(UserError) as ei:
        open_data(tmp_path, pin="1.1.1", ack=LATEST_RELEASE).samples("PI-CAI_BoxCoordinate_Task01_Axial")
    msg = one_line_error(ei)
    assert "not published at the selected version" in msg and "benchmark_plan_detection_v1.2.1.json.gz" in msg
    assert "Pin a later version or remove the task from the tasks list" in msg


def test_unknown_variant_suffix_in_a_run(tmp_path):
    kits23_detection(tmp_path)
    with pytest.raises(UserError) as ei:
        open_data(tmp_path).samples("KiTS23_BoxCoordinate_Task01_Axial-CoT-fast")
    msg = one_line_error(ei)
    assert "unknown" in msg and "'-CoT-fast'" in msg and "known variants: -CoT" in msg


def test_data_folder_without_datasets(tmp_path):
    (tmp_path / "Images").mkdir()
    with pytest.raises(UserError) as ei:
        open_data(tmp_path)
    msg = one_line_error(ei)
    assert f"data folder {tmp_path.resolve()} has no Datasets/ subfolder" in msg
    assert "point --data_dir at upstream's Data/ folder" in msg
    with pytest.raises(UserError, match="does not exist"):
        open_data(tmp_path / "nowhere")


def test_missing_dataset_folder_names_the_ones_found(tmp_path):
    kits23_detection(tmp_path)
    with pytest.raises(UserError) as ei:
        open_data(tmp_path).samples("LiTS_BoxCoordinate_Task01_Axial")
    msg = one_line_error(ei)
    assert "dataset 'LiTS' is not under" in msg and "found: KiTS23" in msg


def test_empty_data_dir_is_reported_as_a_data_dir_error(tmp_path):
    (tmp_path / "Datasets").mkdir()
    data = open_data(tmp_path)
    assert data.datasets() == [] and data.tasks() == {}
    assert isinstance(data, DataDir)


# =============================================================================================== the CLI


def test_cli_data_tasks_lists_a_folder_at_the_pin(tmp_path):
    from mvtest_support import run_cli

    tl_folder(tmp_path, ["1.0.0", "1.4.0"])
    latest = run_cli("data", "tasks", "--data_dir", str(tmp_path), env={"MedVision_PLANNER_VERSION": "latest",
                                                                         "MedVision_ACK_RELEASE": ""})
    assert latest.returncode == 0, latest.stderr
    assert dict(line.split("\t") for line in latest.stdout.splitlines()) == {
        "KiTS23_BoxCoordinate_Task01_Axial": "1", "KiTS23_TumorLesionSize_Task01_Axial": "1",
        "Ceph-Biometrics-400_BiometricsFromLandmarks_Task01_Sagittal": "1"}
    # the paper's pin without the acknowledgement: the T/L pair is refused, the others are listed
    paper = run_cli("data", "tasks", "--data_dir", str(tmp_path), env={"MedVision_PLANNER_VERSION": "1.0.0",
                                                                        "MedVision_ACK_RELEASE": ""})
    assert paper.returncode == 0, paper.stderr
    assert "KiTS23_TumorLesionSize_Task01_Axial" not in paper.stdout and "KiTS23_BoxCoordinate" in paper.stdout


@pytest.mark.parametrize(("env_value", "fragment"), [("", "annotation version selection required"),
                                                     ("v1.1.1", "invalid MedVision_PLANNER_VERSION")])
def test_cli_data_tasks_bad_pin_is_one_line(tmp_path, env_value, fragment):
    from mvtest_support import run_cli

    tl_folder(tmp_path, ["1.0.0"])
    proc = run_cli("data", "tasks", "--data_dir", str(tmp_path), env={"MedVision_PLANNER_VERSION": env_value})
    assert proc.returncode == 2
    assert fragment in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_cli_data_tasks_on_a_folder_without_datasets(tmp_path):
    from mvtest_support import run_cli

    proc = run_cli("data", "tasks", "--data_dir", str(tmp_path), env={"MedVision_PLANNER_VERSION": "latest"})
    assert proc.returncode == 2 and "has no Datasets/ subfolder" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_the_full_parser_reads_long_strings_across_its_growing_reads(tmp_path, monkeypatch):
    # Reads start at 64 kB here and double while no task is finished (data/plans.py _full_tasks): strings and tasks
    # cut by reads of every size are read whole, and each task's header and cases are its own.
    monkeypatch.setattr(plans_mod, "_FULL_FIRST_READ", 64 << 10)
    tasks = [{"test_cases": [{"case_ID": f"t{t}c{c}", "note": chr(97 + t) * ((t + 1) * 700_000 + c)}
                             for c in range(3)], "task_ID": f"{t + 1:02d}", "train_cases": [], "task_type": "Box-Size"}
             for t in range(3)]
    path = tmp_path / "p.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"tasks_number": 3, "tasks": tasks}).encode(), compresslevel=1))
    for t, want in enumerate(tasks):
        got = plans_mod.read_task(path, t, "test")
        assert got.header["task_ID"] == want["task_ID"]
        assert list(got.cases) == want["test_cases"]
