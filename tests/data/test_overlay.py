"""The -VP and -VP-woMedImg pictures, pixel for pixel against upstream's drawing rule.

The reference below is written from upstream's rule, not from the code under test: YongchengYAO/MedVision
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
import pytest
from PIL import Image, ImageDraw
from scipy.ndimage import zoom

from medvision_bm.data.docs import Overlay, RunDoc, View
from medvision_bm.data.layout import DataDir
from medvision_bm.data.overlay import RULE, draw, overlay_for
from medvision_bm.data.planner import DatasetContract
from medvision_bm.errors import UserError
from medvision_bm.tasks import hooks

cv2 = pytest.importorskip("cv2")

TASKS = {
    "detect": "PhantomCT_BoxCoordinate_Task01_Axial",
    "TL": "PhantomCT_TumorLesionSize_Task01_Axial",
    "distance": "PhantomXR_BiometricsFromLandmarks_Distance_Task01_Sagittal",
    "angle": "PhantomXR_BiometricsFromLandmarks_Angle_Task01_Sagittal",
}
RESHAPES = [None, (70, 130), (41, 37)]


# ---------------------------------------------------------------------------------------------- upstream's rule


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


def _ref_line_with_points(img: Image.Image, p1, p2, line_color: str, point_color: str) -> None:
    pen = ImageDraw.Draw(img)
    x1, y1, x2, y2 = p1[1], p1[0], p2[1], p2[0]
    pen.line([(x1, y1), (x2, y2)], fill=line_color, width=2)
    r = 3
    pen.ellipse([(x1 - r, y1 - r), (x1 + r, y1 + r)], fill=point_color)
    pen.ellipse([(x2 - r, y2 - r), (x2 + r, y2 + r)], fill=point_color)


def _ref_contour(img: Image.Image, mask: np.ndarray) -> Image.Image:
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
        _ref_line_with_points(pil, scaled(coords[a]), scaled(coords[b]), colour, "#FF0000")
    return pil


# ---------------------------------------------------------------------------------------------- the suite's


def _rundocs(phantom_dir: Path, task: str, variant: str, reshape, n: int = 4) -> list[RunDoc]:
    data = DataDir(DatasetContract(phantom_dir.resolve(), "1.0.0", "1.4.0"))
    samples = data.samples(task + variant)
    out = []
    for doc in samples.docs(list(range(min(n, len(samples))))):
        h, w = reshape or doc.image_size_2d
        view = View(image_hw=(h, w), pixel_hw_mm=(1.0, 1.0), canvas_hw=(h, w), content_hw=(h, w),
                    stated_pixel_hw_mm=(1.0, 1.0), header_pixel_hw=(1.0, 1.0), reshape_hw=reshape,
                    overlay=overlay_for(doc, phantom_dir.resolve(), variant, reshape, samples.meta_header))
        out.append(RunDoc(doc, view, "current", variant, str(phantom_dir.resolve())))
    return out


@pytest.mark.parametrize("reshape", RESHAPES)
@pytest.mark.parametrize("variant", ["-VP", "-VP-woMedImg"])
@pytest.mark.parametrize("kind", list(TASKS))
def test_every_drawn_picture_is_upstreams_pixel_for_pixel(phantom_dir, kind, variant, reshape):
    family = "AD" if kind in ("distance", "angle") else kind
    rds = _rundocs(phantom_dir, TASKS[kind], variant, reshape)
    assert rds
    for rd in rds:
        row = rd.doc.upstream_row(phantom_dir.resolve())
        plain = hooks.render_gray(rd)
        expected = upstream_picture(family, variant, row, phantom_dir.resolve(), reshape, plain)
        sent = hooks.visual(rd)
        assert sent.mode == "RGB" and sent.size == expected.size
        assert np.array_equal(np.asarray(sent), np.asarray(expected)), (kind, variant, reshape, rd.doc.key)
        arr = np.asarray(sent)
        colour = ~((arr[..., 0] == arr[..., 1]) & (arr[..., 1] == arr[..., 2]))
        assert colour.any(), "something is drawn"
        if variant == "-VP-woMedImg":
            assert not arr[~colour].any(), "the rest of a woMedImg picture is the black canvas"
        else:
            assert np.array_equal(arr[~colour][:, 0], plain[~colour]), "the rest is the slice as shown"
        # API backends are handed the same colour picture (never a grey slice)
        assert np.array_equal(np.asarray(hooks.visual_gray(rd)), arr)


def test_the_tl_woMedImg_picture_draws_the_mask_contour_under_the_axes(phantom_dir):
    def count(arr, rgb):
        return int(((arr[..., 0] == rgb[0]) & (arr[..., 1] == rgb[1]) & (arr[..., 2] == rgb[2])).sum())

    drawn = [np.asarray(hooks.visual(rd)) for rd in _rundocs(phantom_dir, TASKS["TL"], "-VP-woMedImg", None, n=8)]
    on_slice = [np.asarray(hooks.visual(rd)) for rd in _rundocs(phantom_dir, TASKS["TL"], "-VP", None, n=8)]
    assert all(count(a, (0, 255, 0)) > 10 for a in drawn), "every woMedImg picture has its contour"
    assert any(count(a, (0xF5, 0x8D, 0x31)) for a in drawn), "the major axis is drawn over it"
    assert any(count(a, (0, 0, 0xFF)) for a in drawn) and all(count(a, (0xFF, 0, 0)) for a in drawn)
    assert sum(count(a, (0, 255, 0)) for a in on_slice) == 0, "-VP draws the axes only"


def test_a_reshape_scales_the_coordinates_with_upstreams_truncation(phantom_dir):
    rd = _rundocs(phantom_dir, TASKS["detect"], "-VP", (41, 37), n=1)[0]
    h, w = rd.doc.image_size_2d
    lo, hi = rd.doc.bounding_boxes["min_coords"][0], rd.doc.bounding_boxes["max_coords"][0]
    assert rd.view.overlay.box == ((int(lo[0] * (41 / h)), int(lo[1] * (37 / w))),
                                   (int(hi[0] * (41 / h)), int(hi[1] * (37 / w))))


def test_fractional_coordinates_near_the_edges_draw_as_pil_draws_them():
    """Landmarks need not be whole pixels (fitted ellipse axes); the suite passes them to PIL as read."""
    rng = np.random.default_rng(7)
    for case in range(60):
        h, w = (int(v) for v in rng.integers(8, 90, 2))
        base = rng.integers(0, 256, (h, w), dtype=np.uint8)
        pts = [(float(rng.uniform(-2, h + 2)), float(rng.uniform(-2, w + 2))) for _ in range(4)]
        if case % 3 == 0:
            pts = [(round(r), round(c)) for r, c in pts]
        lines = ((pts[0], pts[1], "#F58D31"), (pts[2], pts[3], "#0000FF"))
        canvas = "black" if case % 2 else "slice"
        ours = draw(base, Overlay(RULE, canvas, lines=lines))
        ref = Image.fromarray(np.zeros_like(base) if canvas == "black" else base, "L").convert("RGB")
        for a, b, colour in lines:
            _ref_line_with_points(ref, a, b, colour, "#FF0000")
        assert np.array_equal(np.asarray(ours), np.asarray(ref)), case


def test_the_overlay_is_part_of_the_doc_hash_and_survives_the_store_row(phantom_dir):
    from medvision_bm.data.docs import rundoc_from_store_row
    from medvision_bm.store.signature import doc_sha

    rd = _rundocs(phantom_dir, TASKS["angle"], "-VP", (70, 130), n=1)[0]
    row = {"doc": rd.doc.to_json(), "view": json.loads(json.dumps(rd.view.to_json())), "protocol": "current",
           "variant": "-VP"}
    back = rundoc_from_store_row(row)
    assert back.view == rd.view and doc_sha(back.doc, back.view) == doc_sha(rd.doc, rd.view)
    import dataclasses

    plain = dataclasses.replace(rd.view, overlay=None)
    assert doc_sha(rd.doc, plain) != doc_sha(rd.doc, rd.view)
    assert "overlay" not in plain.to_json()


def test_a_visual_prompt_sample_without_its_drawing_is_refused_never_sent_plain(phantom_dir):
    import dataclasses

    rd = _rundocs(phantom_dir, TASKS["distance"], "-VP-woMedImg", None, n=1)[0]
    bare = dataclasses.replace(rd, view=dataclasses.replace(rd.view, overlay=None))
    for hook in (hooks.visual, hooks.visual_gray):
        with pytest.raises(UserError, match="no drawn visual prompt"):
            hook(bare)


def test_an_ad_sample_whose_landmarks_cannot_be_named_is_a_one_line_error(phantom_dir):
    import dataclasses

    data = DataDir(DatasetContract(phantom_dir.resolve(), "1.0.0", "1.4.0"))
    samples = data.samples(TASKS["distance"] + "-VP")
    doc = samples.docs([0])[0]
    bad = dataclasses.replace(doc, biometric_profile={**doc.biometric_profile, "metric_key": "L-9-9"})
    with pytest.raises(UserError, match="landmarks cannot be named") as exc:
        overlay_for(bad, phantom_dir, "-VP", None, samples.meta_header)
    assert "\n" not in str(exc.value)
    assert overlay_for(doc, phantom_dir, "-CoT", None, samples.meta_header) is None
