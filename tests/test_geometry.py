"""Hand-computed cases for every coordinate conversion and measurement."""

from __future__ import annotations

import math

import numpy as np
import pytest

from medvision_bm.data.docs import Doc, View
from medvision_bm.geometry import (
    box_from_mask,
    box_iou,
    box_px_to_relative,
    distance_mm,
    ellipse_axes_mm,
    line_angle_deg,
    pixel_overlap,
    rasterize_relative_box,
)
from medvision_bm.tasks.metrics import sample_metrics, target


def test_box_to_relative_flips_y_to_lower_left_origin():
    # image 100 rows x 200 columns; box columns 20..60, rows 10..40 (top-left origin)
    assert box_px_to_relative([20, 10, 60, 40], (100, 200)) == pytest.approx([0.1, 0.6, 0.3, 0.9])


def test_rasterizing_the_relative_box_returns_the_pixel_box_whatever_the_corner_order():
    rel = box_px_to_relative([20, 10, 60, 40], (100, 200))
    assert rasterize_relative_box(rel, (100, 200)) == (20, 10, 60, 40)
    assert rasterize_relative_box([rel[2], rel[3], rel[0], rel[1]], (100, 200)) == (20, 10, 60, 40)


def test_box_from_mask_uses_pixel_edges():
    m = np.zeros((10, 12), bool)
    m[2:5, 3:9] = True  # rows 2..4, columns 3..8
    assert box_from_mask(m) == [3.0, 2.0, 9.0, 5.0]
    assert box_from_mask(np.zeros((4, 4), bool)) is None


def test_iou_hand_cases():
    assert box_iou([0, 0, 2, 2], [1, 1, 3, 3]) == pytest.approx(1 / 7)
    assert box_iou([0, 0, 1, 1], [0, 0, 1, 1]) == 1.0
    assert box_iou([0, 0, 1, 1], [2, 2, 3, 3]) == 0.0
    assert box_iou([1, 1, 0, 0], [0, 0, 1, 1]) == 0.0  # reversed corners: zero area


def test_pixel_precision_recall_f1_on_the_sent_grid():
    pred = rasterize_relative_box([0.0, 0.0, 0.5, 0.5], (4, 4))  # lower-left quarter
    assert pred == (0, 2, 2, 4)
    gt = rasterize_relative_box([0.0, 0.0, 1.0, 0.5], (4, 4))  # lower half
    p, r, f1 = pixel_overlap(pred, gt)
    assert (p, r) == (1.0, 0.5)
    assert f1 == pytest.approx(2 / 3)
    assert pixel_overlap((0, 0, 0, 0), gt) == (0.0, 0.0, 0.0)


def test_ellipse_axes_in_mm_with_anisotropic_pixels():
    # an ellipse with semi-axes 20 mm (x) and 8 mm (y), pixels 0.5 mm wide and 1.0 mm high
    h, w = 60, 120
    ph, pw = 1.0, 0.5
    yy, xx = np.mgrid[0:h, 0:w]
    x_mm, y_mm = (xx + 0.5) * pw - 30.0, (yy + 0.5) * ph - 30.0
    mask = (x_mm / 20.0) ** 2 + (y_mm / 8.0) ** 2 <= 1.0
    major, minor, centre, angle = ellipse_axes_mm(mask, (ph, pw))
    assert major == pytest.approx(40.0, rel=0.02)
    assert minor == pytest.approx(16.0, rel=0.03)
    assert centre == pytest.approx([60.0, 30.0], abs=0.6)
    assert min(angle, 180 - angle) == pytest.approx(0.0, abs=1.0)


def test_distance_and_angle_use_physical_spacing():
    px = (2.0, 1.0)  # 2 mm high, 1 mm wide
    assert distance_mm((0, 0), (3, 4), px) == pytest.approx(math.sqrt(3**2 + 8**2))
    assert line_angle_deg((0, 0), (1, 0), (0, 0), (0, 1), px) == pytest.approx(90.0)
    # the pixel diagonal is steeper in mm when pixels are taller than wide: atan(2/1)
    assert line_angle_deg((0, 0), (1, 0), (0, 0), (1, 1), px) == pytest.approx(math.degrees(math.atan(2.0)))
    # undirected lines: reversing one line changes nothing
    assert line_angle_deg((0, 0), (1, 0), (1, 1), (0, 0), px) == pytest.approx(math.degrees(math.atan(2.0)))


def _doc(**kw) -> Doc:
    base = dict(key="k", task="X_BoxCoordinate_Task01_Axial", dataset="X", family="detect", task_type="BoxCoordinate",
                task_id="Task01", plane="Axial", split="test", index=0, image="Images/a.nii.gz", slice_dim=2,
                slice_idx=0, label=1, label_name="liver", structure_kind="anatomy", modality="CT", anatomy="abdomen",
                spacing_mm=(0.5, 1.0, 2.0), image_hw=(100, 200), pixel_hw_mm=(1.0, 0.5),
                annotation={"box_px": [20, 10, 60, 40]}, measurement="the bounding box of the liver")
    base.update(kw)
    return Doc(**base)


def test_reshape_that_changes_aspect_ratio_rescales_pixel_size_and_pixel_targets():
    doc = _doc()
    view = View.for_doc(doc, reshape_hw=(50, 50))
    # 100 rows of 1.0 mm -> 50 rows of 2.0 mm; 200 columns of 0.5 mm -> 50 columns of 2.0 mm
    assert view.pixel_hw_mm == pytest.approx((2.0, 2.0))
    assert view.seen_hw == (50, 50)
    # relative targets do not change; on the 50x50 grid the box in pixels scales by 1/4 in x and 1/2 in y
    tgt = target(doc)
    assert rasterize_relative_box(tgt, view.seen_hw) == (5, 5, 15, 20)
    m = sample_metrics(doc, view, tgt)
    assert m["iou"] == 1.0 and m["pixel_f1"] == 1.0 and m["mae"] == 0.0


def test_processed_size_sets_the_stated_pixel_size():
    doc = _doc()
    view = View.for_doc(doc, reshape_hw=None, processed_hw=(56, 112))
    assert view.pixel_hw_mm == pytest.approx((1.0 * 100 / 56, 0.5 * 200 / 112))
    assert view.reshape_hw is None


def test_processor_resize_rules_of_the_registry():
    from medvision_bm.models.registry import get_record
    from medvision_bm.runner.config import processed_hw_for

    # pad-to-square then 336: a 112x128 slice is seen as 294x336 content, scaled the same in both axes
    seen = processed_hw_for(get_record("llava_med"), "pad_square", (112, 128))
    assert seen == (294, 336)
    view = View.for_doc(_doc(image_hw=(112, 128), pixel_hw_mm=(0.8, 0.8)), processed_hw=seen)
    assert view.pixel_hw_mm[0] == pytest.approx(view.pixel_hw_mm[1], rel=0.01)
    assert view.pixel_hw_mm[1] == pytest.approx(0.8 * 128 / 336)
    assert processed_hw_for(get_record("meddr"), "fixed", (112, 128)) == (448, 448)
    assert processed_hw_for(get_record("gemma3"), "fixed", (300, 200)) == (896, 896)
    assert processed_hw_for(get_record("oracle"), "none", (300, 200)) is None
