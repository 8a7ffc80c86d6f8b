"""Task metadata read as upstream's prompt code reads it: the dataset module's benchmark_plan, by source, not import.

Upstream: medvision_utils.py master @c221615 and @0a4c5e2 take
``preprocess_<kind>_module.benchmark_plan["tasks"][int(doc["taskID"]) - 1]``; ``label_name =
labels_map[str(doc["label"])]`` with ``ValueError(f"Label {label} not found in labels_map.")``; the A/D names walk
metric_map_name -> line/angle -> element_map_name -> landmarks. Module layout as in the medvision_ds copies read
(``medvision_ds/datasets/Ceph_Biometrics_400/preprocess_biometry.py``, ``.../KiPA22/...``; docs/spec/data-loader.md
section 9).
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from medvision_bm.data import task_meta as tm
from medvision_bm.data.task_meta import (
    LabelNotFoundError,
    ModuleReadError,
    load_task_meta,
    module_path,
    read_benchmark_plan,
    resolve_ad_names,
    resolve_label_name,
)
from medvision_bm.tasks.upstream_prompts import PromptInput, build_prompt

CEPH_MODULE = '''\
import os
import argparse
from medvision_ds.utils.benchmark_planner import MedVision_BenchmarkPlannerBiometry

"""Module docstring-like string."""

dataset_info = {
    "dataset": "Ceph-Biometrics-400",
    "license": ["N/A", "CC BY-NC 4.0"],
}

landmarks_map = {
    "P1": "sella",
    "P2": "nasion",
    "P5": "subspinale",
    "P6": "supramentale",
}

lines_map = {
    "L-1-2": {"name": "", "element_keys": ["P1", "P2"], "element_map_name": "landmarks_map"},
    "L-2-5": {"name": "", "element_keys": ["P2", "P5"], "element_map_name": "landmarks_map"},
    "L-2-6": {"name": "", "element_keys": ["P2", "P6"], "element_map_name": "landmarks_map"},
}

angles_map = {
    "A-L_2_5-L_2_6": {"name": "", "element_keys": ["L-2-5", "L-2-6"], "element_map_name": "lines_map"},
}

biometrics_map = [
    {"metric_type": "angle", "metric_map_name": "angles_map", "metric_key": "A-L_2_5-L_2_6", "slice_dim": 0},
]

benchmark_plan = {
    "dataset_info": dataset_info,
    "tasks": [
        {
            "image_modality": "X Ray",
            "image_description": "cephalogram (head and neck X-ray)",
            "image_folder": "Images",
            "landmarks_map": landmarks_map,
            "lines_map": lines_map,
            "angles_map": angles_map,
            "biometrics_map": biometrics_map,
        },
    ],
}


def main(dir_datasets_data, dataset_name, benchmark_plan=benchmark_plan, random_seed=1024):
    dataset_dir = os.path.join(dir_datasets_data, dataset_name)
    landmarks_map = {}  # a local name: does not touch the module's landmarks_map
    planner = MedVision_BenchmarkPlannerBiometry(dataset_dir=dataset_dir, bm_plan=benchmark_plan)
    planner.process()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Generate benchmark planner for biometric measurement task.")
    args = parser.parse_args()
    main(benchmark_plan=benchmark_plan, dir_datasets_data=args.d, dataset_name=args.n)
'''

KIPA_MODULE = '''\
CLUSTER_SIZE_THRESHOLD = 200
labels_map = {"1": "renal vein", "2": "kidney", "3": "renal artery", "4": "tumor"}
landmarks_map = {
    "P1": "most right/anterior/superior endpoint of the major axis",
    "P2": "most left/superior/inferior endpoint of the major axis",
}
lines_map = {
    "L-1-2": {"name": "marjor axis of the fitted ellipse", "element_keys": ["P1", "P2"],
              "element_map_name": "landmarks_map"},
}
angles_map = {}
benchmark_plan = {
    "dataset_info": {"dataset": "KiPA22"},
    "tasks": [
        {
            "image_modality": "CT",
            "image_description":  "kidney computed tomography (CT) scan",
            "labels_map": labels_map,
            "landmarks_map": landmarks_map,
            "lines_map": lines_map,
            "angles_map": angles_map,
            "target_label": 4,
            "cluster_size_threshold": CLUSTER_SIZE_THRESHOLD,
            "offset": -1,
            "suffixes": ["-t1c" + ".nii.gz", *["a", "b"]],
            "extra": {**{"x": 1}, "y": 2},
        },
    ],
}
'''


def _write_module(data_dir: Path, package: str, kind: str, text: str) -> Path:
    path = data_dir / "src" / "medvision_ds" / "datasets" / package / f"preprocess_{kind}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


CEPH_HEADER = {
    "image_modality": "X Ray",
    "image_description": "cephalogram (head and neck X-ray)",
    "landmarks_map": {"P1": "sella", "P2": "nasion", "P5": "subspinale", "P6": "supramentale"},
    "lines_map": {
        "L-1-2": {"name": "", "element_keys": ["P1", "P2"], "element_map_name": "landmarks_map"},
        "L-2-5": {"name": "", "element_keys": ["P2", "P5"], "element_map_name": "landmarks_map"},
        "L-2-6": {"name": "", "element_keys": ["P2", "P6"], "element_map_name": "landmarks_map"},
    },
    "angles_map": {"A-L_2_5-L_2_6": {"name": "", "element_keys": ["L-2-5", "L-2-6"],
                                     "element_map_name": "lines_map"}},
    "task_ID": "01",
}


def test_module_read_without_import(tmp_path):
    """The module's benchmark_plan (names bound earlier, a def main with a same-named local, a main guard) is read
    as data; source names the module file."""
    path = _write_module(tmp_path, "Ceph_Biometrics_400", "biometry", CEPH_MODULE)
    meta = load_task_meta(tmp_path, "Ceph-Biometrics-400", "biometry", "01")
    assert meta.source == f"medvision_ds:{path}"
    assert meta.image_description == "cephalogram (head and neck X-ray)"
    assert meta.image_modality == "X Ray"
    assert meta.labels_map is None
    assert dict(meta.landmarks_map) == CEPH_HEADER["landmarks_map"]
    assert meta.lines_map["L-2-5"]["element_keys"] == ("P2", "P5")
    assert set(meta.angles_map) == {"A-L_2_5-L_2_6"}
    with pytest.raises(TypeError):
        meta.landmarks_map["P9"] = "x"  # read-only


def test_plan_header_fallback_gives_the_same_meta(tmp_path):
    """No module under <data_dir>/src/medvision_ds: the plan's task header (same keys) is used, source "plan"."""
    from_plan = load_task_meta(tmp_path, "Ceph-Biometrics-400", "AD", "01", plan_task_header=CEPH_HEADER)
    assert from_plan.source == "plan"
    _write_module(tmp_path, "Ceph_Biometrics_400", "biometry", CEPH_MODULE)
    from_module = load_task_meta(tmp_path, "Ceph-Biometrics-400", "AD", "01", plan_task_header={"bogus": 1})
    assert from_module.source.startswith("medvision_ds:")  # the module wins when it exists
    for field in ("image_description", "image_modality", "labels_map", "landmarks_map"):
        assert getattr(from_plan, field) == getattr(from_module, field)
    assert resolve_ad_names(from_plan, {"metric_type": "angle", "metric_map_name": "angles_map",
                                        "metric_key": "A-L_2_5-L_2_6"}) == resolve_ad_names(
        from_module, {"metric_type": "angle", "metric_map_name": "angles_map", "metric_key": "A-L_2_5-L_2_6"})


def test_names_resolved_as_upstream_and_rendered(tmp_path):
    """Angle: angle -> two lines -> four landmarks, empty name -> the wording without a name (N @0a4c5e2
    create_doc_to_text_BiometricsFromLandmarks); distance: line -> two landmarks and its name."""
    _write_module(tmp_path, "Ceph_Biometrics_400", "biometry", CEPH_MODULE)
    meta = load_task_meta(tmp_path, "Ceph-Biometrics-400", "biometry", "01")
    profile = {"metric_type": "angle", "metric_map_name": "angles_map", "metric_key": "A-L_2_5-L_2_6",
               "metric_unit": "degree"}
    names = resolve_ad_names(meta, profile)
    assert names.points == ("nasion", "subspinale", "nasion", "supramentale")
    assert names.biometrics_name == ""
    inp = PromptInput("AD", "Biometrics-From-Landmarks-Angle", meta.image_description, metric_type="angle",
                      metric_unit=profile["metric_unit"], biometrics_name=names.biometrics_name,
                      points=names.points, canvas_hw=(896, 896), pixel_hw_mm=(0.2159598214285714, 0.26785714285714285))
    assert build_prompt(inp, "", "current").startswith(
        "Task:\nGiven the input medical image: cephalogram (head and neck X-ray), estimate the angle between 2 lines "
        "in degrees: (line 1) the line connecting nasion and subspinale, (line 2) the line connecting nasion and "
        "supramentale.\n")
    dist = resolve_ad_names(meta, {"metric_type": "distance", "metric_map_name": "lines_map", "metric_key": "L-1-2"})
    assert dist.points == ("sella", "nasion") and dist.biometrics_name == ""
    with pytest.raises(ValueError, match="L-9-9"):
        resolve_ad_names(meta, {"metric_type": "distance", "metric_map_name": "lines_map", "metric_key": "L-9-9"})
    with pytest.raises(ValueError, match="metric_type"):
        resolve_ad_names(meta, {"metric_type": "area", "metric_map_name": "lines_map", "metric_key": "L-1-2"})


def test_label_name_and_missing_label(tmp_path):
    """labels_map[str(doc["label"])] (M/N create_doc_to_text_BoxCoordinate / _TumorLesionSize); a missing label is an
    error naming it (upstream: ValueError "Label {label} not found in labels_map.")."""
    _write_module(tmp_path, "KiPA22", "biometry", KIPA_MODULE)
    meta = load_task_meta(tmp_path, "KiPA22", "TL", "01")
    assert resolve_label_name(meta, 4) == "tumor"
    with pytest.raises(LabelNotFoundError, match="Label 7 not found in labels_map") as err:
        resolve_label_name(meta, 7)
    assert isinstance(err.value, ValueError)
    ceph = load_task_meta(tmp_path, "Ceph-Biometrics-400", "AD", "01", plan_task_header=CEPH_HEADER)
    with pytest.raises(LabelNotFoundError, match="no labels_map"):
        resolve_label_name(ceph, 1)
    inp = PromptInput("TL", "Tumor-Lesion-Size", meta.image_description, label_name=resolve_label_name(meta, 4),
                      metric_unit=["mm"], pixel_hw_mm=(1.0, 1.0))
    assert build_prompt(inp, "", "paper").startswith(
        "Task:\nGiven the input medical image: kidney computed tomography (CT) scan, estimate the major and minor "
        "axis lengths of the ellipse enclosing the tumor, in mm.\n")


def test_supported_expression_subset(tmp_path):
    """Constants, names, negative numbers, + of strings, * and ** unpacking."""
    path = _write_module(tmp_path, "KiPA22", "biometry", KIPA_MODULE)
    task = read_benchmark_plan(path)["tasks"][0]
    assert task["cluster_size_threshold"] == 200
    assert task["offset"] == -1
    assert task["suffixes"] == ("-t1c.nii.gz", "a", "b")
    assert dict(task["extra"]) == {"x": 1, "y": 2}


KIPA_LABELS = 'labels_map = {"1": "renal vein", "2": "kidney", "3": "renal artery", "4": "tumor"}'


@pytest.mark.parametrize("text, needle", [
    (KIPA_MODULE.replace(KIPA_LABELS, "labels_map = dict(a='1')"), "unsupported expression Call"),
    (KIPA_MODULE.replace(KIPA_LABELS, "labels_map = {str(k): v for k, v in {}.items()}"),
     "unsupported expression DictComp"),
    (KIPA_MODULE + "labels_map['9'] = 'extra'\n", "Assign statement at line 30"),
    (KIPA_MODULE + "labels_map.update({'9': 'extra'})\n", "Expr statement at line 30"),
    (KIPA_MODULE + "for k in ['9']:\n    labels_map[k] = 'x'\n", "For statement at line 30"),
    (KIPA_MODULE.replace("benchmark_plan = {", "benchmark_plan = make() or {"), "unsupported expression BoolOp"),
])
def test_non_literal_modules_fail_clearly(tmp_path, text, needle):
    """A plan built or changed by code cannot be read as data: the error names the file and what was found."""
    path = _write_module(tmp_path, "KiPA22", "biometry", text)
    with pytest.raises(ModuleReadError) as err:
        load_task_meta(tmp_path, "KiPA22", "biometry", "01")
    assert str(path) in str(err.value)
    assert needle in str(err.value)


def test_unused_non_literal_names_are_harmless(tmp_path):
    """Only what benchmark_plan uses must be data."""
    text = "import os\nHERE = os.path.dirname(__file__)\nfoo = sorted([3, 1])\n" + KIPA_MODULE
    _write_module(tmp_path, "KiPA22", "biometry", text)
    assert load_task_meta(tmp_path, "KiPA22", "biometry", 1).image_modality == "CT"


def test_cache_per_path_and_mtime(tmp_path):
    path = _write_module(tmp_path, "KiPA22", "biometry", KIPA_MODULE)
    first = read_benchmark_plan(path)
    assert read_benchmark_plan(path) is first
    path.write_text(KIPA_MODULE.replace('"4": "tumor"', '"4": "kidney tumor"'), encoding="utf-8")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000_000))
    assert read_benchmark_plan(path) is not first
    assert resolve_label_name(load_task_meta(tmp_path, "KiPA22", "TL", "01"), 4) == "kidney tumor"


def test_task_index_and_missing_sources(tmp_path):
    """tasks[int(taskID) - 1]; an absent task, taskID "00", or no module and no header are errors."""
    _write_module(tmp_path, "KiPA22", "biometry", KIPA_MODULE)
    with pytest.raises(ValueError, match="1 task"):
        load_task_meta(tmp_path, "KiPA22", "biometry", "02")
    with pytest.raises(ValueError, match="below 1"):
        load_task_meta(tmp_path, "KiPA22", "biometry", "00")
    with pytest.raises(FileNotFoundError, match=r"preprocess_detection\.py"):
        load_task_meta(tmp_path, "KiPA22", "detect", "01")
    with pytest.raises(FileNotFoundError, match="DATASETS_NAME2PACKAGE"):
        load_task_meta(tmp_path, "NoSuchSet", "detection", "01")
    assert load_task_meta(tmp_path, "NoSuchSet", "detection", "01", plan_task_header=CEPH_HEADER).source == "plan"
    with pytest.raises(ValueError, match="image_description"):
        load_task_meta(tmp_path, "NoSuchSet", "detection", "01", plan_task_header={"labels_map": {}})
    with pytest.raises(ValueError, match="module kind"):
        module_path(tmp_path, "KiPA22", "segmentations")


def test_package_names(tmp_path):
    """DATASETS_NAME2PACKAGE (medvision_bm/utils/configs.py @9fff178)."""
    mapping = tm.datasets_name2package()
    assert mapping["AbdomenAtlas1.0Mini"] == "AbdomenAtlas__1_0__Mini"
    assert mapping["Ceph-Biometrics-400"] == "Ceph_Biometrics_400"
    assert mapping["PI-CAI"] == "PICAI"
    assert mapping["KiTS23"] == "KiTS23"
    assert module_path(tmp_path, "autoPET-III", "detection") == (
        tmp_path / "src" / "medvision_ds" / "datasets" / "autoPET_III" / "preprocess_detection.py")


def test_detection_module(tmp_path):
    """Detection reads preprocess_detection.py (M/N create_doc_to_text_BoxCoordinate)."""
    text = textwrap.dedent('''\
        labels_map = {"1": "kidney", "2": "kidney tumor", "3": "kidney cyst"}
        benchmark_plan = {"dataset_info": {}, "tasks": [{"image_modality": "CT",
            "image_description": "corticomedullary-phase computed tomography (CT) scan", "labels_map": labels_map}]}
        ''')
    _write_module(tmp_path, "KiTS23", "detection", text)
    meta = load_task_meta(tmp_path, "KiTS23", "detect", "01")
    assert meta.landmarks_map is None
    inp = PromptInput("detect", "Box-Size", meta.image_description, label_name=resolve_label_name(meta, 2))
    assert build_prompt(inp, "-CoT", "current").startswith(
        "Task:\nGiven the input medical image: corticomedullary-phase computed tomography (CT) scan, return the "
        "coordinates of the lower-left and upper-right corners of the bounding box for the kidney tumor.\n")
