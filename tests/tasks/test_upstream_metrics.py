"""Upstream MedVision's per-sample metrics, denominators and aggregation (medvision_bm.tasks.upstream_metrics).

Pins (upstream YongchengYAO/MedVision; spec: docs/spec/parser-metrics.md and docs/spec/scoring-rules.md; the metric
paths on generated answers: tests/tasks/test_metric_paths.py):
* per sample: upstream ``src/medvision_bm/utils/parse_utils.py`` ``cal_IoU``/``cal_F1``/``cal_Precision``/``cal_Recall``/
  ``cal_metrics_detection_task``/``cal_metrics`` - newer generation @2f20f64 (sorted corners, clamp), paper era
  master c221615 (corners as given); T/L and A/D ``cal_metrics_TL_task``/``cal_metrics_AD_task`` in
  ``src/medvision_bm/benchmark/summarize_TL_task.py`` @2f20f64 and ``summarize_AD_task.py`` @286f632; eval-time A/D
  rules in ``medvision_lmms_eval/.../medvision_utils.py`` @0a4c5e2 and master c221615 l.916-941; nMAE diagonal
  ``_compute_physical_diagonal`` (same file, @0a4c5e2).
* aggregation: ``summarize_detection_task.py`` (@825344c; master c221615), ``summarize_TL_task.py``
  ``print_model_summaries`` (@2f20f64), ``summarize_AD_task.py`` (@286f632), ``parse_outputs.py``
  ``_update_results_summary`` (@1f4cc6c), constants in ``utils/configs.py`` (master c221615 l.59-63; @9fff178).
* the reference vectors of ``skills/medvision/sub-skills/results-parsing-and-metrics/scripts/metrics_demo.py`` @39dd6bf.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from medvision_bm.tasks.upstream_groups import (
    GroupRecord,
    anatomy_vs_lesion,
    group_key,
    summarize_ad_groups,
    summarize_detection_groups,
    summarize_tl_groups,
)
from medvision_bm.tasks.upstream_metrics import (
    ACC_IOU_MEAN_KEY,
    COCO_IOU_THRESHOLDS,
    DetectionSample,
    MeasureSample,
    acc_iou_key,
    ad_sample,
    aggregate_ad,
    aggregate_detection,
    aggregate_tl,
    detection_sample,
    inplane_pixel_size,
    parse_outputs_summary,
    slice_diagonal_mm,
    tl_sample,
)
from medvision_bm.tasks.upstream_parse import parse_strict

GT = [0.25, 0.25, 0.75, 0.75]  # dyadic numbers: exact in float32, so the hand values below are exact


def approx(x, rel=1e-12, abs=1e-12):
    return pytest.approx(x, rel=rel, abs=abs)


# ----------------------------------------------------------------------------------------------- detection


def test_detection_exact_box():
    s = detection_sample([0.25, 0.25, 0.75, 0.75], GT)
    assert s == DetectionSample(success=True, MAE=0.0, IoU=1.0, F1=1.0, Precision=1.0, Recall=1.0)


def test_detection_shifted_box_continuous_overlap():
    # I = 0.25 * 0.25, both areas 0.25: IoU = 0.0625 / 0.4375, F1 = 2I / 0.5, P = R = I / 0.25
    s = detection_sample([0.5, 0.5, 1.0, 1.0], GT)
    assert s.success and s.MAE == 0.25
    assert s.IoU == approx(1 / 7) and s.F1 == 0.25 and s.Precision == 0.25 and s.Recall == 0.25


def test_detection_box_inside_target():
    s = detection_sample([0.25, 0.25, 0.5, 0.5], GT)  # I = A_pred = 0.0625, A_gt = 0.25
    assert (s.IoU, s.F1, s.Precision, s.Recall) == (0.25, approx(0.4), 1.0, 0.25)
    half = detection_sample([0.25, 0.25, 0.5, 0.75], GT)  # IoU exactly 0.5
    assert half.IoU == 0.5


def test_detection_swapped_corners_sorted_in_newer_rules_only():
    swapped = [0.75, 0.75, 0.25, 0.25]
    newer = detection_sample(swapped, GT)
    assert (newer.IoU, newer.F1, newer.Precision, newer.Recall) == (1.0, 1.0, 1.0, 1.0)
    assert newer.MAE == 0.5  # MAE compares coordinates as given
    x_only = detection_sample([0.75, 0.25, 0.25, 0.75], GT)
    assert x_only.IoU == 1.0
    paper = detection_sample(swapped, GT, rules="paper")
    assert paper == DetectionSample(success=True, MAE=0.5, IoU=0.0, F1=0.0, Precision=0.0, Recall=0.0)


def test_detection_no_overlap_and_zero_area_score_zero():
    for pred in ([0.875, 0.875, 1.0, 1.0], [0.75, 0.25, 1.0, 0.75], [0.5, 0.5, 0.5, 0.7]):
        s = detection_sample(pred, GT)
        assert s.success and (s.IoU, s.F1, s.Precision, s.Recall) == (0.0, 0.0, 0.0, 0.0)


def test_detection_failures_score_zero_overlap_and_nan_mae():
    for pred in (None, [0.25, 0.25, 0.75], parse_strict("The box is 0.25, 0.25, 0.75, 0.75", 4), "0.25,0.25,0.75,0.75"):
        s = detection_sample(pred, GT)
        assert not s.success and math.isnan(s.MAE)
        assert (s.IoU, s.F1, s.Precision, s.Recall) == (0.0, 0.0, 0.0, 0.0)
    ok = detection_sample(parse_strict("<answer>0.25, 0.25, 0.75, 0.75</answer>", 4), GT)
    assert ok.success and ok.IoU == 1.0


def test_detection_prediction_is_float32_rounded():
    s = detection_sample([0.1, 0.25, 0.75, 0.75], [0.1, 0.25, 0.75, 0.75])
    assert approx(abs(float(np.float32(0.1)) - 0.1) / 4, rel=1e-9, abs=0) == s.MAE and s.MAE > 0


def test_detection_infinite_prediction_is_a_success_with_inf_mae():
    s = detection_sample([0.0, 0.0, 1e39, 1e39], GT)  # float32 overflow -> inf, as upstream's np.float32
    assert s.success and math.isinf(s.MAE)
    assert s.IoU == 0.0 and s.Recall == 1.0 and s.Precision == 0.0


@settings(max_examples=300, deadline=None)
@given(
    pred=st.one_of(st.none(), st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=0, max_size=5)),
    rules=st.sampled_from(["newer", "paper"]),
)
def test_detection_never_raises_on_any_prediction(pred, rules):
    s = detection_sample(pred, GT, rules=rules)
    assert isinstance(s, DetectionSample)
    if rules == "newer" and s.success:
        for v in (s.IoU, s.F1, s.Precision, s.Recall):
            assert math.isnan(v) or 0.0 <= v <= 1.0


# ----------------------------------------------------------------------------------------------- T/L


def test_tl_sample_metrics_demo_vector():
    s = tl_sample(parse_strict("<answer>12.0 mm x 8.0 mm</answer>", 2), [12.4, 8.3])
    assert s.success and approx((0.4 + 0.3) / 2, rel=1e-6) == s.MAE
    assert approx((0.4 / 12.4 + 0.3 / 8.3) / 2, rel=1e-6) == s.MRE
    assert math.isnan(s.nMAE) and not s.nMAE_success  # no diagonal known


def test_tl_sample_hand_values_and_nmae():
    assert slice_diagonal_mm((3, 4), (1.0, 1.0)) == 5.0
    s = tl_sample([10.0, 6.0], [8.0, 4.0], diagonal_mm=5.0)
    assert s.MAE == 2.0 and approx((2 / 8 + 2 / 4) / 2) == s.MRE and s.nMAE == approx(0.4) and s.nMAE_success
    assert not tl_sample([10.0, 6.0], [8.0, 4.0], diagonal_mm=0.0).nMAE_success


def test_slice_diagonal_uses_native_size_and_inplane_zooms():
    zooms = (0.5, 0.7, 1.0)
    assert inplane_pixel_size(zooms, 2) == (0.5, 0.7)
    assert inplane_pixel_size(zooms, 1) == (0.5, 1.0)
    assert inplane_pixel_size(zooms, 0) == (0.7, 1.0)
    assert slice_diagonal_mm((256, 320), inplane_pixel_size(zooms, 2)) == approx(math.sqrt(128.0**2 + 224.0**2))
    with pytest.raises(ValueError):
        inplane_pixel_size(zooms, 3)


def test_tl_failures():
    for pred in (None, [12.0], parse_strict("The tumor measures about 12 by 8 mm.", 2)):
        s = tl_sample(pred, [12.4, 8.3], diagonal_mm=100.0)
        assert not s.success and math.isnan(s.MAE) and math.isnan(s.MRE) and math.isnan(s.nMAE)


# ----------------------------------------------------------------------------------------------- A/D


def test_ad_distance_and_angle():
    d = ad_sample(parse_strict("<answer>30</answer>", 1), 27.5, "distance", diagonal_mm=250.0)
    assert d.success and d.MAE == 2.5 and approx(2.5 / 27.5) == d.MRE and d.nMAE == approx(0.01) and d.nMAE_success
    a = ad_sample([30.0], [27.5], "angle", diagonal_mm=250.0)
    assert a.success and a.MAE == 2.5 and math.isnan(a.nMAE) and not a.nMAE_success


def test_ad_negative_prediction_fails_only_at_eval_time():
    parsed = parse_strict("<answer>-5</answer>", 1)
    summarizer = ad_sample(parsed, 27.5, "distance")
    assert summarizer.success and summarizer.MAE == 32.5
    eval_time = ad_sample(parsed, 27.5, "distance", reject_negative=True)
    assert not eval_time.success and math.isnan(eval_time.MAE)
    assert ad_sample([-0.0], 27.5, "distance", reject_negative=True).success  # -0.0 is not < 0


def test_ad_near_zero_ground_truth():
    s = ad_sample([0.04], 0.05, "distance")
    assert s.success and s.near_zero_gt  # scored; the summarizer drops it when aggregating
    e = ad_sample([0.04], 0.05, "distance", near_zero_gt_failure=True)
    assert not e.success and e.near_zero_gt
    assert not ad_sample([0.1], 0.1, "distance").near_zero_gt  # "< 0.1"


def test_ad_failure():
    s = ad_sample(parse_strict("I cannot determine it.", 1), 27.5, "distance", diagonal_mm=100.0)
    assert not s.success and math.isnan(s.MAE) and not s.nMAE_success


# ----------------------------------------------------------------------------------------------- task aggregation


def _detection_group():
    return [
        detection_sample([0.25, 0.25, 0.75, 0.75], GT),  # IoU 1, MAE 0
        detection_sample([0.5, 0.5, 1.0, 1.0], GT),  # IoU 1/7, F1 = P = R = 0.25, MAE 0.25
        detection_sample([0.875, 0.875, 1.0, 1.0], GT),  # IoU 0, MAE 0.4375
        detection_sample(parse_strict("<answer>0.25, 0.25, 0.75</answer>", 4), GT),  # failure
        detection_sample(parse_strict("The box is 0.25, 0.25, 0.75, 0.75", 4), GT),  # failure
    ]


def test_aggregate_detection_denominators():
    m = aggregate_detection(_detection_group())
    assert m["num_samples"] == 5 and m["SuccessRate"] == 0.6
    assert m["avgMAE"] == approx((0 + 0.25 + 0.4375) / 3)  # successes only
    assert m["IoU"] == approx((1 + 1 / 7) / 5)  # all N, failures are 0
    assert (m["F1"], m["Precision"], m["Recall"]) == (approx(0.25), approx(0.25), approx(0.25))
    # MAE buckets min(int(MAE*10), 9): 0 -> 0, 0.25 -> 2, 0.4375 -> 4; cumulative over N
    assert [m[f"MAE<{k / 10:.1f}"] for k in range(1, 11)] == [0.2, 0.2, 0.4, 0.4, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]
    assert [m[f"IoU>{t:.1f}"] for t in (0.5, 0.6, 0.7, 0.8, 0.9)] == [0.2] * 5
    assert m["F1>0.5"] == 0.2 and m["Recall>0.9"] == 0.2
    assert [m[acc_iou_key(t)] for t in COCO_IOU_THRESHOLDS] == [0.2] * 10
    assert m[ACC_IOU_MEAN_KEY] == approx(0.2)
    assert acc_iou_key(0.5) == "Acc@IoU>=0.50" and ACC_IOU_MEAN_KEY == "Acc@IoU[0.50:0.95]"
    assert list(m)[:7] == ["avgMAE", "IoU", "F1", "Precision", "Recall", "SuccessRate", "num_samples"]
    paper = aggregate_detection(_detection_group(), rules="paper")
    assert not any(key.startswith("Acc@") for key in paper)
    assert aggregate_detection([]) is None


def test_iou_thresholds_use_greater_or_equal():
    m = aggregate_detection([detection_sample([0.25, 0.25, 0.5, 0.75], GT)])  # IoU exactly 0.5
    assert m["IoU>0.5"] == 1.0 and m[acc_iou_key(0.5)] == 1.0 and m[acc_iou_key(0.55)] == 0.0


def _measure(mre, mae=1.0, success=True, nmae=math.nan):
    if not success:
        return MeasureSample(False, math.nan, math.nan, math.nan, False)
    return MeasureSample(True, mae, mre, nmae, not math.isnan(nmae))


def test_aggregate_tl_buckets_and_denominators():
    samples = [
        _measure(0.05, mae=1.0, nmae=0.01),
        _measure(0, success=False),
        _measure(0.95, mae=3.0, nmae=0.03),
        _measure(2.0, mae=5.0, nmae=0.05),  # bucket min(int(20), 9) = 9
        MeasureSample(True, math.inf, math.inf, math.nan, False),  # float32 overflow: success, no finite error
    ]
    m = aggregate_tl(samples)
    assert m["num_samples"] == 5 and m["SuccessRate"] == 0.8
    assert m["avgMAE"] == 3.0 and m["avgMRE"] == approx((0.05 + 0.95 + 2.0) / 3) and m["avgNMAE"] == approx(0.03)
    assert m["MRE<0.1"] == 0.2 and m["MRE<0.9"] == 0.2 and m["MRE<1.0"] == 0.6  # last bucket is [0.9, inf)
    assert list(m)[:5] == ["avgMAE", "avgMRE", "SuccessRate", "avgNMAE", "num_samples"]
    assert "avgNMAE" not in aggregate_tl(samples, rules="paper")
    # parse_outputs' results.json: unclamped buckets (2.0 and inf fall in none), NaN-only skipping (inf kept)
    po = parse_outputs_summary(samples, "TL")
    assert po["MRE<1.0"] == 0.4 and po["SuccessRate,none"] == 0.8
    assert po["avgMAE,none"] == "inf" and po["avgIoU,none"] == "nan"


def test_aggregate_ad_drops_near_zero_ground_truth():
    samples = [
        ad_sample([30.0], 27.5, "distance"),
        ad_sample(parse_strict("I cannot determine it.", 1), 27.5, "distance"),
        ad_sample([0.04], 0.05, "distance"),
    ]
    m = aggregate_ad(samples)
    assert m["num_samples"] == 2 and m["SuccessRate"] == 0.5 and m["avgMAE"] == 2.5
    assert list(m)[:5] == ["avgMAE", "avgMRE", "avgNMAE", "SuccessRate", "num_samples"]
    assert aggregate_ad(samples, rules="paper")["num_samples"] == 3
    assert aggregate_ad(samples[2:]) is None


def test_parse_outputs_summary_detection():
    po = parse_outputs_summary(_detection_group(), "detect")
    assert po["avgIoU,none"] == str((1 + 1 / 7 + 0 + 0 + 0) / 5) and po["avgMRE,none"] == "nan"
    assert po["MRE<0.5"] == "N/A" and po["SuccessRate,none"] == 0.6
    paper = parse_outputs_summary(_detection_group(), "detect", rules="paper")
    assert paper["avgIoU,none"] == str((1 + 1 / 7 + 0) / 3)  # paper-era cal_metrics: failure IoU is NaN


# ----------------------------------------------------------------------------------------------- label groups


def test_group_key():
    assert group_key("Kidney", "CT", 2) == "Kidney @ CT (A)"
    assert group_key("Liver", "MRI", 0) == "Liver @ MR (S)"
    assert group_key("Heart", "ultrasound", "Coronal") == "Heart @ US (C)"
    assert group_key("Skull", "X-ray", "S") == "Skull @ XR (S)"
    assert group_key("Lung", "SPECT", "axial") == "Lung @ SPECT (A)"  # unknown modality kept as is
    with pytest.raises(ValueError):
        group_key("Lung", "CT", 3)


def _records(label, modality, plane, samples):
    return [GroupRecord("detect", label, s, modality=modality, plane=plane) for s in samples]


def test_detection_groups_anatomy_vs_lesion_by_hand():
    exact = detection_sample([0.25, 0.25, 0.75, 0.75], GT)
    shifted = detection_sample([0.5, 0.5, 1.0, 1.0], GT)
    fail = detection_sample(None, GT)
    label_map = {"left kidney": "Kidney", "liver": "Liver", "kidney tumor": "Kidney Tumor/Lesion",
                 "bone": "Others", "spleen": "Spleen"}
    records = (
        _records("left kidney", "CT", 2, [exact] * 30 + [fail] * 30)  # 60: IoU 0.5, SR 0.5, avgMAE 0
        + _records("liver", "MRI", 2, [shifted] * 100)  # 100: IoU 1/7, SR 1, avgMAE 0.25
        + _records("kidney tumor", "CT", 2, [exact] * 50)  # 50: exactly the minimum group size
        + _records("bone", "CT", 2, [exact] * 80)  # "others" -> excluded
        + _records("spleen", "CT", 0, [exact] * 49)  # 49 < 50 -> excluded
    )
    out = summarize_detection_groups(records, label_map=label_map)
    assert list(out["groups"]) == ["Kidney @ CT (A)", "Liver @ MR (A)", "Kidney Tumor/Lesion @ CT (A)",
                                   "Others @ CT (A)", "Spleen @ CT (S)"]
    assert out["groups"]["Kidney @ CT (A)"]["IoU"] == 0.5
    anatomy = out["anatomy"]
    assert anatomy["regions"] == ["Kidney @ CT (A)", "Liver @ MR (A)"]
    mean = anatomy["mean_metrics"]
    assert mean["total_samples"] == 160 and mean["num_regions"] == 2
    assert mean["IoU"] == approx((0.5 * 60 + (1 / 7) * 100) / 160)
    assert mean["SuccessRate"] == approx((0.5 * 60 + 100) / 160)
    assert mean["avgMAE"] == approx((0 * 60 + 0.25 * 100) / 160)  # weighted by N, not by successes
    assert mean[acc_iou_key(0.5)] == approx(30 / 160)
    lesion = out["T/L"]
    assert lesion["regions"] == ["Kidney Tumor/Lesion @ CT (A)"] and lesion["mean_metrics"]["IoU"] == 1.0
    assert lesion["mean_metrics"]["total_samples"] == 50
    with pytest.raises(ValueError):
        summarize_detection_groups(_records("unknown", "CT", 2, [exact]), label_map=label_map)
    assert anatomy_vs_lesion({})["anatomy"]["mean_metrics"] == {}


def test_tl_groups_overall_row_by_hand():
    def recs(label, modality, samples):
        return [GroupRecord("TL", label, s, modality=modality, plane="Axial") for s in samples]

    ok1 = MeasureSample(True, 2.0, 0.2, 0.01, True)
    ok2 = MeasureSample(True, 1.0, 0.05, 0.02, True)
    fail = MeasureSample(False, math.nan, math.nan, math.nan, False)
    records = recs("kidney tumor", "CT", [ok1] * 10) + recs("liver lesion", "MRI", [ok2] * 15 + [fail] * 15)
    records += recs("brain tumor", "MRI", [fail] * 5)  # no finite avgMRE -> dropped from the model row
    out = summarize_tl_groups(records)
    assert set(out["groups"]) == {"kidney tumor @ CT (A)", "liver lesion @ MR (A)", "brain tumor @ MR (A)"}
    row = out["overall"]
    assert row["total_samples"] == 40
    assert row["weighted_avg_mae"] == approx((2 * 10 + 1 * 30) / 40)
    assert row["weighted_avg_mre"] == approx((0.2 * 10 + 0.05 * 30) / 40)
    assert row["weighted_avg_sr"] == approx((1 * 10 + 0.5 * 30) / 40)
    assert row["weighted_avg_nmae"] == approx((0.01 * 10 + 0.02 * 30) / 40)
    assert row["weighted_mre<0.1"] == approx((0 * 10 + 0.5 * 30) / 40)
    assert row["weighted_mre<0.3"] == approx((1 * 10 + 0.5 * 30) / 40)
    assert "brain tumor @ MR (A)" not in row["labels"]


def test_ad_groups_separate_distances_and_angles_by_hand():
    def recs(dataset, metric_type, key, samples):
        return [GroupRecord("AD", key, s, dataset=dataset, metric_type=metric_type) for s in samples]

    feta = [ad_sample([32.0], 30.0, "distance")] * 10 + [ad_sample([0.05], 0.05, "distance")]  # + 1 near-zero GT
    ceph_angle = [ad_sample([33.0], 30.0, "angle")] * 20
    ceph_dist = [ad_sample(None, 30.0, "distance")] * 10
    records = recs("FeTA24", "distance", "BPD", feta) + recs("Ceph-Biometrics-400", "angle", "SNA", ceph_angle)
    records += recs("Ceph-Biometrics-400", "distance", "X", ceph_dist)
    out = summarize_ad_groups(records)
    assert list(out["groups"]) == ["FeTA24_distance_BPD", "Ceph-Biometrics-400_angle_SNA",
                                   "Ceph-Biometrics-400_distance_X"]
    assert out["groups"]["FeTA24_distance_BPD"]["num_samples"] == 10
    row = out["overall"]
    assert row["total_samples"] == 40
    assert row["weighted_avg_mae"] == approx((2 * 10 + 3 * 20) / 40)  # the all-failure label stays in the denominator
    assert row["weighted_avg_sr"] == approx((10 + 20 + 0) / 40)
    g = row["group_averages"]
    assert list(g) == ["FeTA-Distance", "Ceph-Angle", "Ceph-Distance", "Distance", "Angle"]
    assert g["FeTA-Distance"]["MAE"] == approx(2.0) and g["FeTA-Distance"]["samples"] == 10
    assert g["Ceph-Angle"]["MAE"] == approx(3.0) and g["Angle"] == g["Ceph-Angle"]
    assert math.isnan(g["Ceph-Distance"]["MAE"]) and g["Ceph-Distance"]["SR"] == 0.0
    assert g["Distance"]["MAE"] == approx(2.0) and g["Distance"]["samples"] == 20 and g["Distance"]["SR"] == 0.5
    paper = summarize_ad_groups(records, rules="paper")
    assert list(paper["overall"]["group_averages"]) == ["FeTA-Distance", "Ceph-Angle", "Ceph-Distance"]
    assert paper["groups"]["FeTA24_distance_BPD"]["num_samples"] == 11  # no near-zero filter in the paper era


def test_records_of_another_family_are_rejected():
    with pytest.raises(ValueError):
        summarize_tl_groups([GroupRecord("AD", "x", MeasureSample(True, 1.0, 0.1, math.nan, False))])
