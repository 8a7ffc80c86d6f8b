"""The paper protocol states pixel sizes with upstream master's perceived-size rules; the current one with the newer.

Upstream: master c221615 ``src/medvision_bm/medvision_lmms-eval/lmms_eval/tasks/medvision/medvision_utils.py``
``get_resized_img_shape`` (fixed [336, 336] for llava_med, huatuogpt_vision and healthgpt_l14, [448, 448] for
internvl3; ``_process_img_llavaonevision``: ``select_best_resolution(img_PIL.size, image_grid_pinpoints)``, PIL's size
being (W, H)), used by ``doc_to_text_TumorLesionSize`` / ``doc_to_text_BiometricsFromLandmarks``: ``resize_ratio =
resized / original`` per axis, ``pixel / resize_ratio``, printed with ``.3f``, width first. The texts below are typed
from those functions (the constants are master's prompt wording); ``select_best_resolution`` is transformers'
``image_processing_utils`` helper master calls, re-written here from its documented rule.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from medvision_bm.data.docs import RunDoc
from medvision_bm.data.layout import DataDir
from medvision_bm.data.planner import DatasetContract
from medvision_bm.models.registry import REGISTRY, get_record
from medvision_bm.runner.args import build_parser
from medvision_bm.runner.config import build_config, stated_size_for
from medvision_bm.tasks.hooks import prompt
from medvision_bm.tasks.upstream_prompts import PromptInput, build_prompt
from mvtest_support import REPO

#: llava-hf/llava-onevision-qwen2-72b-ov-hf preprocessor_config.json image_grid_pinpoints: 384 i x 384 j, i, j in 1..6
OV_PINPOINTS = [[384 * i, 384 * j] for i in range(1, 7) for j in range(1, 7)]
M_FORMAT_TL = ("The answer should be two decimal numbers separated by a comma without any units or additional text. "
               "The first is the major axis length, and the second is the minor axis length.")
M_FORMAT_AD = "The answer should be a single decimal number without any units or additional text."
FIVE = ("llava_med", "huatuogpt_vision", "healthgpt", "intern_vl3", "llava_onevision")


def select_best_resolution(original_size: tuple[int, int], possible: list[list[int]]) -> tuple[int, int]:
    """transformers' helper: original_size is read as (height, width); the (height, width) resolution whose
    downscale keeps the most pixels (``min(int(w s) * int(h s), w h)``, s = min(W / w, H / h)), the least wasted
    area on ties, the first such one."""
    oh, ow = original_size
    best, best_eff, best_waste = None, 0, float("inf")
    for rh, rw in possible:
        s = min(rw / ow, rh / oh)
        eff = min(int(ow * s) * int(oh * s), ow * oh)
        waste = rh * rw - eff
        if eff > best_eff or (eff == best_eff and waste < best_waste):
            best, best_eff, best_waste = (rh, rw), eff, waste
    assert best is not None
    return best


def master_resized_hw(record: str, h: int, w: int) -> tuple[int, int]:
    """master get_resized_img_shape for the five model keys."""
    if record == "llava_onevision":
        return select_best_resolution((w, h), OV_PINPOINTS)  # master passes img_PIL.size, which is (W, H)
    return (448, 448) if record == "intern_vl3" else (336, 336)


def master_pixel_hw(record: str, hw: tuple[int, int], px: tuple[np.float32, np.float32]):
    rh, rw = master_resized_hw(record, *hw)
    return px[0] / (rh / hw[0]), px[1] / (rw / hw[1])


def master_tl_text(desc: str, label: str, unit: str, p_h, p_w) -> str:
    """master doc_to_text_TumorLesionSize (metric_unit ["mm"] -> "mm")."""
    return (f"Task:\nGiven the input medical image: {desc}, estimate the major and minor axis lengths of the ellipse "
            f"enclosing the {label}, in {unit}.\nAdditional information:\nThe pixel size for this image is "
            f"{p_w:.3f} {unit} (width) x {p_h:.3f} {unit} (height).\nFormat requirement:\n{M_FORMAT_TL}")


def master_distance_text(desc: str, name: str, p1: str, p2: str, unit: str, p_h, p_w) -> str:
    """master doc_to_text_BiometricsFromLandmarks with _get_biometric_prompt_distance (mm -> millimeters)."""
    unit = unit.strip().replace("mm", "millimeters")
    task = (f"estimate the distance of {name} in {unit}, which is the distance between 2 landmark points: "
            f"(landmark 1) {p1}, (landmark 2) {p2}.\n")
    return (f"Task:\nGiven the input medical image: {desc}, {task}Additional information:\nThe pixel size for this "
            f"image is {p_w:.3f} mm (width) x {p_h:.3f} mm (height).\nFormat requirement:\n{M_FORMAT_AD}")


def config(name: str, protocol: str, tmp_path, data_dir=None):
    record = get_record(name)
    argv = ["--data_dir", str(data_dir or tmp_path), "--tasks_list_json_path",
            str(REPO / "tasks_list" / "tasks_MedVision-Phantom-AD.json"), "--results_dir", str(tmp_path / "res"),
            "--skip_env_setup", "--skip_update_status", "--protocol", protocol]
    return build_config(build_parser(record, "t").parse_args(argv), record, argv)


def _sizes(rng: random.Random, n: int) -> list[tuple[int, int]]:
    out = [(48, 32), (32, 128), (75, 48)]  # the worked examples of the perceived-size rule
    while len(out) < n:
        h, w = rng.randint(8, 2600), rng.randint(8, 2600)
        if h != w:
            out.append((h, w))
    return out


@pytest.mark.parametrize("name", FIVE)
def test_paper_prompts_equal_masters_text_on_non_square_slices(name, tmp_path):
    rng = random.Random(name)
    paper, current = config(name, "paper", tmp_path), config(name, "current", tmp_path)
    differ = 0
    for h, w in _sizes(rng, 400):
        px = (np.float32(rng.uniform(0.05, 3.0)), np.float32(rng.uniform(0.05, 3.0)))  # header zooms are float32
        stated = stated_size_for(paper, (h, w), px)
        m_h, m_w = master_pixel_hw(name, (h, w), px)
        tl = PromptInput("TL", "Tumor-Lesion-Size", "abdominal CT scan", label_name="kidney tumor", metric_unit=["mm"],
                         pixel_hw_mm=stated.pixel_hw_mm)
        assert build_prompt(tl, "", "paper") == master_tl_text("abdominal CT scan", "kidney tumor", "mm", m_h, m_w)
        dist = PromptInput("AD", "Biometrics-From-Landmarks-Distance", "fetal brain MRI", metric_type="distance",
                           metric_unit="mm", biometrics_name="BPD", points=("left skull", "right skull"),
                           pixel_hw_mm=stated.pixel_hw_mm)
        assert build_prompt(dist, "", "paper") == master_distance_text("fetal brain MRI", "BPD", "left skull",
                                                                      "right skull", "mm", m_h, m_w)
        newer = stated_size_for(current, (h, w), px).pixel_hw_mm
        differ += f"{newer[0]:.3f} {newer[1]:.3f}" != f"{m_h:.3f} {m_w:.3f}"
    assert differ > 100  # the newer rule would state other pixel sizes on most of these slices
    assert paper.perceived_size_rule.startswith("paper:") and current.perceived_size_rule == current.processor_resize


def test_issue_20_examples(tmp_path):
    """huatuogpt_vision 48x32: width 336/32, height 336/48; llava_med 32x128; internvl3 75x48 on 448x448."""
    px = (np.float32(0.3), np.float32(0.3))
    for name, hw in (("huatuogpt_vision", (48, 32)), ("llava_med", (32, 128)), ("intern_vl3", (75, 48))):
        side = 448 if name == "intern_vl3" else 336
        got = stated_size_for(config(name, "paper", tmp_path), hw, px).pixel_hw_mm
        assert got == (px[0] / (side / hw[0]), px[1] / (side / hw[1]))


def test_other_records_state_the_same_under_both_protocols(tmp_path):
    """Master's other rules are the newer ones (Qwen-family probes, fixed 896/448 canvases, the Llama content)."""
    px = (np.float32(0.7), np.float32(1.1))
    for name in ("gemma3", "medgemma", "meddr", "qwen2_5_vl", "lingshu", "llama3_2_vision", "healthgpt_xl32"):
        paper, current = config(name, "paper", tmp_path), config(name, "current", tmp_path)
        assert paper.perceived_size_rule == current.perceived_size_rule == REGISTRY[name].processor_resize
        for hw in ((48, 32), (300, 700), (512, 512)):
            assert stated_size_for(paper, hw, px) == stated_size_for(current, hw, px)


def test_the_rule_enters_the_view_and_the_signature(phantom_dir, tmp_path):
    """A paper run of LLaVA-Med through the run's own view: the prompt's pixel line is master's, and the answer
    signature names the rule (a current-protocol store is never reused for it)."""
    from medvision_bm.runner.loop import prepare_task

    data = DataDir(DatasetContract.resolve(phantom_dir))
    task = "PhantomXR_BiometricsFromLandmarks_Distance_Task01_Sagittal"
    cfg = config("llava_med", "paper", tmp_path, phantom_dir)
    prep = prepare_task(cfg, data, task)
    assert prep.answer_inputs["processed_hw_rule"] == "paper:fixed-336x336"
    assert prepare_task(config("llava_med", "current", tmp_path, phantom_dir), data, task).answer_sig != prep.answer_sig
    for rd in prep.rundocs:
        h, w = rd.doc.image_size_2d
        ph, pw = rd.view.header_pixel_hw
        m_h, m_w = master_pixel_hw("llava_med", (h, w), (np.float32(ph), np.float32(pw)))
        assert f"The pixel size for this image is {m_w:.3f} mm (width) x {m_h:.3f} mm (height).\n" in prompt(
            RunDoc(rd.doc, rd.view, "paper", "", str(phantom_dir)))
