"""Process accuracy and equation accuracy of one answer, and their aggregation, held to upstream's rules on
generated inputs: YongchengYAO/MedVision script/analyze/process-accuracy/analyze_process_accuracy_TL.py @0b7106d and
analyze_process_accuracy_AD.py @286f632 (step patterns, normalised L2 with the swapped pairing, MRE, nMAE, the
tool-use fallbacks, the near-zero ground truth rule, the per-label JSON and texts), and
script/analyze/equation-accuracy/analyze_equation_accuracy_TL.py @28f6c67 / _AD.py @286f632 (the formula of a step
against its own answer); skills/medvision/sub-skills/analysis/references/process-and-equation-accuracy.md @39dd6bf."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from medvision_bm.report import process_accuracy as pa

RNG = np.random.default_rng(7)


def _pt() -> tuple[float, float]:
    return tuple(float(round(v, 4)) for v in RNG.uniform(0.05, 0.95, 2))  # type: ignore[return-value]


def _pairs(*pts: tuple[float, float]) -> str:
    return ", ".join(f"({x}, {y})" for x, y in pts)


def _tl_answer(s1, s2, major, minor, reason3="", reason4="") -> str:
    return (f"<step-1-reasoning>find the longest chord</step-1-reasoning><step-1-answer>{_pairs(*s1)}</step-1-answer>"
            f"<step-2-reasoning>perpendicular</step-2-reasoning><step-2-answer>{_pairs(*s2)}</step-2-answer>"
            f"<step-3-reasoning>{reason3}</step-3-reasoning><step-3-answer>{major} mm</step-3-answer>"
            f"<step-4-reasoning>{reason4}</step-4-reasoning><step-4-answer>{minor}</step-4-answer>"
            f"<answer>{major}, {minor}</answer>")


def _upstream_norm_l2(p, g) -> float:
    """``_cal_norm_L2_dist``: sqrt(dx^2 + dy^2) / sqrt(2)."""
    return float(np.sqrt((p[0] - g[0]) ** 2 + (p[1] - g[1]) ** 2) / np.sqrt(2))


@pytest.mark.parametrize("trial", range(20))
def test_tl_steps_match_upstreams_formulas(trial: int) -> None:
    g = [_pt() for _ in range(4)]
    p = [_pt() for _ in range(4)]
    major, minor, diag = float(RNG.uniform(5, 80)), float(RNG.uniform(2, 40)), float(RNG.uniform(100, 400))
    pred_major, pred_minor = round(major * RNG.uniform(0.5, 1.5), 3), round(minor * RNG.uniform(0.5, 1.5), 3)
    gt = pa.TLTruth(g[0], g[1], g[2], g[3], major, minor, diag)
    out = pa.tl_process(_tl_answer(p[0:2], p[2:4], pred_major, pred_minor), gt)
    assert out["step1_pred"] == [*p[0], *p[1]]
    d_same = (_upstream_norm_l2(p[0], g[0]) + _upstream_norm_l2(p[1], g[1])) / 2
    d_swap = (_upstream_norm_l2(p[0], g[1]) + _upstream_norm_l2(p[1], g[0])) / 2
    assert out["step1_normL2"] == pytest.approx(min(d_same, d_swap), rel=1e-15)
    assert out["step3_MRE"] == abs(pred_major - major) / (major + 1e-15)
    assert out["step4_nMAE"] == abs(pred_minor - minor) / (diag + 1e-15)
    swapped = pa.tl_process(_tl_answer([p[1], p[0]], p[2:4], pred_major, pred_minor), gt)
    assert swapped["step1_normL2"] == pytest.approx(out["step1_normL2"], rel=1e-15)  # a swapped pair: same


def test_tl_record_keys_are_upstreams() -> None:
    gt = pa.TLTruth((0.1, 0.2), (0.3, 0.4), (0.5, 0.6), (0.7, 0.8), 10.0, 5.0, 200.0)
    out = pa.tl_process(_tl_answer([(0.1, 0.2), (0.3, 0.4)], [(0.5, 0.6), (0.7, 0.8)], 10, 5), gt)
    assert list(out) == ["metric_type", "gt_P1_wh", "gt_P2_wh", "gt_P3_wh", "gt_P4_wh", "gt_major_length",
                         "gt_minor_length", "step1_pred", "step1_normL2", "step2_pred", "step2_normL2",
                         "step3_pred", "step3_MRE", "step3_nMAE", "step4_pred", "step4_MRE", "step4_nMAE"]
    assert out["step1_normL2"] == 0.0 and out["step3_MRE"] == 0.0


def test_step_patterns() -> None:
    gt = pa.TLTruth((0.1, 0.2), (0.3, 0.4), (0.5, 0.6), (0.7, 0.8), 10.0, 5.0, 200.0)
    # an answer block without its reasoning block is still read (upstream's answer-only fallback)
    only = pa.tl_process("<step-1-answer>(0.1, 0.2), (0.3, 0.4)</step-1-answer>", gt)
    assert only["step1_pred"] == [0.1, 0.2, 0.3, 0.4] and only["step2_pred"] is None
    # a coordinate is 0.x or 1(.0): 1.5 is no relative coordinate, so the step is not read
    assert pa.tl_process("<step-1-answer>(1.5, 0.2), (0.3, 0.4)</step-1-answer>", gt)["step1_pred"] is None
    # T/L tool use: <answer>major, minor</answer> fills steps 3 and 4 when neither step tag gave a length
    tool = pa.tl_process("<tool_call>{}</tool_call> <answer>12.5, 7</answer>", gt)
    assert (tool["step3_pred"], tool["step4_pred"]) == (12.5, 7.0) and tool["step3_MRE"] == pytest.approx(0.25)
    kept = pa.tl_process("<step-3-answer>11</step-3-answer><answer>12.5, 7</answer>", gt)
    assert (kept["step3_pred"], kept["step4_pred"], kept["step4_MRE"]) == (11.0, None, None)


def test_ad_distance_landmarks_are_not_paired() -> None:
    a, b = _pt(), _pt()
    gt = pa.ADTruth("distance", (a, b), 40.0, 250.0)
    text = (f"<step-1-reasoning>.</step-1-reasoning><step-1-answer>{_pairs(b)}</step-1-answer>"
            f"<step-2-reasoning>.</step-2-reasoning><step-2-answer>{_pairs(a)}</step-2-answer>"
            "<step-3-reasoning>.</step-3-reasoning><step-3-answer>44</step-3-answer>")
    out = pa.ad_process(text, gt)
    assert out["step1_normL2"] == pytest.approx(_upstream_norm_l2(b, a)) and out["step1_normL2"] > 0
    assert (out["step3_MRE"], out["step3_nMAE"]) == (4 / (40 + 1e-15), 4 / (250 + 1e-15))
    # the step-3 fallback of a tool-use answer: <answer>x</answer>
    assert pa.ad_process("<answer>38</answer>", gt)["step3_pred"] == 38.0


def test_ad_angle_lines_are_paired_and_have_no_nmae() -> None:
    pts = tuple(_pt() for _ in range(4))
    gt = pa.ADTruth("angle", pts, 80.0, math.nan)
    text = (f"<step-1-answer>{_pairs(pts[1], pts[0])}</step-1-answer><step-2-answer>{_pairs(pts[2], pts[3])}"
            "</step-2-answer><step-3-answer>84</step-3-answer>")
    out = pa.ad_process(text, gt)
    assert out["step1_normL2"] == 0.0 and out["step2_normL2"] == 0.0
    assert out["step3_MRE"] == pytest.approx(0.05) and "step3_nMAE" not in out


def test_near_zero_ground_truth_leaves_step_3_out() -> None:
    """AD_NEAR_ZERO_GT_THRESHOLD (0.1): a ground truth below it is counted in n_ignored and its step-3 MRE/nMAE
    left out of the means; steps 1 and 2 are kept."""
    agg = pa.Aggregate("AD", "proc")
    base = {"metric_type": "distance", "step1_normL2": 0.1, "step2_normL2": 0.3, "step3_nMAE": 0.5}
    agg.add("D_distance_k", {**base, "gt_distance": 0.05, "step3_MRE": 9.0})
    agg.add("D_distance_k", {**base, "gt_distance": 12.0, "step3_MRE": 0.2, "step1_normL2": 0.2})
    agg.add("D_distance_k", {**base, "gt_distance": 12.0, "step3_MRE": None, "step3_nMAE": None})
    row = agg.summary()["D_distance_k"]
    assert (row["n_samples"], row["n_valid"], row["n_ignored"]) == (3, 2, 1)
    assert row["step3_avg_MRE"] == 0.2 and row["step1_avg_normL2"] == pytest.approx(0.4 / 3)
    assert row["success_rate"] == pytest.approx(2 / 3)  # the ignored sample read every step
    assert list(row) == ["metric_type", "step1_avg_normL2", "step2_avg_normL2", "step3_avg_MRE", "step3_avg_nMAE",
                         "n_samples", "n_valid", "n_ignored", "success_rate"]


def test_equation_accuracy_of_three_samples() -> None:
    """The reference's three-row example: a clean sample, an arithmetic slip (0.2) and prose with no formula give
    a step-3 mean of 0.1 over n=2 of 3."""
    clean = _tl_answer([(0.1, 0.1), (0.2, 0.2)], [(0.3, 0.3), (0.4, 0.4)], 5, 2, "L = sqrt(3^2 + 4^2) = 5",
                       "sqrt((-2.0)^2 + 0^2)")
    slip = _tl_answer([(0.1, 0.1), (0.2, 0.2)], [(0.3, 0.3), (0.4, 0.4)], 6, 2, "L = sqrt(-3.0^2 + |4|^2)",
                       "sqrt(2^2)")
    prose = "The longest diameter is about 5 mm."
    agg = pa.Aggregate("TL", "eq")
    records = [pa.tl_equations(t) for t in (clean, slip, prose)]
    for r in records:
        agg.add("kidney tumor @ CT (A)", r)
    assert records[1]["step3_raw_expr"] == "sqrt(-3.0^2 + |4|^2)" and records[1]["step3_python_eval"] == 5.0
    assert records[1]["step3_equation_MRE"] == pytest.approx(0.2)
    assert records[2]["step3_raw_expr"] is None and records[2]["step3_equation_MRE"] is None
    row = agg.summary()["kidney tumor @ CT (A)"]
    assert row == {"step3_avg_equation_MRE": pytest.approx(0.1), "step4_avg_equation_MRE": 0.0, "n_samples": 3,
                   "n_valid_3": 2, "n_valid_4": 2}


def test_equation_errors_are_kept_on_the_record() -> None:
    text = "<step-3-reasoning>d = sqrt(log(4))</step-3-reasoning><step-3-answer>1.2</step-3-answer>"
    out = pa.ad_equations(text, "distance")
    assert out["step3_raw_expr"] == "sqrt(log(4))" and out["step3_equation_MRE"] is None
    assert out["step3_eval_error"] == "Disallowed function: 'log'"
    angle = pa.ad_equations("<step-3-reasoning>arccos(0.5)</step-3-reasoning><step-3-answer>66</step-3-answer>",
                            "angle")
    assert angle["step3_python_eval"] == pytest.approx(60.0) and angle["step3_equation_MRE"] == pytest.approx(0.1)


def test_equation_near_zero_value_is_ignored() -> None:
    """A/D: an evaluated value below 0.1 goes to n_ignored instead of the mean (upstream's rule on the Python
    value, not the ground truth)."""
    agg = pa.Aggregate("AD", "eq")
    agg.add("X_angle_a", {"metric_type": "angle", "step3_python_eval": 0.05, "step3_equation_MRE": 3.0})
    agg.add("X_angle_a", {"metric_type": "angle", "step3_python_eval": 60.0, "step3_equation_MRE": 0.1})
    agg.add("X_angle_a", {"metric_type": "angle", "step3_python_eval": None, "step3_equation_MRE": None})
    assert agg.summary()["X_angle_a"] == {"metric_type": "angle", "step3_avg_equation_MRE": 0.1, "n_samples": 3,
                                          "n_valid": 1, "n_ignored": 1}


def test_means_are_numpys() -> None:
    """Upstream's np.mean of a list (its pairwise sum), to the last bit."""
    values = [float(v) for v in RNG.uniform(0, 1, 1000)]
    agg = pa.Aggregate("TL", "eq")
    for v in values:
        agg.add("L", {"step3_equation_MRE": v, "step4_equation_MRE": None})
    row = agg.summary()["L"]
    assert row["step3_avg_equation_MRE"] == float(np.mean(values)) and math.isnan(row["step4_avg_equation_MRE"])


def test_texts_have_upstreams_layout() -> None:
    summary = {"b @ CT (A)": {"step1_avg_normL2": 0.25, "step2_avg_normL2": 0.5, "step3_avg_MRE": 0.1,
                              "step4_avg_MRE": math.nan, "step3_avg_nMAE": 0.01, "step4_avg_nMAE": 0.02,
                              "n_samples": 3, "success_rate": 2 / 3},
               "a @ MR (S)": {"step1_avg_normL2": 0.75, "step2_avg_normL2": 0.5, "step3_avg_MRE": 0.3,
                              "step4_avg_MRE": 0.2, "step3_avg_nMAE": 0.03, "step4_avg_nMAE": 0.04,
                              "n_samples": 1, "success_rate": 1.0}}
    model = pa.model_text("TL", "proc", "m", summary).split("\n")
    assert model[:3] == ["", "Model: m", "Weighted Average → Step1_normL2: 0.3750, Step2_normL2: 0.5000, "
                         "Step3_MRE: 0.1500, Step4_MRE: 0.2000, nMAE (step 3): 0.0150, nMAE (step 4): 0.0250 "
                         "(Total Samples: 4)"]
    assert model[6] == "-" * 152
    assert model[7] == f"{'b @ CT (A)':<52} | 0.2500   | 0.5000   | 0.1000   | nan      | 0.0100   | 0.0200   | " \
                       "0.6667 | 3       "
    task = pa.task_text("TL", "proc", [("m", summary)])
    assert task.startswith("\n\n========== MODEL SUMMARIES (Process Accuracy - TL Task) ==========\n\n\nModel: m\n")
    assert "| 0.0100         | 0.0200         | 0.6667 |" in task and task.endswith("\n" + "=" * 100 + "\n")
    assert json.loads(pa.metrics_json(summary).replace("NaN", "null"))["b @ CT (A)"]["step4_avg_MRE"] is None
    assert '"step4_avg_MRE": NaN' in pa.metrics_json(summary)


def test_ad_groups_of_the_texts() -> None:
    row = {"metric_type": "distance", "step1_avg_normL2": 0.1, "step2_avg_normL2": 0.2, "step3_avg_MRE": 0.3,
           "step3_avg_nMAE": 0.01, "n_samples": 4, "n_valid": 2, "n_ignored": 2, "success_rate": 1.0}
    summary = {"FeTA24_distance_L-1-2": row, "Ceph-Biometrics-400_angle_A": {**row, "metric_type": "angle",
                                                                              "step3_avg_MRE": 0.5}}
    text = pa.model_text("AD", "proc", "m", summary)
    assert "(Valid: 4, Total: 8)" in text
    assert "\nDistance        | 0.1000     | 0.2000     | 0.3000     | 0.0100         | 2       | 4       " in text
    overall = pa.overall("AD", "proc", summary)
    assert overall["n"] == 8 and overall["step3_avg_MRE"] == pytest.approx(0.4)


def test_judge_step_extractions_count_when_present_and_complete() -> None:
    """The judge's steps (its reply's ``steps``: index, status, values; STEP_SPECS of upstream's judge_config.py)
    give the step numbers; an absent step or one with the wrong count of numbers is not read."""
    steps = [{"index": 1, "status": "present", "values": [0.1, 0.2, 0.3, 0.4]},
             {"index": 2, "status": "absent", "values": [0.5, 0.6, 0.7, 0.8]},
             {"index": 3, "status": "present", "values": [12.0, 3.0]},
             {"index": 4, "status": "present", "values": ["7.5"]}, {"index": 9, "status": "present", "values": [1]}]
    assert pa.judge_found(steps, "TL") == {1: [0.1, 0.2, 0.3, 0.4], 2: None, 3: None, 4: [7.5]}
    assert pa.judge_found(None, "distance") == {1: None, 2: None, 3: None}
    gt = pa.TLTruth((0.1, 0.2), (0.3, 0.4), (0.5, 0.6), (0.7, 0.8), 10.0, 5.0, 200.0)
    out = pa.tl_process(pa.judge_found(steps, "TL"), gt)
    assert out["step1_normL2"] == 0.0 and out["step2_normL2"] is None and out["step4_MRE"] == pytest.approx(0.5)
