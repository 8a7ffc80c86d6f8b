"""-CoT-scaledPS as upstream defines it (YongchengYAO/MedVision src/medvision_bm/medvision_lmms_eval/lmms_eval/tasks/
medvision/medvision_utils.py @0a4c5e2: ``_get_pixel_size_scale_factor``, ``create_doc_to_target_*_scaledPS``,
``_compute_physical_diagonal``; the landmark files as ``sft_utils._get_landmarks_coords`` reads them): the
--scaled_ps_low/--scaled_ps_high range of every driver, the scaled target, prompt and diagonal, the answer signature;
and upstream's OOD and scaledPS lists run on the phantom's tasks of the same families, planes and variants.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import pytest

from medvision_bm.data.docs import RunDoc
from medvision_bm.data.layout import DataDir, load_tasks_list, parse_task_name
from medvision_bm.io import iter_jsonl
from medvision_bm.models.registry import REGISTRY, get_record
from medvision_bm.runner.args import build_parser
from medvision_bm.runner.config import build_config
from medvision_bm.tasks.hooks import prompt
from medvision_bm.tasks.scaled_ps import ad_target, slice_landmarks
from medvision_bm.tasks.scoring import diagonal_mm, target
from medvision_bm.tasks.upstream_prompts import scaled_ps_factors
from mvtest_support import REPO, run_cli

TL_TASK = "PhantomCT_TumorLesionSize_Task01_Axial-CoT-scaledPS"
DIST_TASK = "PhantomXR_BiometricsFromLandmarks_Distance_Task01_Sagittal-CoT-scaledPS"
ANGLE_TASK = "PhantomXR_BiometricsFromLandmarks_Angle_Task01_Sagittal-CoT-scaledPS"


def _views(phantom_dir: Path, tmp_path: Path, task: str, *flags: str, n: int = 3):
    """(doc, view) of the first samples of ``task`` as a run with ``flags`` asks them."""
    tl = tmp_path / "tasks.json"
    tl.write_text(json.dumps({task: 1}))
    rec = get_record("oracle")
    ns = build_parser(rec, "x").parse_args(["--tasks_list_json_path", str(tl), "--data_dir", str(phantom_dir),
                                            "--results_dir", str(tmp_path / "r"), *flags])
    cfg = build_config(ns, rec, [])
    data = DataDir(cfg.contract)
    samples = data.samples(task)
    return [(d, cfg.view_for(d, data.root, samples.tn.variant, samples.meta_header)) for d in samples.docs()[:n]]


# ------------------------------------------------------------------------------------------------ the rule itself


def test_ad_target_is_upstreams_formula_on_hand_made_landmarks():
    pts = {"P1": (0.0, 0.0), "P2": (3.0, 4.0), "P3": (1.0, 1.0), "P4": (1.0, 0.0)}
    assert ad_target("distance", pts, ("P1", "P2"), (1.0, 1.0), (1.0, 1.0)) == 5.0
    # each pixel step times pixel size times factor: rows 3 * 0.5 * 2, columns 4 * 2 * 1
    assert ad_target("distance", pts, ("P1", "P2"), (0.5, 2.0), (2.0, 1.0)) == pytest.approx(math.hypot(3.0, 8.0))
    # lines P1-P3 (45 degrees) and P1-P4 (along the rows): rows stretched twice -> atan(1/2)
    assert ad_target("angle", pts, ("P1", "P3", "P1", "P4"), (1.0, 1.0), (1.0, 1.0)) == pytest.approx(45.0)
    assert ad_target("angle", pts, ("P1", "P3", "P1", "P4"), (1.0, 1.0), (2.0, 1.0)) == \
        pytest.approx(math.degrees(math.atan2(1, 2)))


def test_slice_landmarks_merges_the_slices_entries_and_drops_the_slice_axis(tmp_path):
    path = tmp_path / "case.json.gz"
    data = {"slice_landmarks_y": [{"slice_idx": 5, "landmarks": {"P1": [1, 5, 2]}},
                                  {"slice_idx": 6, "landmarks": {"P1": [9, 6, 9]}},
                                  {"slice_idx": 5, "landmarks": [{"P3": [3, 5, 4]}, {"P3": [7, 5, 7]}]}]}
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    assert slice_landmarks(path, 1, 5) == {"P1": (1.0, 2.0), "P3": (3.0, 4.0)}  # a T/L list: its first lesion
    with pytest.raises(Exception, match="no entry for slice 7 of axis y"):
        slice_landmarks(path, 1, 7)


def test_a_fixed_factor_scales_the_tl_target_prompt_and_diagonal(phantom_dir, tmp_path, clean_env):
    plain = _views(phantom_dir, tmp_path, TL_TASK.removesuffix("-scaledPS"))
    scaled = _views(phantom_dir, tmp_path, TL_TASK, "--scaled_ps_low", "2", "--scaled_ps_high", "2")
    for (doc, view), (_, pview) in zip(scaled, plain, strict=True):
        assert view.pixel_scale_hw == (2.0, 2.0)
        assert list(view.scaled_target) == [2 * v for v in target(doc)] == target(doc, view)
        assert diagonal_mm(doc, view) == 2 * diagonal_mm(doc, pview)
        text = prompt(RunDoc(doc, view, "current", "-CoT-scaledPS", str(phantom_dir)))
        pw, ph = (float(v) for v in re.search(r"pixel size for this image is ([\d.]+) \w+ \(width\) x ([\d.]+)",
                                              text).groups())
        assert (pw, ph) == (round(2 * pview.stated_pixel_hw_mm[1], 3), round(2 * pview.stated_pixel_hw_mm[0], 3))


def test_ad_targets_come_from_the_landmarks(phantom_dir, tmp_path, clean_env):
    # with factors 1 the recomputed value is the stored one (stored float16-rounded, as upstream's loader rounds it)
    for task in (DIST_TASK, ANGLE_TASK):
        for doc, view in _views(phantom_dir, tmp_path, task, "--scaled_ps_low", "1", "--scaled_ps_high", "1"):
            assert view.scaled_target[0] == pytest.approx(target(doc)[0], rel=2e-3)
    # one factor for both axes scales a distance and keeps an angle
    for doc, view in _views(phantom_dir, tmp_path, ANGLE_TASK, "--scaled_ps_low", "3", "--scaled_ps_high", "3"):
        assert view.scaled_target[0] == pytest.approx(target(doc)[0], rel=2e-3)


def test_default_factors_are_upstreams_draw_in_half_to_three(phantom_dir, tmp_path, clean_env):
    for doc, view in _views(phantom_dir, tmp_path, TL_TASK, n=5):
        s = scaled_ps_factors(str(phantom_dir / "Datasets" / doc.image_file), doc.slice_dim, doc.slice_idx,
                              doc.taskID, doc.label, "TL")
        assert view.pixel_scale_hw == s and 0.5 <= s[0] <= 3.0
        assert target(doc, view) == [v * s[0] for v in target(doc)]


def test_every_driver_takes_the_range_and_a_bad_one_is_a_user_error(tmp_path, clean_env):
    for rec in REGISTRY.values():
        ns = build_parser(rec, "x").parse_args(["--scaled_ps_low", "0.8", "--scaled_ps_high", "1.2"])
        assert (ns.scaled_ps_low, ns.scaled_ps_high) == (0.8, 1.2), rec.name
    tl = tmp_path / "t.json"
    tl.write_text(json.dumps({TL_TASK: 1}))
    r = run_cli("run", "--model", "oracle", "--tasks_list_json_path", str(tl), "--data_dir", str(tmp_path),
                "--scaled_ps_low", "2", "--scaled_ps_high", "1", "--skip_env_setup")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "low <= high" in r.stderr


# ------------------------------------------------------------------------------------------------ runs


def _results(res: Path) -> dict[str, dict]:
    return {json.loads(p.read_text())["task"]: json.loads(p.read_text()) | {"_dir": p.parent}
            for p in res.rglob("results.json")}


@pytest.mark.slow
def test_the_range_enters_the_answer_signature_and_the_oracle_stays_perfect(phantom_dir, tmp_path):
    tasks = {TL_TASK: 0, DIST_TASK: 0, ANGLE_TASK: 0, TL_TASK.removesuffix("-scaledPS"): 0}
    tl = tmp_path / "tasks.json"
    tl.write_text(json.dumps(tasks))
    common = ["run", "--model", "oracle", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tl),
              "--skip_update_status", "--skip_env_setup", "--sample_limit", "4"]
    runs = {}
    for name, extra in (("default", []), ("one", ["--scaled_ps_low", "1", "--scaled_ps_high", "1"])):
        r = run_cli(*common, "--results_dir", str(tmp_path / name), *extra)
        assert r.returncode == 0, r.stderr[-2000:]
        runs[name] = _results(tmp_path / name)
    for task in tasks:
        a, b = runs["default"][task], runs["one"][task]
        for res in (a, b):  # upstream reads an answer as float32: a float64 scaled target is off by its rounding
            assert res["metrics"]["SuccessRate"] == 1.0, (task, res["metrics"])
            assert res["metrics"]["avgMAE"] == pytest.approx(0.0, abs=1e-5), (task, res["metrics"])
        scaled = task.endswith("-scaledPS")
        assert (a["answer_signature"] != b["answer_signature"]) == scaled
        assert a["signature_inputs"].get("scaled_ps_range") == ([0.5, 3.0] if scaled else None)
    rows = list(iter_jsonl(runs["default"][TL_TASK]["_dir"] / "parsed.jsonl"))
    plain = {r["key"]: r["target"] for r in iter_jsonl(runs["default"][TL_TASK.removesuffix("-scaledPS")]["_dir"]
                                                        / "parsed.jsonl")}
    assert rows and all(r["target"] != plain[r["key"]] for r in rows)  # the scaled target was scored
    # re-parsed from the store alone (no data folder), the scaled targets and the perfect scores stay
    r = run_cli("parse", "--results_dir", str(tmp_path / "default"))
    assert r.returncode == 0, r.stderr[-2000:]
    again = _results(tmp_path / "default")
    assert all(again[t]["metrics"]["avgMAE"] == pytest.approx(0.0, abs=1e-5) for t in tasks)


def _phantom_analogue(upstream_list: Path, phantom_tasks: list[str]) -> dict[str, int]:
    """The phantom's tasks of each (family, plane, variant) the upstream list holds."""
    shapes = {(tn.family, tn.plane, tn.variant) for tn in map(parse_task_name, load_tasks_list(upstream_list))}
    out = {}
    for name in phantom_tasks:
        tn = parse_task_name(name)
        for family, plane, variant in shapes:
            if (tn.family, tn.plane) == (family, plane):
                out[name + variant] = 0
    return out


UPSTREAM_LISTS = ["tasks_list/tasks_MedVision-AD-CoT.json", "tasks_list/OOD/tasks_MedVision-detect-planeOOD-CoT.json",
                  "tasks_list/OOD/tasks_MedVision-detect-taskOOD-CoT.json",
                  "tasks_list/OOD/tasks_MedVision-TL-planeOOD-CoT.json",
                  "tasks_list/OOD/tasks_MedVision-TL-taskOOD-CoT.json",
                  "tasks_list/experimental/tasks_MedVision-AD-CoT-scaledPS.json",
                  "tasks_list/experimental/tasks_MedVision-TL-CoT-scaledPS.json"]


@pytest.mark.slow
def test_upstreams_ood_and_scaled_lists_run_on_the_phantoms_tasks(phantom_dir, tmp_path, clean_env):
    from medvision_bm.data.planner import DatasetContract

    offered = list(DataDir(DatasetContract.resolve(str(phantom_dir))).tasks())
    tasks: dict[str, int] = {}
    for rel in UPSTREAM_LISTS:
        analogue = _phantom_analogue(REPO / rel, offered)
        assert analogue, rel  # the phantom has tasks of every list's families and planes
        tasks.update(analogue)
    tl = tmp_path / "tasks_analogue.json"
    tl.write_text(json.dumps(tasks))
    r = run_cli("run", "--model", "oracle", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tl),
                "--results_dir", str(tmp_path / "res"), "--skip_update_status", "--skip_env_setup",
                "--sample_limit", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    results = _results(tmp_path / "res")
    assert set(results) == set(tasks)
    for task, res in results.items():
        m = res["metrics"]
        assert m["SuccessRate"] == 1.0, (task, m)
        if res["family"] == "detect":
            assert m["IoU"] == pytest.approx(1.0, abs=1e-6), (task, m)
        else:
            assert m["avgMAE"] == pytest.approx(0.0, abs=1e-5), (task, m)
