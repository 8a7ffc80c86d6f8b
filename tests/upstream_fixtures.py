"""Builders of small ``Data/`` folders in upstream MedVision's layout, for the data-layer tests.

Everything is written the way upstream ships it (schema and key order from upstream
``skills/medvision/sub-skills/dataset-and-tasks/references/data-layout.md`` @39dd6bf):

    <data_dir>/Datasets/<dataset>/benchmark_plan_<kind>_v<X.Y.Z>.json.gz
        {"dataset_info", "tasks_number", "tasks": [{"task_ID", "task_type", ..., "train_cases_number",
         "train_cases", "test_cases_number", "test_cases"}]}
    case = {"case_ID", "image_file", "mask_file", ["landmark_file"], "image_file_info", "mask_file_info",
            "slice_profiles_x", "slice_profiles_y", "slice_profiles_z"}

Case paths are relative to the dataset folder and already hold the task's image/mask/landmark folder
(docs/spec/data-loader.md section 2.2). ``reference_rows`` is an independent, deliberately plain restatement of
upstream's flatten + filters (docs/spec/data-loader.md sections 2-3) used to cross-check the streaming reader on
random plans.
"""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np

from medvision_bm.data.layout import DataDir
from medvision_bm.data.planner import DatasetContract

AXES = "xyz"


def f16(value: float) -> float:
    return float(np.float16(value))


# ---------------------------------------------------------------------------------------------- slice entries


def bbox(lo: tuple[int, int], dims: tuple[int, int], spacing: tuple[float, float] = (1.0, 1.0)) -> dict[str, Any]:
    """A box as upstream's detection planner writes it (inclusive max, dimensions = max - min + 1, sizes in mm)."""
    hi = [lo[0] + dims[0] - 1, lo[1] + dims[1] - 1]
    return {"min_coords": list(lo), "max_coords": hi, "center_coords": [int((lo[0] + hi[0]) / 2),
                                                                        int((lo[1] + hi[1]) / 2)],
            "dimensions": list(dims), "sizes": [round(dims[0] * spacing[0], 3), round(dims[1] * spacing[1], 3)],
            "mask_image_ratio": 0.0123}


def det_item(label: int, *boxes: dict[str, Any]) -> dict[str, Any]:
    return {"label": label, "bboxes": list(boxes)}


def det_entry(slice_idx: int, *items: dict[str, Any]) -> dict[str, Any]:
    return {"slice_idx": slice_idx, "slice_profile": list(items)}


def tl_cluster(major: float, minor: float, dim: int = 2, keys: tuple[str, ...] = ("L-1-2", "L-3-4")) -> list[dict]:
    """One measured cluster: its major (L-1-2) and minor (L-3-4) axis metrics (``keys`` drops or renames them)."""
    return [{"metric_type": "distance", "metric_map_name": "lines_map", "metric_key": key, "metric_value": value,
             "metric_unit": "mm", "slice_dim": dim} for key, value in zip(keys, (major, minor))]


def tl_entry(slice_idx: int, *clusters: list[dict], n_total: int | None = None) -> dict[str, Any]:
    """A tumor/lesion slice entry; ``n_total`` None writes a v1.0.0 entry (no ``n_total_clusters`` key)."""
    entry: dict[str, Any] = {"slice_idx": slice_idx}
    if n_total is not None:
        entry["n_total_clusters"] = n_total
    entry["slice_profile"] = list(clusters)
    return entry


def ad_metric(metric_type: str, key: str, value: float, dim: int = 0) -> dict[str, Any]:
    unit, map_name = ("mm", "lines_map") if metric_type == "distance" else ("degree", "angles_map")
    return {"metric_type": metric_type, "metric_map_name": map_name, "metric_key": key, "metric_value": value,
            "metric_unit": unit, "slice_dim": dim}


def ad_entry(slice_idx: int, *metrics: dict[str, Any]) -> dict[str, Any]:
    return {"slice_idx": slice_idx, "slice_profile": list(metrics)}


# ---------------------------------------------------------------------------------------------- cases and tasks


def image_info(shape: tuple[int, int, int], voxel: tuple[float, float, float]) -> dict[str, Any]:
    affine = [[voxel[0], 0, 0, 0], [0, voxel[1], 0, 0], [0, 0, voxel[2], 0], [0, 0, 0, 1]]
    return {"voxel_size": list(voxel), "affine": affine, "orientation": ["R", "A", "S"], "array_size": list(shape)}


def case(case_id: str, *, image_folder: str = "Images", mask_folder: str | None = "Masks",
         landmark_folder: str | None = None, shape: tuple[int, int, int] = (20, 24, 10),
         voxel: tuple[float, float, float] = (1.0, 1.0, 2.0), x: list | None = None, y: list | None = None,
         z: list | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"case_ID": case_id, "image_file": f"{image_folder}/{case_id}.nii.gz"}
    if mask_folder is not None:
        out["mask_file"] = f"{mask_folder}/{case_id}.nii.gz"
    if landmark_folder is not None:
        out["landmark_file"] = f"{landmark_folder}/{case_id}.json.gz"
    out["image_file_info"] = image_info(shape, voxel)
    if mask_folder is not None:
        out["mask_file_info"] = image_info(shape, voxel)
    out.update(slice_profiles_x=list(x or []), slice_profiles_y=list(y or []), slice_profiles_z=list(z or []))
    return out


def task(kind: str, train: list[dict], test: list[dict], *, task_no: int = 1, image_folder: str = "Images",
         labels_map: dict[str, str] | None = None, target_label: int | None = None,
         landmark_folder: str | None = None, biometrics_map: list[dict] | None = None,
         numbers: bool = True, task_id: str | None = None) -> dict[str, Any]:
    """One plan task in upstream's key order (header, train_cases_number, train_cases, test_cases_number, ...)."""
    head: dict[str, Any] = {"task_ID": task_id or f"{task_no:02d}", "task_type": kind, "image_modality": "CT",
                            "image_description": "abdominal computed tomography (CT) scan",
                            "image_folder": image_folder}
    if kind != "biometry" or target_label is not None:
        head.update(mask_folder=image_folder.rsplit("Images", 1)[0] + "Masks")
    head.update(image_prefix="", image_suffix=".nii.gz", mask_prefix="", mask_suffix=".nii.gz")
    head["labels_map"] = labels_map or _labels_map([*train, *test], target_label)
    if kind == "biometry":
        landmarks_map, lines_map, angles_map = _ad_maps([*train, *test])
        head.update(landmark_folder=landmark_folder or "Landmarks", landmark_figure_folder="Landmarks-fig",
                    landmark_prefix="", landmark_suffix=".json.gz", landmarks_map=landmarks_map,
                    lines_map=lines_map, angles_map=angles_map, biometrics_map=biometrics_map or [])
        if target_label is not None:
            head.update(target_label=target_label, cluster_size_threshold=10, min_major_axis_mm=0.0)
    out = dict(head)
    if numbers:
        out["train_cases_number"] = len(train)
    out["train_cases"] = train
    if numbers:
        out["test_cases_number"] = len(test)
    out["test_cases"] = test
    return out


def _entries(cases: list[dict]) -> list[dict]:
    return [e for c in cases for a in AXES for e in c.get(f"slice_profiles_{a}") or []]


def _labels_map(cases: list[dict], target_label: int | None) -> dict[str, str]:
    """A name for every label the cases use (the task metadata must know each doc's label)."""
    labels = {1, 2, 3} | ({target_label} if target_label is not None else set())
    labels |= {item["label"] for e in _entries(cases) for item in e["slice_profile"]
               if isinstance(item, dict) and "label" in item}
    return {str(lab): f"structure {lab}" for lab in sorted(labels)}


def _ad_maps(cases: list[dict]) -> tuple[dict, dict, dict]:
    """landmarks_map / lines_map / angles_map naming every A/D metric key the cases use."""
    landmarks: dict[str, str] = {}
    lines: dict[str, dict] = {}
    angles: dict[str, dict] = {}

    def line(key: str) -> None:
        pts = [f"{key}:P1", f"{key}:P2"]
        landmarks.update({p: f"point {p}" for p in pts})
        lines[key] = {"name": f"line {key}", "element_keys": pts, "element_map_name": "landmarks_map"}

    for e in _entries(cases):
        for m in e["slice_profile"]:
            if not isinstance(m, dict) or m.get("metric_map_name") not in ("lines_map", "angles_map"):
                continue
            if m["metric_type"] == "distance":
                line(m["metric_key"])
            else:
                pair = [f"{m['metric_key']}:L1", f"{m['metric_key']}:L2"]
                for k in pair:
                    line(k)
                angles[m["metric_key"]] = {"name": f"angle {m['metric_key']}", "element_keys": pair,
                                           "element_map_name": "lines_map"}
    return landmarks, lines, angles


def plan(dataset: str, tasks: list[dict]) -> dict[str, Any]:
    return {"dataset_info": {"dataset": dataset, "dataset_website": "", "dataset_data": [], "license": [],
                             "paper": []},
            "tasks_number": len(tasks), "tasks": tasks}


def reorder(task_dict: dict[str, Any], first: list[str], last: list[str]) -> dict[str, Any]:
    """The same task with some keys moved to the front / the back (a plan not in upstream's writing order)."""
    middle = [k for k in task_dict if k not in first and k not in last]
    return {k: task_dict[k] for k in [*first, *middle, *last] if k in task_dict}


def write_plan(data_dir: Path, dataset: str, kind: str, version: str, plan_dict: dict[str, Any],
               indent: int | None = None) -> Path:
    path = Path(data_dir) / "Datasets" / dataset / f"benchmark_plan_{kind}_v{version}.json.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(plan_dict, indent=indent).encode("utf-8"), compresslevel=6))
    return path


def garble_keeping_size_and_mtime(path: Path) -> None:
    """Overwrite a plan with zeros of the same size, keeping its modification time (its change time and gzip trailer
    differ): what a cache keyed by size and mtime alone would serve stale."""
    st = path.stat()
    path.write_bytes(b"\0" * st.st_size)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def write_volumes(data_dir: Path, dataset: str, cases: list[dict[str, Any]]) -> None:
    """Tiny NIfTI volumes (image, and mask when the case has one) at the case paths, with the case's geometry."""
    import nibabel as nib

    root = Path(data_dir) / "Datasets" / dataset
    for c in cases:
        info = c["image_file_info"]
        shape, voxel = tuple(info["array_size"]), tuple(info["voxel_size"])
        for key, dtype in (("image_file", np.int16), ("mask_file", np.uint8)):
            if key not in c:
                continue
            path = root / c[key]
            path.parent.mkdir(parents=True, exist_ok=True)
            img = nib.Nifti1Image(np.zeros(shape, dtype=dtype), np.diag([*voxel, 1.0]))
            img.header.set_zooms(voxel)
            nib.save(img, str(path))
        if c.get("landmark_file"):
            path = root / c["landmark_file"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(gzip.compress(json.dumps({"slice_landmarks_x": [], "slice_landmarks_y": [],
                                                       "slice_landmarks_z": []}).encode()))


def env(pin: str | None = "latest", ack: str | None = None, filtering: str | None = None) -> dict[str, str]:
    out: dict[str, str] = {}
    if pin is not None:
        out["MedVision_PLANNER_VERSION"] = pin
    if ack is not None:
        out["MedVision_ACK_RELEASE"] = ack
    if filtering is not None:
        out["MedVision_DISABLE_SAMPLE_FILTERING"] = filtering
    return out


def open_data(data_dir: Path, pin: str | None = "latest", ack: str | None = None,
              filtering: str | None = None) -> DataDir:
    return DataDir(DatasetContract.resolve(data_dir, env(pin, ack, filtering)))


# ---------------------------------------------------------------------------------------------- reference flatten


def reference_rows(data_dir: Path, dataset: str, plan_dict: dict[str, Any], task_pos: int, split: str,
                   family: str, slice_dim: int, measure: str | None = None, filtering: bool = True) -> list[dict]:
    """The rows upstream's loader yields for one config, restated plainly from docs/spec/data-loader.md section 3
    (not from our reader)."""
    t = plan_dict["tasks"][task_pos]
    root = Path(data_dir) / "Datasets" / dataset
    task_type = {"detect": "Box-Size", "TL": "Tumor-Lesion-Size"}.get(family) or (
        "Biometrics-From-Landmarks" + (f"-{measure}" if measure else ""))
    rows = []
    for c in t[f"{split}_cases"]:
        info = c["image_file_info"]
        size3 = [int(v) for v in info["array_size"]]
        vox = [f16(v) for v in info["voxel_size"]]
        inplane = [a for a in range(3) if a != slice_dim]
        geometry = {"image_size_2d": [size3[a] for a in inplane], "pixel_size": [vox[a] for a in inplane],
                    "image_size_3d": size3, "voxel_size": vox}
        head = {"dataset_name": dataset, "taskID": f"{task_pos + 1:02d}", "taskType": task_type,
                "image_file": str(root / c["image_file"])}
        if family != "AD":
            head["mask_file"] = str(root / c["mask_file"])
        if family != "detect":
            head["landmark_file"] = str(root / c["landmark_file"])
        for entry in c.get(f"slice_profiles_{AXES[slice_dim]}") or []:
            pos = {"slice_dim": slice_dim, "slice_idx": entry["slice_idx"]}
            if family == "detect":
                for item in entry["slice_profile"]:
                    boxes = item["bboxes"]
                    if filtering and (len(boxes) > 1 or boxes[0]["dimensions"][0] < 10
                                      or boxes[0]["dimensions"][1] < 10):
                        continue
                    bb = {k: [list(b[k]) for b in boxes] for k in ("min_coords", "max_coords", "center_coords",
                                                                   "dimensions")}
                    bb["sizes"] = [[f16(s) for s in b["sizes"]] for b in boxes]
                    rows.append({**head, **pos, "label": item["label"], **geometry, "bounding_boxes": bb})
            elif family == "TL":
                profile = []
                for cluster in entry["slice_profile"]:
                    by_key = {m["metric_key"]: m for m in cluster}
                    if "L-1-2" not in by_key or "L-3-4" not in by_key:
                        continue
                    profile.append((by_key["L-1-2"], by_key["L-3-4"]))
                n_total = entry.get("n_total_clusters")
                if filtering and ((n_total is not None and n_total > 1) or (n_total is None and len(profile) > 1)):
                    continue
                bp = {"metric_type": [a["metric_type"] for a, _ in profile],
                      "metric_map_name": [a["metric_map_name"] for a, _ in profile],
                      "metric_key_major_axis": ["L-1-2" for _ in profile],
                      "metric_value_major_axis": [f16(a["metric_value"]) for a, _ in profile],
                      "metric_key_minor_axis": ["L-3-4" for _ in profile],
                      "metric_value_minor_axis": [f16(b["metric_value"]) for _, b in profile],
                      "metric_unit": [a["metric_unit"] for a, _ in profile]}
                rows.append({**head, **pos, "label": t["target_label"], **geometry, "biometric_profile": bp})
            else:
                for m in entry["slice_profile"]:
                    if measure and m["metric_type"] != measure.lower():
                        continue
                    bp = {**m, "metric_value": f16(m["metric_value"])}
                    rows.append({**head, **pos, **geometry, "biometric_profile": bp})
    return rows


# ---------------------------------------------------------------------------------------------- random plans


def random_plan(family: str, seed: int, n_tasks: int = 2, n_train: int = 3, n_test: int = 4,
                versioned_tl: bool = True) -> dict[str, Any]:
    """A plan with every filter case drawn at random (boxes 5..15 px, 1..3 boxes, 0..3 clusters, ...)."""
    rng = random.Random(seed)
    tasks = []
    for t in range(n_tasks):
        def make(prefix: str, n: int, t: int = t) -> list[dict]:
            out = []
            for i in range(n):
                shape = (rng.randint(12, 40), rng.randint(12, 40), rng.randint(4, 30))
                voxel = (round(rng.uniform(0.3, 1.2), 3), round(rng.uniform(0.3, 1.2), 3),
                         round(rng.uniform(0.5, 5.0), 3))
                profiles: dict[str, list] = {}
                for axis in AXES:
                    entries = []
                    for s in sorted(rng.sample(range(40), rng.randint(0, 5))):
                        if family == "detect":
                            items = [det_item(lab, *[bbox((rng.randint(0, 9), rng.randint(0, 9)),
                                                          (rng.randint(7, 13), rng.randint(7, 13)))
                                                     for _ in range(rng.choice((1, 1, 1, 2, 3)))])
                                     for lab in sorted(rng.sample(range(1, 6), rng.randint(1, 3)))]
                            entries.append(det_entry(s, *items))
                        elif family == "TL":
                            clusters = [tl_cluster(round(rng.uniform(3, 60), 3), round(rng.uniform(1, 30), 3))
                                        for _ in range(rng.randint(1, 3))]
                            if rng.random() < 0.2:  # a cluster missing its minor axis is skipped (BP)
                                clusters.append(tl_cluster(12.0, 5.0, keys=("L-1-2",)))
                            n_total = len(clusters) + rng.randint(0, 1) if versioned_tl else None
                            entries.append(tl_entry(s, *clusters, n_total=n_total))
                        else:
                            metrics = [ad_metric(rng.choice(("distance", "angle")), f"K{rng.randint(1, 9)}",
                                                 round(rng.uniform(1, 120), 3)) for _ in range(rng.randint(1, 3))]
                            entries.append(ad_entry(s, *metrics))
                    profiles[axis] = entries
                kw: dict[str, Any] = {"shape": shape, "voxel": voxel, **profiles}
                if family == "TL":
                    kw["landmark_folder"] = f"Landmarks-Label{t + 2}" + ("-v1.1.1" if versioned_tl else "")
                if family == "AD":
                    kw.update(mask_folder=None, landmark_folder="Landmarks")
                out.append(case(f"{prefix}{t}_{i:03d}", **kw))
            return out

        train, test = make("tr", n_train), make("te", n_test)
        if family == "detect":
            tasks.append(task("detection", train, test, task_no=t + 1))
        elif family == "TL":
            tasks.append(task("biometry", train, test, task_no=t + 1, target_label=t + 2,
                              landmark_folder=f"Landmarks-Label{t + 2}"))
        else:
            tasks.append(task("biometry", train, test, task_no=t + 1,
                              biometrics_map=[{"metric_type": "distance"}, {"metric_type": "angle"}]))
    return plan("Rand", tasks)
