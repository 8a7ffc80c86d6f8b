"""Per-sample metrics and task aggregation, hand-computed."""

from __future__ import annotations

import pytest

from medvision_bm.data.docs import Doc, View
from medvision_bm.tasks.metrics import aggregate, format_answer, score_answer, target


def _doc(family: str, annotation: dict, **kw) -> Doc:
    task_type = {"detect": "BoxCoordinate", "TL": "TumorLesionSize", "AD": "BiometricsFromLandmarks"}[family]
    base = dict(key=kw.pop("key", "k"), task=f"X_{task_type}_Task01_Axial", dataset="X", family=family,
                task_type=task_type, task_id="Task01", plane="Axial", split="test", index=0, image="Images/a.nii.gz",
                slice_dim=2, slice_idx=0, label=1, label_name="tumor", structure_kind="lesion", modality="CT",
                anatomy="abdomen", spacing_mm=(1.0, 1.0, 1.0), image_hw=(10, 10), pixel_hw_mm=(1.0, 1.0),
                annotation=annotation, measurement="m")
    base.update(kw)
    return Doc(**base)


VIEW = View(seen_hw=(10, 10), pixel_hw_mm=(1.0, 1.0))


def test_detection_metrics_hand_case():
    doc = _doc("detect", {"box_px": [2, 2, 6, 6]})  # rows 2..5, cols 2..5 -> rel [0.2, 0.4, 0.6, 0.8]
    assert target(doc) == pytest.approx([0.2, 0.4, 0.6, 0.8])
    # predicted box shifted right by 0.2: overlap 0.2 x 0.4 out of union 0.24
    sc = score_answer(doc, VIEW, "<answer>0.4, 0.4, 0.8, 0.8</answer>")
    m = sc.metrics
    assert sc.success
    assert m["iou"] == pytest.approx(0.08 / 0.24)
    assert m["pixel_precision"] == pytest.approx(0.5) and m["pixel_recall"] == pytest.approx(0.5)
    assert m["mae"] == pytest.approx(0.1)  # (0.2 + 0 + 0.2 + 0) / 4
    assert m["mre"] == pytest.approx((0.2 / 0.2 + 0 + 0.2 / 0.6 + 0) / 4)
    assert m["iou_ge_50"] == 0.0
    perfect = score_answer(doc, VIEW, format_answer(target(doc))).metrics
    assert perfect["iou"] == 1.0 and all(perfect[f"iou_ge_{t}"] == 1.0 for t in (50, 60, 70, 80, 90))


def test_tl_metrics_per_axis():
    doc = _doc("TL", {"major_axis_mm": 20.0, "minor_axis_mm": 10.0})
    m = score_answer(doc, VIEW, "major 22, minor 9").metrics
    assert m["mae_major"] == pytest.approx(2.0) and m["mae_minor"] == pytest.approx(1.0)
    assert m["mae"] == pytest.approx(1.5)
    assert m["mre_major"] == pytest.approx(0.1) and m["mre_minor"] == pytest.approx(0.1)


def test_ad_metrics():
    doc = _doc("AD", {"metric": "angle", "value": 40.0})
    m = score_answer(doc, VIEW, "<answer>30</answer>").metrics
    assert m["mae"] == pytest.approx(10.0) and m["mre"] == pytest.approx(0.25)


def test_aggregate_averages_over_successes_and_counts_failures():
    docs = [_doc("AD", {"metric": "distance", "value": 10.0}, key=f"k{i}") for i in range(4)]
    scores = [
        score_answer(docs[0], VIEW, "12"),
        score_answer(docs[1], VIEW, "<answer>9</answer>"),
        score_answer(docs[2], VIEW, "no idea"),
        score_answer(docs[3], VIEW, "[LMMS_EVAL_REQUEST_FAILED after 5 retries] 500"),
    ]
    agg = aggregate("AD", scores)
    assert agg["n"] == 4 and agg["n_success"] == 2 and agg["success_rate"] == 0.5
    assert agg["n_parse_failed"] == 1 and agg["n_request_failed"] == 1
    assert agg["mae"] == pytest.approx(1.5) and agg["mre"] == pytest.approx(0.15)


def test_aggregate_of_nothing_successful_has_no_error_figures():
    doc = _doc("TL", {"major_axis_mm": 5.0, "minor_axis_mm": 3.0})
    agg = aggregate("TL", [score_answer(doc, VIEW, "none")])
    assert agg["success_rate"] == 0.0 and agg["mae"] is None
