"""A reference of upstream's -VP / -VP-woMedImg pictures, for the tests that hold the suite's to it.

It is written from upstream's rule, not from the code under test: YongchengYAO/MedVision
``src/medvision_bm/medvision_lmms_eval/lmms_eval/tasks/medvision/medvision_utils.py`` @0a4c5e2
(``doc_to_visual_wBox`` / ``_wBox_woMedImg``, ``doc_to_visual_wVisualPrompt_TLTask`` / ``_TLTask_woMedImg``,
``_distanceTask`` / ``_distanceTask_woMedImg``, ``_angleTask`` / ``_angleTask_woMedImg``), the landmark reading of
``src/medvision_bm/sft/sft_utils.py`` @0a4c5e2 (``_get_landmarks_coords``), and the drawing helpers
``add_bbox_overlay``, ``add_landmarks_and_line_overlay``, ``add_mask_overlay_contour`` (YongchengYAO/biometric_vqa
``src/biometric_vqa/utils/doc_to_visual_utils.py`` @7eb775b; @0a4c5e2 passes the line and point colours). It calls
PIL and OpenCV, the libraries upstream draws with, with upstream's parameters, on the rows upstream's loader yields
(absolute paths), reading the volumes, masks, landmark files and plans itself.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import nibabel as nib
import numpy as np
from PIL import Image, ImageDraw
from scipy.ndimage import zoom


def _ref_load_2d(path: str, dim: int, idx: int, new_hw) -> np.ndarray:
    """``_load_nifti_2d`` @0a4c5e2: get_fdata as float32, the raw slice, zoom (order 0 for <= 2 values, else 1)."""
    vol = nib.load(path).get_fdata().astype("float32")
    img = [vol[idx, :, :], vol[:, idx, :], vol[:, :, idx]][dim]
    if new_hw is not None:
        order = 0 if len(np.unique(img)) <= 2 else 1
        img = zoom(img, (new_hw[0] / img.shape[0], new_hw[1] / img.shape[1]), order=order)
    return img


def _ref_landmarks(row: dict, names: list[str]) -> dict[str, list]:
    """``_get_landmarks_coords``: the slice's entries merged (a list: its first lesion), the slice axis dropped."""
    with gzip.open(row["landmark_file"], "rt", encoding="utf-8") as f:
        data = json.load(f)
    dim, idx = row["slice_dim"], row["slice_idx"]
    merged: dict = {}
    for entry in data[("slice_landmarks_x", "slice_landmarks_y", "slice_landmarks_z")[dim]]:
        if entry.get("slice_idx") == idx:
            lms = entry["landmarks"]
            merged.update(lms[0] if isinstance(lms, list) else lms)
    out = {}
    for name in names:
        c = merged[name]
        out[name] = [c[1], c[2]] if dim == 0 else [c[0], c[2]] if dim == 1 else [c[0], c[1]]
    return out


def _ref_task_info(data_dir: Path, row: dict) -> dict:
    """The task dict upstream indexes (``benchmark_plan["tasks"][int(taskID) - 1]``), here from the plan file."""
    folder = data_dir / "Datasets" / row["dataset_name"]
    plan = sorted(folder.glob("benchmark_plan_biometry_v*.json.gz"))[0]
    with gzip.open(plan, "rt", encoding="utf-8") as f:
        return json.load(f)["tasks"][int(row["taskID"]) - 1]


def _ref_point_pairs(family: str, row: dict, task_info: dict) -> list[tuple[str, str, str]]:
    if family == "TL":
        return [("P1", "P2", "#F58D31"), ("P3", "P4", "#0000FF")]
    bp = row["biometric_profile"]
    entry = task_info[bp["metric_map_name"]][bp["metric_key"]]
    if bp["metric_type"] == "distance":
        a, b = entry["element_keys"]
        return [(a, b, "#00FF00")]
    lines = task_info[entry["element_map_name"]]
    (a, b), (c, d) = (lines[k]["element_keys"] for k in entry["element_keys"])
    return [(a, b, "#00FF00"), (c, d, "#0000FF")]


def ref_line_with_points(img: Image.Image, p1, p2, line_color: str, point_color: str) -> None:
    pen = ImageDraw.Draw(img)
    x1, y1, x2, y2 = p1[1], p1[0], p2[1], p2[0]
    pen.line([(x1, y1), (x2, y2)], fill=line_color, width=2)
    r = 3
    pen.ellipse([(x1 - r, y1 - r), (x1 + r, y1 + r)], fill=point_color)
    pen.ellipse([(x2 - r, y2 - r), (x2 + r, y2 + r)], fill=point_color)


def _ref_contour(img: Image.Image, mask: np.ndarray) -> Image.Image:
    import cv2

    arr = np.array(img)
    contours, _ = cv2.findContours(mask.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    out = arr.copy()
    cv2.drawContours(out, contours, -1, (0, 255, 0), 2)
    return Image.fromarray(out)


def upstream_picture(family: str, variant: str, row: dict, data_dir: Path, new_hw, shown_slice: np.ndarray):
    """What upstream's doc_to_visual_* returns for this row; ``shown_slice`` is the normalised uint8 slice of
    ``doc_to_visual`` (the plain picture, pinned by tests/data/test_image.py)."""
    img_2d = _ref_load_2d(row["image_file"], row["slice_dim"], row["slice_idx"], new_hw)
    base = np.zeros_like(img_2d, dtype=np.uint8) if variant == "-VP-woMedImg" else shown_slice
    assert base.shape == img_2d.shape
    pil = Image.fromarray(base, mode="L").convert("RGB")
    orig_h, orig_w = row["image_size_2d"]

    def scaled(c):
        if new_hw is None:
            return c
        return (int(c[0] * (new_hw[0] / orig_h)), int(c[1] * (new_hw[1] / orig_w)))

    if family == "detect":
        lo, hi = scaled(row["bounding_boxes"]["min_coords"][0]), scaled(row["bounding_boxes"]["max_coords"][0])
        ImageDraw.Draw(pil).rectangle([(lo[1], lo[0]), (hi[1], hi[0])], outline="#00FF00", width=2)
        return pil
    if family == "TL" and variant == "-VP-woMedImg":
        pil = _ref_contour(pil, _ref_load_2d(row["mask_file"], row["slice_dim"], row["slice_idx"], new_hw))
    pairs = _ref_point_pairs(family, row, _ref_task_info(data_dir, row) if family == "AD" else {})
    coords = _ref_landmarks(row, [k for a, b, _ in pairs for k in (a, b)])
    for a, b, colour in pairs:
        ref_line_with_points(pil, scaled(coords[a]), scaled(coords[b]), colour, "#FF0000")
    return pil
